"""The local development stack without Docker: Apache Kafka from its Maven jars and a private
PostgreSQL cluster, started, checked and stopped by ``devicestate-dev stack up|status|down``.

- :mod:`devtools.stack.supervisor`: where the stack keeps its files, pid files, waiting helpers.
- :mod:`devtools.stack.kafka`: a single-node KRaft broker + controller.
- :mod:`devtools.stack.postgres`: a PostgreSQL 15 cluster in the state dir.
- :mod:`devtools.stack.cli`: the typer commands.

Machines with Docker can use ``docker-compose.yml`` at the repository root instead.
"""
