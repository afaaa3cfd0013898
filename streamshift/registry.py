"""The flow registry: every module in ``flows/`` that declares ``FLOW``."""

from __future__ import annotations

import importlib
import pkgutil

from streamshift.errors import StreamshiftError
from streamshift.flow import Flow


class UnknownFlowError(StreamshiftError):
    pass


def flow_names() -> list[str]:
    """Names of the declared flows, without importing them (safe for DAG parsing)."""
    import flows

    return sorted(m.name for m in pkgutil.iter_modules(flows.__path__) if not m.name.startswith("_"))


def get_flow(name: str) -> Flow:
    if name not in flow_names():
        raise UnknownFlowError(f"unknown flow {name!r}; declared flows: {', '.join(flow_names())}")
    module = importlib.import_module(f"flows.{name}")
    return module.FLOW
