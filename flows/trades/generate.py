"""A realistic trading-day generator for the trades flow.

For a business date it writes the day's EOD file, a corrections (delta) file, a whole-day
replacement file, a file of late trades, poison rows of every kind the rules catch, and the
clearing house's EOD positions with a few deliberate breaks. Skew follows a Zipf law: a few
books and instruments carry most of the trades.
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import math
import random
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from flows.trades import REFERENCE_DIR, SCHEMA
from streamshift.spec.dayfiles import DayFiles, write_csv

COLUMNS = [f.name for f in SCHEMA.fields]
DESK_ASSET_CLASSES = {
    "EQUITY": ("EQUITY",),
    "RATES": ("GOVT_BOND",),
    "CREDIT": ("CREDIT_INDEX", "GOVT_BOND"),
    "FX": ("FX_SPOT",),
    "TREASURY": ("GOVT_BOND",),
}
BASE_PRICE = {
    "EQUITY": (20, 900),
    "GOVT_BOND": (92, 104),
    "CREDIT_INDEX": (60, 110),
    "FX_SPOT": (0.9, 1.4),
}

Row = list[str]


def _read_reference(name: str) -> list[dict[str, str]]:
    with open(REFERENCE_DIR / name, newline="") as handle:
        return list(csv.DictReader(handle))


def _zipf_weights(n: int, s: float = 1.1) -> list[float]:
    return [1.0 / (k**s) for k in range(1, n + 1)]


class _Progress:
    def __init__(self, label: str, total: int, enabled: bool):
        self.label, self.total, self.enabled, self.shown = label, max(total, 1), enabled, -1

    def update(self, done: int) -> None:
        percent = done * 100 // self.total
        if self.enabled and percent // 10 != self.shown // 10:
            self.shown = percent
            print(f"[generate] {self.label}: {percent}%", file=sys.stderr, flush=True)


class TradingDay:
    """Generates one business date's trades and the files around it (deterministic by seed)."""

    def __init__(self, business_date: dt.date, seed: int = 1):
        self.date = business_date
        self.rng = random.Random(seed * 1_000_003 + business_date.toordinal())
        books = _read_reference("books.csv")
        instruments = _read_reference("instruments.csv")
        self.books = [b["book"] for b in books]
        self.book_weights = _zipf_weights(len(books))
        self.desk = {b["book"]: b["desk"] for b in books}
        self.currency = {i["instrument"]: i["currency"] for i in instruments}
        self.by_desk: dict[str, list[str]] = {}
        self.price: dict[str, float] = {}
        for desk, classes in DESK_ASSET_CLASSES.items():
            names = [i["instrument"] for i in instruments if i["asset_class"] in classes]
            self.by_desk[desk] = names
        self.book_cum = list(itertools.accumulate(self.book_weights))
        self.desk_cum = {
            d: list(itertools.accumulate(_zipf_weights(len(n)))) for d, n in self.by_desk.items()
        }
        for inst in instruments:
            low, high = BASE_PRICE[inst["asset_class"]]
            self.price[inst["instrument"]] = self.rng.uniform(low, high)

    # ---- rows -----------------------------------------------------------------------------
    def _pick_book_instrument(self) -> tuple[str, str]:
        book = self.rng.choices(self.books, cum_weights=self.book_cum)[0]
        desk = self.desk[book]
        instrument = self.rng.choices(self.by_desk[desk], cum_weights=self.desk_cum[desk])[0]
        return book, instrument

    def _trade(
        self,
        trade_id: str,
        version: int,
        event: str,
        day: dt.date | None = None,
        book: str | None = None,
        instrument: str | None = None,
    ) -> Row:
        rng = self.rng
        if book is None or instrument is None:
            book, instrument = self._pick_book_instrument()
        seconds = rng.randint(7 * 3600, 19 * 3600)
        ts = dt.datetime.combine(day or self.date, dt.time()) + dt.timedelta(seconds=seconds)
        quantity = max(1, int(math.exp(rng.gauss(5.5, 1.3))))
        price = self.price[instrument] * (1 + rng.gauss(0, 0.01))
        return [
            trade_id,
            str(version),
            event,
            str(day or self.date),
            ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
            book,
            instrument,
            rng.choice(("BUY", "SELL")),
            str(quantity),
            f"{price:.6f}",
            self.currency[instrument],
        ]

    def _cancel(self, trade_id: str, version: int, day: dt.date) -> Row:
        return [trade_id, str(version), "CANCEL", str(day)] + [""] * (len(COLUMNS) - 4)

    def _amend(self, row: Row, move_book: bool = False, day: dt.date | None = None) -> Row:
        book, instrument = row[5], row[6]
        if move_book:
            desk = self.desk[book]
            others = [b for b in self.books if self.desk[b] == desk and b != book]
            candidates = others or [b for b in self.books if b != book]
            book = self.rng.choice(candidates)
            if instrument not in self.by_desk[self.desk[book]]:
                instrument = self.rng.choice(self.by_desk[self.desk[book]])
        amended = self._trade(
            row[0], int(row[1]) + 1, "AMEND", day or dt.date.fromisoformat(row[3]), book, instrument
        )
        amended[7] = row[7]  # same side, new quantity/price
        return amended

    # ---- files ----------------------------------------------------------------------------
    def write(self, out_dir: Path, n_trades: int, progress: bool = True) -> DayFiles:
        out_dir.mkdir(parents=True, exist_ok=True)
        d = self.date
        tag = d.strftime("%Y%m%d")
        files = DayFiles.named(out_dir, "trades", d, external="clearing_positions")
        bar = _Progress(f"{n_trades} trades for {d}", n_trades, progress)
        state: dict[str, Row] = {}
        eod_rows: list[Row] = []
        for i in range(n_trades):
            row = self._trade(f"T{tag}-{i:07d}", 1, "NEW")
            if self.rng.random() < 0.03:  # amended during the day: the EOD file has v2
                row = self._amend(row)
            state[row[0]] = row
            eod_rows.append(row)
            if i % 50_000 == 0:
                bar.update(i)
        bar.update(n_trades)
        write_csv(files.eod, eod_rows, COLUMNS)

        ids = list(state)
        n_fix = max(3, n_trades // 100)
        corrections: list[Row] = []
        for trade_id in self.rng.sample(ids, min(len(ids), n_fix)):
            row = state[trade_id]
            if self.rng.random() < 0.25:
                new = self._cancel(trade_id, int(row[1]) + 1, d)
            else:
                new = self._amend(row, move_book=self.rng.random() < 0.2)
            corrections.append(new)
        # A back-dated correction: one trade really belonged to the previous business day.
        previous = d - dt.timedelta(days=3 if d.weekday() == 0 else 1)
        moved = next(
            t for t in ids if state[t][2] != "CANCEL" and t not in {c[0] for c in corrections}
        )
        corrections.append(self._amend(state[moved], day=previous))
        for row in corrections:
            state[row[0]] = row
        write_csv(files.corrections, corrections, COLUMNS)

        # The whole day again after corrections, a few dropped (to be cancelled), a few amended.
        live_today = [r for r in state.values() if r[2] != "CANCEL" and r[3] == str(d)]
        drop = set(self.rng.sample([r[0] for r in live_today], max(1, len(live_today) // 500)))
        replacement: list[Row] = []
        for row in live_today:
            if row[0] in drop:
                continue
            if self.rng.random() < 0.002:
                row = self._amend(row)
            replacement.append(row)
        write_csv(files.replacement, replacement, COLUMNS)

        late = [self._trade(f"L{tag}-{i:05d}", 1, "NEW") for i in range(max(2, n_trades // 200))]
        write_csv(files.late, late, COLUMNS)
        write_csv(files.poison, [row for _, row in self._poison_rows()], COLUMNS)

        final = {r[0]: r for r in eod_rows}
        final.update({r[0]: r for r in corrections})
        self._write_clearing(files.external, final.values())
        return files

    def _poison_rows(self) -> list[tuple[str, Row]]:
        """One row per rule the flow enforces (the expected rule first)."""
        tag = self.date.strftime("%Y%m%d")

        def base(n: int) -> Row:
            return self._trade(f"P{tag}-{n:03d}", 1, "NEW", book="EQ-US-FLOW", instrument="AAPL")

        cases: list[tuple[str, Row]] = []
        edits = [
            ("trade_id_present", 0, ""),
            ("parseable_version", 1, "one"),
            ("version_at_least_1", 1, "0"),
            ("known_event_type", 2, "MODIFY"),
            ("parseable_business_date", 3, "2026-02-30"),
            ("parseable_trade_ts", 4, "yesterday"),
            ("known_book", 5, "NO-SUCH-BOOK"),
            ("known_instrument", 6, "NOSUCH"),
            ("known_side", 7, "HOLD"),
            ("parseable_quantity", 8, "12.5"),
            ("quantity_positive", 8, "-5"),
            ("price_positive", 9, "0"),
            ("fx_rate_exists", 10, "XXX"),
        ]
        for n, (rule, column, value) in enumerate(edits):
            row = base(n)
            row[column] = value
            cases.append((rule, row))
        cases.append(("field_count", base(99)[:7]))
        return cases

    def _write_clearing(self, path: Path, rows: Iterable[Row]) -> None:
        net: dict[tuple[str, str], int] = defaultdict(int)
        for r in rows:
            if r[2] != "CANCEL" and r[3] == str(self.date):
                net[(r[5], r[6])] += int(r[8]) * (-1 if r[7] == "SELL" else 1)
        keys = sorted(net)
        # Deliberate breaks: two quantity differences, one position missing, one extra.
        if len(keys) > 3:
            net[keys[0]] += 100
            net[keys[1]] -= 7
            del net[keys[2]]
        net[("FX-SPOT", "NZDUSD")] = 1_000_000
        write_csv(
            path,
            ([str(self.date), b, i, str(q)] for (b, i), q in sorted(net.items())),
            ["business_date", "book", "instrument", "net_quantity"],
        )

    def expected_poison_rules(self) -> list[str]:
        return [rule for rule, _ in self._poison_rows()]


def generate_day(
    business_date: dt.date, n_trades: int, out_dir: Path, seed: int = 1, progress: bool = True
) -> DayFiles:
    return TradingDay(business_date, seed).write(out_dir, n_trades, progress)
