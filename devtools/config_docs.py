"""Print the configuration reference (``docs/configuration.md``) from the settings groups.

``python -m devtools.config_docs > docs/configuration.md``; ``tests/test_config_docs.py`` fails
when the file is out of date, so the reference always matches the code.
"""

from __future__ import annotations

import json
from typing import Any

from services.runtime.config import GROUPS, Settings

HEADER = """# Configuration reference

Every process reads `DEVICESTATE_*` environment variables (or a `.env` file); the command-line
flags of each command override them. Generated from `services/runtime/config.py` by
`python -m devtools.config_docs > docs/configuration.md` (a test checks it is current).

| variable | default | meaning |
| --- | --- | --- |
"""


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str) and not value:
        return "empty"
    return f"`{json.dumps(value) if not isinstance(value, str) else value}`"


def render() -> str:
    """The Markdown reference: one row per setting, group by group in the order of ``GROUPS``,
    each group's fields in declaration order (a group's inherited fields are listed with the group
    they come from). Raises ``ValueError`` when a field of :class:`Settings` is in no group."""
    prefix = Settings.model_config.get("env_prefix", "")
    rows = []
    listed: set[str] = set()
    for group in GROUPS:
        for name, info in group.model_fields.items():
            if name in listed:
                continue
            listed.add(name)
            description = (info.description or "").replace("|", "\\|").replace("\n", " ")
            rows.append(f"| `{prefix}{name.upper()}` | {_default(info.default)} | {description} |")
    missing = set(Settings.model_fields) - listed
    if missing:
        raise ValueError(f"settings in no group of GROUPS: {sorted(missing)}")
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(render(), end="")
