"""Processes: each package composes the domain and the adapters into one long-running command
(``devicestate watch|api|alerts|recovery|enforce|replay``). Processes never import each other; the
stream worker (``devicestate worker``) is the top-level package :mod:`streams`."""
