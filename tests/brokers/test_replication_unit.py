"""Replication settings without a cluster: the three-node stack's layout and broker
configuration, the topic configs that go with a replication factor, and the worker's faust app
(changelog replication, an idempotent producer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devtools.stack import kafka_nodes
from devtools.stack.supervisor import StackError, StackLayout
from services.adapters.kafka.topics import replication_configs
from services.runtime.config import Settings
from streams.app import IdempotentProducer, assignor_topic, build_worker_app
from tests.fakes.batch_sink import FakeSink
from tests.fakes.governance_sink import FakeGovernanceSink


def layout(tmp_path: Path, brokers: int, env: dict[str, str] | None = None) -> StackLayout:
    values = {
        "DEVICESTATE_STACK_DIR": str(tmp_path),
        "DEVICESTATE_STACK_KAFKA_PORT": "59100",
        "DEVICESTATE_STACK_KAFKA_CONTROLLER_PORT": "59101",
        **(env or {}),
    }
    return StackLayout.from_env(values, cwd=tmp_path).with_brokers(brokers)


def test_three_brokers_listen_on_every_other_port(tmp_path: Path) -> None:
    three = layout(tmp_path, 3)
    assert three.kafka_node_ports == [(59100, 59101), (59102, 59103), (59104, 59105)]
    assert three.kafka_bootstrap_servers == "127.0.0.1:59100,127.0.0.1:59102,127.0.0.1:59104"
    assert [(n.index, n.name) for n in kafka_nodes.nodes(three)] == [
        (1, "kafka-1"),
        (2, "kafka-2"),
        (3, "kafka-3"),
    ]
    assert len({n.dir for n in kafka_nodes.nodes(three)}) == 3
    one = layout(tmp_path, 1)  # the single node keeps its files where they always were
    (node,) = kafka_nodes.nodes(one)
    assert (node.name, node.dir, one.kafka_bootstrap_servers) == (
        "kafka",
        one.kafka_dir,
        "127.0.0.1:59100",
    )


def test_each_node_of_three_is_a_voter_with_three_replicas_and_two_in_sync(tmp_path: Path) -> None:
    three = layout(tmp_path, 3)
    props = dict(
        line.split("=", 1)
        for line in kafka_nodes.server_properties(three, kafka_nodes.node(three, 2)).splitlines()
        if line and not line.startswith("#")
    )
    assert props["node.id"] == "2"
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:59101,2@127.0.0.1:59103,3@127.0.0.1:59105"
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:59102,CONTROLLER://127.0.0.1:59103"
    for name in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
    ):
        assert props[name] == "3", name
    assert props["min.insync.replicas"] == props["transaction.state.log.min.isr"] == "2"
    assert props["auto.create.topics.enable"] == "false"
    single = kafka_nodes.server_properties(
        layout(tmp_path, 1), kafka_nodes.node(layout(tmp_path, 1), 1)
    )
    assert "default.replication.factor=1\n" in single and "min.insync.replicas=1\n" in single


def test_broker_counts_and_ports_out_of_range_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="from 1 to"):
        layout(tmp_path, 0)
    with pytest.raises(StackError, match="must be distinct"):  # controller 2 = broker 2's port
        layout(tmp_path, 3, {"DEVICESTATE_STACK_KAFKA_CONTROLLER_PORT": "59102"})
    with pytest.raises(ValueError, match="brokers 1 to 3"):
        kafka_nodes.node(layout(tmp_path, 3), 4)


def test_the_recorded_broker_count_is_the_default(tmp_path: Path) -> None:
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "brokers").write_text("3\n")
    assert layout(tmp_path, 3).kafka_brokers == 3
    values = {"DEVICESTATE_STACK_DIR": str(tmp_path)}
    assert StackLayout.from_env(values, cwd=tmp_path).kafka_brokers == 3
    values["DEVICESTATE_STACK_KAFKA_BROKERS"] = "1"
    assert StackLayout.from_env(values, cwd=tmp_path).kafka_brokers == 1


def test_two_in_sync_replicas_from_three_replicas_on() -> None:
    assert replication_configs(1) == replication_configs(2) == {"min.insync.replicas": "1"}
    assert replication_configs(3) == replication_configs(5) == {"min.insync.replicas": "2"}


def _app(tmp_path: Path, **kwargs: Any) -> Any:
    settings = Settings(
        consumer_group="tunit.worker",
        worker_data_dir=str(tmp_path / "worker"),
        worker_store="memory://",
        worker_metrics_port=0,
    )
    return build_worker_app(
        settings, sink=FakeSink(), governance_sink=FakeGovernanceSink(), **kwargs
    )


def test_the_changelog_gets_the_replication_of_the_topics(tmp_path: Path) -> None:
    built = _app(tmp_path, replication=3)
    assert built.app.conf.topic_replication_factor == 3
    changelog = built.dedup.table.changelog_topic
    assert changelog.config == {"min.insync.replicas": "2"}
    assert assignor_topic(built.dedup.settings) == "tunit.worker-__assignor-__leader"
    single = _app(tmp_path)  # kafka_replication_factor 0 and no cluster asked: one replica
    assert single.app.conf.topic_replication_factor == 1
    assert single.dedup.table.changelog_topic.config == {"min.insync.replicas": "1"}


def test_the_worker_producer_is_idempotent(tmp_path: Path) -> None:
    producer = _app(tmp_path, replication=3).app.producer
    assert isinstance(producer, IdempotentProducer)
    options = {**producer._settings_default(), **producer._settings_extra()}
    assert options["acks"] == "all" and options["enable_idempotence"] is True
