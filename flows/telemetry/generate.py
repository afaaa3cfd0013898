"""A day of sensor telemetry: the telemetry flow's generator.

For a business date it writes the day's EOD file (every device's readings), a corrections
file (two devices re-sending an hour after a recalibration, under higher sequence numbers, and
one device voiding two readings), a whole-day replacement file, late readings (a device that
was offline and sends its buffer), poison rows of every kind the rules catch, and the device
vendor's hourly aggregates with four deliberate breaks.
"""

from __future__ import annotations

import csv
import datetime as dt
import random
import sys
from collections import defaultdict
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from flows.telemetry import REFERENCE_DIR, SCHEMA
from streamshift.spec.dayfiles import DayFiles, write_csv

COLUMNS = [f.name for f in SCHEMA.fields]
BASE = {"temperature": (20.0, 4.0), "humidity": (45.0, 8.0), "pressure": (101.0, 1.5)}
BASE_DEFAULT = (3.0, 1.0)  # vibration
EXTERNAL_HEADER = ["business_date", "device_id", "hour", "readings", "min_value", "max_value"]
EXTERNAL_HEADER += ["mean_value"]

Row = list[str]


def _devices() -> list[dict[str, str]]:
    with open(REFERENCE_DIR / "devices.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _ts(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class TelemetryDay:
    """One business date's readings and the files around them (deterministic by seed)."""

    def __init__(self, business_date: dt.date, seed: int = 1):
        self.date = business_date
        self.rng = random.Random(seed * 1_000_003 + business_date.toordinal())
        self.devices = _devices()
        self.sensor = {d["device_id"]: d["sensor_type"] for d in self.devices}
        # Each device's sequence number goes on from where the previous day left it.
        self.seq = {d["device_id"]: business_date.toordinal() * 100_000 for d in self.devices}

    def _value(self, device: str, shift: float = 0.0) -> str:
        mean, spread = BASE.get(self.sensor[device], BASE_DEFAULT)
        return f"{max(0.0, self.rng.gauss(mean, spread)) + shift:.3f}"

    def _reading(self, device: str, moment: dt.datetime, shift: float = 0.0) -> Row:
        self.seq[device] += 1
        reading_id = f"{device}@{moment:%Y%m%dT%H%M%S}"
        return [
            reading_id,
            device,
            str(self.seq[device]),
            "OK",
            str(moment.date()),
            _ts(moment),
            self._value(device, shift),
        ]

    def _void(self, row: Row) -> Row:
        self.seq[row[1]] += 1
        return [row[0], row[1], str(self.seq[row[1]]), "VOID", row[4], "", ""]

    def write(self, out_dir: Path, n_readings: int, progress: bool = True) -> DayFiles:
        out_dir.mkdir(parents=True, exist_ok=True)
        d = self.date
        files = DayFiles.named(out_dir, "telemetry", d, external="vendor_hourly")
        midnight = dt.datetime.combine(d, dt.time())
        ids = [x["device_id"] for x in self.devices]
        per_device = max(1, n_readings // len(ids))
        step = 86_400 // (per_device + 1)
        state: dict[str, Row] = {}
        for i, device in enumerate(ids):
            for j in range(per_device):
                if len(state) >= n_readings:
                    break
                moment = midnight + dt.timedelta(seconds=(j + 1) * step + i)
                row = self._reading(device, moment)
                state[row[0]] = row
        eod = list(state.values())
        self.rng.shuffle(eod)  # a day's file arrives in no particular order
        write_csv(files.eod, eod, COLUMNS)
        if progress:
            print(f"  {len(eod)} readings of {len(ids)} devices for {d}", file=sys.stderr)

        # Two devices re-send a three-hour window after a recalibration (+0.5); one device
        # voids two readings.
        resend = self.rng.sample(ids, 2)
        window = {f"{h:02d}" for h in range(self.rng.randrange(6, 16), 24)[:3]}
        corrections = [
            self._reading(r[1], dt.datetime.fromisoformat(r[5].rstrip("Z")), shift=0.5)
            for r in sorted(state.values(), key=lambda r: r[5])
            if r[1] in resend and r[5][11:13] in window
        ]
        voided = self.rng.sample([r for r in eod if r[1] not in resend], min(2, len(eod)))
        corrections += [self._void(r) for r in voided]
        for row in corrections:
            state[row[0]] = row
        write_csv(files.corrections, corrections, COLUMNS)

        live = [r for r in state.values() if r[3] == "OK"]
        drop = set(self.rng.sample([r[0] for r in live], max(1, len(live) // 500)))
        write_csv(files.replacement, [r for r in live if r[0] not in drop], COLUMNS)

        # A device that was offline sends its buffer after the day closed.
        offline = self.rng.choice(ids)
        late = [
            self._reading(offline, midnight + dt.timedelta(seconds=(j + 1) * step + 59))
            for j in range(max(2, n_readings // 200))
            if (j + 1) * step + 59 < 86_400
        ]
        write_csv(files.late, late, COLUMNS)
        write_csv(files.poison, [row for _, row in self._poison_rows()], COLUMNS)
        self._write_external(files.external, state.values())
        return files

    def _poison_rows(self) -> list[tuple[str, Row]]:
        """One row per rule the flow enforces (the expected rule first)."""
        noon = dt.datetime.combine(self.date, dt.time(12))
        edits = [
            ("reading_id_present", 0, ""),
            ("parseable_seq", 2, "one"),
            ("seq_at_least_1", 2, "0"),
            ("known_status", 3, "MAYBE"),
            ("parseable_business_date", 4, "2026-02-30"),
            ("parseable_reading_ts", 5, "yesterday"),
            ("reading_on_its_business_date", 5, _ts(noon - dt.timedelta(days=2))),
            ("known_device", 1, "DEV-999"),
            ("parseable_value", 6, "warm"),
            ("value_present", 6, ""),
            ("value_within_sensor_range", 6, "250.000"),
        ]
        cases: list[tuple[str, Row]] = []
        for n, (rule, column, value) in enumerate(edits):
            row = self._reading("DEV-001", noon + dt.timedelta(seconds=n))
            row[0] = f"P-{self.date:%Y%m%d}-{n:03d}"
            row[column] = value
            cases.append((rule, row))
        cases.append(("field_count", self._reading("DEV-001", noon)[:4]))
        return cases

    def expected_poison_rules(self) -> list[str]:
        return [rule for rule, _ in self._poison_rows()]

    def _write_external(self, path: Path, rows: Iterable[Row]) -> None:
        """The vendor's hourly aggregates, with four deliberate breaks: a count off by one, a
        mean off by 0.5, an hour missing, and an hour of a device the registry lacks."""
        groups: dict[tuple[str, str], list[Decimal]] = defaultdict(list)
        for r in rows:
            if r[3] == "OK" and r[4] == str(self.date):
                groups[(r[1], f"{r[5][:10]} {r[5][11:13]}:00:00")].append(Decimal(r[6]))
        out: dict[tuple[str, str], list[str]] = {}
        for (device, hour), values in sorted(groups.items()):
            mean = (sum(values) / len(values)).quantize(Decimal("0.000001"), ROUND_HALF_UP)
            out[(device, hour)] = [str(len(values)), str(min(values)), str(max(values)), str(mean)]
        keys = sorted(out)
        if len(keys) > 3:
            out[keys[0]][0] = str(int(out[keys[0]][0]) + 1)
            out[keys[1]][3] = str(Decimal(out[keys[1]][3]) + Decimal("0.5"))
            del out[keys[2]]
        out[("DEV-999", f"{self.date} 03:00:00")] = ["1", "1.000", "1.000", "1.000000"]
        write_csv(
            path,
            ([str(self.date), dev, hour, *vals] for (dev, hour), vals in sorted(out.items())),
            EXTERNAL_HEADER,
        )


def generate_day(
    business_date: dt.date, n_readings: int, out_dir: Path, seed: int = 1, progress: bool = True
) -> DayFiles:
    return TelemetryDay(business_date, seed).write(out_dir, n_readings, progress)
