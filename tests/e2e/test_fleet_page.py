"""The fleet page (``/ui/fleet``) in a real headless Chromium, on a projection built from the demo
stream through the real pipeline: recorded watch stream -> watcher -> Kafka -> Faust worker (and
its governor) -> PostgreSQL -> ``devicestate api`` in a subprocess -> Chromium, driven by
chromedriver through selenium.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them). With
``DEVICESTATE_TEST_SCREENSHOTS=<dir>`` the test saves ``fleet-page.png`` and
``fleet-page-timeline.png`` there (how ``docs/fleet-page*.png`` are made, docs/operations.md).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from devtools.demo.catchup import wait_caught_up
from devtools.testenv.kubeapi import free_port
from services.processes.watcher.run import run_watch
from services.runtime.config import Settings
from tests.conftest import settings_env

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEMO_STREAM = REPO / "devtools" / "examples" / "demo-stream.jsonl"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[Callable[[Settings], str]]:
    """``devicestate api`` in a subprocess on a free port of 127.0.0.1; its base URL."""
    started: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings) -> str:
        port = free_port()
        env = {**os.environ, **settings_env(settings)}
        env.update(DEVICESTATE_API_HOST="127.0.0.1", DEVICESTATE_API_PORT=str(port))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        with (tmp_path / "api.log").open("ab") as log:
            started.append(
                subprocess.Popen(
                    [sys.executable, "-m", "services.cli.main", "api"],
                    cwd=REPO,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        return f"http://127.0.0.1:{port}"

    yield start
    for process in started:
        process.kill()
        process.wait()


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    """Headless Chromium (Debian's package, its own chromedriver: nothing downloaded)."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(
            "chromium and chromium-driver are needed: apt-get install chromium chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,900")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


async def active_quarantines(base: str, seconds: float = 120.0) -> list[dict[str, Any]]:
    """The active quarantines once the governor has recorded the demo's 5 (the API's reads)."""
    deadline = asyncio.get_running_loop().time() + seconds
    last: Any = None
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        while asyncio.get_running_loop().time() < deadline:
            try:
                response = await client.get("/v1/quarantines", params={"status": "active"})
                last = response.text
                if response.status_code == 200 and len(response.json()["items"]) == 5:
                    items: list[dict[str, Any]] = response.json()["items"]
                    return items
            except httpx.TransportError as exc:  # the API is still starting
                last = exc
            await asyncio.sleep(0.5)
    raise AssertionError(f"5 active quarantines not reached; last: {last!r}")


def screenshot(driver: WebDriver, name: str) -> None:
    where = os.environ.get("DEVICESTATE_TEST_SCREENSHOTS")
    if where:
        # The whole document, not only the window: the grid and the table below it.
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, max(900, int(height) + 40))
        driver.save_screenshot(str(Path(where) / name))


async def test_fleet_page_shows_the_demo_quarantines_and_opens_a_timeline(
    stream_settings: Settings,
    kafka_bootstrap: str,
    worker_process: Any,
    api_server: Callable[[Settings], str],
    browser: WebDriver,
    tmp_path: Path,
) -> None:
    settings = stream_settings
    worker = worker_process(settings)
    base = api_server(settings)
    await run_watch(settings, from_file=DEMO_STREAM)

    def worker_alive() -> None:
        assert worker.process.poll() is None, worker.log_text()[-4000:]

    await wait_caught_up(
        kafka_bootstrap, settings.topic, settings.consumer_group, 120, still_alive=worker_alive
    )
    expected = await active_quarantines(base)
    keys = {(q["node"], q["resourceID"]) for q in expected}

    browser.get(f"{base}/ui/fleet")
    assert browser.title == "devicestate fleet"
    banner = browser.find_element(By.ID, "banner")
    assert banner.get_attribute("data-breaker") == "closed"
    assert banner.text  # the governance status message
    cells = browser.find_elements(By.CSS_SELECTOR, "#grid a.dev")
    assert len(cells) >= 5
    quarantined = browser.find_elements(By.CSS_SELECTOR, '#grid a.dev[data-state="Quarantined"]')
    shown = {
        (c.get_attribute("data-node"), c.get_attribute("data-resource-id")) for c in quarantined
    }
    assert shown == keys
    # Coloured by state: a quarantined cell is red, an available one is not.
    assert quarantined[0].value_of_css_property("background-color") == "rgba(198, 40, 40, 1)"
    count = browser.find_element(By.CSS_SELECTOR, '#counts a[data-count-state="Quarantined"]')
    assert count.text == "Quarantined 5"
    rows = browser.find_elements(By.CSS_SELECTOR, "#quarantines tr.quarantine")
    assert len(rows) == 5
    by_device = {q["resourceID"]: q for q in expected}
    for row in rows:
        node, rid, status, reason, actor, _created, _expires = (
            td.text for td in row.find_elements(By.TAG_NAME, "td")
        )
        want = by_device[rid]
        assert (node, status, reason, actor) == (
            want["node"],
            "active",
            want["reason"],
            want["actor"],
        )
    screenshot(browser, "fleet-page.png")

    # The state filter, as a count's link gives it: only the quarantined devices.
    count.click()
    filtered = browser.find_elements(By.CSS_SELECTOR, "#grid a.dev")
    assert {c.get_attribute("data-state") for c in filtered} == {"Quarantined"}
    assert len(filtered) == 5

    # A click on a device opens its timeline: the Unhealthy observation and the quarantine.
    node, rid = (
        filtered[0].get_attribute("data-node"),
        filtered[0].get_attribute("data-resource-id"),
    )
    filtered[0].click()
    heading = browser.find_element(By.ID, "device")
    assert node in heading.text and rid in heading.text
    observations = browser.find_elements(By.CSS_SELECTOR, "#timeline tr.observation")
    decisions = browser.find_elements(By.CSS_SELECTOR, "#timeline tr.decision")
    assert any("health=Unhealthy" in o.text for o in observations)
    assert any("Quarantined" in d.text or "quarantine" in d.text.lower() for d in decisions)
    screenshot(browser, "fleet-page-timeline.png")
