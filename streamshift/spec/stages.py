"""What each migration stage means, as data: the README's stage table in one place.

Every module that branches on a stage (the CLI, the DAGs and their tasks, the jobs, the gate,
the serving read, the Migration page, the stream supervisor) asks a :class:`Stage` here instead
of spelling stage names. No IO, no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamshift.spec.catalog import EOD_FILE, PARITY
from streamshift.spec.errors import StreamshiftError

# What the EOD DAG does with the day, per stage.
LOAD = "load"  # load the EOD file into the batch layer
CORRECT = "correct"  # reconcile the EOD file against the stream layer and correct it
CUT_OFF = "cut_off"  # no file: close the day at its cut-off once the stream passed it

# How a business date closes (the ``how`` of a ``day_closes`` row).
BY_EOD_LOAD = "eod_load"
BY_EOD_FILE = "eod_file"
BY_CUT_OFF = "cut_off"
BY_FORCE = "forced"


class UnknownStageError(StreamshiftError, ValueError):
    final = True


@dataclass(frozen=True)
class Stage:
    name: str
    streams: bool  # the always-on stream job writes the stream layer
    eod: str  # what the EOD DAG does: LOAD, CORRECT or CUT_OFF
    closes_by: str  # how a business date closes: BY_EOD_LOAD, BY_EOD_FILE or BY_CUT_OFF
    closes_layers: tuple[str, ...]  # the layers a close covers (changes after it are late)
    parity: bool  # the EOD DAG reconciles stream vs batch
    evidence: str | None  # the reconciliation this stage makes that gates the next stage
    serves: str  # "batch", "lambda" (batch for closed dates, stream after) or "stream"
    summary: str  # one line for the page and --help
    # Promotion into this stage waits for a second user's approval in the streamshift_promote
    # DAG (four eyes): from here on the stream layer is what readers get.
    approved_entry: bool = False

    @property
    def loads(self) -> bool:
        return self.eod == LOAD

    @property
    def corrects(self) -> bool:
        return self.eod == CORRECT

    @property
    def waits_for_file(self) -> bool:
        """Whether the EOD DAG waits for the day's EOD file."""
        return self.eod != CUT_OFF

    def serving_layer(self, closed: bool) -> str:
        """The layer that serves a business date (``closed``: a close covers it)."""
        if self.serves == "lambda":
            return "batch" if closed else "stream"
        return self.serves


STAGES: tuple[Stage, ...] = (
    Stage(
        "batch",
        streams=False,
        eod=LOAD,
        closes_by=BY_EOD_LOAD,
        closes_layers=("batch", "stream"),
        parity=False,
        evidence=None,
        serves="batch",
        summary="the EOD file loads the batch layer; no stream",
    ),
    Stage(
        "shadow",
        streams=True,
        eod=LOAD,
        closes_by=BY_EOD_LOAD,
        closes_layers=("batch", "stream"),
        parity=True,
        evidence=PARITY,
        serves="lambda",
        summary="the stream writes its layer beside the batch load; parity is reconciled daily",
    ),
    Stage(
        "stream",
        streams=True,
        eod=CORRECT,
        closes_by=BY_EOD_FILE,
        closes_layers=("stream",),
        parity=False,
        evidence=EOD_FILE,
        serves="stream",
        summary="the stream layer serves; the EOD file reconciles and corrects it",
        approved_entry=True,
    ),
    Stage(
        "kappa",
        streams=True,
        eod=CUT_OFF,
        closes_by=BY_CUT_OFF,
        closes_layers=("stream",),
        parity=False,
        evidence=None,
        serves="stream",
        summary="no EOD file: a day closes at its cut-off; reprocessing is replay",
        approved_entry=True,
    ),
)
NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
FIRST = STAGES[0].name


def stage(name: str) -> Stage:
    for s in STAGES:
        if s.name == name:
            return s
    raise UnknownStageError(f"unknown stage {name!r}; stages are {', '.join(NAMES)}")


def position(name: str) -> int:
    return NAMES.index(stage(name).name)


def next_stage(name: str) -> Stage | None:
    i = position(name) + 1
    return STAGES[i] if i < len(STAGES) else None


def previous_stage(name: str) -> Stage | None:
    i = position(name)
    return STAGES[i - 1] if i > 0 else None


def entry_evidence(name: str) -> str | None:
    """The reconciliation a promotion into ``name`` needs clean: what the stage before makes."""
    before = previous_stage(name)
    return before.evidence if before else None


def needs_approval(now: str, to: str) -> bool:
    """Whether moving from stage ``now`` to ``to`` waits for a second user's approval: a
    promotion into a stage whose stream layer serves readers. Demotion never waits."""
    return position(to) > position(now) and stage(to).approved_entry


def streaming() -> tuple[str, ...]:
    return tuple(s.name for s in STAGES if s.streams)
