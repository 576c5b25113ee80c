"""Client side of the directory API: the ``devicestate devices`` command."""
