"""The README's generated tables — every ``STREAMSHIFT_*`` setting and every command — made
from the code, so they cannot drift: ``python -m streamshift.readme`` rewrites them in place,
``--check`` exits 1 when README.md differs (``tests/test_readme.py`` asserts it does not)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamshift.core.settings import REPO_ROOT, describe

README = REPO_ROOT / "README.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(value: str) -> str:
    """Defaults under the repo are shown relative to it (``./var``), empty ones as ``—``."""
    if value.startswith(str(REPO_ROOT)):
        value = "./" + str(Path(value).relative_to(REPO_ROOT))
    return f"`{value}`" if value else "—"


def settings_table() -> str:
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [f"| `{n}` | {_default(d)} | {_cell(doc)} |" for n, d, doc in describe()]
    return "\n".join(rows)


def commands_table() -> str:
    from streamshift.cli import build_parser

    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: c.help or "" for c in commands._choices_actions}
    rows = ["| command | what it does |", "|---|---|"]
    for name, sub in commands.choices.items():
        usage = sub.format_usage().removeprefix("usage: ").strip().removeprefix("streamshift ")
        usage = usage.replace(" [-h]", "")
        rows.append(f"| `streamshift {_cell(' '.join(usage.split()))}` | {_cell(helps[name])} |")
    return "\n".join(rows)


TABLES = {"settings": settings_table, "commands": commands_table}


def rendered(text: str) -> str:
    """``text`` with each ``<!-- NAME:begin -->…<!-- NAME:end -->`` block regenerated."""
    for name, table in TABLES.items():
        begin, end = (
            f"<!-- {name}:begin (generated: python -m streamshift.readme) -->",
            (f"<!-- {name}:end -->"),
        )
        if begin not in text or end not in text:
            raise ValueError(f"README.md lacks the {name} markers: {begin} ... {end}")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{table()}\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamshift.readme",
        description="Regenerate the README's settings and commands tables from the code.",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is stale")
    args = parser.parse_args(argv)
    current = README.read_text()
    fresh = rendered(current)
    if args.check:
        if fresh != current:
            print("README.md tables are stale: run python -m streamshift.readme", file=sys.stderr)
            return 1
        return 0
    README.write_text(fresh)
    print(f"wrote {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
