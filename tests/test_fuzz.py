"""Fuzzing: damaged stores through every entry point in child processes, mutated records through every decoder.

Stores: a small real store (many 8 KiB commitlog files, small consume-queue and index files) is copied, damaged
(bit flips, zeroed ranges, torn tails, hostile length and offset fields, consume-queue units pointing anywhere,
looping or out-of-range index chains, junk files and illegally named directories), optionally marked crashed, and
driven by tests/fuzz_child.py through open, get, query, look, offset_by_time, verify, verify_store, the CLI dump and
a second open. A child that dies on a signal (crash) or outlives its timeout (hang) fails the case. Invariants:
the store opens (and opens again), no call on it raises, nothing appears outside the store directory, and every
record that ended before the first damaged commitlog byte is still there with its topic and body.

Decoders (in process, fast): mutated records through decode_message (against the reference decoder's verdict),
RecordIterator, scan_records, scan_for_dispatch, the Spark segment decoder and verifier; hostile bytes in index
files through selectPhyOffset and reachable_items.

Default (CI): ~25 hypothesis store cases and ~20,000 mutated records, about a minute. Long profile:
``RMQCORE_FUZZ=long RMQCORE_FUZZ_COUNT=N RMQCORE_FUZZ_RECORDS=M`` runs N seeded random stores (in batches of 25 per
child) and M mutated records (seed: RMQCORE_FUZZ_SEED).
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from rmqcore import Message, MessageStore, StoreConfig
from rmqcore import _codec as C
from rmqcore import _message
from rmqcore import _segment as S
from rmqcore import reference as R
from rmqcore._dispatch import scan_for_dispatch
from rmqcore._index_file import IndexFile
from rmqcore.errors import CorruptRecordError

LONG = os.environ.get("RMQCORE_FUZZ") == "long"
STORE_COUNT = int(os.environ.get("RMQCORE_FUZZ_COUNT", "2000"))
RECORD_COUNT = int(os.environ.get("RMQCORE_FUZZ_RECORDS", "10000000" if LONG else "20000"))
SEED = int(os.environ.get("RMQCORE_FUZZ_SEED", "20261124"))
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_child.py")
import rmqcore  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The directory holding the rmqcore imported here (a source tree, or site-packages for an installed build):
# child processes import that one, never the sources beside the tests (uncompiled in an unpacked sdist).
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))

CONFIG = dict(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=20 * 16, max_message_size=2048,
              max_hash_slot_num=7, max_index_num=24, warm_mapped_file_enable=False, flush_interval_commit_log=20,
              flush_interval_consume_queue=20, clean_resource_interval=3600 * 1000)
TOPICS = [("FzA", 0), ("FzA", 1), ("Fz%B|c-_", 0)]
HOSTILE_INTS = [0, -1, 1, 7, 8, 91, 4095, 4096, 8191, 8192, 8193, (1 << 31) - 1, -(1 << 31), 1 << 24, -91]
JUNK_NAMES = ["...", "a b", "x.y", "%2e%2e", "\u00e9t\u00e9", "99999999999999999999", "-1", "junk.txt", "0 ", "1e3"]
KINDS = ["flip", "flip", "zero", "tail", "field", "field", "cqunit", "index", "junk", "rename"]


# -- the base store ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def base_store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("fuzzbase") / "store")
    rng = random.Random(SEED)
    expect = []
    with MessageStore.open(path, StoreConfig(**CONFIG)) as s:
        for i in range(100):
            topic, qid = TOPICS[i % len(TOPICS)]
            body = rng.randbytes(rng.choice([0, 5, 60, 300, 900]))
            r = s.put(Message(topic, body, qid, keys=[f"k{i}"], tags=("a", "b", None)[i % 3]))
            expect.append((r.commitlog_offset, topic, zlib.crc32(body), r.wrote_bytes))
        s.wait_dispatched()
        assert s.verify()["ok"]
    assert len(os.listdir(os.path.join(path, "commitlog"))) >= 5
    assert len(os.listdir(os.path.join(path, "index"))) >= 5
    return path, expect


def store_files(path):
    out = []
    for d, dirs, files in os.walk(path):
        dirs.sort()
        out += [os.path.join(d, f) for f in sorted(files) if f != "lock"]
    return out


def write_at(path, pos, data):
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def apply_damage(path, dmg, expect):
    """Damage the store at ``path`` as ``dmg`` (kind, target, a, b, c: integers picked by the fuzzer) says.
    Returns the global commitlog offset of the first damaged commitlog byte, or None (no commitlog byte)."""
    kind, target, a, b, c = dmg
    files = store_files(path)
    commitlog = os.path.join(path, "commitlog")

    def global_offset(f, pos):
        return int(os.path.basename(f)) + pos if os.path.dirname(f) == commitlog else None

    if kind in ("flip", "zero", "tail"):
        f = files[target % len(files)]
        size = os.path.getsize(f)
        if size == 0:
            return None
        pos = a % size
        if kind == "flip":
            with open(f, "rb") as fh:
                fh.seek(pos)
                old = fh.read(1)[0]
            write_at(f, pos, bytes([old ^ (b % 255 + 1)]))
        elif kind == "zero":
            write_at(f, pos, b"\0" * min(1 + b % 64, size - pos))
        else:
            write_at(f, pos, b"\0" * (size - pos))
        return global_offset(f, pos)
    if kind == "field":
        offset, _topic, _crc, size = expect[target % len(expect)]
        f = os.path.join(commitlog, "%020d" % (offset // CONFIG["mapped_file_size_commit_log"] *
                                               CONFIG["mapped_file_size_commit_log"]))
        pos = offset % CONFIG["mapped_file_size_commit_log"]
        with open(f, "rb") as fh:
            fh.seek(pos)
            rec = fh.read(size)
        body_len = struct.unpack_from(">i", rec, 84)[0] if len(rec) >= 88 else -1
        if not 0 <= body_len < len(rec) - 89 or 89 + body_len + rec[88 + body_len] + 2 > len(rec):
            return None                 # an earlier damage of this list already broke the record's layout
        fields = [(0, ">i"), (4, ">i"), (12, ">i"), (20, ">q"), (28, ">q"), (36, ">i"), (84, ">i"),
                  (88 + body_len, ">b"), (89 + body_len + rec[88 + body_len], ">h")]
        at, fmt = fields[c % len(fields)]
        value = HOSTILE_INTS[b % len(HOSTILE_INTS)] + (size if a % 3 == 0 else 0)
        bits = struct.calcsize(fmt) * 8
        value = (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
        write_at(f, pos + at, struct.pack(fmt, value))
        return offset + at
    if kind == "cqunit":
        cqs = [f for f in files if os.sep + "consumequeue" + os.sep in f and len(os.path.basename(f)) == 20
               and os.path.getsize(f) >= 20]
        if not cqs:
            return None
        f = cqs[target % len(cqs)]
        unit = a % (os.path.getsize(f) // 20)
        choices = [-1, 0, 1 << 62, expect[b % len(expect)][0], expect[b % len(expect)][0] + 1, 91, (1 << 63) - 1]
        sizes = [0, -1, 0x7FFFFFFF, expect[b % len(expect)][3], 91, 1 << 30]
        write_at(f, unit * 20, struct.pack(">qi", choices[c % len(choices)], sizes[(b + c) % len(sizes)]))
        return None
    if kind == "index":
        idx = [f for f in files if os.sep + "index" + os.sep in f]
        f = idx[target % len(idx)]
        slots, items = 7, 24
        if c % 3 == 0:         # a slot pointing anywhere
            write_at(f, 40 + (a % slots) * 4, struct.pack(">I", HOSTILE_INTS[b % len(HOSTILE_INTS)] & 0xFFFFFFFF))
        elif c % 3 == 1:       # a chain that loops: an item whose predecessor is itself or a later item
            i = 1 + a % (items - 1)
            write_at(f, 40 + slots * 4 + i * 20 + 16, struct.pack(">i", i + b % 3))
        else:                  # a header count past the file, or negative
            write_at(f, 36, struct.pack(">i", [items + 5, -3, 0, 1 << 30][b % 4]))
        return None
    if kind == "junk":
        roots = [path, os.path.join(path, "consumequeue"), os.path.join(path, "consumequeue", "FzA")]
        where = roots[target % len(roots)]
        name = os.path.join(where, JUNK_NAMES[a % len(JUNK_NAMES)])
        if not os.path.isdir(where) or os.path.exists(name):     # renamed away by an earlier damage, or taken
            return None
        if c % 2:
            os.makedirs(os.path.join(name, "0"))
        else:
            with open(name, "wb") as fh:
                fh.write(random.Random(b).randbytes(b % 100))
        return None
    if kind == "rename":
        cq = os.path.join(path, "consumequeue")
        topics = sorted(t for t in os.listdir(cq) if os.path.isdir(os.path.join(cq, t)))
        if not topics:
            return None
        topic = topics[target % len(topics)]
        if c % 2:
            src, dst = os.path.join(cq, topic), os.path.join(cq, JUNK_NAMES[a % len(JUNK_NAMES)])
        else:
            qids = sorted(os.listdir(os.path.join(cq, topic)))
            if not qids:
                return None
            src, dst = os.path.join(cq, topic, qids[0]), os.path.join(cq, topic, JUNK_NAMES[a % len(JUNK_NAMES)])
        if os.path.isdir(src) and not os.path.exists(dst):      # an earlier junk damage may hold the name
            os.rename(src, dst)
        return None
    raise ValueError(kind)


def tree(root, skip):
    out = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if os.path.join(d, x) not in skip]
        out.update(os.path.relpath(os.path.join(d, n), root) for n in dirs + files)
    return out


def prepare(base, work, i, damages, abort, expect):
    """Copy the base store into ``work``/case-i/store, damage it; returns the child's case entry."""
    store = os.path.join(work, f"case-{i}", "store")
    shutil.copytree(base, store)
    os.makedirs(os.path.join(work, f"case-{i}", "sentinel"))
    point = None
    for dmg in damages:
        p = apply_damage(store, dmg, expect)
        if p is not None:
            point = p if point is None else min(point, p)
    if abort:
        open(os.path.join(store, "abort"), "w").close()
    keep = [[o, t, crc] for o, t, crc, size in expect if point is None or o + size <= point]
    return {"path": store, "expect": keep, "damages": damages, "abort": abort, "point": point}


def summary(problem) -> str:
    """One line per problem: what went wrong and the damage that caused it (enough to replay it)."""
    what, case = problem
    return f"{what} <- damages={case['damages']} abort={case['abort']} point={case['point']}"


def run_children(cases, work, timeout):
    """Run fuzz_child over ``cases``; returns the problems found (empty: every invariant held)."""
    spec = os.path.join(work, f"spec-{os.getpid()}-{id(cases)}.json")
    with open(spec, "w") as f:
        json.dump({"config": CONFIG, "cases": [{"path": c["path"], "expect": c["expect"]} for c in cases]}, f)
    skip = {os.path.dirname(c["path"]) for c in cases}
    before = tree(os.path.dirname(work), {os.path.join(work, os.path.basename(s)) for s in skip} | {spec})
    env = dict(os.environ, PYTHONPATH=PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    problems = []
    try:
        res = subprocess.run([sys.executable, CHILD, spec], capture_output=True, text=True, timeout=timeout,
                             env=env, cwd=work)
        lines = res.stdout.splitlines()
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        begun = [ln for ln in out.splitlines() if ln.startswith("BEGIN")]
        at = int(begun[-1].split()[1]) if begun else 0
        return [("hang", cases[at])]
    begun = [int(ln.split()[1]) for ln in lines if ln.startswith("BEGIN")]
    results = [json.loads(ln) for ln in lines if ln.startswith("{")]
    if res.returncode != 0:
        at = begun[-1] if begun else 0
        problems.append((f"child exited {res.returncode}: {res.stderr[-2000:]}", cases[at]))
    for case, r in zip(cases, results):
        bad = {k: r[k] for k in ("open_error", "reopen_error") if k in r}
        if r["errors"]:
            bad["errors"] = r["errors"][:5]
        if r["missing"]:
            bad["missing"] = r["missing"][:10]
        if bad:
            problems.append((bad, case))
    after = tree(os.path.dirname(work), {os.path.join(work, os.path.basename(s)) for s in skip} | {spec})
    if after != before:
        problems.append((f"files outside the stores changed: {sorted(after ^ before)[:10]}", cases[0]))
    for c in cases:
        if os.listdir(os.path.join(os.path.dirname(c["path"]), "sentinel")):
            problems.append(("a file appeared next to the store", c))
    return problems


damage = st.tuples(st.sampled_from(KINDS), st.integers(0, 1 << 16), st.integers(0, 1 << 20), st.integers(0, 255),
                   st.integers(0, 255))


@settings(max_examples=500 if LONG else 25, deadline=None)
@given(damages=st.lists(damage, min_size=1, max_size=3), abort=st.booleans())
def test_damaged_stores_open_serve_and_keep_every_record_before_the_damage(base_store, damages, abort):
    base, expect = base_store
    work = tempfile.mkdtemp(prefix="rmq-fuzz-")
    try:
        w = os.path.join(work, "w")
        os.makedirs(w)
        case = prepare(base, w, 0, damages, abort, expect)
        problems = run_children([case], w, timeout=60)
        assert not problems, "\n".join(summary(p) for p in problems)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.skipif(not LONG, reason="the long profile: RMQCORE_FUZZ=long RMQCORE_FUZZ_COUNT=N")
def test_long_profile_random_damaged_stores(base_store):
    base, expect = base_store
    rng = random.Random(SEED)
    problems, done, batch = [], 0, 25
    while done < STORE_COUNT:
        work = tempfile.mkdtemp(prefix="rmq-fuzz-long-")
        try:
            w = os.path.join(work, "w")
            os.makedirs(w)
            cases = []
            for i in range(min(batch, STORE_COUNT - done)):
                damages = [(rng.choice(KINDS), rng.randrange(1 << 16), rng.randrange(1 << 20), rng.randrange(256),
                            rng.randrange(256)) for _ in range(rng.randint(1, 4))]
                cases.append(prepare(base, w, i, damages, rng.random() < 0.5, expect))
            problems += run_children(cases, w, timeout=60 + 10 * len(cases))
            done += len(cases)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"long fuzz: {done} damaged stores, {done * len(expect)} records checked, {len(problems)} problems")
    assert not problems, "\n".join(summary(p) for p in problems)


# -- decoders, in process ---------------------------------------------------------------------------------------------

def corpus(rng):
    out = []
    for i in range(40):
        props = {"KEYS": f"k{i} o{i}", "TAGS": "t" * (i % 5), "UNIQ_KEY": "%032X" % i}
        if i % 7 == 0:
            props["x" * (i % 30 + 1)] = "v" * (i * 37 % 400)
        out.append(R.encode_message(topic=["T", "Tp%|_-", "t" * 127][i % 3], body=rng.randbytes(i * 13 % 700),
                                    queue_id=i % 4, queue_offset=i, physical_offset=i * 1000,
                                    born_host="[::1]:1" if i % 5 == 0 else "10.0.0.1:99",
                                    store_host="[fe80::2]:7" if i % 6 == 0 else "127.0.0.1:10911",
                                    properties=props, version=1 + (i % 4 == 3), append_crc_property=i % 2 == 1))
    return out


def mutate(rng, recs):
    buf = bytearray(b"".join(rng.choice(recs) for _ in range(rng.randint(1, 3))))
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randrange(len(buf)) if buf else 0
        if op == 0 and buf:
            buf[pos] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[pos] = rng.randrange(256)
        elif op == 2:
            del buf[rng.randrange(len(buf) + 1):]
        elif op == 3:
            n = rng.randint(1, 64)
            buf[pos:pos + n] = b"\0" * len(buf[pos:pos + n])
        elif op == 4 and len(buf) >= pos + 4:
            v = rng.choice(HOSTILE_INTS + [len(buf), len(buf) - pos, len(buf) - pos + 1])
            buf[pos:pos + 4] = struct.pack(">I", v & 0xFFFFFFFF)
        else:
            buf += rng.randbytes(rng.randint(0, 40))
    return bytes(buf)


def decode_all(buf, compare_reference):
    try:
        ours = _message.decode_message(buf, check_crc=True)
    except CorruptRecordError as e:
        ours = e
    if compare_reference:
        try:
            ref = R.decode_message(buf, check_crc=True)
        except CorruptRecordError as e:
            assert isinstance(ours, CorruptRecordError) and ours.field == e.field, (buf.hex(), ours, e)
        else:
            assert not isinstance(ours, CorruptRecordError), (buf.hex(), ours)
            assert ours.as_dict() == ref
    elif not isinstance(ours, CorruptRecordError):
        ours.as_dict()
    it = _message.RecordIterator(buf, 0, -1, True)
    n = 0
    try:
        for m in it:
            n += 1
            m.keys, m.properties, bytes(m.body)
    except CorruptRecordError:
        pass
    pos, count, code = C.scan_records(buf, 0, -1, True)
    assert count == n and pos == it.position
    batch = scan_for_dispatch(buf, 0, 0, -1, 64, 256, True, {}, [])
    # Every record the decoders read is dispatched or, its topic or queue id naming no directory, passed over.
    assert batch.n + batch.skipped == n and batch.end_offset == pos
    seg = S.decode_segment(buf)
    assert seg["n"] <= seg["scanned"] and seg["scanned"] <= count + 1 + len(buf) // 91
    S.verify_segment(buf)
    return n


def test_decoders_survive_mutated_records():
    rng = random.Random(SEED)
    recs = corpus(rng)
    decoded = 0
    for i in range(RECORD_COUNT):
        decoded += decode_all(mutate(rng, recs), compare_reference=(not LONG or i % 50 == 0))
    assert decoded > RECORD_COUNT // 20      # the mutations leave many records whole: the fuzz reaches past headers
    if LONG:
        print(f"long fuzz: {RECORD_COUNT} mutated buffers, {decoded} records decoded whole")


def test_index_walks_survive_hostile_index_files(tmp_path):
    rng = random.Random(SEED)
    path = str(tmp_path / "idx")
    slots, items = 7, 24
    f = IndexFile(path, slots, items, 0, 1_000_000)
    keys = [f"T#k{i}" for i in range(items)]
    for i, k in enumerate(keys[:items - 2]):
        assert f.put_key(k, i * 100, 1_000_000 + i * 1000)
    f.close()
    with open(path, "rb") as fh:
        pristine = fh.read()
    rounds = 20 * (1 if not LONG else 50) * 100
    for _ in range(rounds // 10):
        data = bytearray(pristine)
        for _ in range(rng.randint(1, 6)):
            at = rng.choice([36, 32, 40 + 4 * rng.randrange(slots), 40 + 4 * slots + 20 * rng.randrange(items) +
                             rng.choice([0, 4, 12, 16]), rng.randrange(len(data) - 4)])
            data[at:at + 4] = struct.pack(">I", rng.choice(HOSTILE_INTS + [rng.randrange(items + 3)]) & 0xFFFFFFFF)
        with open(path, "wb") as fh:
            fh.write(data)
        g = IndexFile(path, slots, items, read_only=True)
        try:
            for _ in range(10):
                got = g.select_phy_offsets(rng.choice(keys), rng.choice([1, 5, 64, 1 << 20]), 0, 1 << 62)
                assert len(got) <= items
            hashes, phys, problems = g.reachable_items()
            assert len(hashes) // 4 == len(phys) // 8 < items
        finally:
            g.close()
