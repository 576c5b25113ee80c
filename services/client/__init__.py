"""Clients of the directory API: the HTTP client (:mod:`.http`) and the ``devicestate`` commands
built on it: ``devices`` (:mod:`.directory`), the operator commands (:mod:`.operator`: quarantines,
automation, breaker, governance status, timeline, command outcomes, tokens) and the inventory
commands (:mod:`.inventory`)."""
