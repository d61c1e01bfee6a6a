"""The stable verdict (issue 39) on heads whose truth is known: untouched random heads and heads planted as the
nuclear SVM of random one-token selections on all 8 sentences of the calibration model, probed at m = 6 and 8
against the sink null (8 draws, no spectrum nulls beside it).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/probe_stable_verdict.py

Prints the random heads' stable verdicts and each planted head's row at both m. A head planted on 8 sentences is
the max-margin solution of those 8 only: at m = 6 its corr_restricted against the SVM of 6 of them is what any
head's is against a sample it was not fitted to (docs/guide/probe.md, "Which statistic is consistent as m grows").
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from test_probe_calibration import PLANTED, SENTENCES, THRESHOLD, planted_model, random_model  # noqa: E402

from attnsvm.real.probe import probe_heads  # noqa: E402


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    root = tempfile.mkdtemp()
    kw = dict(svm_sentences=[6, 8], threshold=THRESHOLD, max_length=24, spectrum_draws=0)
    t = probe_heads(SENTENCES, model=random_model("bert", os.path.join(root, "r")), **kw).table
    last = t[t["m"] == 8]
    print("random heads, stable verdict:", last["stable_verdict"].value_counts().to_dict(),
          f"corr_restricted {last['corr_restricted'].mean():.3f} vs sink nulls {last['null_mean'].mean():.3f}")
    path, _ = planted_model("bert", os.path.join(root, "p"), PLANTED, sentences=SENTENCES)
    t = probe_heads(SENTENCES, model=path, layers=[0], **kw).table
    print(t[["head", "m", "corr_restricted", "null_mean", "p_upper", "verdict", "stable_verdict",
             "margin_ratio"]].round(3).to_string(index=False))


if __name__ == "__main__":
    main()
