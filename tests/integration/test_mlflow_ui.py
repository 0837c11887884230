"""What a person sees: MLflow's web UI in a real headless Chromium (Debian's package, driven by
Playwright) on the campaign and the training that ``populated_server`` logged. Screenshots go
to the artifacts directory (``$SURROGATE_TEST_ARTIFACTS`` or pytest's temporary directory)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from surrogate.io.tracking import experiment_url

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Without the background-networking flags Chromium keeps trying to reach Google's hosts,
which a closed network refuses."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="pip install -e '.[integration]' for Playwright"
    )
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest, artifacts_dir: Path) -> Iterator[Any]:
    """A fresh browser page; whatever it shows when the test ends (passed or not) is saved as
    ``<test name>.png`` in the artifacts directory."""
    context = browser.new_context(viewport={"width": 1600, "height": 1200})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    try:
        yield pg
    finally:
        shot = artifacts_dir / f"{request.node.name}.png"
        pg.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        context.close()


def _open(page: Any, url: str) -> None:
    page.goto(url, wait_until="load")  # MLflow keeps polling: never "networkidle"
    page.locator("h1, h2").first.wait_for(state="visible")
    close = page.locator('[aria-label="Close"], [aria-label="close"]')
    if close.count():  # MLflow's assistant panel hides a third of the page
        with contextlib.suppress(Exception):
            close.first.click(timeout=2_000)


def test_the_campaign_page_lists_its_runs(populated_server, page, artifacts_dir):
    url = populated_server["url"]
    exp = populated_server["experiments"]["active learning: demo"]
    _open(page, experiment_url(url, exp["experiment_id"]))  # the link the commands print
    for name in ("round 01", "round 02", "accuracy over rounds", "analytic baseline"):
        page.get_by_text(name, exact=True).first.wait_for(state="visible")
    shot = artifacts_dir / "campaign-runs.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    # MLflow's "Model training" view: its page is "Runs" (the GenAI view says "Training runs")
    assert page.get_by_role("heading", name="Runs", exact=True).count() == 1
    assert page.get_by_text("round 01", exact=True).count() == 1  # scored twice, one run


def test_the_chart_view_draws_accuracy_against_rounds(populated_server, page, artifacts_dir):
    url = populated_server["url"]
    exp = populated_server["experiments"]["active learning: demo"]
    _open(page, experiment_url(url, exp["experiment_id"], charts=True))
    title = page.locator('h4[title="round/prospective_mfu_mape"]')
    title.wait_for(state="visible")
    title.scroll_into_view_if_needed()
    # the chart's legend: the learned model's trend over rounds beside the analytic baseline
    for series in ("accuracy over rounds", "analytic baseline", "round 01", "round 02"):
        page.get_by_text(f"{series} (round/prospective_mfu_mape)", exact=True).wait_for(
            state="visible"
        )
    # a line chart: Plotly draws each run's history over the steps as a path of class js-line
    page.locator("path.js-line").first.wait_for(state="attached")
    assert page.locator("path.js-line").count() >= 2
    title.scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    shot = artifacts_dir / "campaign-charts.png"
    page.screenshot(path=str(shot))
    print(f"screenshot: {shot}")


def test_the_training_page_shows_the_training_and_its_baseline(
    populated_server, page, artifacts_dir
):
    url = populated_server["url"]
    exp = populated_server["experiments"]["surrogate-training"]
    tracked = populated_server["train"].tracked
    _open(page, experiment_url(url, exp["experiment_id"]))
    page.get_by_text(tracked.run_name, exact=True).first.wait_for(state="visible")
    page.get_by_text("analytic baseline playbook", exact=True).first.wait_for(state="visible")
    shot = artifacts_dir / "training-runs.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
