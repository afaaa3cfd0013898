"""How a command or a job says how it ended: a :class:`StreamshiftError` as one line and exit
status 2 (no traceback for a user's mistake), an interrupt 130, and the one-line error left
where an orchestrator asked for it (``STREAMSHIFT_ERROR_FILE``). The CLI's ``main`` and a job
run in a process of the engine's runner end the same way."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from streamshift.spec.errors import StreamshiftError


def handled(handler: Callable[..., int], *args: object) -> int:
    """``handler(*args)``'s exit status, a :class:`StreamshiftError` said as one line (2),
    an interrupt 130; other errors are reported, then raised."""
    try:
        return handler(*args)
    except StreamshiftError as exc:
        print(f"streamshift: error: {exc}", file=sys.stderr)
        report_error(str(exc), final=exc.final)
        return 2
    except KeyboardInterrupt:
        print("streamshift: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        report_error(f"{type(exc).__name__}: {first}")
        raise


def report_error(message: str, *, final: bool = False) -> None:
    """Leave the one-line error where an orchestrator asked for it (STREAMSHIFT_ERROR_FILE),
    and a second line ``final`` when a retry cannot fix it (``StreamshiftError.final``)."""
    path = os.environ.get("STREAMSHIFT_ERROR_FILE")
    if path:
        with contextlib.suppress(OSError):
            Path(path).write_text(message + ("\nfinal" if final else "") + "\n", encoding="utf-8")


def say_progress(message: str) -> None:
    """A progress line of a command or a job, on stderr (its output stays the result)."""
    print(f"[streamshift] {message}", file=sys.stderr, flush=True)
