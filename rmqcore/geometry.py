"""Store geometry read from the files: the sizes a store was written with, whatever the configuration says.

RocketMQ never records its file sizes anywhere but in the files themselves: every commitlog file is
``mapped_file_size_commit_log`` bytes, every consume-queue file ``mapped_file_size_consume_queue`` bytes, and an
index file is ``40 + max_hash_slot_num × 4 + max_index_num × 20`` bytes (the header holds neither count, so the
split is taken as RocketMQ sizes it, ``max_index_num = 4 × max_hash_slot_num``, unless the configuration's own
numbers give that size). Opening and the admin commands read these sizes here so a store reopens with the geometry
it was made with, and a file that fits no geometry is reported instead of being guessed at.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .config import StoreConfig
from .errors import StoreLayoutError

CQ_STORE_UNIT_SIZE = 20
INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ITEM_SIZE = 20

# What marks a directory as a store (any one is enough): what MessageStore.open writes first.
STORE_ENTRIES = ("commitlog", "consumequeue", "index", "checkpoint", "abort", "lock", "config")


@dataclass(frozen=True)
class Geometry:
    """File sizes of a store as found on disk; ``None`` where the store has no such file yet."""

    mapped_file_size_commit_log: int | None = None
    mapped_file_size_consume_queue: int | None = None
    max_hash_slot_num: int | None = None
    max_index_num: int | None = None

    def differences(self, config: StoreConfig) -> dict[str, tuple[int, int]]:
        """``{field: (configured, on disk)}`` for every size the files fix differently from ``config``."""
        out = {}
        for name in ("mapped_file_size_commit_log", "mapped_file_size_consume_queue", "max_hash_slot_num",
                     "max_index_num"):
            found = getattr(self, name)
            if found is not None and found != getattr(config, name):
                out[name] = (getattr(config, name), found)
        return out

    def apply(self, config: StoreConfig) -> StoreConfig:
        """``config`` with the on-disk sizes in place of the configured ones (the same object when none differ)."""
        diff = self.differences(config)
        return config.replace(**{k: v[1] for k, v in diff.items()}) if diff else config


def is_store_dir(path: str) -> bool:
    """True when ``path`` is a directory holding at least one of the entries a store is made of."""
    try:
        names = set(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return False
    return any(n in names for n in STORE_ENTRIES)


def _mapped_file_names(directory: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if len(n) == 20 and n.isdigit())
    except FileNotFoundError:
        return []


def mapped_file_size(directory: str) -> int | None:
    """The size of the mapped files in ``directory`` (all equal in a sound store), or None when it holds none.

    A file of size 0 (its creation was interrupted) says nothing; differing sizes are a StoreLayoutError."""
    sizes = set()
    for name in _mapped_file_names(directory):
        size = os.path.getsize(os.path.join(directory, name))
        if size:
            sizes.add(size)
    if not sizes:
        return None
    if len(sizes) > 1:
        raise StoreLayoutError(f"{directory}: mapped files of different sizes {sorted(sizes)}; every file of one "
                               "queue has the same size")
    return sizes.pop()


def consume_queue_file_size(consumequeue_dir: str) -> int | None:
    """The consume-queue file size of a store (the same for every queue), or None when there is no file."""
    found: dict[int, str] = {}
    try:
        topics = sorted(os.listdir(consumequeue_dir))
    except FileNotFoundError:
        return None
    for topic in topics:
        tdir = os.path.join(consumequeue_dir, topic)
        if not os.path.isdir(tdir):
            continue
        for qid in sorted(os.listdir(tdir)):
            qdir = os.path.join(tdir, qid)
            if os.path.isdir(qdir):
                size = mapped_file_size(qdir)
                if size is not None:
                    found.setdefault(size, qdir)
    if not found:
        return None
    if len(found) > 1:
        raise StoreLayoutError(f"{consumequeue_dir}: consume-queue files of different sizes "
                               f"({', '.join(f'{s} in {d}' for s, d in sorted(found.items()))})")
    size = next(iter(found))
    if size % CQ_STORE_UNIT_SIZE:
        raise StoreLayoutError(f"{found[size]}: consume-queue file size {size} is not a multiple of the "
                               f"{CQ_STORE_UNIT_SIZE}-byte unit")
    return size


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE + index_num * INDEX_ITEM_SIZE


def index_geometry(index_dir: str, config: StoreConfig) -> tuple[int, int] | None:
    """(max_hash_slot_num, max_index_num) of the index files in ``index_dir``, or None when there is none.

    The configured pair wins when it gives the files' size; otherwise RocketMQ's proportion (items = 4 × slots)
    must, or the file is a StoreLayoutError naming the size."""
    try:
        names = sorted(os.listdir(index_dir))
    except FileNotFoundError:
        return None
    sizes = {os.path.getsize(os.path.join(index_dir, n)) for n in names
             if os.path.isfile(os.path.join(index_dir, n))} - {0}
    if not sizes:
        return None
    if len(sizes) > 1:
        raise StoreLayoutError(f"{index_dir}: index files of different sizes {sorted(sizes)}")
    size = sizes.pop()
    if size == index_file_size(config.max_hash_slot_num, config.max_index_num):
        return config.max_hash_slot_num, config.max_index_num
    body = size - INDEX_HEADER_SIZE
    per_slot = INDEX_SLOT_SIZE + 4 * INDEX_ITEM_SIZE
    if body > 0 and body % per_slot == 0:
        return body // per_slot, 4 * (body // per_slot)
    raise StoreLayoutError(f"{index_dir}: index files of {size} bytes fit neither the configured "
                           f"{config.max_hash_slot_num} slots × {config.max_index_num} items nor RocketMQ's "
                           "items = 4 × slots proportion; pass the store's max_hash_slot_num and max_index_num")


def read_geometry(path: str, config: StoreConfig | None = None) -> Geometry:
    """The geometry of the store at ``path`` as its files fix it (fields None where there is no file yet)."""
    config = config or StoreConfig()
    idx = index_geometry(os.path.join(path, "index"), config)
    return Geometry(
        mapped_file_size_commit_log=mapped_file_size(os.path.join(path, "commitlog")),
        mapped_file_size_consume_queue=consume_queue_file_size(os.path.join(path, "consumequeue")),
        max_hash_slot_num=idx[0] if idx else None,
        max_index_num=idx[1] if idx else None,
    )
