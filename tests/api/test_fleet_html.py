"""The fleet page's rendering (pure): the grid groups devices by node, and a page stays small
whatever the fleet (what the docs promise for 25k nodes: one page of 800 devices)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.adapters.projection.reads_governance import DeviceGovernance, GovernedDevice
from services.domain.directory import DeviceRecord
from services.domain.events import DeviceSource, Health
from services.processes.api.fleet_html import device_href, fleet_page, grid
from services.processes.api.schemas_governance import (
    AutomationOut,
    BreakerOut,
    GovernanceOut,
)

T = datetime(2026, 11, 29, 12, tzinfo=UTC)


def device(node: str, index: int, state: str | None) -> GovernedDevice:
    record = DeviceRecord(
        node=node,
        resource_id=f"GPU-{index:08d}-0465-5d98-a1eb-027c31219bc4",
        resource_name="nvidia.com/gpu",
        source=DeviceSource.DEVICE_PLUGIN,
        health=Health.HEALTHY,
        raw_health=None,
        message=None,
        status_version=7,
        last_observed_at=T,
        last_transition_at=T,
        allocations=(),
        flags=(),
    )
    governance = None if state is None else DeviceGovernance(state, T, "Healthy", None, None)
    return GovernedDevice(record, governance)


STATUS = GovernanceOut(
    governor_seen=True,
    watermark=T,
    watermarks={},
    pending=0,
    clamped=0,
    last_clamped_at=None,
    watermark_age_seconds=1.0,
    stale=False,
    stale_since=None,
    stale_threshold_seconds=35.0,
    message="observations current",
    breaker=BreakerOut(open=False, opened_at=None, incident=None),
    automation=AutomationOut(paused=False, paused_by=None, reason=None),
    active_quarantines=0,
    deferred=0,
    nodes_heartbeat_lost=0,
    devices=200_000,
    devices_by_state={"Available": 200_000},
)


def test_the_grid_has_a_row_per_node_and_a_cell_per_device() -> None:
    devices = [device("gpu-node-a", i, "Available") for i in range(3)]
    devices += [device("gpu-node-b", 9, "Quarantined"), device("gpu-node-b", 10, None)]
    html = grid(devices)
    assert html.count('<tr class="node">') == 2
    assert html.count('data-state="Quarantined"') == 1
    assert html.count('data-state="Ungoverned"') == 1  # not seen by the governor yet
    assert html.count('class="dev ') == 5


def test_a_page_of_800_devices_stays_small() -> None:
    devices = [device(f"gpu-node-{n:05d}", i, "Available") for n in range(100) for i in range(8)]
    html = fleet_page(
        STATUS, devices, [], state=None, node=None, next_cursor="abc", more_quarantines=False
    )
    assert len(html.encode()) < 300_000
    assert 'id="next" href="/ui/fleet?cursor=abc"' in html


def test_device_links_escape_what_urls_require_and_keep_slashes() -> None:
    assert device_href("n", "gpu.example.com/pool/gpu 1#?") == (
        "/ui/fleet/devices/n/gpu.example.com/pool/gpu%201%23%3F"
    )


def test_the_next_page_link_keeps_the_filters_and_the_page_size() -> None:
    devices = [device("gpu-node-a", i, "Available") for i in range(2)]
    html = fleet_page(
        STATUS,
        devices,
        [],
        state="Available",
        node="gpu-node-a",
        next_cursor="abc",
        more_quarantines=False,
        limit=2,
    )
    assert 'href="/ui/fleet?state=Available&amp;node=gpu-node-a&amp;limit=2&amp;cursor=abc"' in html
