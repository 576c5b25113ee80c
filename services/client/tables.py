"""How ``devicestate`` prints what it reads, like ``kubectl get`` (issue 14, item 6).

- **A cell never folds across lines.** Every column is ``no_wrap`` and the table is printed on a
  console as wide as the table needs (:func:`print_table`, measured with rich's
  :class:`~rich.measure.Measurement`): on a terminal narrower than the table the terminal wraps
  the whole line, as with kubectl; a line feed inside a value is shown as ``\\n``.
- **Not a terminal** (a pipe, a log, CI): the same full-width columns without colour or styles,
  one line per row, so ``grep`` and ``awk`` work on it.
- ``-o table|wide|json|yaml`` (:class:`TableOutput`; ``wide`` adds columns, ``json`` and ``yaml``
  print the API's items), ``--no-headers`` (rows only: no header line, no summary after the
  table) and ``-w/--watch`` (:func:`follow`: poll every ``--watch-interval`` seconds, default
  :data:`WATCH_INTERVAL_SECONDS`, and print each row that is new or changed since the last poll,
  like ``kubectl get -w``; Ctrl-C stops it).

JSON and YAML carry control, invisible and bidi characters only as escapes
(:func:`~services.client.terminal.visible`; YAML is written ASCII-only, so every other
character is a ``\\uXXXX`` escape of a double-quoted scalar too).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Final

import orjson
import typer
import yaml
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from services.client.terminal import visible

WATCH_INTERVAL_SECONDS: Final = 2.0
"""Seconds between two polls of ``--watch``: a change is printed at most this long after the API
serves it (the API's own freshness bound comes on top)."""


class TableOutput(StrEnum):
    """``-o`` of the table commands."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


Format = Annotated[
    TableOutput,
    typer.Option("-o", "--output", help="table, wide (more columns), json or yaml."),
]
NoHeaders = Annotated[
    bool,
    typer.Option("--no-headers", help="Rows only: no header line, no summary after the table."),
]
Watch = Annotated[
    bool,
    typer.Option(
        "-w",
        "--watch",
        help="After the table, poll the API and print each new or changed row (Ctrl-C stops).",
    ),
]
WatchInterval = Annotated[
    float,
    typer.Option("--watch-interval", min=0.5, help="Seconds between two polls of --watch."),
]

Row = list[str]
"""One table row: a cell per column, rich markup with the API's text escaped."""


def one_line(markup: str) -> str:
    """A cell's markup on one line: line feeds and tabs shown as ``\\n`` and ``\\t``."""
    return markup.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def table_of(
    columns: Sequence[str],
    rows: Sequence[Row],
    *,
    headers: bool = True,
    styles: Sequence[str | None] | None = None,
) -> Table:
    """A borderless table whose cells never fold (``styles``: a rich style per row or None)."""
    table = Table(box=None, header_style="bold", pad_edge=False, show_header=headers)
    for column in columns:
        table.add_column(column, no_wrap=True, overflow="ignore")
    for index, row in enumerate(rows):
        style = None if styles is None else styles[index]
        table.add_row(*[one_line(c) for c in row], style=style)
    return table


def print_table(table: Table, console: Console | None = None) -> None:
    """Print ``table`` on ``console`` (default: stdout) at its full width: on a console narrower
    than the table, a console of the same file and colours as wide as the table prints it; off a
    terminal, each line without the padding after its last column."""
    console = console or Console()
    needed = Measurement.get(console, console.options.update_width(1 << 20), table).maximum
    if needed > console.width:
        console = Console(
            file=console.file,
            width=needed,
            color_system=console.color_system,  # type: ignore[arg-type]
            force_terminal=console.is_terminal,
            no_color=console.no_color,
            highlight=False,
        )
    if console.is_terminal:
        console.print(table)
        return
    # Off a terminal, as kubectl: no padding after the last column (awk, diff).
    with console.capture() as captured:
        console.print(table)
    console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def print_json(value: Any) -> None:
    """Write ``value`` as indented JSON on stdout (invisible characters as ``\\uXXXX``)."""
    # The unsafe characters only occur inside strings, where their escape means the same.
    text = visible(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())
    sys.stdout.buffer.write(text.encode() + b"\n")
    sys.stdout.flush()


def print_yaml(value: Any) -> None:
    """Write ``value`` as YAML on stdout (ASCII only: every other character escaped)."""
    text = visible(yaml.safe_dump(value, sort_keys=False, allow_unicode=False, width=1 << 20))
    sys.stdout.buffer.write(text.encode())
    sys.stdout.flush()


def follow(
    poll: Callable[[], list[Row]],
    show: Callable[[list[Row]], None],
    seen: list[Row],
    interval: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    polls: int | None = None,
) -> None:
    """``--watch``: every ``interval`` seconds ``poll()`` the rows again and ``show`` those not
    printed before in that form (new or changed rows; ``seen`` is what the first table showed).
    Runs until interrupted (``KeyboardInterrupt`` ends it quietly) or ``polls`` polls."""
    known = {tuple(r) for r in seen}
    done = 0
    try:
        while polls is None or done < polls:
            sleep(interval)
            done += 1
            rows = poll()
            fresh = [r for r in rows if tuple(r) not in known]
            known = {tuple(r) for r in rows}
            if fresh:
                show(fresh)
    except KeyboardInterrupt:
        return


def check_watch(watch: bool, output: TableOutput) -> None:
    """Exit 2 for ``--watch`` with ``-o json|yaml``: watching prints table rows."""
    if watch and output in (TableOutput.JSON, TableOutput.YAML):
        typer.echo("error: --watch prints table rows: use -o table or -o wide", err=True)
        raise typer.Exit(2)


def _no_style(item: dict[str, Any]) -> str | None:
    return None


def _no_summary(items: list[dict[str, Any]]) -> list[str]:
    return []


@dataclass(frozen=True)
class Listing:
    """What a table command reads and how it prints it.

    ``fetch()`` returns the API's document (what ``-o json|yaml`` prints) and the items the table
    shows; it exits on an API error (the command's own handler). ``columns(wide)`` and
    ``row(item, wide)`` make the table; ``style(item)`` a row's rich style; ``summary(items)``
    the lines printed after the table (rich markup)."""

    fetch: Callable[[], tuple[Any, list[dict[str, Any]]]]
    columns: Callable[[bool], list[str]]
    row: Callable[[dict[str, Any], bool], Row]
    style: Callable[[dict[str, Any]], str | None] = field(default=_no_style)
    summary: Callable[[list[dict[str, Any]]], list[str]] = field(default=_no_summary)


def show(
    listing: Listing,
    output: TableOutput,
    *,
    no_headers: bool = False,
    watch: bool = False,
    interval: float = WATCH_INTERVAL_SECONDS,
    console: Console | None = None,
) -> None:
    """Print ``listing`` as ``-o output`` says, then follow it with ``--watch``."""
    check_watch(watch, output)
    document, items = listing.fetch()
    if output is TableOutput.JSON:
        print_json(document)
        return
    if output is TableOutput.YAML:
        print_yaml(document)
        return
    console = console or Console()
    wide = output is TableOutput.WIDE
    columns = listing.columns(wide)
    rows = [listing.row(item, wide) for item in items]
    print_table(
        table_of(columns, rows, headers=not no_headers, styles=[listing.style(i) for i in items]),
        console,
    )
    if not no_headers:
        for line in listing.summary(items):
            console.print(line, soft_wrap=True)
    if not watch:
        return

    def poll() -> list[Row]:
        return [listing.row(item, wide) for item in listing.fetch()[1]]

    def print_rows(fresh: list[Row]) -> None:
        print_table(table_of(columns, fresh, headers=False), console)

    follow(poll, print_rows, rows, interval)
