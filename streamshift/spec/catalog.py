"""The catalog: where every Delta table lives and what its fixed schema is (no IO, no Spark).

Layout: ``<warehouse>/<layer>/<table>`` for the per-layer tables (current state, history,
views, quarantine, late events) and ``<warehouse>/control/<table>`` for flow-level records
(EOD runs, day closes, reconciliation runs and breaks, stage changes). All tables are path-based Delta
tables. Spark jobs, the JVM-free readers and the Airflow layer all find tables here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow
from streamshift.spec.settings import Settings

LAYERS = ("batch", "stream")
# The reconciliations recorded in recon_runs: stream vs batch (``parity`` or ``parity:<view>``),
# against an external file, against the EOD file.
PARITY, EXTERNAL, EOD_FILE = "parity", "external", "eod_file"
# A version built beside the live one compared with it (``shadow:v<N>:<table>``): the change's
# evidence, not a reconciliation of the day.
SHADOW_RECON = "shadow"
# The kinds of break recorded in recon_breaks.
MISSING_LEFT = "missing_left"  # the key exists only on the right
MISSING_RIGHT = "missing_right"  # the key exists only on the left
VALUE_MISMATCH = "value_mismatch"
KINDS = (MISSING_LEFT, MISSING_RIGHT, VALUE_MISMATCH)

QUARANTINE_SCHEMA = (
    "flow STRING, source STRING, source_ref STRING, raw_payload STRING, rule STRING, "
    "rules STRING, business_date DATE, batch_id STRING, quarantined_at TIMESTAMP"
)
LATE_EVENTS_SCHEMA = "flow STRING, business_date DATE, key STRING, version BIGINT, arrived_at TIMESTAMP, source STRING"
EOD_RUNS_SCHEMA = (
    "flow STRING, layer STRING, business_date DATE, file STRING, mode STRING, "
    "received BIGINT, accepted BIGINT, rejected BIGINT, late BIGINT, run_at TIMESTAMP, "
    "reference STRING"
)

# Closed business dates, one row per layer a close covers: a change for a closed date is late.
# ``how``: the EOD load (batch, shadow), the EOD file's reconciliation (stream), the cut-off
# (kappa) or forced (``streamshift close --force``, with ``reason``); ``detail``: JSON (the
# offsets a cut-off close waited for, the file).
DAY_CLOSES_SCHEMA = (
    "flow STRING, layer STRING, business_date DATE, how STRING, closed_at TIMESTAMP, "
    "closed_by STRING, reason STRING, detail STRING"
)

# A re-runnable job's journal: a ``started`` row fixes, before the job's first write, the
# current-state version its differences are computed against; ``done`` ends the run.
RUN_JOURNAL_SCHEMA = (
    "flow STRING, layer STRING, job STRING, run_key STRING, pinned_version BIGINT, "
    "state STRING, at TIMESTAMP"
)

RECON_RUNS_SCHEMA = (
    "run_id STRING, flow STRING, business_date DATE, recon STRING, left_side STRING, "
    "right_side STRING, left_rows BIGINT, right_rows BIGINT, breaks BIGINT, "
    "missing_left BIGINT, missing_right BIGINT, value_mismatch BIGINT, clean BOOLEAN, "
    "stage STRING, run_at TIMESTAMP"
)
RECON_BREAKS_SCHEMA = (
    "run_id STRING, flow STRING, business_date DATE, recon STRING, kind STRING, key STRING, "
    "column STRING, left_value STRING, right_value STRING, difference DOUBLE, "
    "found_at TIMESTAMP"
)
QUALITY_RUNS_SCHEMA = (
    "run_id STRING, flow STRING, business_date DATE, layer STRING, suite STRING, "
    "expectation STRING, policy STRING, success BOOLEAN, observed STRING, threshold STRING, "
    "docs_page STRING, run_at TIMESTAMP"
)
STAGE_CHANGES_SCHEMA = (
    "flow STRING, from_stage STRING, to_stage STRING, changed_at TIMESTAMP, changed_by STRING, "
    "forced BOOLEAN, reason STRING, evidence STRING"
)
# Every answer to a promotion that waited for a second user's approval (four eyes): decision
# is "approved", "rejected" or "timed out" (decided_by is null then).
PROMOTION_DECISIONS_SCHEMA = (
    "flow STRING, from_stage STRING, to_stage STRING, requested_by STRING, decision STRING, "
    "decided_by STRING, decided_at TIMESTAMP, run_id STRING, forced BOOLEAN, reason STRING"
)

# Re-driven quarantine rows (``streamshift redrive``), one per delivery (``source_ref``) and
# layer: ``outcome`` applied, still failing (``rules``: what it fails now) or unreadable.
REDRIVES_SCHEMA = (
    "flow STRING, layer STRING, source_ref STRING, rule STRING, business_date DATE, "
    "outcome STRING, rules STRING, redriven_at TIMESTAMP, redriven_by STRING"
)

# The flow code each layer's tables are written by, one row per version recorded (a version is
# recorded again, same number, when the flow's files changed but not what the code does):
# ``fingerprint`` digests ``components`` (JSON: streamshift.control.plan), ``files`` digests the
# flow's source files (the JVM-free check before each job), ``how`` says what recorded it.
# ``root``: the folder under the layer its tables live in ("" or ``v<N>/<flow>``,
# :func:`version_root`). A layer's latest row that is not a shadow is the pointer every reader
# and writer resolves; a ``shadow`` row records a version built beside the live one.
FLOW_VERSIONS_SCHEMA = (
    "flow STRING, layer STRING, version INT, fingerprint STRING, components STRING, "
    "files STRING, spark_version STRING, how STRING, changes STRING, deployed_by STRING, "
    "deployed_at TIMESTAMP, root STRING"
)


class UnknownLayerError(StreamshiftError):
    final = True


def quarantine_path(warehouse: Path, layer: str, root: str = "") -> str:
    """The layer's quarantine, which its flows share (a ``flow`` column tells them apart); a
    version folder (``root``) has its own."""
    return str(warehouse / layer / root / "quarantine")


def version_root(flow: str, version: int) -> str:
    """The folder, under each layer, of a version of ``flow`` built beside the live one
    (``streamshift evolve --shadow``)."""
    return f"v{version}/{flow}"


@dataclass(frozen=True)
class LayerTables:
    """Paths of one flow's tables in one layer; ``root``: the version folder they live in
    ("" for the layer's own folder). Readers and writers get the live ones from
    ``streamshift.store.versions.live_tables``, which resolves the pointer."""

    warehouse: Path
    flow: Flow
    layer: str
    root: str = ""

    def __post_init__(self) -> None:
        if self.layer not in LAYERS:
            raise UnknownLayerError(f"unknown layer {self.layer!r}; use one of {', '.join(LAYERS)}")

    def _path(self, name: str) -> str:
        return str(self.warehouse / self.layer / self.root / name)

    @property
    def current(self) -> str:
        return self._path(self.flow.name)

    @property
    def history(self) -> str:
        return self._path(f"{self.flow.name}_history")

    @property
    def redeliveries(self) -> str:
        """Deliveries of a version after its first (history holds the first): a re-sent
        message, a line repeated in a file, a file sent again under another name. Rows of
        history's schema, one per delivery (``_log_ref``, else ``_source_ref``)."""
        return self._path(f"{self.flow.name}_redeliveries")

    @property
    def quarantine(self) -> str:
        """The layer's quarantine (a version folder has its own)."""
        return quarantine_path(self.warehouse, self.layer, self.root)

    @property
    def late_events(self) -> str:
        return self._path("late_events")

    def view(self, name: str) -> str:
        self.flow.view(name)  # raises for an unknown view
        return self._path(name)

    @property
    def eod_runs(self) -> str:
        return ControlTables(self.warehouse).eod_runs

    @property
    def day_closes(self) -> str:
        return ControlTables(self.warehouse).day_closes


@dataclass(frozen=True)
class ControlTables:
    """Paths of the flow-level control tables, shared by every flow (rows carry ``flow``)."""

    warehouse: Path

    def _path(self, name: str) -> str:
        return str(self.warehouse / "control" / name)

    @property
    def eod_runs(self) -> str:
        return self._path("eod_runs")

    @property
    def day_closes(self) -> str:
        """Every close of a business date, per layer (``DAY_CLOSES_SCHEMA``)."""
        return self._path("day_closes")

    @property
    def run_journal(self) -> str:
        return self._path("run_journal")

    @property
    def recon_runs(self) -> str:
        return self._path("recon_runs")

    @property
    def recon_breaks(self) -> str:
        return self._path("recon_breaks")

    @property
    def stage_changes(self) -> str:
        return self._path("stage_changes")

    @property
    def promotion_decisions(self) -> str:
        """Approvals and rejections of promotions (``PROMOTION_DECISIONS_SCHEMA``)."""
        return self._path("promotion_decisions")

    @property
    def redrives(self) -> str:
        """What each re-drive of a quarantined row did (``REDRIVES_SCHEMA``)."""
        return self._path("redrives")

    @property
    def flow_versions(self) -> str:
        """The flow code each layer was written by (``FLOW_VERSIONS_SCHEMA``)."""
        return self._path("flow_versions")

    @property
    def quality_runs(self) -> str:
        """One row per expectation per data-quality run (Great Expectations)."""
        return self._path("quality_runs")


# ---- the landing folder and Airflow's pool ------------------------------------------------
# The Airflow pool every Spark task of the DAGs queues in (the local stack creates it).
SPARK_POOL = "streamshift_spark"


def landing_dir(settings: Settings, flow: str) -> Path:
    """Where a flow's EOD files land, one folder per business date."""
    return settings.home / "landing" / flow


def default_file(flow: str, business_date: str) -> str:
    """The EOD file of a date, relative to the landing folder."""
    return f"{business_date}/{flow}_eod_{business_date}.csv"


def external_file(settings: Settings, flow: str, business_date: str) -> Path:
    """The external view file of a date (the clearing house's positions), beside its EOD file."""
    return landing_dir(settings, flow) / business_date / f"external_{business_date}.csv"
