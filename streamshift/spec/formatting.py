"""Tables for people: the CLI, the demo and task logs print rows through here as plain text;
the HTML report and the Migration page show theirs through ``html_table``; the CLI's JSON
answers through ``json_text``."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence


def format_table(columns: list[str], rows: list[list[str]]) -> str:
    """Aligned columns under a ruled header; numbers right-aligned."""
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(columns, widths)),
        "  ".join("-" * w for w in widths),
    ]
    lines += [
        "  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths))
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def json_text(document: Mapping[str, object]) -> str:
    """A JSON object, one field per line and a list's items one per line, each compact: as
    readable as ``indent=2`` for an answer of thousands of rows, and written by the json
    module's C encoder, which ``indent`` turns off (bench/trace_explain.py).
    Values it cannot encode are written as text (dates, decimals)."""

    def compact(value: object) -> str:
        return json.dumps(value, default=str, separators=(", ", ": "))

    def field(value: object) -> str:
        if isinstance(value, list) and value:
            return "[\n" + ",\n".join(f"    {compact(v)}" for v in value) + "\n  ]"
        return compact(value)

    fields = [f"  {json.dumps(k)}: {field(v)}" for k, v in document.items()]
    return "{\n" + ",\n".join(fields) + "\n}" if fields else "{}"


def cell(value: object) -> str:
    """A value as a table shows it: nothing for null; a float without binary noise (rounded to
    6 places, as breaks stored before differences were exact carry it) and without ``.0`` when
    it is whole (a quantity's difference of 1400, not 1400.0)."""
    if value is None:
        return ""
    if isinstance(value, float):
        value = round(value, 6)
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    return str(value)


def html_cell(value: object) -> str:
    """:func:`cell`, escaped for HTML text and attribute values."""
    return html.escape(cell(value))


def html_table(
    rows: Sequence[Mapping[str, object]],
    columns: Sequence[str],
    cls: str = "",
    links: Mapping[str, str] | None = None,
) -> str:
    """Rows as an HTML table of ``columns`` (each cell through :func:`html_cell`, marked with
    its column); a "none" paragraph when there are no rows. ``links``: column → the row's
    field holding the address that column's cell links to (no link where it is empty)."""
    e = html_cell
    if not rows:
        return f"<p class='{e(('none ' + cls).strip())}'>none</p>"
    links = links or {}

    def td(r: Mapping[str, object], c: str) -> str:
        href = r.get(links[c]) if c in links else None
        text = f"<a href='{e(href)}'>{e(r.get(c))}</a>" if href else e(r.get(c))
        return f"<td data-col='{e(c)}'>{text}</td>"

    head = "".join(f"<th>{e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(td(r, c) for c in columns) + "</tr>" for r in rows)
    table = f"<table class='{e(cls)}'>" if cls else "<table>"
    return f"{table}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _numeric(text: str) -> bool:
    return text.replace(".", "", 1).replace("-", "", 1).isdigit()
