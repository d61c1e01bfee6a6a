"""Planted heads in tiny BERT / GPT-2 models, and where the untouched heads stand (issue 16's note).

    python benchmarks/planted_heads.py

Builds the models of tests/test_real_any_model.py (random weights, one head of layer 0 set to the
nuclear SVM of chosen selections), probes them (threshold 0.5, SVMs on all 6 sentences, 3 random
baselines) and prints the per-head table and the per-layer summary. Then, for each untouched head,
compares its corr_restricted with its own selections' SVM against the SVMs of selections made by 8
random bilinear heads W' (argmax_t x_t^T W' z over the same candidates): a head's own argmax
selections are separated by its own W, so the theory expects its agreement above that baseline.
Writes only to /tmp/attnsvm-planted-heads.
"""

import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from test_real_any_model import SENTENCES, TOKENIZER_FILES, _plant, _tiny  # noqa: E402

from attnsvm.real.minilm import augment, load_model  # noqa: E402
from attnsvm.real.probe import head_svm, probe_heads, random_like  # noqa: E402
from attnsvm.svm import row_basis  # noqa: E402

BASE = "/tmp/attnsvm-planted-heads"
COLUMNS = ["layer", "head", "mean_selected", "corr", "corr_restricted", "corr_random_restricted", "advantage",
           "svm_status"]


def candidates(model, q, mask):
    """(n, T) bool: the tokens each query sees (all real tokens; up to the query for decoders)."""
    T = mask.shape[1]
    return mask & (np.arange(T)[None, :] <= q[:, None]) if model.family.causal else mask


def planted_model(kind: str) -> str:
    """Save a tiny model of ``kind`` with head (0, 0) planted (as the test does); return its directory."""
    base = f"{BASE}/{kind}"
    shutil.rmtree(base, ignore_errors=True)
    src = _tiny(kind, base + "/random")
    m = load_model(src)
    n = len(SENTENCES)
    q = probe_heads(SENTENCES, model=m, layers=[0], heads=[0], svm_sentences=0).queries
    fw = m.forward(SENTENCES, max_length=128, attentions=False)
    T = fw.mask.shape[1]
    cand = candidates(m, q, fw.mask)
    X = augment(fw.layer_input(0)) * fw.mask[:, :, None]
    chosen = random_like(np.eye(T, dtype=bool)[np.zeros(n, int)], cand, np.random.default_rng(1))
    _plant(m, 0, 0, head_svm(X, X[np.arange(n), q], cand, chosen).W, alpha=40.0)
    m.model.save_pretrained(base + "/planted")
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(src, f), base + "/planted")
    return base + "/planted"


def bilinear_baseline(model, res, layer: int, head: int, draws: int = 8, seed: int = 5):
    """corr_restricted of W_h with its own selections' SVM, and with the SVMs of selections made by
    ``draws`` random bilinear heads W' (argmax over the same candidates)."""
    n = len(SENTENCES)
    q = res.queries
    fw = model.forward(SENTENCES, attentions=False)
    T = fw.mask.shape[1]
    cand = candidates(model, q, fw.mask)
    X = augment(fw.layer_input(layer)) * fw.mask[:, :, None]
    Z = X[np.arange(n), q]
    first = np.argmax(cand, axis=1)
    P, B = row_basis((X - X[np.arange(n), first][:, None, :])[cand]), row_basis(Z)
    Wh = model.head_weights(layer, head)
    Wr = P @ (P.T @ Wh @ B) @ B.T
    cos = lambda W: float(np.sum(Wr * W) / np.linalg.norm(Wr) / np.linalg.norm(W))  # noqa: E731
    own = cos(head_svm(X, Z, cand, res.selected[(layer, head)]).W)
    rng = np.random.default_rng(seed)
    other = []
    for _ in range(draws):
        s = np.where(cand, np.einsum("ntd,de,ne->nt", X, rng.standard_normal(Wh.shape), Z), -np.inf)
        sel = np.zeros((n, T), bool)
        sel[np.arange(n), s.argmax(axis=1)] = True
        r = head_svm(X, Z, cand, sel)
        if r.status == "optimal":
            other.append(cos(r.W))
    return own, other


def main():
    for kind in ("gpt2", "bert"):
        path = planted_model(kind)
        res = probe_heads(SENTENCES, model=path, layers=[0, 1], svm_sentences=len(SENTENCES), baseline_draws=3,
                          threshold=0.5)
        t = res.table
        print(f"{kind} per head:\n{t[COLUMNS].to_string(index=False)}")
        g = t.groupby("layer").agg(mean_corr_restricted=("corr_restricted", "mean"),
                                   mean_random=("corr_random_restricted", "mean"),
                                   above=("advantage", lambda a: int((a > 0).sum())), heads=("head", "count"))
        print(f"{kind} per layer:\n{g.to_string()}")
        print("untouched heads: own selections vs selections made by random bilinear heads W' (argmax x^T W' z)")
        model = load_model(path)
        for layer, head in [(0, 1), (1, 0), (1, 1)]:
            own, other = bilinear_baseline(model, res, layer, head)
            print(f"  {kind} ({layer},{head}): corr_restricted own {own:.3f}; random bilinear heads' selections mean "
                  f"{np.mean(other):.3f}, range [{min(other):.3f}, {max(other):.3f}] ({len(other)} certified)")


if __name__ == "__main__":
    main()
