"""The report in a real browser: headless Chromium (Debian's `chromium`)
opens a report of a checked run with anomalies, every fault family and
hostile strings everywhere, at 1,280 and 390 px, and shows no horizontal
overflow, no console error, no network request, and no script of the data's
running. Screenshots go to the test's tmp dir."""

from __future__ import annotations

import pytest

from harness.run.report import render
from tests.harness.pages.chromium import BINARY, Browser
from tests.harness.pages.hostile_run import build
from tests.support import need

pytestmark = pytest.mark.spark

WIDTHS = (1280, 390)
# What the hostile strings would leave on `window` had any of them run.
PROBE = "({pwned: typeof window.pwned === 'undefined' ? null : window.pwned})"


@pytest.fixture(scope="module")
def browser():
    need(BINARY is not None, "chromium (scripts/setup-system.sh installs it)")
    with Browser() as b:
        yield b


def test_the_probe_sees_overflow_console_errors_and_requests(browser, tmp_path):
    """The three checks below can fail: a page with each fault shows it."""
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><html><head><meta charset='utf-8'></head><body>"
                    "<div style='width:2000px'>wide</div><img src='http://127.0.0.1:9/x.png'>"
                    "<script>console.error('broken'); window.pwned = 1;</script></body></html>")
    seen = browser.open_page(page, 390, probe=PROBE)
    assert seen.scroll_width > seen.inner_width == 390
    assert any("broken" in e for e in seen.console_errors)
    assert seen.requests == ["http://127.0.0.1:9/x.png"]
    assert seen.globals == {"pwned": 1}


def test_report_in_chromium_at_desktop_and_phone_widths(spark, browser, tmp_path):
    run_dir, results = build(tmp_path, spark)
    report = render(run_dir, results)
    for width in WIDTHS:
        for where in (None, "#faults"):  # the top, and further down (nemesis and node logs)
            seen = browser.open_page(report, width, probe=PROBE, scroll_to=where)
            name = f"report-{width}{'-' + where.split(':')[0] + '-' + where[-2] if where else ''}.png"
            (tmp_path / name).write_bytes(seen.screenshot)
            assert seen.inner_width == width
            assert seen.scroll_width <= seen.inner_width, f"horizontal overflow at {width} px"
            assert seen.console_errors == []
            assert seen.requests == []
            assert seen.globals == {"pwned": None}
            assert seen.screenshot.startswith(b"\x89PNG")
