"""``python -m bench.governor``: the pure governor benchmark (see :mod:`bench.governor`)."""

from bench.governor.cli import main

main()
