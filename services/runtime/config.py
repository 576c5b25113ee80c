"""Process settings, read from environment variables prefixed ``DEVICESTATE_``.

Every field maps to ``DEVICESTATE_<FIELD NAME IN UPPER CASE>``, e.g. ``kafka_bootstrap_servers``
<- ``DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS``; ``docs/configuration.md`` lists them (generated from
:data:`GROUPS`), ``docker-compose.yml`` uses the same names. No module reads the environment on
its own.

The fields are split into groups by what reads them together (:class:`KafkaSettings`,
:class:`WatchSettings`, ...): a component takes the group(s) it reads, so mypy shows it reads
nothing else. Each process's entry point builds one settings class of its own kind
(:class:`WatcherProcessSettings`, ...: the groups that process reads) and passes it down.
:class:`Settings` inherits every process class, hence every group: the dev tools, benchmarks and
tests that run several processes build it once and pass it anywhere.

Over 400 lines on purpose: the configuration reference is generated from this one module, every
field with its default, bounds and description beside the others of its group.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_LABEL_KEY: Final = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
"""A Kubernetes label name (optional DNS-subdomain prefix and ``/``): what a device taint key is."""


class SettingsGroup(BaseSettings):
    """Base of every group: the ``DEVICESTATE_`` prefix, and variables of other groups ignored
    (one environment serves every process)."""

    model_config = SettingsConfigDict(env_prefix="DEVICESTATE_", extra="ignore")


class KafkaSettings(SettingsGroup):
    """Where Kafka is, and the device-health event stream on it: the watcher publishes to ``topic``
    (dead letters to ``dead_letter_topic``), the worker consumes it as ``consumer_group``, replay
    reads it back. The broker default is the local stack's (``devicestate-dev stack up``)."""

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
    kafka_replication_factor: int = Field(
        0,
        ge=0,
        description="Replicas of every topic the services create, the worker's changelog and "
        "assignor topics included (0: one per broker up to three, counted when the topics are "
        "created). From 3 replicas on, topics get min.insync.replicas=2: with acks=all a write "
        "is on two brokers before it counts, and one broker may be down.",
    )
    consumer_group: str = Field(
        "devicestate-worker", description="Kafka consumer group (Faust app id) of the worker."
    )
    max_message_bytes: int = Field(
        1_048_576,
        ge=65_536,
        le=16_777_216,
        description="Largest record (bytes, key, headers and framing included) on the topics: "
        "the topics' max.message.bytes when the service creates them and the watcher producer's "
        "max_request_size. A larger device event is split (a release per chunk of resourceIDs) "
        "or shortened (a containers list cut, flagged containers-truncated); any other record "
        "over it is dead-lettered with its size, its body cut to fit.",
    )


class DatabaseSettings(SettingsGroup):
    """The projection database (PostgreSQL through asyncpg) the worker writes and the API,
    enforcement and replay read. The default is the local stack's server."""

    database_url: str = Field(
        "postgresql+asyncpg://devicestate:devicestate@127.0.0.1:55432/devicestate",
        description="SQLAlchemy URL of the projection database (asyncpg driver).",
    )
    database_schema: str = Field("public", description="Schema holding the projection tables.")


class KubeSettings(SettingsGroup):
    """Which Kubernetes API server the watcher, recovery and enforcement talk to. Unset, a Pod
    finds its own cluster and a developer's shell its ``~/.kube/config``."""

    kubeconfig: str | None = Field(
        None,
        description="Path to a kubeconfig; unset means in-cluster config, then ~/.kube/config.",
    )


class WatchSettings(SettingsGroup):
    """What the watcher watches and how its WATCH connections behave. Everything is watched by
    default (the governance rules need Leases, Nodes and DRA objects); the read timeout is longer
    than the server's so a half-open connection is noticed, not waited on forever."""

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
    watch_silence_seconds: float = Field(
        90.0,
        gt=0,
        description="A watch that delivers no event and no BOOKMARK for this long (seconds) is "
        "ended and watched again from its last resourceVersion (restart reason `silent`): the "
        "API server sends a BOOKMARK every minute to a watch that asks for them (60.5 s and "
        "119.8 s on a quiet watch of the test kube-apiserver 1.36.3), so this "
        "finds a half-open connection long before read_timeout_seconds.",
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
        "and publish InventoryObserved events (with the Namespaces' admin-access label on the "
        "admin-access claims: Namespaces are watched too).",
    )
    watch_events: bool = Field(
        True,
        description="Watch Warning Events about Pods (core/v1) and read the Pods' PodScheduled "
        "conditions for driver and claim failures (FailedPrepareDynamicResources, "
        "FailedUnprepareDynamicResources, FailedScheduling/Unschedulable with a DRA message) and "
        "publish them, classified, as DRAFailureObserved (issue 16 item 3). Needs RBAC list/watch "
        "of events.",
    )
    watch_workloads: bool = Field(
        True,
        description="Live mode: resolve the controller chain (GET of the owners) and migration "
        "class of every Pod holding devices and publish PodWorkloadObserved (issue 13).",
    )
    owner_cache_size: int = Field(
        10_000,
        ge=1,
        description="Pod owners (ReplicaSets, Jobs, Deployments...) the watcher keeps, by UID, "
        "least recently used out first; emptied at every LIST of Pods.",
    )
    heartbeat_interval_seconds: float = Field(
        60.0,
        gt=0,
        description="At most one NodeHeartbeat per node per this many seconds (event time).",
    )
    watcher_record_schema: int = Field(
        2,
        ge=1,
        le=2,
        description="Record schema of a Pod status change's observations (issue 12): 2 puts all "
        "of one change's devices in one DeviceHealthObservations record (a training Pod: 8 GPUs, "
        "one Kafka record); 1 publishes one DeviceHealthObserved record per device, which workers "
        "and replays older than schema 2 read. Rolling upgrade: set 1, upgrade the workers and "
        "the replay, then set 2.",
    )


class TickSettings(SettingsGroup):
    """The watcher's tick, which moves event time forward when nothing else happens: the watcher
    sends at this rate and the API judges the governor's watermark stale after two missed
    ticks."""

    tick_interval_seconds: float = Field(
        15.0,
        gt=0,
        description="How often the watcher sends a WatcherTick to every partition (seconds).",
    )


class WorkerSettings(SettingsGroup):
    """The stream worker's batching, dedup-table store and metrics port. Batches are large and
    short-lived (2000 events or half a second) so PostgreSQL sees few transactions without
    adding visible delay; the dedup table is kept in RocksDB (``memory://`` is for tests)."""

    worker_batch_size: int = Field(
        2000, ge=1, description="Most events written to PostgreSQL in one transaction."
    )
    worker_batch_within_seconds: float = Field(
        0.5, gt=0, description="Longest wait to fill a batch before writing it (seconds)."
    )
    worker_forward_batch_records: int = Field(
        512,
        ge=1,
        le=4096,
        description="Most forwarded records (transitions, node facts, watermarks...) the health "
        "agent packs into one ForwardedBatch record of the governance topic (issue 12; at most "
        "256 KiB each, split when over): one governance record per batch instead of one per "
        "forwarded record. 1 sends one record each, which governors and governance replays "
        "older than ForwardedBatch read. Rolling upgrade: set 1, upgrade the workers (the "
        "governor runs in them) and the replay, then set 512.",
    )
    worker_store: str = Field(
        "rocksdb://",
        description="Faust table store for the dedup table: rocksdb:// (rocksdict) or memory://.",
    )
    worker_data_dir: str = Field(
        ".stack/worker", description="Faust data directory (RocksDB files of the dedup table)."
    )
    worker_metrics_port: int = Field(9108, description="Prometheus port of the worker (0: off).")
    worker_heap_trim_seconds: float = Field(
        2.0,
        ge=0,
        description="How often the worker hands the C allocator's free memory back to the OS "
        "(glibc malloc_trim) when a batch was written since the last time (seconds; 0: never). "
        "A batch's freed buffers otherwise stay in the process's RSS (issue 12).",
    )
    worker_shutdown_grace_seconds: float = Field(
        20.0,
        ge=1,
        le=3600,
        description="Longest time from SIGTERM to the worker's exit (seconds): a batch still "
        "being written after three quarters of it is abandoned unacknowledged (read again on "
        "restart), and the process exits at the bound whatever it is doing. Keep it under the "
        "Pod's terminationGracePeriodSeconds.",
    )
    max_clock_skew_seconds: float = Field(
        30.0,
        gt=0,
        description="How far a record's observedAt may run ahead of its Kafka timestamp (the "
        "broker's append time) before its event time is clamped to that bound (seconds).",
    )


class ApiSettings(SettingsGroup):
    """Where the directory API listens (the ``devicestate`` client commands use the same address
    as their default). Loopback by default: a developer's API is not on the network."""

    api_host: str = Field("127.0.0.1", description="Address the directory API binds to.")
    api_port: int = Field(8080, description="Port of the directory API.")
    api_access_log: bool = Field(
        False, description="Log every request (costs ~0.1 ms of CPU per request)."
    )
    ready_max_lag_records: int = Field(
        100_000,
        ge=0,
        description="/readyz fails when a partition of the event or governance topic has more "
        "records than this after the worker group's committed offset (the broker's end offset "
        "minus the committed one).",
    )
    ready_max_lag_seconds: float = Field(
        60.0,
        gt=0,
        description="/readyz fails when the oldest record the worker group has not consumed "
        "waited longer than this (seconds: wall clock minus its Kafka timestamp, the broker's "
        "append time on the event topic): a worker fallen behind, or stopped while records wait.",
    )


class GovernanceTopicSettings(KafkaSettings):
    """The governance log and the decision stream, on the brokers of :class:`KafkaSettings`.
    Both topics have ONE partition so every governance record has one total order (replaying
    the log reproduces every decision). Processes on the governance log take this group."""

    governance_topic: str = Field(
        "devicestate.governance.v1",
        description="Single-partition topic: the governor's log (health transitions forwarded by "
        "the worker, node facts, watermarks, operator commands, recovery reports).",
    )
    decisions_topic: str = Field(
        "devicestate.decisions.v1",
        description="Output topic: every governance decision, for alerting and other consumers.",
    )
    topics_create_missing: bool = Field(
        True,
        description="Every process but replay creates the topics it needs when they are missing "
        "(partitions, replicas and configs as the service needs them) and checks them on start; "
        "false: it only checks, and a missing topic stops it naming `devicestate topics create`. "
        "A topic that exists but differs (partitions, replicas, configs) always stops it.",
    )


class PolicySettings(SettingsGroup):
    """Governance timings and limits, copied field by field into
    :class:`~services.domain.governance.policy.GovernancePolicy` (same names, same defaults). All
    durations are event time; the defaults tolerate a short Unknown and stop automatic
    restriction before it can take a large share of the fleet out."""

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
    breaker_min_devices: int = Field(16, ge=1, description="...and at least this many devices did.")
    breaker_node_share: float = Field(
        0.2,
        gt=0,
        le=1,
        description="Circuit breaker also opens when more than this share of known nodes had a "
        "device turn Unknown/Unhealthy (or lost its heartbeat) within the window...",
    )
    breaker_min_nodes: int = Field(3, ge=1, description="...and at least this many nodes did.")
    max_devices_per_node: int = Field(
        4096,
        ge=1,
        description="Ceiling of devices per node: an observation of a new device of a node that "
        "already holds this many is not applied to the directory nor governed; the worker "
        "dead-letters it with the reason (stage device-ceiling) and the node gets one "
        "DataQualityFlagged decision. Far above any real node; it bounds what one hot node costs "
        "the fleet. Give the replay the worker's value.",
    )
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
    quarantine_operator_age_seconds: float = Field(
        259200.0,
        gt=0,
        description="Age (seconds of event time, default 72 h) after which an active quarantine "
        "without recovery progress (no recovery stage passed) needs an operator: decision and "
        "alert QuarantineNeedsOperator.",
    )
    # --- Governance: a silent watch and node-wide faults (issue 15) -------------------------
    watch_stale_seconds: float = Field(
        75.0,
        gt=0,
        description="Seconds of event time without any watch event, BOOKMARK or LIST reported by "
        "the watcher (its ticks carry when its quietest watch last delivered one) before the "
        "governor marks the watch stale (decision WatchStale, alert). A little over the API "
        "server's bookmark interval (~60 s measured on the test kube-apiserver), so a live watch "
        "never crosses it. Devices never turn Unknown from it.",
    )
    node_incident_window_seconds: float = Field(
        1.0,
        ge=0,
        description="Device faults (Unhealthy) on one node within this many seconds of event "
        "time count as simultaneous: one node incident (NodeFaultIncidentOpened) listing them.",
    )
    node_incident_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of the node's governed devices that must fault within the window to "
        "open a node incident.",
    )
    node_incident_min_devices: int = Field(
        2, ge=2, description="Fewest simultaneous device faults that open a node incident."
    )
    driver_taint_keys: str = Field(
        "gpu.nvidia.com/gpu-lost,gpu.nvidia.com/xid",
        description="ResourceSlice device taint keys that count as a device fault (issue 15), "
        "comma-separated: a DRA device tainted with one of them, effect NoSchedule or NoExecute, "
        "is quarantined with reason driver-taint:<key>=<value>; removing the taint starts the "
        "staged recovery. The default is the NVIDIA DRA driver's fatal-XID and lost-GPU keys "
        "(its non-fatal XIDs use effect None and never count). Empty: no taint counts.",
    )

    @field_validator("driver_taint_keys")
    @classmethod
    def _taint_keys(cls, value: str) -> str:
        keys = [k.strip() for k in value.split(",") if k.strip()]
        bad = [k for k in keys if not _LABEL_KEY.fullmatch(k)]
        if bad:
            raise ValueError(f"not a taint key (a label name, e.g. gpu.nvidia.com/xid): {bad}")
        return ",".join(sorted(set(keys)))

    # --- Governance: workload migration off quarantined devices (issue 13) -------------------
    migration_node_burst: int = Field(
        1, ge=1, description="Migrations that may start at once on one node (token bucket burst)."
    )
    migration_node_refill_seconds: float = Field(
        600.0, gt=0, description="Event time to earn one node migration token back (seconds)."
    )
    migration_fleet_burst: int = Field(
        8, ge=1, description="Migrations that may start at once in the fleet (token bucket burst)."
    )
    migration_fleet_refill_seconds: float = Field(
        60.0, gt=0, description="Event time to earn one fleet migration token back (seconds)."
    )
    migration_lease_seconds: float = Field(
        120.0, gt=0, description="Migration lease granted (or renewed) to an executor (seconds)."
    )
    migration_takeover_seconds: float = Field(
        600.0,
        gt=0,
        description="A started migration whose lease nobody holds for this long (never taken, "
        "expired or released) fails with reason lease-lost (seconds, event time).",
    )
    migration_checkpoint_timeout_seconds: float = Field(
        900.0,
        gt=0,
        description="From the checkpoint request to a failed migration with reason "
        "checkpoint-timeout (seconds, event time).",
    )


class RetentionSettings(SettingsGroup):
    """How much the projection keeps of what the log keeps anyway (issue 11 item 9). The worker
    and the replay read it: give the replay the worker's value, or ``replay --verify`` reports the
    history rows one of them dropped. Claim aliases and cleared conflicts are dropped a week after
    (event time) without a setting (``docs/reliability.md``, "Retention")."""

    device_history_retention_seconds: float = Field(
        0.0,
        ge=0,
        description="device_history rows observed more than this long before their partition's "
        "newest event time are deleted with each batch (seconds, event time; 0: keep all). The "
        "log keeps them: a replay rebuilds the table with the same setting. The history "
        "endpoints then answer what is left.",
    )


class RecoverySettings(SettingsGroup):
    """How ``devicestate recovery`` runs probes and canaries. Defaults never touch a cluster: the
    in-process executor, and dry-run Jobs if the Kubernetes executor is chosen."""

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


class ApiAuthSettings(SettingsGroup):
    """Who may call the directory API. No token is configured by default, so only anonymous
    reads work until an operator adds digests; writes always need a token."""

    api_tokens: str = Field(
        "",
        description='Bearer tokens as JSON: [{"name": ..., "role": "viewer|operator|admin", '
        '"sha256": <hex digest of the token>}]. Plain tokens are never configured.',
    )
    api_tokens_file: str | None = Field(
        None, description="File holding the same JSON as api_tokens (e.g. a mounted Secret)."
    )
    api_anonymous_read: bool = Field(
        True, description="Allow GET requests without a token (writes always need one)."
    )


class AlertSettings(SettingsGroup):
    """Where and how ``devicestate alerts`` posts governance decisions (Alertmanager's API). Off
    until a URL is set: nothing leaves the cluster by default."""

    alert_webhook_url: str | None = Field(
        None,
        description="Alertmanager base URL (alerts POSTed to <url>/api/v2/alerts); unset: off.",
    )
    alert_retries: int = Field(5, ge=0, description="Retries of a failed webhook POST.")
    alert_timeout_seconds: float = Field(5.0, gt=0, description="Webhook request timeout.")


class EnforcementSettings(SettingsGroup):
    """The DeviceTaintRule reconciler of ``devicestate enforce``: off by default, and dry-run once
    on, so turning it on shows what it would do before it does anything."""

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


class MigrationExecutorSettings(SettingsGroup):
    """The migration executor of ``devicestate migrate`` (docs/migration.md, "The executor"):
    dry-run by default (it prints what it would do, Kubernetes writes go with ``dryRun=All`` and
    no report is posted). Its lease period and checkpoint deadline are the governor's
    (``DEVICESTATE_MIGRATION_LEASE_SECONDS``, ``..._CHECKPOINT_TIMEOUT_SECONDS``)."""

    migrate_dry_run: bool = Field(
        True, description="Only print what the executor would do (--apply turns it off)."
    )
    migrate_api_url: str | None = Field(
        None,
        description="Base URL of the devicestate API it follows and reports to (unset: "
        "http://DEVICESTATE_API_HOST:DEVICESTATE_API_PORT).",
    )
    migrate_api_token: str | None = Field(
        None, description="Bearer token of the operator role (reports and evidence are writes)."
    )
    migrate_api_token_file: str | None = Field(
        None, description="File holding that token (e.g. a mounted Secret); wins over the value."
    )
    migrate_holder: str | None = Field(
        None, description="The executor's lease holder name (unset: <hostname>-<pid>)."
    )
    migrate_poll_seconds: float = Field(
        5.0, gt=0, description="Seconds between passes over GET /v1/migrations."
    )


class ApiFeatureSettings(SettingsGroup):
    """Optional parts of the directory API: the scheduler-extender endpoint (off: the route does
    not exist until a deployment asks for it), the request size of the capacity view's
    fragmented count (0: the most common claim request), and the in-memory copy of the directory
    that point GETs are served from (:mod:`services.processes.api.warm_devices`)."""

    scheduler_extender: bool = Field(
        False,
        description="Serve the scheduler-extender filter endpoint (POST /scheduler/filter).",
    )
    capacity_request_size: int = Field(
        0,
        ge=0,
        description="Request size for the fragmented count (0: the most common claim request).",
    )
    api_read_cache: bool = Field(
        True,
        description="Serve point GETs (`/v1/nodes/{node}/devices/{resourceID}`), and the "
        "scheduler-extender filter when it is on, from copies kept in memory: loaded at start, "
        "refreshed with what changed in PostgreSQL every `api_read_cache_poll_seconds` (the "
        "extender's copy reloaded whole every 60 s); false: every call reads PostgreSQL.",
    )
    api_read_cache_poll_seconds: float = Field(
        0.25,
        gt=0,
        le=10,
        description="How often the in-memory copy asks PostgreSQL what changed (seconds): a GET "
        "sees a committed change at most this long plus one refresh after its commit.",
    )
    api_read_cache_max_devices: int = Field(
        250_000,
        ge=0,
        description="Most devices the in-memory copy holds (about 3 KiB of RSS each); GETs of the "
        "others read PostgreSQL.",
    )


class AdoptionSettings(SettingsGroup):
    """The DRA adoption gate's thresholds (issue 16, ``docs/dra-adoption.md``): when a pool's
    signals hold its rollout or roll it back. A count of 0 turns its verdict off."""

    adoption_conflicts_rollback: int = Field(
        1,
        ge=0,
        description="Ownership conflicts (`plugin-and-dra`) on a pool's nodes at which the gate "
        "says rollback: the plugin and DRA must never own the same hardware.",
    )
    adoption_divergence_hold: int = Field(
        1,
        ge=0,
        description="Node resources whose ResourceSlices and Node capacity disagree at which the "
        "gate says hold.",
    )
    adoption_divergence_rollback: int = Field(
        0, ge=0, description="... at which it says rollback (0: divergence only holds)."
    )
    adoption_quarantined_hold: int = Field(
        1, ge=0, description="Quarantined devices on a pool's nodes at which the gate says hold."
    )
    adoption_quarantined_rollback_fraction: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Fraction of a pool's governed devices quarantined at which the gate says "
        "rollback (0: never).",
    )
    adoption_leaked_claim_seconds: float = Field(
        900.0,
        gt=0,
        le=366 * 86400,
        description="Seconds of event time a ResourceClaim may stay allocated with no consumer "
        "reserved (`status.reservedFor` empty) before it counts as leaked (at most 366 days: "
        "the governor times the leak as a date).",
    )
    adoption_leaked_hold: int = Field(
        1, ge=0, description="Leaked claims in a pool at which the gate says hold."
    )
    adoption_leaked_rollback: int = Field(
        0, ge=0, description="... at which it says rollback (0: leaked claims only hold)."
    )
    adoption_failure_window_seconds: float = Field(
        600.0,
        gt=0,
        le=86400,
        description="Sliding window (seconds of event time) of the driver and claim failures the "
        "gate counts on a pool's nodes (signal `claim-failures`).",
    )
    adoption_failures_hold: int = Field(
        5,
        ge=0,
        description="Retryable and needs-cleanup failures (prepare errors, unschedulable claims, "
        "failed unprepares) on a pool's nodes in the window at which the gate says hold; "
        "non-retryable ones (the tenant's invalid claim) are shown, not counted.",
    )
    adoption_failures_rollback: int = Field(
        0, ge=0, description="... at which it says rollback (0: failures only hold)."
    )
    adoption_ready_window_seconds: float = Field(
        3600.0,
        gt=0,
        le=7 * 86400,
        description="Sliding window (seconds of event time) of the bound-to-Ready samples the gate "
        "compares (signal `ready-latency`): the pool's DRA Pods against the device plugin's of the "
        "same class, fleet-wide.",
    )
    adoption_ready_min_samples: int = Field(
        20,
        ge=1,
        description="Samples needed on each side (the pool's DRA, the class's device plugin) in the "
        "window before the gate compares their p95; fewer: `not enough samples`, expand.",
    )
    adoption_ready_hold_ratio: float = Field(
        2.0,
        ge=0,
        description="The gate says hold when the pool's DRA bound-to-Ready p95 (nearest rank) is "
        "above this times the device plugin's (0: never).",
    )
    adoption_ready_rollback_ratio: float = Field(
        0.0,
        ge=0,
        description="... and rollback above this times it (0: the latency only holds).",
    )
    adoption_tenant_hold: int = Field(
        1,
        ge=0,
        description="ResourceClaims on a pool's nodes with devices allocated for admin access "
        "(KEP-5018 `adminAccess`) in a Namespace without the label "
        '`resource.kubernetes.io/admin-access: "true"` at which the gate says hold (signal '
        "`tenant-boundary`).",
    )
    adoption_tenant_rollback: int = Field(
        0,
        ge=0,
        description="... at which it says rollback (0: never; the device plugin path has no admin "
        "access, so a rollback would only hide the finding).",
    )


class LoggingSettings(SettingsGroup):
    """Log threshold and format of every process. Console lines by default (a developer reads
    them); ``json`` for log shippers."""

    log_level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING, ERROR.")
    log_format: Literal["json", "console"] = Field(
        "console", description="Structured log output: json (one object a line) or console."
    )


# --- One settings class per process: the groups it reads ----------------------------------------
# Bases follow GROUPS' order (GovernanceTopicSettings first: it carries KafkaSettings), so every
# class below and Settings have one consistent method resolution order.


class WatcherProcessSettings(
    GovernanceTopicSettings, KubeSettings, WatchSettings, TickSettings, LoggingSettings
):
    """``devicestate watch``: the Kubernetes API it watches, the topics it creates and publishes to."""


class WorkerProcessSettings(
    GovernanceTopicSettings,
    DatabaseSettings,
    WorkerSettings,
    PolicySettings,
    RetentionSettings,
    AdoptionSettings,
    LoggingSettings,
):
    """``devicestate worker``: the event topic and governance log it folds, the projection it
    writes, the governor's policy (and the adoption gate's thresholds it evaluates)."""


class ApiProcessSettings(
    GovernanceTopicSettings,
    DatabaseSettings,
    TickSettings,
    ApiSettings,
    ApiAuthSettings,
    ApiFeatureSettings,
    AdoptionSettings,
    LoggingSettings,
):
    """``devicestate api``: the projection it serves, the governance topic operator commands go
    to, the tick it judges staleness by, where it listens and who may call it."""


class AlertsProcessSettings(GovernanceTopicSettings, AlertSettings, LoggingSettings):
    """``devicestate alerts``: the decisions it follows and the webhook it posts them to."""


class RecoveryProcessSettings(
    GovernanceTopicSettings, KubeSettings, RecoverySettings, LoggingSettings
):
    """``devicestate recovery``: the decisions it follows, the governance topic it reports to, the
    executor and the cluster its Jobs run in."""


class EnforcementProcessSettings(
    GovernanceTopicSettings, DatabaseSettings, KubeSettings, EnforcementSettings, LoggingSettings
):
    """``devicestate enforce``: the quarantines it reads, the decisions that wake it, the cluster
    its DeviceTaintRules go to."""


class MigrationProcessSettings(
    KubeSettings, ApiSettings, PolicySettings, MigrationExecutorSettings, LoggingSettings
):
    """``devicestate migrate``: the API it follows and reports to, the cluster its Pods run in,
    the governor's lease period and checkpoint deadline."""


class ReplayProcessSettings(
    GovernanceTopicSettings,
    DatabaseSettings,
    WorkerSettings,
    PolicySettings,
    RetentionSettings,
    AdoptionSettings,
    LoggingSettings,
):
    """``devicestate replay``: the topics it reads back, the projection it rebuilds, the policy
    the governance fold runs with."""


class Settings(
    WatcherProcessSettings,
    WorkerProcessSettings,
    ApiProcessSettings,
    AlertsProcessSettings,
    RecoveryProcessSettings,
    EnforcementProcessSettings,
    MigrationProcessSettings,
    ReplayProcessSettings,
):
    """Every setting of every process (every group). Defaults suit the local stack started by
    ``devicestate-dev stack up`` (Kafka on 127.0.0.1:9092, PostgreSQL on 127.0.0.1:55432)."""


GROUPS: Final[tuple[type[SettingsGroup], ...]] = (
    KafkaSettings,
    DatabaseSettings,
    KubeSettings,
    WatchSettings,
    TickSettings,
    WorkerSettings,
    ApiSettings,
    GovernanceTopicSettings,
    PolicySettings,
    RetentionSettings,
    RecoverySettings,
    ApiAuthSettings,
    AlertSettings,
    EnforcementSettings,
    MigrationExecutorSettings,
    ApiFeatureSettings,
    AdoptionSettings,
    LoggingSettings,
)
"""Every group, in the order of the configuration reference (``docs/configuration.md``)."""
