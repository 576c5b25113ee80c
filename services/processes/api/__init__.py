"""The read-only device directory API (FastAPI): :func:`services.processes.api.app.create_app`, served by
``devicestate api`` (:func:`services.processes.api.cli.api`)."""
