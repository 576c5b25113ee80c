"""Alembic revisions of the projection schema (Alembic skips this file)."""
