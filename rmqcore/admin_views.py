"""The admin views every face of rmqcore shows: the command line (cli.py, mqadmin.py) and the console
(console/data.py, console/app.py) answer with the same topic and group dicts, the same text tables and the same
JSON, and end with the same exit statuses.

This module sits below the faces: each of them imports it, it imports none of them (tests/test_imports.py fails on
an import cycle among rmqcore's modules), so the CLI can start the console (``serve --http``) and the console's
operations can serve the CLI's ``--server`` and STORE admin alike without one face importing another.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO

# The command line's exit statuses (cli.py's docstring says what each means); mqadmin's commands and the console's
# standalone entry point answer with the same ones.
EXIT_OK, EXIT_PROBLEM, EXIT_ERROR = 0, 1, 2


def not_found(kind: str, name: str) -> str:
    """"topic 'x' does not exist": the one wording of a missing topic or group, on every face (console JSON, CLI)."""
    return f"{kind} {name!r} does not exist"


def missing_extra(what: str, extra: str, e: ImportError) -> str:
    """The one line a face prints when an optional dependency of ``extra`` (pyproject.toml) is not installed."""
    module = (e.name or "").split(".")[0] or str(e)        # the distribution's top-level module, not a submodule
    return (f"{what} needs {module}, of rmqcore's {extra} extra: python -m pip install -e '.[{extra}]' in a "
            "clone (README, Set up)")


def table(rows: Sequence[Sequence[Any]], header: Sequence[str], out: TextIO) -> None:
    """Left-aligned text columns, numbers right-aligned."""
    cells = [[str(h) for h in header]] + [[f"{c:,}" if isinstance(c, int) and not isinstance(c, bool) else str(c)
                                           for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [all(isinstance(r[i], int) for r in rows) if rows else False for i in range(len(header))]
    for n, r in enumerate(cells):
        line = "  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        print("  " + line.rstrip(), file=out)
        if n == 0:
            print("  " + "  ".join("-" * w for w in widths), file=out)


def emit_json(obj: Any, out: TextIO) -> None:
    """``obj`` as indented JSON and a newline (what ``--json`` prints)."""
    json.dump(obj, out, indent=2, default=str)
    out.write("\n")


def topic_view(tc: Any, system: bool) -> dict[str, Any]:
    """A topic's config (a broker TopicConfig) as ``rmqcore topic`` answers it, offline and through a server alike
    (the console's JSON carries the same dict as ``config``)."""
    from .broker.topic_validator import perm_to_string
    return {"name": tc.topic_name, "read_queue_nums": tc.read_queue_nums, "write_queue_nums": tc.write_queue_nums,
            "perm": tc.perm, "perm_string": perm_to_string(tc.perm), "message_type": tc.message_type,
            "order": tc.order, "topic_filter_type": tc.topic_filter_type, "attributes": tc.attributes,
            "system": system}


def group_view(g: Any, system: bool) -> dict[str, Any]:
    """A group's config (a broker SubscriptionGroupConfig) as ``rmqcore group`` answers it, offline and through a
    server alike (the console's JSON carries the same dict as ``config``)."""
    return {"name": g.group_name, "fifo": g.consume_message_orderly, "max_delivery_attempts": g.max_delivery_attempts,
            "retry_max_times": g.retry_max_times, "retry_queue_nums": g.retry_queue_nums,
            "consume_enable": g.consume_enable, "retry_policy": g.group_retry_policy.to_json(), "system": system}


def record_crc_view(m: Any) -> dict[str, Any] | None:
    """What a record's ``__CRC32#`` property is, for a person: None when the record has none. RocketMQ 5 (with
    enableAppendPropCRC) appends it as the CRC32 of the record before it, masked to 31 bits, its 10 decimal digits
    written least significant first (CommitLog's crc32 reserved property): the text shown among the properties is
    that reversed number. ``crc32`` is the number itself, ``matches`` whether the record's bytes still give it."""
    from ._message import decode_message
    from .errors import CorruptRecordError
    text = m.properties.get("__CRC32#")
    if text is None:
        return None
    crc = int(text[::-1]) if text.isdigit() else None
    try:
        decode_message(m.record(), 0, check_crc=True)    # checks the body CRC and this record CRC
        matches = crc is not None
    except CorruptRecordError:
        matches = False
    return {"stored_text": text, "crc32": crc, "matches": matches,
            "what": "RocketMQ 5's record CRC32 (enableAppendPropCRC) of the record's bytes before the property, "
                    "stored with its decimal digits reversed"}
