"""The report as a reader sees it: rendered by a real headless Chromium (selenium with Debian's chromium and
chromium-driver, no download), at a 1,280 px wide window.

The `browser` fixture (browser_fixture) and `page_facts` are used by test_report.py too, on the report of its
real sweep. Without a browser the tests skip, saying why; under CI (CI set) a missing browser fails them."""

import os
import shutil
from pathlib import Path

import pytest

WIDTH = 1280
FACTS = """
const view = document.documentElement.clientWidth;
const text = e => e ? e.innerText.replace(/\\s+/g, ' ').trim() : null;
return {
  view: view,
  page: Math.max(document.documentElement.scrollWidth, document.body.scrollWidth),
  boxes: Array.from(document.querySelectorAll('table')).map(t => {
    const box = t.closest('.table-box') || t;
    const r = box.getBoundingClientRect();
    return {id: t.id, left: r.left, right: r.right, scrolls: box.scrollWidth > box.clientWidth};
  }),
  headers: Array.from(document.querySelectorAll('#runs th')).map(text),
  verdict: text(document.querySelector('#verdict p')),
  verdictItems: Array.from(document.querySelectorAll('#verdict li')).map(text),
  figures: Array.from(document.querySelectorAll('figure')).map(f => {
    const img = f.querySelector('img'), r = img.getBoundingClientRect();
    return {id: f.id, alt: img.alt, caption: text(f.querySelector('figcaption')), loaded: img.complete &&
            img.naturalWidth > 0, right: r.right};
  }),
  notDrawn: Array.from(document.querySelectorAll('.not-drawn')).map(text),
};
"""


def _found(*names: str) -> str | None:
    for name in names:
        path = shutil.which(name) or (name if os.path.isfile(name) else None)
        if path:
            return path
    return None


@pytest.fixture(scope="session", name="browser")
def browser_fixture():
    """A headless Chromium driven by selenium, 1,280 px wide; skipped (failed under CI) without one."""
    chromium = _found("chromium", "chromium-browser", "/usr/bin/chromium")
    driver_path = _found("chromedriver", "/usr/bin/chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        webdriver = None
    missing = [
        what
        for what, ok in (
            ("chromium", chromium),
            ("chromedriver", driver_path),
            ("selenium (the test extra)", webdriver),
        )
        if not ok
    ]
    if missing:
        reason = (
            f"no headless browser: {', '.join(missing)} missing (apt-get install chromium chromium-driver; "
            f"pip install -e '.[test]')"
        )
        if os.environ.get("CI"):
            pytest.fail(f"CI: {reason}")
        pytest.skip(reason)
    os.environ["SE_OFFLINE"] = "true"  # selenium manager: never fetch a driver or a browser
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={WIDTH},900",
        "--hide-scrollbars",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


def page_facts(driver, path: Path) -> dict:
    """What the browser shows of the report at `path`: page and viewport widths, each table's box, the runs
    table's headers, the verdict line, the figures (alt, caption, loaded) and the not-drawn lines."""
    driver.get(path.resolve().as_uri())
    return driver.execute_script(FACTS)


def assert_fits(facts: dict) -> None:
    assert facts["view"] >= WIDTH - 20, facts["view"]  # the window is as wide as asked
    assert facts["page"] <= facts["view"], f"the page is {facts['page']} px wide in a {facts['view']} px window"
    for box in facts["boxes"]:
        assert box["left"] >= 0 and box["right"] <= facts["view"], f"table {box['id']} is wider than the page: {box}"
    for figure in facts["figures"]:
        assert figure["loaded"] and figure["right"] <= facts["view"], figure


@pytest.mark.timeout(120)
def test_long_settings_and_errors_wrap_or_scroll_inside_the_page(browser, tmp_path):
    """A sweep of many long swept values and a long error: the page stays as wide as the window, the wide
    table scrolls inside its own box."""
    from selfsup.report.model import Run
    from selfsup.report.render import render_html

    long_path = "/data/" + "very_long_folder_name_" * 8 + "corpus.jsonl"
    keys = [f"objective.knob_number_{i}" for i in range(10)] + ["data.paths"]
    runs = []
    for i in range(6):
        config = {
            "objective.name": "mlm",
            "architecture.name": "encoder",
            "data.paths": [long_path],
            **{k: 0.1 * i + j for j, k in enumerate(keys[:-1])},
        }
        runs.append(
            Run(
                label=str(i),
                path=tmp_path / str(i),
                sweep=tmp_path,
                status="finished" if i else "failed",
                error=None if i else "loss became nan at step 3: " + "x" * 300,
                objective="mlm",
                architecture="encoder",
                config=config,
                source="summary.json",
                summary={"tokens_per_sec": 614.0, "wall_seconds": 12.0},
            )
        )
    setup = {"fixed": {"data.cache_dir_like_setting": long_path * 3}, "study": [f"Best: run dir {long_path * 2}"]}
    page = tmp_path / "report.html"
    page.write_text(render_html(runs, keys, [], setup), encoding="utf-8")
    facts = page_facts(browser, page)
    assert_fits(facts)
    [runs_box] = [b for b in facts["boxes"] if b["id"] == "runs"]
    assert runs_box["scrolls"]  # 11 swept columns: wider than the page, scrolled inside its box
    assert "objective.knob_number_0" in facts["headers"] and "tokens/s" in facts["headers"]
    table = browser.find_element("id", "runs").text
    assert "614 (not a benchmark: 12 s run)" in " ".join(table.split())
