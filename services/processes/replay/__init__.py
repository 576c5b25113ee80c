"""Rebuild the projection from the event log: ``devicestate replay`` (see :mod:`services.processes.replay.run`)."""
