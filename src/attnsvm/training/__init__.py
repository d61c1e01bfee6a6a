"""Every attention model of the theory, trained in batch (torch, float64).

W, (K, Q), prompt p, joint (v, p), sequence and causal language models; heads and losses;
GD, normalized GD and Adam; regularization paths. ``import attnsvm`` does not load this
package (nor torch); it is imported on the first use of a training name.
"""

from attnsvm.training.train import PathResult, TrainResult, regularization_path, train, train_sequence

__all__ = ["train", "train_sequence", "regularization_path", "TrainResult", "PathResult"]
