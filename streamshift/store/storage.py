"""JVM-free listings of the warehouse's storage (a local folder or an object store), through
``pyarrow.fs``: what the write path asks of a table's folders without a Spark session, so the
same code runs beside a local session and beside a Spark Connect engine."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem


@lru_cache(maxsize=32)
def _filesystem(root: str) -> FileSystem:
    from pyarrow import fs

    return fs.FileSystem.from_uri(root)[0]


def _resolve(path: str) -> tuple[FileSystem, str]:
    from pyarrow import fs

    if "://" not in path:
        return fs.LocalFileSystem(), path
    scheme, _, rest = path.partition("://")
    if scheme == "file":
        return fs.LocalFileSystem(), rest
    bucket = rest.split("/", 1)[0]
    return _filesystem(f"{scheme}://{bucket}"), rest


def names(path: str) -> list[str]:
    """The names directly under folder ``path`` (none when it does not exist)."""
    from pyarrow import fs

    filesystem, inner = _resolve(path)
    selector = fs.FileSelector(inner, allow_not_found=True, recursive=False)
    return [info.base_name for info in filesystem.get_file_info(selector)]


def tree_bytes(path: str) -> int:
    """Bytes of the files under folder ``path`` (0 when it does not exist)."""
    from pyarrow import fs

    filesystem, inner = _resolve(path)
    selector = fs.FileSelector(inner, allow_not_found=True, recursive=True)
    return sum(
        i.size or 0 for i in filesystem.get_file_info(selector) if i.type == fs.FileType.File
    )
