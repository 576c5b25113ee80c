"""Alembic environment of the PostgreSQL projection (see ``env.py``; run through
:func:`services.adapters.projection.migrate.migrate` or ``alembic -x schema=NAME upgrade head``)."""
