"""The flow registry: every package (or module) in ``flows/`` that declares ``FLOW``.

``flow_names`` lists flows without importing them, so a DAG file can build one DAG per flow
without importing pyspark. A flow may ship a data generator as ``flows/<name>/generate.py``
with a ``generate_day(business_date, n, out_dir, seed=..., progress=...)`` function.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamshift.spec.errors import StreamshiftError

if TYPE_CHECKING:
    from streamshift.spec.flow import Flow


class UnknownFlowError(StreamshiftError):
    final = True


def flow_names() -> list[str]:
    """Names of the declared flows, without importing them (safe for DAG parsing)."""
    import flows

    return sorted(
        m.name for m in pkgutil.iter_modules(flows.__path__) if not m.name.startswith("_")
    )


def _check(name: str) -> None:
    if name not in flow_names():
        raise UnknownFlowError(f"unknown flow {name!r}; declared flows: {', '.join(flow_names())}")


def get_flow(name: str) -> Flow:
    _check(name)
    module = importlib.import_module(f"flows.{name}")
    flow: Flow = module.FLOW
    return flow


def get_generator(name: str) -> Callable[..., Any]:
    """The flow's ``generate_day`` function; a clear error when the flow ships none."""
    _check(name)
    try:
        module = importlib.import_module(f"flows.{name}.generate")
    except ModuleNotFoundError as exc:
        if exc.name != f"flows.{name}.generate":
            raise
        raise UnknownFlowError(
            f"flow {name!r} ships no data generator (flows/{name}/generate.py with generate_day)"
        ) from None
    generate: Callable[..., Any] = module.generate_day
    return generate
