"""The HTML pages in a real browser: report.html of ``reproduce --quick`` and probe.html of a small probe.

Selenium drives Debian's Chromium (``/usr/bin/chromium`` with ``/usr/bin/chromedriver``, headless,
a fresh profile, no network services). The checks are small functions of a driver, each returning
what is wrong (an empty list when the page is fine), and ``test_checks_catch_a_broken_page`` shows
that each of them reports a broken page.

When Chromium, chromedriver or selenium is missing the tests are skipped with the missing path
named, unless ``ATTNSVM_REQUIRE_BROWSER=1`` (then they fail with the same reason);
``scripts/install_browser.sh`` installs both browser packages. Full-page screenshots go to
``$ATTNSVM_ARTIFACTS`` (default ``<repo>/artifacts``).
"""

from __future__ import annotations

import base64
import json
import os
import pathlib

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
REPO = pathlib.Path(__file__).resolve().parents[1]
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def require_browser() -> None:
    """Skip (or, with ``ATTNSVM_REQUIRE_BROWSER=1``, fail) naming whatever the browser tests lack."""
    missing = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the Python package selenium (pip install selenium)")
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            missing.append(path)
    if missing:
        reason = f"browser tests need {', '.join(missing)} (scripts/install_browser.sh installs chromium and chromium-driver)"
        if os.environ.get("ATTNSVM_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + "; ATTNSVM_REQUIRE_BROWSER=1 makes this a failure")
        pytest.skip(reason)


def artifacts_dir() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("ATTNSVM_ARTIFACTS", REPO / "artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    opts.add_argument("--window-size=1400,1000")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


# ------------------------------------------------------------------ checks
def open_page(driver, path) -> None:
    """Load a local file (``file://``) with an empty console log."""
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(pathlib.Path(path).resolve().as_uri())
    assert driver.execute_script("return document.readyState") == "complete"


def images_loaded(driver) -> list:
    """The ``src`` of every ``<img>`` that did not load (not complete or ``naturalWidth == 0``)."""
    return driver.execute_script(
        "return Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src);")


def console_errors(driver) -> list:
    """Console messages of level SEVERE since the last call (failed loads, ``console.error``, script errors)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def broken_anchors(driver) -> list:
    """Same-page links ``href="#id"`` whose target element does not exist."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('a[href^=\"#\"]')).map(a => a.getAttribute('href'))"
        ".filter(h => h.length > 1 && !document.getElementById(decodeURIComponent(h.slice(1))));")


def save_screenshot(driver, name: str) -> pathlib.Path:
    """A full-page PNG (the whole scroll height, via CDP ``captureBeyondViewport``) in the artifacts folder."""
    m = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    size = m.get("cssContentSize") or m["contentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                             "clip": clip})
    path = artifacts_dir() / name
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def raw_markup(driver) -> list:
    """Visible text that is unrendered Markdown or a Python repr: ``**``, ``np.int64(`` and the like."""
    text = driver.execute_script("return document.body.innerText")
    return [m for m in ("**", "np.int64(", "np.float64(", "np.True_", "np.False_") if m in text]


def shrunk_images(driver) -> list:
    """``(src, shown / natural width)`` of every image shown below half its natural width."""
    return driver.execute_script(
        "return Array.from(document.images).filter(i => i.naturalWidth > 0 && i.clientWidth < 0.5 * i.naturalWidth)"
        ".map(i => [i.getAttribute('src'), i.clientWidth / i.naturalWidth]);")


#: the banner's background colour (computed style) per colour class
BANNER_RGB = {"green": "rgba(218, 251, 225, 1)", "amber": "rgba(255, 248, 197, 1)", "red": "rgba(255, 235, 233, 1)"}


def banner_problems(driver, checks, skipped=()) -> list:
    """What is wrong with the verdict banner for these checks: its colour (red for an unexpected failure,
    amber for findings, inconclusive checks or skipped experiments, green only when all passed), its
    counts and the names of the checks that did not pass."""
    from attnsvm.report import counts_line, human, verdict_of

    from selenium.webdriver.common.by import By

    banner = driver.find_element(By.ID, "verdict")
    verdicts = [verdict_of(c) for c in checks]
    want = "red" if "fail" in verdicts else "amber" if (set(verdicts) - {"pass"} or skipped) else "green"
    out = []
    bg = banner.value_of_css_property("background-color")
    if bg != BANNER_RGB[want]:
        out.append(f"banner colour {bg}, expected {want} {BANNER_RGB[want]}")
    text = banner.text
    if counts_line(checks) not in text:
        out.append(f"banner lacks {counts_line(checks)!r}")
    if want == "green" and "All checks pass" not in text:
        out.append("green banner without 'All checks pass'")
    for c, v in zip(checks, verdicts):
        if v != "pass" and human(c["name"]) not in text:
            out.append(f"banner does not name the {v} check {c['name']!r}")
    return out


def _precedes(driver, a, b) -> bool:
    return bool(driver.execute_script("return !!(arguments[0].compareDocumentPosition(arguments[1]) & 4);", a, b))


#: a 400 x 1 PNG (white), shown at 100 px by the broken page below
WIDE_PNG = "iVBORw0KGgoAAAANSUhEUgAAAZAAAAABCAIAAAB/kG/JAAAAE0lEQVR4nGP4PwpGwSgYBUMEAACCJauNnb+xSgAAAABJRU5ErkJggg=="


# ------------------------------------------------------------------ the checks can fail
def test_checks_catch_a_broken_page(driver, tmp_path):
    good = tmp_path / "good.png"
    good.write_bytes(base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
                                      "RU5ErkJggg=="))
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><html><head><meta charset='utf-8'><title>bad</title></head><body>"
                    "<img src='good.png' alt='ok'><img src='missing.png' alt='broken'>"
                    "<a href='#here'>fine</a><a href='#nowhere'>dangling</a><p id='here'>x</p>"
                    "<script>console.error('deliberate failure');</script></body></html>")
    open_page(driver, page)
    broken = images_loaded(driver)
    assert len(broken) == 1 and broken[0].endswith("/missing.png"), broken
    errors = console_errors(driver)
    assert any("deliberate failure" in e for e in errors), errors
    assert any("missing.png" in e for e in errors), errors  # the failed load is logged too
    assert broken_anchors(driver) == ["#nowhere"]
    # and a clean page passes all three
    page.write_text("<!doctype html><html><head><meta charset='utf-8'><title>ok</title></head><body>"
                    "<img src='good.png' alt='ok'><a href='#here'>fine</a><p id='here'>x</p></body></html>")
    open_page(driver, page)
    assert images_loaded(driver) == [] and console_errors(driver) == [] and broken_anchors(driver) == []
    # raw markup, shrunk images and a banner that does not match the checks are reported
    wide = tmp_path / "wide.png"
    wide.write_bytes(base64.b64decode(WIDE_PNG))
    page.write_text("<!doctype html><html><head><meta charset='utf-8'><title>x</title></head><body>"
                    "<div id='verdict' style='background:#dafbe1'>All checks pass: 2 checks: 2 pass, 0 fail, "
                    "0 inconclusive, 0 findings</div><p>**Pitfall** d in [np.int64(10)]</p>"
                    "<img src='wide.png' style='width:100px' alt='w'></body></html>")
    open_page(driver, page)
    assert raw_markup(driver) == ["**", "np.int64("]
    assert [src for src, _ in shrunk_images(driver)] == ["wide.png"]
    ok = [{"name": "a", "passed": True}, {"name": "b", "passed": True}]
    assert banner_problems(driver, ok) == []
    bad = [{"name": "a", "passed": True}, {"name": "b", "passed": False}]
    problems = banner_problems(driver, bad)
    assert any("expected red" in p for p in problems) and any("'b'" in p for p in problems)


def test_missing_browser_skips_or_fails(monkeypatch):
    """The one skip rule: a visible skip naming the path, a failure under ATTNSVM_REQUIRE_BROWSER=1."""
    monkeypatch.setitem(globals(), "CHROMEDRIVER", "/nonexistent/chromedriver")
    monkeypatch.delenv("ATTNSVM_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="/nonexistent/chromedriver"):
        require_browser()
    monkeypatch.setenv("ATTNSVM_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="/nonexistent/chromedriver"):
        require_browser()


# ------------------------------------------------------------------ report.html
def test_report_in_browser(driver, quick_out):
    from selenium.webdriver.common.by import By

    from attnsvm.experiments import registry
    from attnsvm.report import human, verdict_of

    open_page(driver, quick_out / "report.html")

    assert images_loaded(driver) == []
    assert console_errors(driver) == []
    assert broken_anchors(driver) == []
    reg = registry()
    ran = sorted(p.name for p in quick_out.iterdir() if (p / "meta.json").is_file())
    skipped = json.loads((quick_out / "skipped.json").read_text()) if (quick_out / "skipped.json").exists() else []
    assert set(ran) <= set(reg), set(ran) - set(reg)
    assert set(ran) | {s["name"] for s in skipped} == set(reg)  # every registered experiment ran or is named skipped
    assert ran

    # the verdict and the summary table with links and pass counts come before the experiments' sections
    verdict = driver.find_element(By.ID, "verdict")
    summary_h2 = next(h for h in driver.find_elements(By.TAG_NAME, "h2") if h.text.strip() == "Summary")
    summary = summary_h2.find_element(By.XPATH, "following-sibling::table[1]")
    first_section = driver.find_element(By.CSS_SELECTOR, "section")
    assert _precedes(driver, verdict, summary) and _precedes(driver, summary, first_section)
    rows = {r.find_element(By.CSS_SELECTOR, "td a").get_attribute("href").rsplit("#", 1)[1]: r
            for r in summary.find_elements(By.XPATH, ".//tr[td/a]")}
    assert set(rows) == set(ran)

    # the banner's colour and words follow checks.json (and the skipped list)
    all_checks = [c for name in ran for c in json.loads((quick_out / name / "checks.json").read_text())]
    assert banner_problems(driver, all_checks, skipped) == []

    # one round trip: per section, its check table's first column, its config block, and whether its first
    # figure comes before its checks
    sections = driver.execute_script("""
        const out = {};
        for (const sec of document.querySelectorAll('section[id]')) {
            const table = sec.querySelector('table.checks');
            const img = sec.querySelector('img');
            const cfg = Array.from(sec.querySelectorAll('details')).filter(
                d => d.querySelector('summary').textContent.trim().startsWith('config'));
            out[sec.id] = {claims: table ? Array.from(table.querySelectorAll('tr')).filter(r => r.querySelector('td'))
                                             .map(r => r.querySelector('td').textContent) : [],
                           configs: cfg.map(d => d.querySelector('pre').textContent),
                           figureFirst: !!(img && table && (img.compareDocumentPosition(table) & 4))};
        }
        return out;""")
    for name in ran:
        checks = json.loads((quick_out / name / "checks.json").read_text())
        cell = rows[name].find_elements(By.TAG_NAME, "td")[2].text
        assert cell == f"{sum(verdict_of(c) == 'pass' for c in checks)}/{len(checks)}", (name, cell)
        assert driver.find_element(By.ID, name).tag_name == "section"
        assert sections[name]["claims"] == [human(c["name"]) for c in checks], name
        assert sections[name]["figureFirst"], name
        assert len(sections[name]["configs"]) == 1, name
        text = sections[name]["configs"][0]
        meta = json.loads((quick_out / name / "meta.json").read_text())
        assert text.strip() and all(f"{key}:" in text for key in (meta.get("config") or {})), name
    assert raw_markup(driver) == []
    assert shrunk_images(driver) == []
    # every experiment shows its figures (each writes at least one PNG; all loaded, checked above)
    assert len(driver.find_elements(By.CSS_SELECTOR, "section img")) >= len(ran)
    path = save_screenshot(driver, "report.png")
    assert path.stat().st_size > 10_000

    # (issue 42, item 6: the page was 81,541 px long) an experiment's check table and notes are collapsed when every
    # check passed and open otherwise; the page opens shorter than with everything open by at least the collapsed
    # check tables' height (closing a <details> removes its content's height, tables included, and leaves its line)
    all_pass = {name: all(verdict_of(c) == "pass" for c in json.loads((quick_out / name / "checks.json").read_text()))
                for name in ran}
    holders = driver.execute_script("""
        return Array.from(document.querySelectorAll('section[id] details.checks')).map(
            d => [d.closest('section').id, d.open, !!d.querySelector('table.checks')]);""")
    assert sorted(h[0] for h in holders) == sorted(ran)
    assert all(is_open == (not all_pass[name]) for name, is_open, _ in holders), holders
    short = driver.execute_script("return document.body.scrollHeight")
    hidden = driver.execute_script("""
        const closed = Array.from(document.querySelectorAll('details')).filter(d => !d.open);
        closed.forEach(d => { d.open = true; });
        return Array.from(document.querySelectorAll('details.checks')).filter(d => closed.includes(d))
            .map(d => d.querySelector('table.checks')).filter(t => t)
            .reduce((a, t) => a + t.getBoundingClientRect().height, 0);""")
    full = driver.execute_script("return document.body.scrollHeight")
    assert hidden > 0 and short <= full - hidden, (short, full, hidden)
    # a summary-table link to an experiment whose checks all passed lands on its section (figures shown, the check
    # table collapsed); the link of its "checks passed" count opens the table and lands on it
    name = next((n for n in ran if all_pass[n]), None)
    assert name, "the quick run has no experiment whose checks all pass: nothing to show collapsed"
    open_page(driver, quick_out / "report.html")

    def in_view(element_id):
        top, height = driver.execute_script(
            "return [document.getElementById(arguments[0]).getBoundingClientRect().top, window.innerHeight]", element_id)
        return -5 < top < height

    driver.find_element(By.CSS_SELECTOR, f"table.toc a[href='#{name}']").click()
    assert in_view(name) and driver.find_element(By.ID, name).find_element(By.TAG_NAME, "img").is_displayed()
    table = driver.find_element(By.CSS_SELECTOR, f"#checks-{name} table.checks")
    assert not table.is_displayed()
    driver.find_element(By.CSS_SELECTOR, "a[href='#summary']").click()
    driver.find_element(By.CSS_SELECTOR, f"table.toc a[href='#checks-{name}']").click()
    assert table.is_displayed() and in_view(f"checks-{name}")
    assert console_errors(driver) == []


# ------------------------------------------------------------------ probe.html
HOSTILE = "A <script>console.error('injected')</script> & \"quoted\" sentence."


@pytest.fixture(scope="module")
def probe_page(tmp_path_factory):
    """A tiny MiniLM probe written by run_probe: (folder, probe.json payload)."""
    pytest.importorskip("transformers")
    from attnsvm.cli.probe import run_probe

    out = tmp_path_factory.mktemp("probe")
    sentences = ["The cat sat on the mat while the dog slept.", HOSTILE, "Margins decide which token wins.",
                 "Every head reads its own tokens here.", "A short one.", "Attention selects a few tokens at a time.",
                 "The solver returns multipliers for every row.", "Nuclear norms favour low rank matrices."]
    text = run_probe([5], [0, 3], sentences, out=str(out), svm_sentences=6)
    assert str(out / "probe.html") in text
    return out, json.loads((out / "probe.json").read_text())


def test_probe_view_in_browser(driver, probe_page):
    from selenium.webdriver.common.by import By

    out, payload = probe_page
    open_page(driver, out / "probe.html")
    assert images_loaded(driver) == []
    assert len(driver.find_elements(By.TAG_NAME, "img")) == 1  # probe_heatmap.png, relative path
    assert console_errors(driver) == []  # the hostile sentence's script is text, never run
    assert broken_anchors(driver) == []
    heads = [(r["layer"], r["head"]) for r in payload["heads"]]
    sections = driver.find_elements(By.CSS_SELECTOR, "section.head")
    assert [s.get_attribute("id") for s in sections] == [f"head-{l}-{h}" for l, h in heads]

    # every heat-map cell links to its head's section; following one lands there
    links = driver.find_elements(By.CSS_SELECTOR, "table.grid a")
    assert {a.get_attribute("href").rsplit("#", 1)[1] for a in links} == {f"head-{l}-{h}" for l, h in heads}
    target = links[-1].get_attribute("href").rsplit("#", 1)[1]
    links[-1].click()
    assert driver.current_url.endswith("#" + target)
    assert driver.execute_script("return document.querySelector(':target').id") == target
    top, height, scrolled = driver.execute_script(
        "return [document.getElementById(arguments[0]).getBoundingClientRect().top, window.innerHeight, window.scrollY]",
        target)
    assert scrolled > 0 and -5 < top < height, (top, height, scrolled)  # scrolled to it (as far as the page allows)

    roles = {"sel", "sup", "oth", "unk", "na"}
    threshold = payload["config"]["threshold"]
    for sec in sections:
        for sent in sec.find_elements(By.CSS_SELECTOR, "div.sent"):
            spans = sent.find_elements(By.CSS_SELECTOR, "span.tok")
            assert spans
            info = driver.execute_script(
                "return arguments[0].map(s => [s.className, parseFloat(s.dataset.att), "
                "getComputedStyle(s).borderTopStyle, getComputedStyle(s).outlineStyle]);", spans)
            classes = [set(c.split()) for c, *_ in info]
            assert all(len(c & roles) == 1 and "tok" in c for c in classes)
            assert sum("q" in c for c in classes) == 1
            att = [a for _, a, *_ in info]
            best = max(range(len(att)), key=att.__getitem__)
            assert "sel" in classes[best]
            for c, a in zip(classes, att):
                if a >= threshold + 1e-5:
                    assert "sel" in c
                elif "sel" in c and a < threshold - 1e-5:
                    assert a == att[best]
            for (cls, _, border, outline), c in zip(info, classes):  # the CSS marks are really applied
                assert border == {"sel": "solid", "sup": "dashed", "oth": "solid", "unk": "dotted", "na": "solid"}[
                    (c & roles).pop()], cls
                assert (outline == "solid") == ("q" in c), cls
    body = driver.find_element(By.TAG_NAME, "body").text
    assert "<script>console.error('injected')</script>" in body  # shown as text
    assert driver.find_element(By.ID, "legend").is_displayed()
    assert shrunk_images(driver) == []
    # the verdict comes first
    assert _precedes(driver, driver.find_element(By.ID, "verdict"), driver.find_element(By.ID, "heatmap"))
    driver.execute_script("window.scrollTo(0, 0)")
    path = save_screenshot(driver, "probe.png")
    assert path.stat().st_size > 10_000
    check_explorer(driver)
    driver.execute_script("document.getElementById('explorer').scrollIntoView()")
    driver.save_screenshot(str(artifacts_dir() / "probe-explorer.png"))


def check_explorer(driver) -> None:
    """The chooser: picking a sentence, a query, clicking a token or a matrix row changes what is shown."""
    import numpy as np
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    data = json.loads(driver.execute_script("return document.getElementById('probe-data').textContent"))
    layer = str(data["layers"][0])

    def state():
        return driver.execute_script("const e = document.getElementById('shown'), s = e.dataset;"
                                     "return [s.layer, +s.sentence, +s.query, e.textContent];")

    assert state()[:3] == [layer, 0, data["sentences"][0]["query"]]
    text0 = state()[3]
    Select(driver.find_element(By.ID, "pick-sentence")).select_by_value("2")
    _, i, q, text = state()
    sent = data["sentences"][2]
    assert i == 2 and q == sent["query"] and sent["text"] in text and text != text0
    options = driver.find_elements(By.CSS_SELECTOR, "#pick-query option")
    assert len(options) == len(sent["tokens"])  # every token of the sentence can be the query
    new_q = (q + 1) % len(options)
    Select(driver.find_element(By.ID, "pick-query")).select_by_value(str(new_q))
    assert state()[2] == new_q

    def rows():
        return driver.execute_script(
            "return Array.from(document.querySelectorAll('#heads-rows .hrow')).map(r => [r.dataset.head, "
            "Array.from(r.querySelectorAll('.tok')).map(t => [t.classList.contains('q'), parseFloat(t.dataset.att), "
            "t.textContent])]);")

    shown = rows()
    assert [int(h) for h, _ in shown] == data["heads"][layer]  # one row per head of the layer
    for h, toks in shown:
        assert [k for k, (is_q, _, _) in enumerate(toks) if is_q] == [new_q]
        assert [t for _, _, t in toks] == sent["tokens"]
        np.testing.assert_allclose([a for _, a, _ in toks], np.array(data["att"][f"{layer}-{h}"][2][new_q]) / 1000,
                                   atol=1e-3)
    driver.find_elements(By.CSS_SELECTOR, "#heads-rows .hrow .tok")[1].click()  # a token becomes the query
    assert state()[2] == 1
    matrix_rows = driver.find_elements(By.CSS_SELECTOR, "#matrix tbody tr")
    assert len(matrix_rows) == len(sent["tokens"])
    assert [r.get_attribute("class") for r in matrix_rows].index("cur") == 1
    matrix_rows[3].click()  # so does a row of the attention matrix
    assert state()[2] == 3
    Select(driver.find_element(By.ID, "pick-head")).select_by_value(str(data["heads"][layer][-1]))
    title = driver.find_element(By.ID, "matrix-title").text
    assert f"head {data['heads'][layer][-1]}:" in title and "sentence 2" in title


# ------------------------------------------------------------------ probe.html: model view, layers, scale, words
#: "nan", "inf" and the like as words (not inside a longer word)
NOT_A_NUMBER = r"(^|[^\w-])(nan|inf|-inf|infinity)(?![\w-])"
VIEW_SENTENCES = ["The cat sat on the mat while the dog slept.", "Margins decide which token wins.",
                  "Every head reads its own tokens here.", "Attention selects a few tokens at a time.",
                  "The solver returns multipliers for every row.", "Nuclear norms favour low rank matrices.",
                  "Queries look for keys that match them.", "Small models still have many heads."]


@pytest.fixture(scope="module")
def view_page(tmp_path_factory):
    """probe.html of a real MiniLM probe of 2 layers x 2 heads with null heads, head (4, 0)'s SVM made infeasible
    (NaN cosines, an infinite nuclear norm, as the solver reports one): (path, result)."""
    pytest.importorskip("transformers")
    from infeasible_head import probe_with_infeasible_head

    from attnsvm.real.probe_view import write_probe_view

    res = probe_with_infeasible_head(VIEW_SENTENCES, (4, 0), layers=[4, 5], heads=[0, 1], svm_sentences=6,
                                     view_sentences=3, null_draws=3)
    out = tmp_path_factory.mktemp("view")
    return pathlib.Path(write_probe_view(res, str(out))), res


def _explorer_state(driver) -> list:
    """[layer, head, sentence, query] the explorer shows."""
    return driver.execute_script("const s = document.getElementById('shown').dataset;"
                                 "return [+s.layer, +document.getElementById('pick-head').value, +s.sentence, +s.query];")


def _thumbs(driver) -> list:
    """Each thumbnail of the model view: [layer, head, mark, text, canvas width, pressed, class]."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#model-view .thumb')).map(b => [+b.dataset.layer, "
        "+b.dataset.head, b.dataset.mark, b.textContent, b.querySelector('canvas').width, "
        "b.getAttribute('aria-pressed'), b.className]);")


def test_model_view_in_browser(driver, view_page):
    """One thumbnail per layer x head, drawn from the head's attention for the chosen sentence, marked with its
    verdict; a click (or Enter) shows that head in the explorer."""
    import numpy as np
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    path, res = view_page
    open_page(driver, path)
    assert console_errors(driver) == []
    data = json.loads(driver.execute_script("return document.getElementById('probe-data').textContent"))
    thumbs = _thumbs(driver)
    heads = [(int(r["layer"]), int(r["head"])) for _, r in res.table.iterrows()]
    assert [(l, h) for l, h, *_ in thumbs] == heads and len(thumbs) == 4  # 2 layers x 2 heads, in order
    from attnsvm.real.probe_view import HEAD_MARKS

    verdicts = {(int(r["layer"]), int(r["head"])): r["verdict"] for _, r in res.table.iterrows()}
    assert verdicts[(4, 0)] == "no SVM"
    n0 = len(data["sentences"][0]["tokens"])
    for l, h, mark, text, width, pressed, _ in thumbs:
        assert mark == verdicts[(l, h)] and HEAD_MARKS[mark][0] in text and f"head {h}" in text, (l, h, mark, text)
        assert width == n0  # sentence 0: one pixel per cell
    # the mark is seen, not only written: the label's background is the verdict map's colour
    bg = driver.execute_script("return getComputedStyle(document.querySelector("
                               "\"#model-view .thumb[data-layer='4'][data-head='0'] .tv\")).backgroundColor")
    assert bg == "rgb(238, 238, 238)", bg  # VERDICT_COLOURS["no SVM"]
    # the pixels are the head's attention: white to orange, green = 255 - 115 sqrt(a)
    green = driver.execute_script(
        "const c = document.querySelector(\"#model-view .thumb[data-layer='5'][data-head='1'] canvas\");"
        "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "return Array.from(d).filter((_, k) => k % 4 === 1);")
    want = np.round(255 - 115 * np.sqrt(np.array(data["att"]["5-1"][0]) / 1000)).ravel()
    np.testing.assert_allclose(green, want, atol=1)
    assert np.ptp(green) > 50  # a pattern, not a blank square
    # the first head is the current one; a click shows another in the explorer
    assert [t[5] for t in thumbs] == ["true", "false", "false", "false"]
    driver.find_element(By.CSS_SELECTOR, "#model-view .thumb[data-layer='5'][data-head='1']").click()
    assert _explorer_state(driver)[:2] == [5, 1]
    assert "Layer 5, head 1:" in driver.find_element(By.ID, "matrix-title").text
    assert [t[5] for t in _thumbs(driver)] == ["false", "false", "false", "true"]
    # keyboard: Enter on a focused thumbnail does the same
    driver.find_element(By.CSS_SELECTOR, "#model-view .thumb[data-layer='4'][data-head='1']").send_keys(Keys.ENTER)
    assert _explorer_state(driver)[:2] == [4, 1]
    # another sentence redraws every thumbnail at its length
    Select(driver.find_element(By.ID, "pick-sentence")).select_by_value("2")
    assert {t[4] for t in _thumbs(driver)} == {len(data["sentences"][2]["tokens"])}
    assert "sentence 2" in driver.find_element(By.ID, "model-title").text
    driver.execute_script("document.getElementById('model-title').scrollIntoView()")
    driver.save_screenshot(str(artifacts_dir() / "probe-model-view.png"))


def _css_rgb(colour: str) -> str:
    """A colour of :data:`attnsvm.real.probe_view.HEAD_MARKS` ("#rrggbb" or "rgb(r,g,b)") as getComputedStyle
    gives it."""
    if colour.startswith("#"):
        hexes = colour[1:] if len(colour) == 7 else "".join(c + c for c in colour[1:])  # "#777" is "#777777"
        r, g, b = (int(hexes[k:k + 2], 16) for k in (0, 2, 4))
        return f"rgb({r}, {g}, {b})"
    return colour.replace(",", ", ")


def _row_meta(driver) -> list:
    """Each explorer row's [head, [[mark, words, background, colour], ...] of its verdicts, shares text, tooltip]."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#heads-rows .hrow')).map(r => [+r.dataset.head, "
        "Array.from(r.querySelectorAll('.hv')).map(v => [v.dataset.mark, v.textContent, "
        "getComputedStyle(v).backgroundColor, getComputedStyle(v).color]), "
        "(r.querySelector('.sh') || {}).textContent || '', (r.querySelector('.sh') || {}).title || '']);")


def test_explorer_rows_show_verdicts_and_shares(driver, view_page):
    """Each head's row in the explorer shows its verdict in words, coloured as in the verdict map, and how often it
    selects [CLS] and [SEP] and its query-independent share; they follow the chosen layer."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from attnsvm.real.probe_view import HEAD_MARKS

    path, res = view_page
    open_page(driver, path)
    rows = {(int(r["layer"]), int(r["head"])): r for _, r in res.table.iterrows()}
    for layer in ("4", "5"):
        Select(driver.find_element(By.ID, "pick-layer")).select_by_value(layer)
        meta = _row_meta(driver)
        assert [h for h, *_ in meta] == [0, 1]
        for h, verdicts, shares, tip in meta:
            r = rows[(int(layer), h)]
            _, bg, fg = HEAD_MARKS[r["verdict"]]
            assert verdicts == [[r["verdict"], r["verdict"], _css_rgb(bg), _css_rgb(fg)]], (layer, h, verdicts)
            qi = "no value" if r["qi_share"] != r["qi_share"] else format(r["qi_share"], ".2f")
            assert shares == (f"selects [CLS] {r['sel_first']:.2f} \u00b7 selects [SEP] {r['sel_last']:.2f} \u00b7 "
                              f"query-indep. share {qi}"), shares
            assert "sel_first" in tip and "qi_share" in tip
    assert console_errors(driver) == []


@pytest.fixture(scope="module")
def curve_page(tmp_path_factory):
    """probe.html of a real probe at two numbers of SVM sentences (4 and 6; layer 4, heads 0 and 1, head 0 without
    an SVM) in which head 1's verdicts at the two m disagree (its row at m = 4 set to "beyond null"), so its
    stable verdict is "depends on sample size" whatever its verdict at m = 6, with its curve figure as
    ``attnsvm probe --out`` writes it: (path, table at the largest m)."""
    pytest.importorskip("transformers")
    from infeasible_head import probe_with_infeasible_head

    from attnsvm.real.figures import curve_figure, largest_m
    from attnsvm.real.probe_view import write_probe_view
    from attnsvm.real.verdict import stable_verdicts

    res = probe_with_infeasible_head(VIEW_SENTENCES, (4, 0), layers=[4], heads=[0, 1], svm_sentences=[4, 6],
                                     view_sentences=2, null_draws=3)
    table = res.table.copy()
    assert sorted(table["m"].unique()) == [4, 6]
    at6 = table.loc[(table["head"] == 1) & (table["m"] == 6), "verdict"].iloc[0]
    table.loc[(table["head"] == 1) & (table["m"] == 4), "verdict"] = (
        "beyond null" if at6 != "beyond null" else "below null")
    table = stable_verdicts(table)
    out = tmp_path_factory.mktemp("curve-view")
    curve_figure(table, str(out), "probe_curve")
    path = write_probe_view(type(res)(**{**res.__dict__, "table": table}), str(out), curve="probe_curve.png")
    return pathlib.Path(path), largest_m(table)


def test_several_m_page_shows_the_curve_legibly(driver, curve_page):
    """The "Across sample sizes" section shows the curve figure: one image that loads and decodes in the browser
    (naturalWidth > 0), at least 150 px tall, its two panels (one per head, side by side) each at most 1.5 times
    as wide as tall on the page (the figure's size was once passed as each panel's: a 10 x 2.5 in strip here, a
    4-head one shrank to about 100 px tall)."""
    path, _ = curve_page
    open_page(driver, path)
    imgs = driver.execute_script(
        "const h = document.getElementById('curve'); const out = [];"
        "for (let e = h.nextElementSibling; e && e.tagName !== 'H2'; e = e.nextElementSibling)"
        "  for (const img of e.querySelectorAll('img'))"
        "    out.push([img.getAttribute('src'), img.complete, img.naturalWidth, img.getBoundingClientRect().width,"
        "              img.getBoundingClientRect().height]);"
        "return out;")
    assert len(imgs) == 1, imgs
    src, complete, natural, width, height = imgs[0]
    assert src == "probe_curve.png" and complete and natural > 0, imgs
    assert height >= 150 and width / 2 <= 1.5 * height, imgs
    assert console_errors(driver) == []


def test_several_m_thumbnails_mark_the_stable_verdict(driver, curve_page):
    """With several m the model view's thumbnails carry the stable verdict (not the verdict at the largest m) and
    their tooltips say so; the explorer rows show both, the stable one first."""
    from attnsvm.real.probe_view import HEAD_MARKS

    path, table = curve_page
    open_page(driver, path)
    assert console_errors(driver) == []
    r1 = table[table["head"] == 1].iloc[0]
    assert r1["stable_verdict"] == "depends on sample size" and r1["verdict"] != "depends on sample size"
    thumbs = {h: (mark, text) for _, h, mark, text, *_ in _thumbs(driver)}
    assert thumbs[1][0] == "depends on sample size" and HEAD_MARKS["depends on sample size"][0] in thumbs[1][1]
    assert thumbs[0][0] == "no SVM"  # stable: no SVM at both m
    title = driver.execute_script("return document.querySelector(\"#model-view .thumb[data-head='1']\").title")
    assert "stable: depends on sample size" in title and f"m = 6: {r1['verdict']}" in title, title
    assert "the thumbnail marks the stable verdict" in title, title
    meta = {h: verdicts for h, verdicts, *_ in _row_meta(driver)}
    assert [v[1] for v in meta[1]] == ["stable: depends on sample size", f"m = 6: {r1['verdict']}"]
    assert meta[1][0][2] == _css_rgb(HEAD_MARKS["depends on sample size"][1])
    assert [v[1] for v in meta[0]] == ["stable: no SVM", "m = 6: no SVM"]
    legend = driver.execute_script("return document.getElementById('explorer').textContent")
    assert "Thumbnail marks:" in legend and "the head's stable verdict" in legend


def test_layer_sections_collapse(driver, view_page):
    """One collapsible section per layer, the first open: a closed one hides its heads, opening it (click or
    Enter) shows them, a heat-map link into a closed layer opens it, and the explorer works with all closed."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    path, _ = view_page
    open_page(driver, path)
    layers = driver.find_elements(By.CSS_SELECTOR, "details.layer")
    assert [d.get_attribute("id") for d in layers] == ["layer-4", "layer-5"]
    assert [d.get_attribute("open") is not None for d in layers] == [True, False]
    sec4, sec5 = driver.find_element(By.ID, "head-4-1"), driver.find_element(By.ID, "head-5-1")
    assert sec4.is_displayed() and not sec5.is_displayed()
    assert "Layer 5: 2 heads" in layers[1].find_element(By.TAG_NAME, "summary").text
    short = driver.execute_script("return document.documentElement.scrollHeight")
    summary = layers[1].find_element(By.TAG_NAME, "summary")
    summary.send_keys(Keys.ENTER)  # keyboard: Enter on the focused summary opens it
    assert sec5.is_displayed()
    assert driver.execute_script("return document.documentElement.scrollHeight") > short + 200
    summary.click()
    assert not sec5.is_displayed()
    # the buttons open and close every layer
    driver.find_element(By.ID, "open-layers").click()
    assert sec4.is_displayed() and sec5.is_displayed()
    driver.find_element(By.ID, "close-layers").click()
    assert not sec4.is_displayed() and not sec5.is_displayed()
    # the explorer (and its model view) still work with every layer closed
    driver.find_element(By.CSS_SELECTOR, "#model-view .thumb[data-layer='5'][data-head='0']").click()
    assert _explorer_state(driver)[:2] == [5, 0]
    # a heat-map cell's link into a closed layer opens it and lands on the head
    driver.find_element(By.CSS_SELECTOR, "#grid-verdict a[href='#head-5-1']").click()
    assert driver.find_element(By.ID, "layer-5").get_attribute("open") is not None and sec5.is_displayed()
    top, height = driver.execute_script(
        "return [document.getElementById('head-5-1').getBoundingClientRect().top, window.innerHeight]")
    assert -5 < top < height, (top, height)


def test_matrix_colour_scale_and_values(driver, view_page):
    """The attention matrix has a colour scale with this matrix's min and max, and "show values" prints every
    cell's value (hundredths) without hover; both follow the chosen head and sentence."""
    import numpy as np
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    path, _ = view_page
    open_page(driver, path)
    data = json.loads(driver.execute_script("return document.getElementById('probe-data').textContent"))
    scale = driver.find_element(By.ID, "matrix-scale")
    assert scale.is_displayed()

    def check(layer, head, i, values):
        m = np.array(data["att"][f"{layer}-{head}"][i]) / 1000
        assert _explorer_state(driver)[:3] == [layer, head, i]
        assert driver.find_element(By.ID, "scale-min").text == f"{m.min():.3f}"
        assert driver.find_element(By.ID, "scale-max").text == f"{m.max():.3f}"
        lo, hi = driver.execute_script("return Array.from(document.querySelectorAll('#matrix-scale .mark'))"
                                       ".map(e => parseFloat(e.style.left));")
        assert abs(lo - 100 * m.min()) < 0.1 and abs(hi - 100 * m.max()) < 0.1
        cells = driver.execute_script("return Array.from(document.querySelectorAll('#matrix tbody tr')).map(r => "
                                      "Array.from(r.querySelectorAll('td')).map(td => td.textContent));")
        if not values:
            assert {c for row in cells for c in row} == {""}
            return
        c = (np.array(data["att"][f"{layer}-{head}"][i]) + 5) // 10  # hundredths, halves up (as Math.round)
        want = [["0" if a <= 0 else "1" if k >= 100 else f".{k:02d}" for a, k in zip(ra, rk)]
                for ra, rk in zip(m, c)]
        assert cells == want

    check(4, 0, 0, False)
    box = driver.find_element(By.ID, "show-values")
    box.click()
    assert box.is_selected()
    check(4, 0, 0, True)
    Select(driver.find_element(By.ID, "pick-sentence")).select_by_value("1")
    Select(driver.find_element(By.ID, "pick-head")).select_by_value("1")
    check(4, 1, 1, True)  # the toggle stays on as the choice changes
    driver.execute_script("document.getElementById('matrix-title').scrollIntoView()")
    driver.save_screenshot(str(artifacts_dir() / "probe-matrix-values.png"))
    box.click()
    check(4, 1, 1, False)


#: the page's visible text, tooltips, labels and alt texts, scripts and styles left out, joined by " | "
VISIBLE_WORDS = ("const out = [], w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);"
                 "while (w.nextNode()) { if (!w.currentNode.parentElement.closest('script,style')) "
                 "out.push(w.currentNode.textContent); }"
                 "document.querySelectorAll('[title],[aria-label],[alt]').forEach(e => ['title', 'aria-label', 'alt']"
                 ".forEach(a => { if (e.hasAttribute(a)) out.push(e.getAttribute(a)); }));"
                 "return out.join(' | ');")


def nan_words(driver) -> list:
    """Each "nan", "inf" and the like in the page's :data:`VISIBLE_WORDS`, with some context."""
    import re

    text = driver.execute_script(VISIBLE_WORDS)
    return [text[max(0, m.start() - 60):m.end() + 20] for m in re.finditer(NOT_A_NUMBER, text, flags=re.IGNORECASE)]


def test_attention_without_a_value_reads_no_value(driver, view_page, tmp_path):
    """An attention value that is not a number (NaN) reaches the explorer as "no value": a grey matrix cell, a token
    of the heads' rows and a thumbnail pixel, left out of the colour scale; no "nan" and no huge negative number."""
    import numpy as np
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from attnsvm.real.probe_view import write_probe_view

    _, res = view_page
    mats = {k: np.array(v, dtype=float) for k, v in res.matrices.items()}
    q = int(np.asarray(res.queries[0]))
    mats[(4, 1)][0, q, 2] = np.nan
    path = write_probe_view(type(res)(**{**res.__dict__, "matrices": mats}), str(tmp_path))
    open_page(driver, path)
    Select(driver.find_element(By.ID, "pick-head")).select_by_value("1")
    cell = driver.find_element(By.CSS_SELECTOR, f"#matrix tbody tr[data-query='{q}'] td:nth-of-type(3)")
    assert cell.get_attribute("data-att") == "no value" and cell.get_attribute("title").endswith(": no value")
    assert cell.value_of_css_property("background-color") == "rgba(208, 215, 222, 1)"
    tok = driver.find_element(By.CSS_SELECTOR, "#heads-rows .hrow[data-head='1'] .tok[data-t='2']")
    assert tok.get_attribute("data-att") == "no value" and "attention no value" in tok.get_attribute("title")
    m = np.delete(mats[(4, 1)][0, :len(res.tokens[0]), :len(res.tokens[0])].ravel(),
                  q * len(res.tokens[0]) + 2)
    assert driver.find_element(By.ID, "scale-min").text == f"{np.rint(1000 * m.min()) / 1000:.3f}"
    pixel = driver.execute_script(
        "const c = document.querySelector(\"#model-view .thumb[data-layer='4'][data-head='1'] canvas\");"
        "return Array.from(c.getContext('2d').getImageData(2, arguments[0], 1, 1).data);", q)
    assert pixel == [208, 215, 222, 255], pixel
    driver.find_element(By.ID, "show-values").click()
    cell = driver.find_element(By.CSS_SELECTOR, f"#matrix tbody tr[data-query='{q}'] td:nth-of-type(3)")
    assert cell.text == "-"
    assert nan_words(driver) == [] and console_errors(driver) == []


def test_probe_page_shows_no_nan_words(driver, view_page):
    """No "nan", "NaN" or "inf" anywhere on probe.html, tooltips and labels included, in every state of the explorer
    (each sentence, values shown) and on the model view's thumbnail of the head without an SVM (words instead)."""
    import re

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    path, _ = view_page
    open_page(driver, path)
    assert re.search(NOT_A_NUMBER, "p nan |", flags=re.IGNORECASE)  # the pattern finds the word

    def check(state):
        hits = nan_words(driver)
        assert not hits, (state, hits)

    check("as loaded")
    no_svm = driver.find_element(By.CSS_SELECTOR, "#model-view .thumb[data-layer='4'][data-head='0']")
    assert "no SVM" in no_svm.text and "no SVM" in no_svm.get_attribute("aria-label")
    driver.find_element(By.ID, "show-values").click()
    pick = Select(driver.find_element(By.ID, "pick-sentence"))
    for i in range(len(pick.options)):
        pick.select_by_value(str(i))
        for head in ("0", "1"):
            Select(driver.find_element(By.ID, "pick-head")).select_by_value(head)
            check((i, head))
    assert console_errors(driver) == []


# ------------------------------------------------------------------ the docs' "On this page" column
DOC_WIDTHS = (1280, 1440, 1600, 1920)


@pytest.fixture(scope="module")
def furo_page(tmp_path_factory):
    """A one-page Sphinx site in the docs' theme (furo) with docs/_static/wide.css, as docs/conf.py sets them: a
    few sections (the "On this page" column) and a code line wider than any window (what pushed the column out)."""
    pytest.importorskip("sphinx")
    pytest.importorskip("furo")
    import shutil
    import subprocess
    import sys

    src = tmp_path_factory.mktemp("furo-src")
    (src / "_static").mkdir()
    shutil.copy(REPO / "docs" / "_static" / "wide.css", src / "_static" / "wide.css")
    (src / "conf.py").write_text("project = 'toc'\nhtml_theme = 'furo'\nhtml_static_path = ['_static']\n"
                                 "html_css_files = ['wide.css']\n")
    sections = "".join(f"\nSection {k} with a longer title\n{'-' * 30}\n\nText {k}.\n" for k in range(8))
    (src / "index.rst").write_text("Page\n====\n\n.. code-block:: text\n\n   " + "x" * 400 + "\n" + sections)
    out = tmp_path_factory.mktemp("furo-html")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", str(src), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out / "index.html"


def toc_problems(driver, page, widths=DOC_WIDTHS) -> list:
    """Where the docs' right-hand "On this page" column is not wholly in the window, per window width: hidden in
    a drawer, past the right edge, overlapping the content, or the page scrolling sideways."""
    out = []
    for width in widths:
        driver.set_window_size(width, 900)
        open_page(driver, page)
        got = driver.execute_script(
            "const t = document.querySelector('.toc-drawer').getBoundingClientRect(),"
            " c = document.querySelector('.content').getBoundingClientRect(), e = document.documentElement;"
            "return {toc: [t.left, t.right, t.width], content: c.right, view: e.clientWidth, scroll: e.scrollWidth,"
            " position: getComputedStyle(document.querySelector('.toc-drawer')).position,"
            " links: Array.from(document.querySelectorAll('.toc-drawer a')).map(a => a.getBoundingClientRect().right)};")
        left, right, w = got["toc"]
        if got["position"] != "static" or w < 100:
            out.append(f"{width}: the column is not shown ({got['position']}, {w:.0f} px wide)")
        if right > got["view"] + 1 or max(got["links"] or [0]) > got["view"] + 1:
            out.append(f"{width}: the column ends at {right:.0f} px, past the window's {got['view']} px")
        if got["content"] > left + 1:
            out.append(f"{width}: the content ({got['content']:.0f} px) runs under the column ({left:.0f} px)")
        if got["scroll"] > got["view"] + 1:
            out.append(f"{width}: the page scrolls sideways ({got['scroll']} > {got['view']} px)")
    driver.set_window_size(1400, 1000)
    return out


#: docs/_static/wide.css before issue 42's fix: the column was cut at 1440 and 1600 px and a drawer at 1280
OLD_WIDE_CSS = """@media (min-width: 67em) {
  .sidebar-drawer { width: 15em; }
  .toc-drawer { width: 13em; flex: none; }
  .content { width: auto; flex: 1 1 auto; min-width: 0; max-width: 62em; padding: 0 2em; }
}"""


def test_docs_toc_column_fits(driver, furo_page):
    """Issue 42: "On this page" was cut at 1440 and 1600 px wide (and a drawer at 1280); it is whole at each width,
    and the check reports the old stylesheet's layout."""
    assert toc_problems(driver, furo_page) == []
    for width in DOC_WIDTHS:
        driver.set_window_size(width, 900)
        open_page(driver, furo_page)
        driver.save_screenshot(str(artifacts_dir() / f"docs-toc-{width}.png"))
    css = furo_page.parent / "_static" / "wide.css"
    fixed = css.read_text()
    try:
        css.write_text(OLD_WIDE_CSS)
        problems = toc_problems(driver, furo_page)
    finally:
        css.write_text(fixed)
    assert any(p.startswith("1280: the column is not shown") for p in problems), problems
    for width in (1440, 1600):
        assert any(p.startswith(f"{width}: the column ends at") for p in problems), problems


def test_artifacts_folder_is_ignored():
    ignore = (REPO / ".gitignore").read_text().split()
    assert "artifacts/" in ignore
