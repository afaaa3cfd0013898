"""The documents made from the code, so they cannot drift: the README's stage table, the
settings reference ``docs/settings.md`` and the CLI reference ``docs/cli.md`` (every command
and its ``--help``). ``python -m streamshift.cli.readme`` rewrites them; ``--check`` exits 1 when
one differs (``tests/test_readme.py`` asserts none does)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamshift.spec import stages as S
from streamshift.spec.catalog import EOD_FILE, PARITY
from streamshift.spec.settings import REPO_ROOT, describe

README = REPO_ROOT / "README.md"
CLI_REFERENCE = REPO_ROOT / "docs" / "cli.md"
SETTINGS_REFERENCE = REPO_ROOT / "docs" / "settings.md"


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


def stages_table() -> str:
    """The stage table, from :mod:`streamshift.spec.stages` (the one definition)."""

    eod = {
        S.LOAD: "loads the EOD file into the batch layer",
        S.CORRECT: "reconciles the EOD file against the stream layer and applies the differences "
        "as corrections (`mode=replace` also cancels what the whole-day file lacks)",
        S.CUT_OFF: "no file: waits for the date's cut-off and closes it (`streamshift close`)",
    }
    closes = {
        S.BY_EOD_LOAD: "the EOD load",
        S.BY_EOD_FILE: "the EOD file's reconciliation and correction",
        S.BY_CUT_OFF: "the cut-off, once the stream committed the offsets the topic held then",
    }
    evidence = {PARITY: "clean parity days (stream vs batch)", EOD_FILE: "clean EOD-file days"}
    served = {
        "batch": "the batch layer",
        "lambda": "batch for closed dates, stream after",
        "stream": "the stream layer",
    }
    rows = [
        (
            "| stage | the stream job | the EOD DAG (`eod_<flow>`) | a day closes by (layers) "
            "| evidence it makes for the next stage | readers are served |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for s in S.STAGES:
        dag = eod[s.eod] + ("; reconciles stream vs batch" if s.parity else "")
        dag += "; vs an external file when one lands; quality; report"
        rows.append(
            f"| `{s.name}` | {'writes the stream layer' if s.streams else 'off'} | {_cell(dag)} "
            f"| {closes[s.closes_by]} ({', '.join(s.closes_layers)}) "
            f"| {evidence.get(s.evidence or '', '—')} | {served[s.serves]} |"
        )
    return "\n".join(rows)


TABLES = {"stages": stages_table}


def rendered(text: str) -> str:
    """``text`` with each ``<!-- NAME:begin -->…<!-- NAME:end -->`` block regenerated."""
    for name, table in TABLES.items():
        begin, end = (
            f"<!-- {name}:begin (generated: python -m streamshift.cli.readme) -->",
            (f"<!-- {name}:end -->"),
        )
        if begin not in text or end not in text:
            raise ValueError(f"README.md lacks the {name} markers: {begin} ... {end}")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{table()}\n{end}{tail}"
    return text


def cli_reference() -> str:
    """``docs/cli.md``: every command's ``--help``, as the command prints it."""
    import os

    from streamshift.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: fix it
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    parts = [
        "# The `streamshift` command",
        "",
        (
            "Generated from the code (`python -m streamshift.cli.readme`); "
            "`streamshift <command> --help` prints the same. Data lives under "
            "`STREAMSHIFT_HOME`; settings are in [settings.md](settings.md)."
        ),
        "",
        commands_table(),
    ]
    for name, sub in commands.choices.items():
        parts += ["", f"## `streamshift {name}`", "", "```", sub.format_help().rstrip(), "```"]
    return "\n".join(parts) + "\n"


def settings_reference() -> str:
    """``docs/settings.md``: every ``STREAMSHIFT_*`` setting, its default and meaning."""
    intro = (
        "Every setting is an environment variable; a typo or a malformed value fails at "
        "start-up naming the variable, and `streamshift settings` prints the values in "
        "force (secrets masked). Generated from `streamshift/spec/settings.py` "
        "(`python -m streamshift.cli.readme`)."
    )
    return f"# Settings\n\n{intro}\n\n{settings_table()}\n"


def generated() -> dict[Path, str]:
    """Every generated document, by path, as it should read now."""
    return {
        README: rendered(README.read_text()),
        CLI_REFERENCE: cli_reference(),
        SETTINGS_REFERENCE: settings_reference(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamshift.cli.readme",
        description="Regenerate the documents made from the code (the README's stage table, "
        "docs/settings.md, docs/cli.md).",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if one is stale")
    args = parser.parse_args(argv)
    documents = generated()
    if args.check:
        stale = [p for p, text in documents.items() if not p.exists() or p.read_text() != text]
        for path in stale:
            print(f"{path} is stale: run python -m streamshift.cli.readme", file=sys.stderr)
        return 1 if stale else 0
    for path, text in documents.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
