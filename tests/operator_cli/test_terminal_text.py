"""What the CLI prints of the API's text: control, invisible and bidi-control characters as
``\\uXXXX`` escapes, never raw (issue 11, item 10)."""

from __future__ import annotations

import orjson
import pytest

from services.client.common import make_table, print_json
from services.client.terminal import escape, visible


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("GPU-\u202e0", "GPU-\\u202e0"),
        ("a\u2028b", "a\\u2028b"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("bell\x07", "bell\\u0007"),
        ("isolate\u2066x\u2069", "isolate\\u2066x\\u2069"),
        ("plain gpu.example.com/pool-a/gpu-3", "plain gpu.example.com/pool-a/gpu-3"),
        ("tab\tand\nnewline", "tab\tand\nnewline"),
    ],
)
def test_visible_escapes_what_a_terminal_would_hide_or_reorder(raw: str, shown: str) -> None:
    assert visible(raw) == shown


def test_markup_is_escaped_after_the_characters() -> None:
    assert escape("[red]x\u202e") == "\\[red]x\\u202e"


def test_table_cells_and_json_output_carry_no_raw_bidi(capsys: pytest.CaptureFixture[str]) -> None:
    import io

    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(make_table(["RESOURCE ID"], [["GPU-\u202e0"]]))
    text = console.export_text()
    assert "\u202e" not in text
    assert "GPU-\\u202e0" in text
    print_json({"resourceID": "GPU-\u202e0"})
    out = capsys.readouterr().out
    assert "\u202e" not in out
    assert orjson.loads(out) == {"resourceID": "GPU-\u202e0"}  # the same JSON value
