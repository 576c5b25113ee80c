"""Rebuild the projection from the event log: ``devicestate replay`` (see :mod:`services.replay.run`)."""
