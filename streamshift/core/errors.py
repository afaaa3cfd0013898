"""Errors a user can act on: the CLI prints their message (no traceback) and exits 2."""

from __future__ import annotations


class StreamshiftError(Exception):
    """Base of every error whose message tells the user what to do."""
