"""Import time of ``attnsvm`` (no torch) against numpy alone and against the training layer (torch).

Usage: python benchmarks/import_time.py [--runs 7]

Each figure is the median wall time of a fresh interpreter running ``import ...`` (the
interpreter's own start-up is measured too, as ``python -c pass``, and subtracted). Prints the
medians and the ratio of ``import attnsvm`` to ``import attnsvm.training`` measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

STATEMENTS = {
    "python -c pass": "pass",
    "import numpy": "import numpy",
    "import numpy, scipy.linalg": "import numpy, scipy.linalg",
    "import attnsvm": "import attnsvm",
    "import attnsvm.svm": "import attnsvm.svm",
    "import attnsvm.training (torch)": "import attnsvm.training",
}


def _time(stmt: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", stmt], check=True)
    return time.perf_counter() - t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args(argv)
    for stmt in STATEMENTS.values():  # warm the file cache once
        _time(stmt)
    med = {}
    for label, stmt in STATEMENTS.items():
        med[label] = statistics.median(_time(stmt) for _ in range(args.runs))
    base = med["python -c pass"]
    print(f"{'statement':36s} {'median s':>9s} {'minus start-up':>15s}")
    for label, t in med.items():
        print(f"{label:36s} {t:9.3f} {t - base:15.3f}")
    print(f"import attnsvm / import attnsvm.training: "
          f"{(med['import attnsvm'] - base) / (med['import attnsvm.training (torch)'] - base):.2f}")


if __name__ == "__main__":
    main()
