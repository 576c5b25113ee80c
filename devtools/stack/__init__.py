"""The local development stack without Docker: Apache Kafka from its Maven jars and a private
PostgreSQL cluster, started, checked and stopped by ``devicestate-dev stack up|status|down``.

- :mod:`devtools.stack.supervisor`: where the stack keeps its files, pid files;
  :mod:`devtools.stack.waiting`: waiting helpers (ports, log lines, locks).
- :mod:`devtools.stack.kafka`: KRaft broker + controller nodes, one or ``--brokers N``
  (:mod:`devtools.stack.kafka_nodes`: their files and configuration; :mod:`devtools.stack.kafka_jars`:
  the jars); :mod:`devtools.stack.brokers`: stop and start one broker by PID (fault tests).
- :mod:`devtools.stack.postgres`: a PostgreSQL 15 cluster in the state dir.
- :mod:`devtools.stack.cli`: the typer commands.

Machines with Docker can use ``docker-compose.yml`` at the repository root instead.
"""
