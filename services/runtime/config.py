"""Process settings, read from environment variables prefixed ``DEVICESTATE_``.

One :class:`Settings` object is built in each entry point (CLI command) and passed down; no module
reads the environment on its own. Every field maps to ``DEVICESTATE_<FIELD NAME IN UPPER CASE>``,
e.g. ``kafka_bootstrap_servers`` <- ``DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS``. The README's
configuration reference lists them; ``docker-compose.yml`` uses the same names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """All settings of the watcher, stream worker, API and replay. Defaults suit the local stack
    started by ``devicestate-dev stack up`` (Kafka on 127.0.0.1:9092, PostgreSQL on 127.0.0.1:55432)."""

    model_config = SettingsConfigDict(env_prefix="DEVICESTATE_", extra="ignore")

    # --- Kafka -------------------------------------------------------------------------------
    kafka_bootstrap_servers: str = Field(
        "127.0.0.1:9092", description="Comma-separated host:port list of Kafka brokers."
    )
    topic: str = Field(
        "devicestate.device-health.v1",
        description="Device-health event topic, keyed by node name so one node's events stay in "
        "one partition, in order.",
    )
    dead_letter_topic: str = Field(
        "devicestate.dead-letter.v1",
        description="Dead-letter topic: the original bytes as the value, the reason in headers.",
    )
    topic_partitions: int = Field(
        6, ge=1, description="Partitions of the event topic when the service creates it."
    )
    consumer_group: str = Field(
        "devicestate-worker", description="Kafka consumer group (Faust app id) of the worker."
    )

    # --- PostgreSQL ------------------------------------------------------------------------
    database_url: str = Field(
        "postgresql+asyncpg://devicestate:devicestate@127.0.0.1:55432/devicestate",
        description="SQLAlchemy URL of the projection database (asyncpg driver).",
    )
    database_schema: str = Field("public", description="Schema holding the projection tables.")

    # --- Watcher ---------------------------------------------------------------------------
    kubeconfig: str | None = Field(
        None,
        description="Path to a kubeconfig; unset means in-cluster config, then ~/.kube/config.",
    )
    label_selector: str | None = Field(None, description="Label selector for watched Pods.")
    field_selector: str | None = Field(None, description="Field selector for watched Pods.")
    watch_timeout_seconds: int = Field(
        300, ge=1, description="Server-side timeout of one WATCH request (seconds)."
    )
    read_timeout_seconds: float = Field(
        330.0,
        gt=0,
        description="Client read timeout on the watch connection (seconds); longer than the "
        "server timeout so half-open connections are noticed.",
    )
    watcher_metrics_port: int = Field(9107, description="Prometheus port of the watcher (0: off).")
    watch_leases: bool = Field(
        True,
        description="Watch Node Leases in lease_namespace and publish coarsened NodeHeartbeat events.",
    )
    lease_namespace: str = Field("kube-node-lease", description="Namespace of the Node Leases.")
    watch_nodes: bool = Field(
        True,
        description="Watch Nodes' extended-resource capacity/allocatable (NodeResourcesChanged).",
    )
    watch_dra: bool = Field(
        True,
        description="Watch ResourceSlices, ResourceClaims and DeviceClasses (resource.k8s.io/v1) "
        "and publish InventoryObserved events.",
    )
    heartbeat_interval_seconds: float = Field(
        60.0,
        gt=0,
        description="At most one NodeHeartbeat per node per this many seconds (event time).",
    )
    tick_interval_seconds: float = Field(
        15.0,
        gt=0,
        description="How often the watcher sends a WatcherTick to every partition (seconds).",
    )

    # --- Stream worker ---------------------------------------------------------------------
    worker_batch_size: int = Field(
        2000, ge=1, description="Most events written to PostgreSQL in one transaction."
    )
    worker_batch_within_seconds: float = Field(
        0.5, gt=0, description="Longest wait to fill a batch before writing it (seconds)."
    )
    worker_store: str = Field(
        "rocksdb://",
        description="Faust table store for the dedup table: rocksdb:// (rocksdict) or memory://.",
    )
    worker_data_dir: str = Field(
        ".stack/worker", description="Faust data directory (RocksDB files of the dedup table)."
    )
    worker_metrics_port: int = Field(9108, description="Prometheus port of the worker (0: off).")

    # --- API -------------------------------------------------------------------------------
    api_host: str = Field("127.0.0.1", description="Address the directory API binds to.")
    api_port: int = Field(8080, description="Port of the directory API.")
    api_access_log: bool = Field(
        False, description="Log every request (costs ~0.1 ms of CPU per request)."
    )

    # --- Governance (issue 3): topics ------------------------------------------------------
    governance_topic: str = Field(
        "devicestate.governance.v1",
        description="Single-partition topic: the governor's log (health transitions forwarded by "
        "the worker, node facts, watermarks, operator commands, recovery reports).",
    )
    decisions_topic: str = Field(
        "devicestate.decisions.v1",
        description="Output topic: every governance decision, for alerting and other consumers.",
    )
    # --- Governance: Unknown tolerance and heartbeats ---------------------------------------
    unknown_tolerance_seconds: float = Field(
        300.0, gt=0, description="First tolerance window for an Unknown device (seconds)."
    )
    unknown_tolerance_max_seconds: float = Field(
        3600.0, gt=0, description="Longest tolerance window after backoff (seconds)."
    )
    unknown_backoff_factor: float = Field(
        2.0, ge=1, description="Each new Unknown episode multiplies the window by this."
    )
    unknown_backoff_reset_seconds: float = Field(
        86400.0, gt=0, description="Episodes older than this no longer grow the window (seconds)."
    )
    heartbeat_grace_seconds: float = Field(
        120.0,
        gt=0,
        description="A node whose Lease was not renewed for this long (event time) is a "
        "'node heartbeat lost' incident; its devices read Unknown.",
    )
    # --- Governance: quarantine, flapping, escalation ---------------------------------------
    flap_threshold: int = Field(
        3, ge=2, description="Unhealthy transitions within flap_window_seconds that mark a flapper."
    )
    flap_window_seconds: float = Field(3600.0, gt=0, description="Flapping window (seconds).")
    node_escalation_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of a node's devices Unhealthy that recommends node-level action.",
    )
    node_escalation_min_devices: int = Field(
        2, ge=1, description="Fewest Unhealthy devices on a node for a node-level recommendation."
    )
    # --- Governance: blast-radius limits ----------------------------------------------------
    restrict_node_burst: int = Field(
        8, ge=1, description="Token bucket per node: most automatic restrictions at once."
    )
    restrict_node_refill_seconds: float = Field(
        60.0, gt=0, description="Token bucket per node: seconds to earn one more restriction."
    )
    restrict_fleet_burst: int = Field(
        32, ge=1, description="Fleet token bucket: most automatic restrictions at once."
    )
    restrict_fleet_refill_seconds: float = Field(
        5.0, gt=0, description="Fleet token bucket: seconds to earn one more restriction."
    )
    breaker_window_seconds: float = Field(
        300.0, gt=0, description="Circuit breaker: window over which bad signals are counted."
    )
    breaker_device_share: float = Field(
        0.2,
        gt=0,
        le=1,
        description="Circuit breaker opens when more than this share of known devices turned "
        "Unknown/Unhealthy within the window...",
    )
    breaker_min_devices: int = Field(
        16, ge=1, description="...and at least this many devices did."
    )
    breaker_node_share: float = Field(
        0.2,
        gt=0,
        le=1,
        description="Circuit breaker also opens when more than this share of known nodes had a "
        "device turn Unknown/Unhealthy (or lost its heartbeat) within the window...",
    )
    breaker_min_nodes: int = Field(3, ge=1, description="...and at least this many nodes did.")
    # --- Governance: staged recovery ---------------------------------------------------------
    recovery_probe: bool = Field(True, description="Run the probe stage of recovery.")
    recovery_canary: bool = Field(True, description="Run the canary stage of recovery.")
    recovery_stage_timeout_seconds: float = Field(
        600.0, gt=0, description="A probe/canary with no passing report by then fails (seconds)."
    )
    recovery_stability_seconds: float = Field(
        900.0, ge=0, description="Healthy for this long after the canary before release (seconds)."
    )
    recovery_holddown_seconds: float = Field(
        900.0, ge=0, description="Wait after a failed recovery before the next attempt (seconds)."
    )
    recovery_lease_seconds: float = Field(
        300.0, gt=0, description="Recovery lease duration granted to an executor (seconds)."
    )
    recovery_executor: Literal["inprocess", "kubernetes-job"] = Field(
        "inprocess",
        description="Probe/canary executor: inprocess (reports a configured result) or "
        "kubernetes-job (a Job pinned to the node; dry-run unless recovery_dry_run is false).",
    )
    recovery_dry_run: bool = Field(
        True, description="kubernetes-job executor: create Jobs with dryRun=All only."
    )
    recovery_canary_image: str = Field(
        "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        description="Image of the canary Job (runs nvidia-smi).",
    )
    recovery_namespace: str = Field("devicestate", description="Namespace of canary Jobs.")
    # --- Governance: operator API auth and alerts --------------------------------------------
    api_tokens: str = Field(
        "",
        description="Bearer tokens as JSON: [{\"name\": ..., \"role\": \"viewer|operator|admin\", "
        "\"sha256\": <hex digest of the token>}]. Plain tokens are never configured.",
    )
    api_tokens_file: str | None = Field(
        None, description="File holding the same JSON as api_tokens (e.g. a mounted Secret)."
    )
    api_anonymous_read: bool = Field(
        True, description="Allow GET requests without a token (writes always need one)."
    )
    alert_webhook_url: str | None = Field(
        None,
        description="Alertmanager base URL (alerts POSTed to <url>/api/v2/alerts); unset: off.",
    )
    alert_retries: int = Field(5, ge=0, description="Retries of a failed webhook POST.")
    alert_timeout_seconds: float = Field(5.0, gt=0, description="Webhook request timeout.")

    # --- Enforcement adapters (issue 4): off by default, dry-run first ------------------------
    enforce_device_taint_rules: bool = Field(
        False,
        description="Reconcile one DeviceTaintRule per quarantined DRA device (removed on release).",
    )
    enforce_dry_run: bool = Field(
        True, description="Enforcement writes use dryRun=All (nothing changes in the cluster)."
    )
    enforce_no_execute: bool = Field(
        False,
        description="DeviceTaintRules use effect NoExecute instead of NoSchedule (evicts Pods).",
    )
    scheduler_extender: bool = Field(
        False,
        description="Serve the scheduler-extender filter endpoint (POST /scheduler/filter).",
    )
    capacity_request_size: int = Field(
        0,
        ge=0,
        description="Request size for the fragmented count (0: the most common claim request).",
    )

    # --- Logging ---------------------------------------------------------------------------
    log_level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING, ERROR.")
    log_format: Literal["json", "console"] = Field(
        "console", description="Structured log output: json (one object a line) or console."
    )
