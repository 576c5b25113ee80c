"""The local development stack without Docker: Apache Kafka from its Maven jars and a private
PostgreSQL cluster, started, checked and stopped by ``devicestate stack up|status|down``.

- :mod:`services.stack.supervisor`: where the stack keeps its files, pid files, waiting helpers.
- :mod:`services.stack.kafka`: a single-node KRaft broker + controller.
- :mod:`services.stack.postgres`: a PostgreSQL 15 cluster in the state dir.
- :mod:`services.stack.cli`: the typer commands.

Machines with Docker can use ``docker-compose.yml`` at the repository root instead.
"""
