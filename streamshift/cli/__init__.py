"""The ``streamshift`` command: its parser built from the command groups (each a module holding
its parsers beside its handlers: stack, job, stream, read), and :func:`main`. Nothing in the
package imports this folder but its own ``__main__``; ``spark_jobs/run.py`` and
``streaming/run.py`` call :func:`main`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from streamshift.cli import job_command, read_command, stack_command, stream_command
from streamshift.control.outcome import handled

GROUPS = (stack_command, job_command, stream_command, read_command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamshift",
        description="Lambda migration kit: one set of PySpark transforms for EOD batch "
        "and Kafka streaming. Settings come from STREAMSHIFT_* variables "
        "(see `streamshift settings`).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return handled(args.handler, args)


def batch_job_main(argv: Sequence[str]) -> int:
    """``spark_jobs/run.py``: a batch job in a spark-submit driver, given as a command line or
    as a typed job request in JSON (``{"kind": ...}``)."""
    argv = list(argv)
    return main(["request", *argv] if argv and argv[0].lstrip().startswith("{") else argv)


def stream_job_main(argv: Sequence[str]) -> int:
    """``streaming/run.py``: the always-on stream job in a spark-submit driver, with the
    arguments of ``streamshift stream``."""
    return main(["stream", *argv])
