"""What every process shares: settings (:mod:`.config`), structured logging (:mod:`.logs`) and
the event loop and GC choices (:mod:`.loop`)."""
