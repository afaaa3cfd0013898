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


def cell(value: object) -> str:
    """A value as a table shows it: nothing for null; a float without binary noise (rounded to
    6 places, as breaks stored before differences were exact carry it) and without ``.0`` when
    it is whole (a quantity's difference of 1400, not 1400.0)."""
    if value is None:
        return ""
    if isinstance(value, float):
        value = round(value, 6)
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _numeric(text: str) -> bool:
    return text.replace(".", "", 1).replace("-", "", 1).isdigit()
