"""Child process of tests/test_fuzz.py: drive damaged stores through every entry point, report as JSON lines.

    python tests/fuzz_child.py CASES.json

CASES.json holds {"config": {...StoreConfig fields}, "cases": [{"path": ..., "expect": [[offset, topic, crc],
...]}, ...]}. For each case the child prints "BEGIN i" (so a crash names the case that caused it), then one JSON
line with what it saw: errors raised where none is allowed, the expected records missing after a reopen. A crash
(signal) or a hang (the parent's timeout) is seen by the parent.
"""
import json
import os
import sys
import traceback
import zlib

# rmqcore comes from PYTHONPATH (set by test_fuzz.py to the rmqcore it imports): not from the sources beside
# this file, which are uncompiled in an unpacked sdist.

from rmqcore import MessageStore, StoreConfig  # noqa: E402
from rmqcore.cli import main as cli_main  # noqa: E402
from rmqcore.recovery import verify_store  # noqa: E402


def drive(path: str, config: StoreConfig, expect) -> dict:
    out = {"errors": [], "missing": [], "records": 0, "units": 0, "verify_ok": None}

    def attempt(what, fn):
        try:
            return fn()
        except Exception as e:      # every error a damaged but opened store raises is a finding
            out["errors"].append(f"{what}: {type(e).__name__}: {e}"[:500] + " | "
                                 + traceback.format_exc().splitlines()[-3][:200])
            return None

    try:
        store = MessageStore.open(path, config)
    except Exception as e:
        out["open_error"] = f"{type(e).__name__}: {e}"[:500]
        out["trace"] = traceback.format_exc()[-1500:]
        return out
    try:
        topics = attempt("topics", store.topics) or {}
        for topic, qids in topics.items():
            for qid in qids:
                offset = attempt("min_offset", lambda: store.min_offset(topic, qid)) or 0
                for _ in range(10000):
                    g = attempt("get_messages", lambda: store.get_messages("g", topic, qid, max(offset, 0), 32))
                    if g is None or g.next_begin_offset <= offset:
                        break
                    out["units"] += len(g.messages)
                    for m in g.messages:
                        attempt("message fields", lambda: (m.keys, m.tags, bytes(m.body), m.properties, m.msg_id))
                    offset = g.next_begin_offset
                attempt("offset_by_time", lambda: store.offset_by_time(topic, qid, 1 << 40))
        for i, (offset, topic, _crc) in enumerate(expect[:20]):
            attempt("query_message", lambda: store.query_message(topic, f"k{i}"))
            attempt("look_message", lambda: store.look_message(offset))
        report = attempt("verify", store.verify)
        out["verify_ok"] = None if report is None else report["ok"]
        attempt("runtime_info", store.runtime_info)
    finally:
        attempt("close", store.close)
    attempt("verify_store", lambda: verify_store(path, config))
    with open(os.devnull, "w") as null:
        saved, sys.stdout = sys.stdout, null
        try:
            attempt("dump", lambda: cli_main(["dump", path, "--count", str(1 << 30)]))
        finally:
            sys.stdout = saved
    # A store that opened once opens again, and keeps every record before the damage.
    try:
        store = MessageStore.open(path, config)
    except Exception as e:
        out["reopen_error"] = f"{type(e).__name__}: {e}"[:500]
        return out
    try:
        for offset, topic, crc in expect:
            m = attempt("look_message", lambda: store.look_message(offset))
            if m is None or m.topic != topic or zlib.crc32(bytes(m.body)) != crc:
                out["missing"].append(offset)
        out["records"] = len(expect)
    finally:
        attempt("close", store.close)
    return out


def main() -> int:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    config = StoreConfig(**spec["config"])
    for i, case in enumerate(spec["cases"]):
        print(f"BEGIN {i}", flush=True)
        print(json.dumps(drive(case["path"], config, case["expect"])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
