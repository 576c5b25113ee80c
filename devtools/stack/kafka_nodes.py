"""The nodes of the local Kafka cluster: where each keeps its files, and its configuration.

One node (the default) is a combined broker + KRaft controller with a dynamic quorum of itself,
its files directly in ``<state>/kafka`` (pid file ``run/kafka.pid``, logs ``logs/kafka-*.log``).
With ``stack up --brokers N`` (N > 1) every node is a combined broker + controller too, the
static quorum ``controller.quorum.voters`` naming all N, node i (1..N) in ``<state>/kafka/node-i``
with pid file ``run/kafka-i.pid`` and logs ``logs/kafka-i-*.log``; its ports come from
:attr:`~devtools.stack.supervisor.StackLayout.kafka_node_ports`. Every topic the brokers create
themselves (consumer offsets, transaction state) gets min(3, N) replicas, and the brokers'
default ``min.insync.replicas`` is 2 from three replicas on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from devtools.stack.supervisor import HOST, StackLayout

MAX_REPLICATION_FACTOR = 3


@dataclass(frozen=True)
class KafkaNode:
    """One Kafka process of the stack: ``index`` is its ``node.id`` (1..N)."""

    index: int
    name: str
    port: int
    controller_port: int
    dir: Path
    logs_dir: Path

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def server_log(self) -> Path:
        return self.logs_dir / f"{self.name}-server.log"

    @property
    def console_log(self) -> Path:
        """The JVM's own stdout and stderr (crashes before logging starts land here)."""
        return self.logs_dir / f"{self.name}-console.log"

    @property
    def properties(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.dir / "log4j2.properties"

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"


def nodes(layout: StackLayout) -> tuple[KafkaNode, ...]:
    """The stack's Kafka nodes, in ``node.id`` order."""
    single = layout.kafka_brokers == 1
    return tuple(
        KafkaNode(
            index=i,
            name="kafka" if single else f"kafka-{i}",
            port=port,
            controller_port=controller,
            dir=layout.kafka_dir if single else layout.kafka_dir / f"node-{i}",
            logs_dir=layout.logs_dir,
        )
        for i, (port, controller) in enumerate(layout.kafka_node_ports, start=1)
    )


def node(layout: StackLayout, index: int) -> KafkaNode:
    """Node ``index`` (1..N); raises ``ValueError`` when the stack has no such node."""
    found = nodes(layout)
    if not 1 <= index <= len(found):
        raise ValueError(f"broker {index}: the stack has brokers 1 to {len(found)}")
    return found[index - 1]


def voters(layout: StackLayout) -> str:
    """``controller.quorum.voters`` of a multi-node cluster: ``1@host:port,2@host:port,...``."""
    return ",".join(f"{n.index}@{HOST}:{n.controller_port}" for n in nodes(layout))


def replication(layout: StackLayout) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) of the topics the brokers create."""
    factor = min(MAX_REPLICATION_FACTOR, layout.kafka_brokers)
    return factor, 2 if factor >= MAX_REPLICATION_FACTOR else 1


def server_properties(layout: StackLayout, node: KafkaNode) -> str:
    factor, min_isr = replication(layout)
    if layout.kafka_brokers == 1:
        quorum = f"controller.quorum.bootstrap.servers={HOST}:{node.controller_port}"
        shape = "One node acting as broker and KRaft controller"
    else:
        quorum = f"controller.quorum.voters={voters(layout)}"
        shape = f"Node {node.index} of {layout.kafka_brokers}, each a broker and a KRaft controller"
    return f"""\
# Written by `devicestate-dev stack up` on every start: edit devtools/stack/kafka_nodes.py, not
# this file. {shape}, on loopback only.
process.roles=broker,controller
node.id={node.index}
{quorum}
listeners=PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}
advertised.listeners=PLAINTEXT://{HOST}:{node.port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={node.data_dir}

# Topics: one replica per broker up to three; with three, a write acknowledged by all in-sync
# replicas is on at least two brokers.
num.partitions={layout.kafka_partitions}
default.replication.factor={factor}
min.insync.replicas={min_isr}
offsets.topic.replication.factor={factor}
offsets.topic.num.partitions=12
transaction.state.log.replication.factor={factor}
transaction.state.log.min.isr={min_isr}
share.coordinator.state.topic.replication.factor={factor}
share.coordinator.state.topic.min.isr={min_isr}
# Topics are created by the services (with their settings), never by a client asking for one.
auto.create.topics.enable=false
delete.topic.enable=true

# Consumer groups form at once (tests would otherwise wait 3 s per new group).
group.initial.rebalance.delay.ms=0

# Small machine: a modest heap, so a smaller compaction dedupe buffer (faust changelogs are
# compacted), fewer threads.
log.cleaner.dedupe.buffer.size=33554432
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
"""


def log4j2_properties(node: KafkaNode) -> str:
    log = node.server_log
    return f"""\
# log4j2 configuration of the local Kafka broker (written by `devicestate-dev stack up`).
status = warn
name = devicestate-{node.name}

appender.server.type = RollingFile
appender.server.name = SERVER
appender.server.fileName = {log}
appender.server.filePattern = {log}.%i
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
appender.server.policies.type = Policies
appender.server.policies.size.type = SizeBasedTriggeringPolicy
appender.server.policies.size.size = 100MB
appender.server.strategy.type = DefaultRolloverStrategy
appender.server.strategy.max = 3

rootLogger.level = INFO
rootLogger.appenderRef.server.ref = SERVER

logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.controller.name = kafka.controller
logger.controller.level = INFO
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.zk.name = org.apache.zookeeper
logger.zk.level = WARN
"""
