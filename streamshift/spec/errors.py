"""Errors a user can act on: the CLI prints their message (no traceback) and exits 2."""

from __future__ import annotations

from typing import ClassVar


class StreamshiftError(Exception):
    """Base of every error whose message tells the user what to do."""

    # A retry cannot fix it (bad input, an unknown name, a refused request): an orchestrator
    # fails the task at once instead of retrying (STREAMSHIFT_ERROR_FILE says so).
    final: ClassVar[bool] = False


class ReconcileError(StreamshiftError):
    """A reconciliation that cannot run as asked (a missing file, a correction its stage
    does not make)."""

    final = True
