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
    started by ``devicestate stack up`` (Kafka on 127.0.0.1:9092, PostgreSQL on 127.0.0.1:55432)."""

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

    # --- Logging ---------------------------------------------------------------------------
    log_level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING, ERROR.")
    log_format: Literal["json", "console"] = Field(
        "console", description="Structured log output: json (one object a line) or console."
    )
