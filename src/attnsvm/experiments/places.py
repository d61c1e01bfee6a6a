"""Where each check's claim stands in the papers: an internal spec reference mapped to the paper's place.

A check's ``source`` names what a reader has: the paper (arXiv id and title) and the place of the
claim in it. The spec lines the claim was transcribed from are internal; they live in the check's
``spec_ref``. :func:`paper_source` maps an internal reference (a spec file's section, item or fact) to
the paper's place through :data:`PLACES`, an ordered table of patterns;
:class:`~attnsvm.experiments.checks.Check` applies it when it is built. Re-exported by
:mod:`attnsvm.experiments.claims` (which also writes the docs page); kept apart so that the checks do not
import the page's code.
"""

from __future__ import annotations

import re

__all__ = ["PAPERS", "PLACES", "is_internal", "paper_source"]

TF = 'arXiv 2308.16898 "Transformers as Support Vector Machines"'
MM = 'arXiv 2306.13596 "Max-Margin Token Selection in Attention Mechanism"'
LM = ('"On the similarity between attention and SVM on the token separation and selection behavior" '
      "(anonymous; a withdrawn ICLR 2024 submission, OpenReview forum 1Yq7zIOfj0; no arXiv id)")
PAPERS = {"transformers-as-svms.md": TF, "max-margin-token-selection.md": MM, "causal-language-modeling.md": LM}

#: (spec file, pattern on the rest of the reference, the paper's place); the first match wins
PLACES: list[tuple[str, str, str]] = [
    # Transformers as Support Vector Machines
    ("transformers-as-svms.md", r"4 thm 1 \(regularization path\)", "theorem: the regularization path of W "
                                                                      "(argmin of the loss over ||W||_F <= R) converges "
                                                                      "in direction to the Frobenius Att-SVM W^mm "
                                                                      "(Theorem 2 of the authors' talk, 'Regularization "
                                                                      "Path -> Att-SVM'); the paper has no experiment "
                                                                      "for it"),
    ("transformers-as-svms.md", r"4 thm 2 \(regularization path\)", "theorem: the regularization path of (K, Q) "
                                                                      "(argmin over ||K||_F^2 + ||Q||_F^2 <= 2R) "
                                                                      "converges to the set of nuclear-norm Att-SVM* "
                                                                      "solutions (Theorem 3 of the authors' talk, "
                                                                      "'Regularization Path -> Att-SVM*'); the paper "
                                                                      "has no experiment for it"),
    ("transformers-as-svms.md", r"1\.6 regularization paths", "the regularization paths (minimizers of the loss "
                                                               "over norm balls) and the over-parameterization "
                                                               "result (no finite stationary point when d >= "
                                                               "max(T-1, n))"),
    ("transformers-as-svms.md", r"5 E8", "sequence-to-sequence and causal extension (Seq-SVM, causal SVM); the paper "
                                          "has no such experiment: protocol of this project"),
    ("transformers-as-svms.md", r"3\.7 and 7\.1 item 5", "over-parameterization result (Att-SVM feasible when "
                                                          "d >= max(T-1, n)), applied to the sequence SVM"),
    ("transformers-as-svms.md", r"5 E4|7\.2 item 5", "experiment: percentage of convergence types (global / local / "
                                                      "neither) vs d"),
    ("transformers-as-svms.md", r"7\.2 item 1|5 E2", "experiment: local convergence with random data (official "
                                                      "notebook local_converge.ipynb); theorems W -> Att-SVM, "
                                                      "(K,Q) -> Att-SVM*"),
    ("transformers-as-svms.md", r"7\.2 item 2|5 E1", "2-D directional-convergence figures (official notebooks "
                                                      "visualization1/2.ipynb)"),
    ("transformers-as-svms.md", r"7\.2 item 3|9\.1", "experiment: rank of the SVM solutions vs d (official notebook "
                                                      "svm_rank.ipynb); result: rank(W^mm) <= n"),
    ("transformers-as-svms.md", r"7\.1 item 5", "over-parameterization result: Att-SVM is feasible for every token "
                                                 "choice when d >= max(T-1, n)"),
    ("transformers-as-svms.md", r"7\.2 item 4", "over-parameterization result: feasibility of Att-SVM vs d"),
    ("transformers-as-svms.md", r"7\.2 item 6|5 E5", "experiment: multi-token selection with an MLP (ReLU) head "
                                                      "(official notebook multi_token_converge.ipynb); Gen-SVM and "
                                                      "W_fin + R W_svm"),
    ("transformers-as-svms.md", r"7\.2 item 7", "nonlinear head h(a) = v^T a - lambda ||a||^2: number of selected "
                                                 "tokens vs lambda"),
    ("transformers-as-svms.md", r"7\.2 item 8", "over-parameterization: more tokens become support vectors as d "
                                                 "grows"),
    ("transformers-as-svms.md", r"2\.2 and 7\.3", "implicit bias of (K,Q): the nuclear-norm Att-SVM*, not the "
                                                   "Frobenius Att-SVM"),
    ("transformers-as-svms.md", r"3\.1 and 4 thm 4", "optimal tokens (token scores of the head) and global "
                                                      "convergence of GD"),
    ("transformers-as-svms.md", r"2\.4 and 4 thm 2, 8", "(K,Q) -> nuclear-norm Att-SVM* and the Gen-SVM of "
                                                         "multi-token selections"),
    ("transformers-as-svms.md", r"4 thm 2 and 7\.3", "theorem: GD on (K,Q) converges in direction to the "
                                                      "nuclear-norm Att-SVM*"),
    ("transformers-as-svms.md", r"4 thm 1, 4 and 7\.3", "theorems: GD on W converges in direction to the Frobenius "
                                                         "Att-SVM of its selections"),
    ("transformers-as-svms.md", r"4 thm 4 and 7\.3", "theorem: GD on W / (K,Q) selects tokens (global "
                                                      "convergence)"),
    # Max-Margin Token Selection in Attention Mechanism
    ("max-margin-token-selection.md", r"8 E3|6 Joint|3\.9|fact (9|10)\b", "Fig. 3: joint training of v and p "
                                                                           "(regularization path and GD)"),
    ("max-margin-token-selection.md", r"8 E4|Role of the loss|fact 11", "experiment: role of the loss function "
                                                                         "(likely Fig. 4)"),
    ("max-margin-token-selection.md", r"8 E1|fact [1-4]\b", "experiment: single input, GD on p converges to "
                                                             "p^mm (likely Fig. 1)"),
    ("max-margin-token-selection.md", r"8 E2|fact ([5-8]|1[2-5])\b|Appendix A|1\.3 item 2|2 \[RUN\]|6 Rates|6 GD on W",
     "experiment: multiple inputs (data of Appendix A), GD on p and W, rates (likely Fig. 2)"),
    ("max-margin-token-selection.md", r"6 Lemma L2", "lemma: the loss decreases along the max-margin direction"),
    ("max-margin-token-selection.md", r"3\.7 cone|6 Local GD|6 Regularization path \(local", "local theory: "
                                                                                             "regularization path "
                                                                                             "and GD inside a cone "
                                                                                             "around a locally "
                                                                                             "optimal p^mm"),
    ("max-margin-token-selection.md", r"6 Regularization path, nonlinear head", "theorem (regularization path, "
                                                                                 "nonlinear head; number not "
                                                                                 "verified): for f = h(X^T softmax("
                                                                                 "XWp)) under a strict first-order "
                                                                                 "optimality condition on the "
                                                                                 "selected tokens, p(R)/R converges "
                                                                                 "to p^mm of those tokens (abstract: "
                                                                                 "'a broader regularization path "
                                                                                 "analysis ... even for nonlinear "
                                                                                 "prediction heads'); the paper has "
                                                                                 "no experiment for it"),
    ("max-margin-token-selection.md", r"6 Regularization path", "theorem: the regularization path converges in "
                                                                 "direction to p^mm"),
    # the causal-LM paper
    ("causal-language-modeling.md", r"Theorem 3\.15 \(near ties\)",
     "Sec. 3.2, Theorem 3.15 (informal version of Theorem G.5): 'there exists a dataset dependent sufficiently small "
     "delta > 0 such that [...] Suppose non-optimal scores obey |gamma_it - gamma_itau| <= delta [...] Then, Algorithm "
     "X-GD [...] obeys lim ||X(k)||_F = inf and lim X(k)/||X(k)||_F = X^mm/||X^mm||_F'; the paper has no experiment "
     "varying delta"),
    ("causal-language-modeling.md", r"C1", "Sec. 4, Fig. 1 (Theorem 3.15): the cosine similarity between X(k) and "
                                           "the soft-margin Att-SVM"),
    ("causal-language-modeling.md", r"C2", "Sec. 4, Fig. 2: the margin between optimal and non-optimal tokens"),
    ("causal-language-modeling.md", r"only support tokens carry gradient", "Sec. 1 (contributions: only a few "
                                                                            "tokens, the support vectors, contribute "
                                                                            "to the gradient)"),
    ("causal-language-modeling.md", r"C3", "Sec. 1 (contributions) and Sec. 3.3-3.4 (Lemma 3.13): softmax attention "
                                           "trains more stably than linear attention"),
]

_SPEC = re.compile(r"(transformers-as-svms\.md|max-margin-token-selection\.md|causal-language-modeling\.md)")


def is_internal(source: str) -> bool:
    """Whether ``source`` names an internal reference (a spec file, a seed file, an issue's item)."""
    s = str(source)
    return bool(_SPEC.search(s) or re.search(r"\bseed \d{3}|\bspec item\b|\bissue \d", s))


def paper_source(spec_ref: str) -> str:
    """The paper and place of the claim an internal spec reference names; ValueError when none matches.

    ``spec_ref``: e.g. ``"transformers-as-svms.md 7.2 item 5"``. The first spec file named decides
    the paper; the first :data:`PLACES` pattern matching the text after it decides the place.
    """
    m = _SPEC.search(str(spec_ref))
    if m is None:
        raise ValueError(f"spec_ref must name a spec file ({', '.join(PAPERS)}), got {spec_ref!r}")
    rest = str(spec_ref)[m.end():]
    for file, pattern, place in PLACES:
        if file == m.group(1) and re.search(pattern, rest):
            return f"{PAPERS[file]}, {place}"
    raise ValueError(f"no paper place known for {spec_ref!r}: add a pattern to attnsvm.experiments.claims.PLACES")
