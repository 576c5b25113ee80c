"""Clients of the directory API: the HTTP client (:mod:`.http`) and the ``devicestate`` commands
built on it: ``devices`` (:mod:`.directory`); the operator commands, wired by :mod:`.operator`:
quarantines (:mod:`.quarantine`), automation, breaker, command outcomes, governance status and
timeline (:mod:`.governance`), tokens (:mod:`.tokens`), inventory, capacity and conflicts
(:mod:`.inventory`); what they share: :mod:`.common` (options, exit codes, output) and
:mod:`.writes` (submitting governance commands)."""
