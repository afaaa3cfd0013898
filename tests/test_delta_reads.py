"""The JVM-free reader's tables (``streamshift.store.tables``): one table read again and again
in a process is brought forward by the commits since, and a table deleted and written again at
the same path is read anew. The tables are written by deltalake here, so no JVM starts."""

from __future__ import annotations

import datetime as dt
import shutil

import pyarrow as pa
from deltalake import write_deltalake

from streamshift.store import tables

D1, D2 = dt.date(2026, 1, 5), dt.date(2026, 1, 6)


def _write(path, ids, day, mode="append"):  # type: ignore[no-untyped-def]
    data = pa.table({"id": pa.array(ids, pa.int64()), "d": pa.array([day] * len(ids))})
    write_deltalake(str(path), data, mode=mode)


def _ids(path) -> list[int]:  # type: ignore[no-untyped-def]
    return [r["id"] for r in tables.rows(path, ["id"], order_by=["id"])]


def test_a_table_read_again_sees_each_new_commit_and_a_rewritten_one_anew(tmp_path) -> None:
    path = tmp_path / "t"
    _write(path, [1, 2], D1)
    assert _ids(path) == [1, 2]
    for n in (3, 4):  # brought forward, one commit and then another
        _write(path, [n], D2)
        assert _ids(path) == list(range(1, n + 1))
    version, _, day2 = tables.latest_rows(str(path), "d", [D2])
    assert version == 2 and sorted(day2["id"].to_pylist()) == [3, 4]
    assert tables.column_names(path) == ["id", "d"]

    # Deleted and written again with as many commits: the same versions, other content.
    shutil.rmtree(path)
    _write(path, [7], D1)
    _write(path, [8], D2)
    _write(path, [9], D2)
    assert _ids(path) == [7, 8, 9]
    version, _, day2 = tables.latest_rows(str(path), "d", [D2])
    assert version == 2 and sorted(day2["id"].to_pylist()) == [8, 9]

    # ... and with fewer: version 0 again.
    shutil.rmtree(path)
    _write(path, [5], D2)
    assert _ids(path) == [5]
    assert tables.latest_rows(str(path), "d", [D1, D2])[0] == 0

    # An overwrite is a commit like any other.
    _write(path, [6], D1, mode="overwrite")
    assert _ids(path) == [6]


def test_only_the_tables_read_last_are_kept(tmp_path) -> None:
    paths = [tmp_path / f"t{i}" for i in range(tables.KNOWN_AT_MOST + 3)]
    for i, path in enumerate(paths):
        _write(path, [i], D1)
        assert _ids(path) == [i]
    assert len(tables._KNOWN) <= tables.KNOWN_AT_MOST
    assert str(paths[-1]) in tables._KNOWN and str(paths[0]) not in tables._KNOWN
    _write(paths[0], [100], D1)  # a table let go is opened anew
    assert _ids(paths[0]) == [0, 100]
