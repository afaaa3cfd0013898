"""Plain-text tables for people: the CLI, the demo and task logs print rows through here."""

from __future__ import annotations


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


def _numeric(text: str) -> bool:
    return text.replace(".", "", 1).replace("-", "", 1).isdigit()
