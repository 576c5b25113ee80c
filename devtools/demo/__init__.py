"""``devicestate-dev demo``: the whole pipeline on a bundled recorded watch stream."""
