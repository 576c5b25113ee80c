"""Adapters: each package is the only owner of one backend.

- :mod:`.kafka`: every aiokafka client (producer, consumer, admin) and the topic layout;
- :mod:`.projection`: every SQL statement on the projection tables (PostgreSQL, SQLAlchemy 2);
- :mod:`.kube`: the kubernetes-asyncio client and the raw request / error mapping.

Adapters import the domain and :mod:`services.runtime`, never a process.
"""
