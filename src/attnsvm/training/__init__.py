"""Every attention model of the theory, trained in batch (torch, float64).

W, (K, Q), prompt p, joint (v, p), sequence and causal language models; heads and losses;
GD, normalized GD and Adam; regularization paths. ``import attnsvm`` does not load this
package (nor torch); it is imported on the first use of a training name.

Modules, lowest first (each imports only the ones above it):

* ``losses`` -- margin losses, cross-entropy, their overflow-free derivatives;
* ``ops`` -- contractions, logits, softmax (fixed-order and BLAS forms);
* ``kernel`` -- THE closed-form gradient: ``softmax_backward`` (the softmax Jacobian) and the
  closed forms built on it (``closed_form_step``, the fused kernels' per-token weights);
* ``models`` -- heads, token forms, the autograd ``AttentionModel``;
* ``checks``, ``initial``, ``results``, ``threads`` -- argument checks, initial parameters,
  ``TrainResult`` / ``PathResult``, the scoped torch thread count;
* ``loop`` -- THE training loop (``run``: checked gradient, record, update) and ``TrainConfig``;
* ``optim``, ``recorder`` -- optimizers and norms; checkpoint recording and health checks;
* kernels of the loop: ``lean`` (numpy, a single small run), ``fast`` (fused torch GD / NGD),
  ``engine`` (data preparation, the generic kernel over closed-form or autograd gradients with any
  optimizer, the choice of kernel);
* ``train`` (``train``, ``train_sequence``), ``regpath`` (``regularization_path``);
* ``prompt`` (the prompt model: gradient, batched training, notebook replay),
  ``language_model`` (the causal language model), ``paths`` (exact 2-D regularization paths);
  ``regpath``, ``prompt`` and ``language_model`` define their own kernels of the same loop.
"""

from attnsvm.training.train import PathResult, TrainResult, regularization_path, train, train_sequence

__all__ = ["train", "train_sequence", "regularization_path", "TrainResult", "PathResult"]
