"""Operator commands of ``devicestate`` (quarantines, automation, breaker, governance status,
timeline, command outcomes, tokens): :mod:`services.operator_cli.cli`."""
