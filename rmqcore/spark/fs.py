"""Store files on any filesystem: local paths through mmap, everything else through ``pyarrow.fs``.

A store root is a local path (``/data/store``, ``file:///data/store``) or a URI that ``pyarrow.fs`` opens
(``s3://bucket/stores/broker-a``, ``gs://…``, ``hdfs://…``, ``abfs://…``; ``s3a://`` and ``s3n://`` are read as
``s3://``). Query parameters of the URI configure the filesystem as ``pyarrow.fs.FileSystem.from_uri`` reads them
(``s3://bucket/a?endpoint_override=127.0.0.1:9000&scheme=http&region=us-east-1``); credentials come from the
usual environment (``AWS_ACCESS_KEY_ID``…) of every executor. Paths below a root are joined before the query.

Local files are mapped, so the Cython decoders read the page cache in place. Remote files are read in ranges
(``read_at``) into buffers that the same decoders walk: see ``rmqcore.spark.arrow`` for the windowing.
"""
from __future__ import annotations

import os
import threading
from urllib.parse import urlsplit, urlunsplit

_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
_fs_cache: dict = {}
_fs_lock = threading.Lock()


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def local_path(uri: str) -> str:
    if uri.startswith("file://"):
        return urlsplit(uri).path
    return uri


def normalize(uri: str) -> str:
    """A root as the reader keeps it: an absolute local path, or the URI with its scheme aliases resolved."""
    uri = os.fspath(uri)
    if is_local(uri):
        return os.path.abspath(local_path(uri))
    parts = urlsplit(uri)
    scheme = _SCHEME_ALIASES.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") or "/", parts.query, ""))


def join(root: str, *names: str) -> str:
    if is_local(root):
        return os.path.join(local_path(root), *names)
    parts = urlsplit(root)
    path = "/".join([parts.path.rstrip("/")] + [n.strip("/") for n in names])
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def basename(uri: str) -> str:
    if is_local(uri):
        return os.path.basename(os.path.normpath(local_path(uri)))
    return urlsplit(uri).path.rstrip("/").rsplit("/", 1)[-1]


def display(uri: str) -> str:
    """The URI without its query (which may carry endpoints or keys): for messages and the ``segment`` path."""
    if is_local(uri):
        return local_path(uri)
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def _filesystem(uri: str):
    """(pyarrow FileSystem, path inside it) for a remote URI; one FileSystem per scheme/host/query per process
    (an S3 client is costly to make, and every partition of a task set reads the same bucket)."""
    from pyarrow import fs as pafs
    parts = urlsplit(uri)
    key = (parts.scheme, parts.netloc, parts.query)
    with _fs_lock:
        cached = _fs_cache.get(key)
    if cached is None:
        cached, _ = pafs.FileSystem.from_uri(urlunsplit((parts.scheme, parts.netloc, "/", parts.query, "")))
        with _fs_lock:
            _fs_cache[key] = cached
    return cached, (parts.netloc + parts.path) if parts.scheme in ("s3", "gs", "gcs") else parts.path


def _info(uri: str):
    from pyarrow import fs as pafs
    fs, path = _filesystem(uri)
    info = fs.get_file_info(path)
    return info, pafs.FileType


def isdir(uri: str) -> bool:
    if is_local(uri):
        return os.path.isdir(local_path(uri))
    info, ft = _info(uri)
    return info.type == ft.Directory


def exists(uri: str) -> bool:
    if is_local(uri):
        return os.path.exists(local_path(uri))
    info, ft = _info(uri)
    return info.type != ft.NotFound


def getsize(uri: str) -> int:
    if is_local(uri):
        return os.path.getsize(local_path(uri))
    info, ft = _info(uri)
    if info.type != ft.File:
        raise FileNotFoundError(display(uri))
    return int(info.size)


def listdir(uri: str) -> list[str]:
    """Names in a directory, sorted; [] when it does not exist."""
    if is_local(uri):
        p = local_path(uri)
        return sorted(os.listdir(p)) if os.path.isdir(p) else []
    from pyarrow import fs as pafs
    fs, path = _filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False))
    return sorted(i.base_name for i in infos)


def read_bytes(uri: str, offset: int = 0, n: int = -1) -> bytes:
    with open_file(uri) as f:
        if n < 0:
            n = f.size - offset
        return bytes(f.read_at(offset, n))


class FileSource:
    """One store file opened for reading: ``size``, ``local``; ``view()`` (local: the whole mapped file, zero
    copy) and ``read_at(offset, n)`` (local: a slice of the mapping; remote: one ranged read)."""

    def __init__(self, uri: str):
        self.uri = uri
        self.local = is_local(uri)
        self._mf = self._view = self._raf = None
        if self.local:
            path = local_path(uri)
            self.size = os.path.getsize(path)
            if self.size:
                import mmap
                with open(path, "rb") as f:
                    self._mf = mmap.mmap(f.fileno(), self.size, access=mmap.ACCESS_READ)
                self._view = memoryview(self._mf)
        else:
            fs, path = _filesystem(uri)
            self._raf = fs.open_input_file(path)
            self.size = int(self._raf.size())

    def view(self):
        if not self.local:
            raise TypeError("only local files are mapped")
        return self._view if self._view is not None else memoryview(b"")

    def read_at(self, offset: int, n: int):
        n = max(0, min(n, self.size - offset))
        if self.local:
            return self.view()[offset:offset + n]
        return self._raf.read_at(n, offset) if n else b""

    def close(self):
        if self._view is not None:
            self._view.release()
            self._view = None
        if self._mf is not None:
            try:
                self._mf.close()
            except BufferError:
                pass            # a slice of the mapping is still referenced: unmapped when it goes
            self._mf = None
        if self._raf is not None:
            self._raf.close()
            self._raf = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_file(uri: str) -> FileSource:
    return FileSource(uri)
