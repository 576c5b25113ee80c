"""The read-only device directory API (FastAPI): :func:`services.api.app.create_app`, served by
``devicestate api`` (:func:`services.api.cli.api`)."""
