"""Text from the API made safe for a terminal: control, invisible and bidirectional-control
characters are shown as ``\\uXXXX`` escapes instead of being written raw.

A resourceID or reason holding U+202E (right-to-left override), U+2028 (line separator) or
U+200B (zero-width space) would otherwise reorder or hide what the operator reads (Trojan Source):
two IDs that differ only by one would print alike. The API refuses them in what it is sent; this
covers what it serves (older data, the inventory of a cluster).
"""

from __future__ import annotations

import re
from typing import Final

from rich.markup import escape as _markup_escape

from services.domain.limits import INVISIBLE_CHARACTERS

_UNSAFE: Final = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{INVISIBLE_CHARACTERS}]")


def visible(text: str) -> str:
    """``text`` with every control character except tab and LF, and every invisible or
    bidi-control character, replaced by its ``\\uXXXX`` escape."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def escape(text: str) -> str:
    """:func:`visible` text with rich markup escaped, for ``console.print`` and table cells."""
    return _markup_escape(visible(text))
