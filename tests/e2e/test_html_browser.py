"""The HTML page in a real browser: Debian's headless chromium driven by
Selenium through Debian's chromedriver (never a downloaded browser: both
paths are given, so Selenium Manager is not asked). Opened as a file:// URL
with no network: the problems in the DOM are the report's, a problem's
file:line opens its source excerpt with the line marked and in view, the
node filter hides the rows that do not match, the page's CSP blocks none of
its own handlers, and markup from the run file runs nothing. A screenshot is
kept (`page.png` in the test's folder).

Without chromium, chromedriver or selenium the tests are skipped, saying
which is missing; with CI set they fail instead (.ci/run installs chromium)."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from htmlruns import browser_missing, chromium, synthetic

from graphdbg.core.format import at
from graphdbg.reporters.html import page

from conftest import group

# one chromium for the module, on the worker that runs the showcase
pytestmark = group("showcase")

@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    why = browser_missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test cannot run in CI: {why}")
        pytest.skip(why)
    driver = chromium(tmp_path_factory.mktemp('chromium'), console_log=True)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _open(browser, html: str, path) -> None:
    path.write_text(html, encoding="utf-8")
    browser.get(path.resolve().as_uri())


def _console_errors(browser) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e.get("level") == "SEVERE"]


def test_the_showcase_page_in_chromium(browser, runs, tmp_path):
    from selenium.webdriver.common.by import By
    r = runs.golden("showcase").ok()
    _open(browser, page(str(r.run)), tmp_path / "showcase.html")
    # the problems in the DOM, in the report's order
    shown = [(e.get_attribute("data-kind"), e.get_attribute("data-where"))
             for e in browser.find_elements(By.CSS_SELECTOR, "div.problem")]
    assert shown == [(d["kind"], at(d["file"], d["line"], d["cell"])) for d in r.doc["diagnostics"]]
    # a source jump: the excerpt is closed, the click opens it with its line in view
    link = browser.find_elements(By.CSS_SELECTOR, "div.problem a.where")[-1]
    target = link.get_attribute("href").split("#", 1)[1]
    row = browser.find_element(By.ID, target)
    assert not row.is_displayed()
    link.click()
    time.sleep(0.2)
    # (flash: the page's own handler ran, its CSP hash admitted it)
    assert row.is_displayed() and row.get_attribute("class").split() == ["hl", "flash"]
    top, bottom = browser.execute_script(
        "var r=arguments[0].getBoundingClientRect();return [r.top, r.bottom];", row)
    assert 0 <= top and bottom <= browser.execute_script("return window.innerHeight")
    line = int(shown[-1][1].rsplit(":", 1)[1])
    assert row.text.split()[0] == str(line)
    # the node filter: only matching rows left, the graphs opened
    box = browser.find_element(By.CSS_SELECTOR, "input.filter")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.nodes tbody tr")
    box.send_keys("embedding")
    time.sleep(0.2)
    visible = [e for e in rows if e.is_displayed()]
    assert 0 < len(visible) < len(rows)
    assert all("embedding" in e.text.lower() for e in visible)
    # the page's CSP let its handlers run and blocked nothing of its own
    assert not _console_errors(browser), _console_errors(browser)
    shot = tmp_path / "page.png"
    browser.save_screenshot(str(shot))
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    keep = os.environ.get("GRAPHDBG_HTML_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_markup_from_the_run_file_runs_nothing(browser, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    run = synthetic(tmp_path / "evil.run", 1, 20, evil=True)
    _open(browser, page(str(run)), tmp_path / "evil.html")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    assert not browser.find_elements(By.TAG_NAME, "img")
    assert browser.execute_script("return document.scripts.length") == 0
    assert "<script>alert(1)</script>" in browser.find_element(By.TAG_NAME, "h1").text
