"""Typed job requests: what a Spark job is asked to do, built once (by the CLI from its
arguments, by a DAG task from its params and the flow's stage) and handed to one
``run(spark, request)`` (:mod:`streamshift.engine.jobs.requests`). Frozen, and serialisable to JSON,
which is how an Airflow task passes one to the task that runs it on the engine: dates stay
dates and paths stay paths, nothing is parsed back out of an argument list by position.

No pyspark here: the DAGs and the CLI build requests without a JVM.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

_KINDS: dict[str, type[JobRequest]] = {}


@dataclass(frozen=True)
class JobRequest:
    """A job's whole input; subclasses name their ``kind``."""

    kind: ClassVar[str] = ""
    # Runs in a session of its own (its JVM), never on the warm engine.
    needs_jvm: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _KINDS[cls.kind] = cls

    @property
    def business_day(self) -> dt.date | None:
        return getattr(self, "business_date", None)

    def to_json(self) -> str:
        values: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, dt.date):  # (a datetime too)
                value = value.isoformat()
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            values[f.name] = value
        return json.dumps(values, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> JobRequest:
        """The request ``text`` holds; :class:`ValueError` saying what is wrong with it (a
        field it lacks, one its kind does not have: a misspelt field is refused, never
        ignored), :class:`TypeError` for JSON that is not an object."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError(f"a JSON object is needed, not {type(data).__name__}")
        kind = data.pop("kind", None)
        if kind not in _KINDS:
            raise ValueError(f"kind {kind!r} is none of {', '.join(_KINDS)}")
        cls = _KINDS[kind]
        fields = dataclasses.fields(cls)
        names = [f.name for f in fields]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(
                f"the {kind} request has no field {', '.join(unknown)} (its fields: {', '.join(names)})"
            )
        lacking = [
            f.name
            for f in fields
            if f.name not in data
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if lacking:
            raise ValueError(f"the {kind} request needs {', '.join(lacking)}")
        hints = typing.get_type_hints(cls)
        values = {}
        for name, value in data.items():
            hint = str(hints[name])
            try:
                if value is not None and "datetime.datetime" in hint:
                    value = dt.datetime.fromisoformat(value)
                elif value is not None and "datetime.date" in hint:
                    value = dt.date.fromisoformat(value)
            except (TypeError, ValueError):
                form = "YYYY-MM-DDTHH:MM" if "datetime.datetime" in hint else "YYYY-MM-DD"
                raise ValueError(f"{name} {value!r} is not in ISO form ({form})") from None
            if value is not None and "Path" in hint:
                value = Path(value)
            elif isinstance(value, list):
                value = tuple(value)
            values[name] = value
        return cls(**values)


@dataclass(frozen=True)
class EodRequest(JobRequest):
    """Load an EOD file into a layer (``streamshift eod``)."""

    kind: ClassVar[str] = "eod"
    flow: str
    business_date: dt.date
    file: Path
    layer: str = "batch"
    replace: bool = False
    quality_run: str | None = None  # validate the day in the same session, under this id


@dataclass(frozen=True)
class ReconcileRequest(JobRequest):
    """Reconcile a date, and in stages stream and kappa correct the stream layer with the EOD
    file's differences (``streamshift reconcile``)."""

    kind: ClassVar[str] = "reconcile"
    flow: str
    business_date: dt.date
    against: Path | None = None
    eod_file: Path | None = None
    parity: bool = True
    correct: bool = False
    replace: bool = False
    fail_on_breaks: bool = False
    quality_run: str | None = None


@dataclass(frozen=True)
class CloseRequest(JobRequest):
    """Close a date at its cut-off, or by force with a reason (``streamshift close``)."""

    kind: ClassVar[str] = "close"
    flow: str
    business_date: dt.date
    force: bool = False
    reason: str | None = None
    by: str | None = None
    quality_run: str | None = None


@dataclass(frozen=True)
class PromoteRequest(JobRequest):
    """Move a flow to another stage through the gate (``streamshift promote``)."""

    kind: ClassVar[str] = "promote"
    flow: str
    to: str
    force: bool = False
    reason: str | None = None
    by: str | None = None
    # Set where the promotion waited for a second user (four eyes): "approved", "rejected" or
    # "timed out", who answered (none on a time-out) and the Airflow run that asked.
    approval: str | None = None
    approved_by: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class RedriveRequest(JobRequest):
    """Re-apply quarantined rows whose cause is fixed (``streamshift redrive``): those of one
    ``rule`` and one ``business_date`` when given, from ``layer`` (default: the serving one)."""

    kind: ClassVar[str] = "redrive"
    flow: str
    rule: str | None = None
    business_date: dt.date | None = None
    layer: str | None = None
    by: str | None = None


@dataclass(frozen=True)
class ReplayRequest(JobRequest):
    """Re-apply the topic's events of a time range to a layer (``streamshift replay``)."""

    kind: ClassVar[str] = "replay"
    flow: str
    start: dt.datetime
    end: dt.datetime
    into: str = "batch"
    topic: str | None = None


@dataclass(frozen=True)
class QualityRequest(JobRequest):
    """Validate a date of a layer with the flow's suites (``streamshift quality``); ``file``:
    also the raw rows of that EOD file; ``datasets``: only those suites."""

    kind: ClassVar[str] = "quality"
    flow: str
    business_date: dt.date
    layer: str = "batch"
    file: Path | None = None
    datasets: tuple[str, ...] = ()


@dataclass(frozen=True)
class MaintainRequest(JobRequest):
    """Compact, VACUUM and checkpoint the flow's tables (``streamshift maintain``). It
    checkpoints Delta's log through the JVM, so it runs in a session of its own, never on
    the engine (:attr:`needs_jvm`)."""

    kind: ClassVar[str] = "maintain"
    needs_jvm: ClassVar[bool] = True
    flow: str


@dataclass(frozen=True)
class PlanRequest(JobRequest):
    """What changed in the flow's code since each layer's recorded version, and what each
    change needs (``streamshift plan``): nothing is written."""

    kind: ClassVar[str] = "plan"
    flow: str


@dataclass(frozen=True)
class EvolveRequest(JobRequest):
    """Apply the flow's plan to both layers and record the new version (``streamshift
    evolve``); ``reapply``: history checked again by the changed rules."""

    kind: ClassVar[str] = "evolve"
    flow: str
    reapply: bool = False
    # Build the new version beside the live one and compare them, serving nothing of it.
    shadow: bool = False


@dataclass(frozen=True)
class SwitchRequest(JobRequest):
    """Switch a flow's readers and writers to the tables of one of its versions (``streamshift
    promote --version``): a shadow, or an earlier version to roll back to. ``approval``,
    ``approved_by``, ``run_id``: as on a promotion that waited for a second user."""

    kind: ClassVar[str] = "switch"
    flow: str
    version: int
    by: str | None = None
    reason: str | None = None
    approval: str | None = None
    approved_by: str | None = None
    run_id: str | None = None
