"""The PostgreSQL projection of the device directory: tables (:mod:`.tables`), migrations
(:mod:`.migrate`), the batch writer and read helpers (:mod:`.store`) and the replay comparison
(:mod:`.compare`). What an event does to a device is decided by :mod:`services.domain.directory`
only; this package loads rows, runs that fold and writes the result."""
