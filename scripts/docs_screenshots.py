"""Screenshots of the built docs and of a probe page at several m, at 1440 px wide (issue 42, docs).

    python scripts/docs_screenshots.py [--html docs/_build/html] [--dest docs/_static] [--workdir DIR]

Build the docs first (``bash scripts/build_docs.sh``; ``ATTNSVM_DOCS_SKIP_TUTORIALS=1`` is enough for these two
pages). In headless Chromium (as scripts/probe_screenshots.py and tests/test_browser.py drive it), a 1440 x 900
viewport, it writes to ``--dest``:

- ``docs-install.png``: the top of the install and quick-start page (``install.html``), sidebar and "On this
  page" column included;
- ``docs-probe-guide.png``: the top of the probe guide (``guide/probe.html``);
- ``probe-curve.png``: the "Across sample sizes" section of the probe.html of a probe at two numbers of SVM
  sentences (``attnsvm probe --svm-sentences 6,8``) of a tiny random-weight BERT-like model (the tests' model:
  tests/test_probe_calibration.py ``random_model``, 1 layer, 4 heads; 8 corpus sentences, 4 null heads per head;
  about a minute): each head's stable verdict, its verdicts at each m and the curve figure with the nulls' band.
  A random model's heads are not max-margin selectors: the picture shows the layout, not a finding.

With ``--report DIR`` (a ``reproduce`` folder; ``--report-only`` skips the docs pages and the probe), also:

- ``report-top.png``: the top of DIR's report.html as it opens (the verdict banner and the summary table);
- ``report-sections.png``: around the check line of the first experiment whose checks all passed, as it opens (its table
  collapsed behind its "checks: N/N passed" line, the next section below it).

Each PNG is reduced to 128 colours (under 300 KB).
"""

from __future__ import annotations

import argparse
import base64
import io
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from probe_screenshots import _shot, chromium  # noqa: E402

WIDTH, HEIGHT = 1440, 900


def _viewport(driver, path: pathlib.Path) -> None:
    """The viewport (WIDTH x HEIGHT CSS px) as a 128-colour PNG."""
    from PIL import Image

    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
    img = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    img.quantize(colors=128).save(path, optimize=True)
    print(f"{path}: {img.size[0]} x {img.size[1]} px, {path.stat().st_size // 1024} KiB")


def _curve_probe(work: pathlib.Path) -> pathlib.Path:
    """probe.html of ``attnsvm probe --svm-sentences 6,8`` on the tests' tiny random-weight BERT-like model."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_probe_calibration import random_model

    model = random_model("bert", work / "model", layers=1, heads=4)
    out = work / "probe"
    subprocess.run([sys.executable, "-m", "attnsvm", "probe", "--model", model, "--n-sentences", "8",
                    "--svm-sentences", "6,8", "--null-draws", "4", "--view-sentences", "1", "--out", str(out)],
                   check=True)
    return out / "probe.html"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--html", default=str(ROOT / "docs" / "_build" / "html"), help="the built docs")
    ap.add_argument("--dest", default=str(ROOT / "docs" / "_static"))
    ap.add_argument("--workdir", default=None, help="where the probe is written (default: a temporary folder)")
    ap.add_argument("--report", default=None, metavar="DIR", help="also shoot DIR/report.html (a reproduce folder)")
    ap.add_argument("--report-only", action="store_true", help="only the report's screenshots (needs --report)")
    args = ap.parse_args(argv)
    if args.report_only and not args.report:
        ap.error("--report-only needs --report DIR")
    report = pathlib.Path(args.report).resolve() / "report.html" if args.report else None
    if report is not None and not report.is_file():
        print(f"docs_screenshots: no {report}: run attnsvm reproduce --out DIR first", file=sys.stderr)
        return 2
    html, dest = pathlib.Path(args.html).resolve(), pathlib.Path(args.dest).resolve()
    pages = {} if args.report_only else {"docs-install.png": html / "install.html",
                                         "docs-probe-guide.png": html / "guide" / "probe.html"}
    missing = [str(p) for p in pages.values() if not p.is_file()]
    if missing:
        print(f"docs_screenshots: no built page {', '.join(missing)}: build the docs first", file=sys.stderr)
        return 2
    work = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="docs-shots-"))
    probe_page = None if args.report_only else _curve_probe(work)
    driver = chromium(work)
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
        for name, page in pages.items():
            driver.get(page.as_uri())
            _viewport(driver, dest / name)
        if probe_page is not None:
            driver.get(probe_page.as_uri())
            _shot(driver, "#curve", "#curve ~ table", dest / "probe-curve.png")
        if report is not None:
            driver.get(report.as_uri())
            _viewport(driver, dest / "report-top.png")
            found = driver.execute_script("""
                const d = document.querySelector('section details.checks:not([open])');
                if (!d) return false;
                d.scrollIntoView({block: 'center'}); return true;""")
            if found:
                _viewport(driver, dest / "report-sections.png")
            else:
                print("docs_screenshots: no collapsed section in the report (every experiment has a check that did "
                      "not pass): report-sections.png not written", file=sys.stderr)
    finally:
        driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
