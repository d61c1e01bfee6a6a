"""Screenshots of probe.html for the probe guide ("Reading probe.html", docs/guide/probe.md).

    python scripts/probe_screenshots.py [--dest docs/_static] [--workdir DIR]

Runs a small real probe of the shipped MiniLM (layers 4 and 5, heads 0-3, 16 corpus sentences, SVMs on 12, 4 null
heads per head: a few minutes on a busy 2-core machine), writes its probe.html and photographs four parts of it in
headless Chromium (as tests/test_browser.py drives it: /usr/bin/chromium, /usr/bin/chromedriver, selenium):

- ``probe-top.png``: the verdict and the layer x head maps;
- ``probe-model-view.png``: the model view, one thumbnail per head, for the first sentence, and the explorer's
  rows below it (each head's verdict, shares and tokens);
- ``probe-matrix.png``: the chosen head's attention matrix with its colour scale and "show values" on;
- ``probe-layers.png``: the heads' sections, one collapsible section per layer, all closed.

The PNGs are cut to those parts and reduced to 128 colours, so each stays small.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import pathlib
import sys
import tempfile

FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--window-size=1200,900"]


def _shot(driver, first: str, last: str, path: pathlib.Path) -> None:
    """The page from element ``first``'s top to element ``last``'s bottom (CSS selectors), full width."""
    from PIL import Image

    top, bottom, width = driver.execute_script(
        "const a = document.querySelector(arguments[0]).getBoundingClientRect(), "
        "b = document.querySelector(arguments[1]).getBoundingClientRect();"
        "return [a.top + window.scrollY - 8, b.bottom + window.scrollY + 8, document.documentElement.clientWidth];",
        first, last)
    clip = {"x": 0, "y": top, "width": width, "height": bottom - top, "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                             "clip": clip})
    img = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    img.quantize(colors=128).save(path, optimize=True)
    print(f"{path}: {img.size[0]} x {img.size[1]} px, {path.stat().st_size // 1024} KiB")


def chromium(work: pathlib.Path):
    """Headless Debian Chromium driven by selenium, its profile in ``work``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in FLAGS + [f"--user-data-dir={work / 'chromium-profile'}"]:
        opts.add_argument(flag)
    return webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=os.path.join(os.path.dirname(__file__), "..", "docs", "_static"))
    ap.add_argument("--workdir", default=None, help="where the probe is written (default: a temporary folder)")
    args = ap.parse_args(argv)
    from attnsvm.cli.probe import run_probe

    work = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="probe-shots-"))
    dest = pathlib.Path(args.dest).resolve()
    run_probe([4, 5], [0, 1, 2, 3], None, n_sentences=16, svm_sentences=12, null_draws=4, view_sentences=2,
              out=str(work))
    driver = chromium(work)
    try:
        driver.get((work / "probe.html").resolve().as_uri())
        _shot(driver, "h1", "#heatmap + p + .maps", dest / "probe-top.png")
        _shot(driver, "#model-title", "#heads-rows", dest / "probe-model-view.png")
        driver.find_element("id", "show-values").click()
        _shot(driver, "#matrix-title", "#matrix", dest / "probe-matrix.png")
        driver.find_element("id", "close-layers").click()
        _shot(driver, "#open-layers", "details.layer:last-of-type", dest / "probe-layers.png")
    finally:
        driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
