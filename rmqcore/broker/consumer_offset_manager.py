"""ConsumerOffsetManager: each consumer group's committed offset per (topic, queue), kept in memory and persisted
to ``config/consumerOffset.json`` (``{"offsetTable":{"topic@group":{0:12,1:7}}}``) every
``flush_consumer_offset_interval`` ms and at shutdown, as RocketMQ does. A crash loses at most the commits of the
last interval; a consumer then re-reads those messages (at-least-once).

A commit is a dict store under a lock; a persist snapshots the table under the same lock (one shallow copy per
topic@group) and encodes outside it, so commits are never held up by the file write.

Each text of the file has a generation (a digest of its bytes, ``generation_of``): the one loaded and the one last
written are kept, and ``persist_listener`` hears of a generation before its text is written. The server's pop
journal records the generations it is in step with, so it can tell a file another broker wrote since (a swap to a
Java broker and back) from one of its own that is merely older than the journal (rmqcore/server/pop.py).
"""
from __future__ import annotations

import hashlib
import os
import threading

from .._codec import java_hash_code
from .. import fastjson
from ..config_manager import ConfigManager, string2file
from ..fastjson import JAVA_INT, JAVA_LONG, FieldError, check_int, check_map, map_key_int

TOPIC_GROUP_SEPARATOR = "@"
_INT_MAX = JAVA_INT[1]
_LONG_MIN, _LONG_MAX = JAVA_LONG
GROUP_TOPIC_MAP = "groupTopicMap"


def java_hash_set_order(items: list[str]) -> list[str]:
    """Strings in the order a java.util.HashSet created with capacity 8 iterates them after they were added in
    ``items`` order: by bucket (String.hashCode spread as HashMap.hash does, masked by the table size the set grew
    to), then in insertion order within a bucket."""
    cap = 8
    while len(items) > cap * 3 // 4:
        cap *= 2

    def bucket(s: str) -> int:
        h = java_hash_code(s) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)
    return sorted(items, key=bucket)


def generation_of(text: str) -> str:
    """The generation of one text of consumerOffset.json: any change of a byte, by whoever wrote it, is another."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


def _refuse_commit(group, topic, queue_id, offset) -> None:
    from .errors import InvalidConfigError, OffsetIllegalError, QueueIdIllegalError
    for name, v in (("topic", topic), ("group", group)):
        if type(v) is not str:
            raise InvalidConfigError(name, f"expected a str, got {type(v).__name__}")
    if type(queue_id) is not int or not 0 <= queue_id <= _INT_MAX:
        raise QueueIdIllegalError(f"queue_id: {queue_id!r} is not an int in [0, {_INT_MAX}] "
                                  f"(offsetTable.{topic}@{group})")
    raise OffsetIllegalError(f"offset: {offset!r} is not an int in [{_LONG_MIN}, {_LONG_MAX}] "
                             f"(offsetTable.{topic}@{group}.{queue_id})")


class ConsumerOffsetManager(ConfigManager):
    FILE_NAME = "consumerOffset.json"

    def __init__(self, root_dir: str):
        super().__init__(root_dir)
        self.offset_table: dict[str, dict[int, int]] = {}
        self.extra: dict = {}                  # 5.x's dataVersion and the like, written back unchanged
        self._lock = threading.Lock()
        self._version = 0                      # bumped by every change; persist skips an unchanged table
        self._persisted_version = 0
        self.loaded_generation: str | None = None   # generation_of the text load read (None: no file)
        self.generation: str | None = None          # ... of the text the file holds now, as far as we know
        # fn(generation), called before a text of that generation is written (from the persisting thread)
        self.persist_listener = None

    # -- file -------------------------------------------------------------------------------------------------

    def _snapshot(self):
        with self._lock:
            return {k: dict(v) for k, v in self.offset_table.items()}, dict(self.extra), self._version

    def _document(self, table: dict, extra: dict) -> dict:
        """The file's document. A 5.x file also carries ``groupTopicMap`` (ConsumerOffsetManager.getGroupTopicMap,
        a public getter fastjson writes: each group's topics as a HashSet): it is derived from the table, so it is
        rebuilt, not copied, when the file had it."""
        doc = extra
        doc["offsetTable"] = table
        if GROUP_TOPIC_MAP in doc:
            groups: dict[str, list[str]] = {}
            for key in table:
                tg = self.split_key(key)
                if tg is not None:
                    groups.setdefault(tg[1], []).append(tg[0])
            doc[GROUP_TOPIC_MAP] = {g: java_hash_set_order(t) for g, t in groups.items()}
        return doc

    def encode(self, pretty: bool = False) -> str:
        table, extra, _ = self._snapshot()
        return fastjson.dumps(self._document(table, extra), pretty)

    def decode(self, text: str):
        doc = check_map(fastjson.loads(text), "(document)")
        table: dict[str, dict[int, int]] = {}
        raw_table = doc.get("offsetTable")
        if raw_table is None:
            # RocketMQ keeps its empty table only when the field is absent; a null table is as good as absent.
            raw_table = {}
        for key, queues in check_map(raw_table, "offsetTable").items():
            where = f"offsetTable.{key}"
            if not isinstance(key, str):
                raise FieldError(where, "a topic@group key must be a string")
            check_map(queues, where)
            if all(type(q) is int and 0 <= q <= _INT_MAX and type(o) is int and _LONG_MIN <= o <= _LONG_MAX
                   for q, o in queues.items()):
                table[key] = queues            # the common case, checked in one pass
                continue
            out = {}
            for qid, off in queues.items():
                q = map_key_int(qid, where, 0, JAVA_INT[1])
                out[q] = check_int(off, f"{where}.{q}", *JAVA_LONG)
            table[key] = out
        extra = {k: v for k, v in doc.items() if k != "offsetTable"}
        return table, extra, generation_of(text)

    def apply(self, state) -> None:
        table, extra, gen = state
        with self._lock:
            self.offset_table = table
            self.extra = extra
            self._version += 1
            self._persisted_version = self._version
        self.loaded_generation = self.generation = gen

    def persist(self, force: bool = True) -> bool:
        """Write the table; with ``force`` False only when it changed since the last persist or the file is not
        there yet (a broker leaves all its files, as RocketMQ's shutdown does). True if written."""
        with self._persist_lock:
            table, extra, version = self._snapshot()
            if not force and version == self._persisted_version and os.path.exists(self.config_file_path()):
                return False
            text = fastjson.dumps(self._document(table, extra), True)
            gen = generation_of(text)
            if self.persist_listener is not None:
                self.persist_listener(gen)      # first: a kill after the write must find it recorded
            string2file(text, self.config_file_path())
            self.generation = gen
            self._persisted_version = version
            return True

    # -- offsets ----------------------------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` for the queue. The reader's limits apply here, so every offset committed reads back:
        a str topic and group, a queue id in [0, 2^31-1], an offset within a Java long (QueueIdIllegalError /
        OffsetIllegalError naming the value otherwise)."""
        if type(offset) is not int or not _LONG_MIN <= offset <= _LONG_MAX or type(queue_id) is not int \
                or not 0 <= queue_id <= _INT_MAX or type(topic) is not str or type(group) is not str:
            _refuse_commit(group, topic, queue_id, offset)
        key = topic + TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            queues = self.offset_table.get(key)
            if queues is None:
                self.offset_table[key] = {queue_id: offset}
            else:
                queues[queue_id] = offset
            self._version += 1

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, -1 when the group has none for this queue (RocketMQ's answer)."""
        queues = self.offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group)
        if queues is not None:
            offset = queues.get(queue_id)
            if offset is not None:
                return offset
        return -1

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        with self._lock:
            return dict(self.offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}))

    @staticmethod
    def split_key(key: str):
        """(topic, group) of a topic@group key, or None for a key that is not two parts (as RocketMQ skips)."""
        parts = key.split(TOPIC_GROUP_SEPARATOR)
        return (parts[0], parts[1]) if len(parts) == 2 else None

    def which_topic_by_consumer(self, group: str) -> set[str]:
        with self._lock:
            keys = list(self.offset_table)
        return {tg[0] for tg in map(self.split_key, keys) if tg is not None and tg[1] == group}

    def which_group_by_topic(self, topic: str) -> set[str]:
        with self._lock:
            keys = list(self.offset_table)
        return {tg[1] for tg in map(self.split_key, keys) if tg is not None and tg[0] == topic}

    def groups(self) -> set[str]:
        with self._lock:
            keys = list(self.offset_table)
        return {tg[1] for tg in map(self.split_key, keys) if tg is not None}

    def put_all(self, table: dict[str, dict[int, int]]) -> None:
        """A slave's copy of its master's offsets (SlaveSynchronize.syncConsumerOffset: offsetTable.putAll): each
        topic@group of ``table`` takes the master's queue offsets; keys the master lacks stay."""
        with self._lock:
            changed = False
            for key, queues in table.items():
                if self.offset_table.get(key) != queues:
                    self.offset_table[key] = dict(queues)
                    changed = True
            if changed:
                self._version += 1              # persist(force=False) writes only a changed table

    def clone_offset(self, src_group: str, dest_group: str, topic: str) -> None:
        with self._lock:
            offsets = self.offset_table.get(topic + TOPIC_GROUP_SEPARATOR + src_group)
            if offsets is not None:
                self.offset_table[topic + TOPIC_GROUP_SEPARATOR + dest_group] = dict(offsets)
                self._version += 1

    def remove_offset(self, group: str) -> int:
        """Forget every offset of ``group`` (RocketMQ's removeOffset). Returns how many topics it had."""
        return self._remove(lambda tg: tg[1] == group)

    def clean_offset_by_topic(self, topic: str) -> int:
        """Forget every group's offsets of ``topic`` (5.x's cleanOffsetByTopic). Returns how many groups it had."""
        return self._remove(lambda tg: tg[0] == topic)

    def _remove(self, match) -> int:
        with self._lock:
            doomed = [k for k in self.offset_table
                      if (tg := self.split_key(k)) is not None and match(tg)]
            for k in doomed:
                del self.offset_table[k]
            if doomed:
                self._version += 1
        return len(doomed)
