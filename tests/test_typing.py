"""Type checkers see rmqcore's API as it is: mypy over README.md's snippet and a small user script (no false
errors, and real errors caught, so the names are not Any), and stubtest: the .pyi stubs of the compiled modules
match what the modules export."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

import rmqcore

mypy_api = pytest.importorskip("mypy.api", reason="mypy is in the test extra")

HERE = os.path.dirname(os.path.abspath(__file__))
# The directory holding the rmqcore package that is imported (a source tree, or site-packages for a wheel).
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
COMPILED = ["_crc", "_codec", "_message", "_encoder", "_commit_log", "_pull", "_mapped_file", "_flush", "_index_file", "_dispatch", "_segment", "_schedule", "broker._send", "server._converter", "remoting._remoting_codec", "remoting._send_message", "remoting._pull_message"]

USER_SCRIPT = '''
from rmqcore import GetResult, GetStatus, Message, MessageExt, MessageStore, PutResult, PutStatus, StoreConfig

def newest_bodies(path: str) -> list[bytes]:
    cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, flush_disk_type="SYNC_FLUSH")
    out: list[bytes] = []
    with MessageStore.open(path, cfg, create=False) as store:
        r: PutResult = store.put(Message("t", b"x", 0, tags="a", keys=["k1", "k2"], properties={"p": "v"}))
        status: PutStatus = r.status
        offset: int = r.commitlog_offset + r.wrote_bytes
        g: GetResult = store.get_messages("g", "t", 0, offset=0, max_count=8)
        if g.status is GetStatus.FOUND:
            for m in g.messages:
                out.append(bytes(m.body))
                ts: int = m.store_timestamp
                keys: list[str] = m.keys
        found: MessageExt | None = store.look_message(r.commitlog_offset)
        info = store.runtime_info()
        adopted = info["geometry_adopted"]
        top: int = store.max_offset("t", 0) - store.min_offset("t", 0)
    return out
'''

# Each line must be an error: the checker knows the real types.
WRONG = '''
from rmqcore import Message, MessageStore, StoreConfig
Message(42, b"x")
StoreConfig(mapped_file_size_commit_log="big")
store = MessageStore.open("/tmp/x", StoreConfig(), create="yes")
n: str = store.max_offset("t", 0)
'''


def readme_snippets() -> list[str]:
    text = open(os.path.join(os.path.dirname(HERE), "README.md"), encoding="utf-8").read() \
        if os.path.exists(os.path.join(os.path.dirname(HERE), "README.md")) else ""
    return [s for s in re.findall(r"```python\n(.*?)```", text, re.S) if "MessageStore" in s]


REVEAL = "import rmqcore\nreveal_type(rmqcore.MessageStore.open)\nreveal_type(rmqcore.Message)\nrmqcore.NoSuchThing\n"


def run_mypy(files: dict, tmp_path, *flags: str) -> tuple[dict[str, list[str]], str]:
    paths = {}
    for name, src in files.items():
        p = tmp_path / f"{name}.py"
        p.write_text(textwrap.dedent(src))
        paths[name] = str(p)
    env_path = os.environ.get("MYPYPATH")
    # A source tree goes on MYPYPATH (an editable install's import hook is invisible to mypy); an installed
    # package is found by mypy itself (py.typed).
    if os.path.basename(PKG_PARENT) not in ("site-packages", "dist-packages"):
        os.environ["MYPYPATH"] = PKG_PARENT
    try:
        out, err, _ = mypy_api.run(["--python-version", "3.11", "--follow-imports=silent", "--no-incremental",
                                    "--cache-dir", str(tmp_path / "cache"), "--show-error-codes",
                                    "--config-file", os.devnull, *flags, *paths.values()])
    finally:
        if env_path is None:
            os.environ.pop("MYPYPATH", None)
        else:
            os.environ["MYPYPATH"] = env_path
    assert "error: Cannot find implementation or library stub" not in out, out
    result = {name: [] for name in files}
    by_path = {os.path.realpath(p): name for name, p in paths.items()}
    for line in out.splitlines():
        # mypy names a file relative to the working directory when it is below it
        name = by_path.get(os.path.realpath(line.split(":", 1)[0]))
        if name is not None and ": error:" in line:
            result[name].append(line)
    assert sum(map(len, result.values())) == out.count(": error:"), out     # every error was attributed
    return result, out


def test_readme_snippet_and_a_user_script_type_check(tmp_path):
    snippets = readme_snippets()
    assert snippets, "README.md has a Python snippet using MessageStore"
    files = {f"readme_{i}": s for i, s in enumerate(snippets)}
    files["user_script"] = USER_SCRIPT
    files["wrong"] = WRONG
    files["reveal"] = REVEAL
    errors, out = run_mypy(files, tmp_path)
    for name in files:
        if name not in ("wrong", "reveal"):
            assert errors[name] == [], f"{name}: {errors[name]}"
    # MessageStore is the real class to a checker, and the module has no __getattr__ it could see
    assert "rmqcore.store.MessageStore" in out and "rmqcore._message.Message" in out, out
    assert [e for e in errors["reveal"] if 'Module has no attribute "NoSuchThing"' in e], out
    wrong = errors["wrong"]
    wrong_lines = sorted({int(e.split(":")[1]) for e in wrong})
    assert wrong_lines == [3, 4, 5, 6], "\n".join(wrong)


def test_stubs_match_the_compiled_modules():
    allowlist = os.path.join(HERE, "stubtest_allowlist.txt")
    env = dict(os.environ)
    if os.path.basename(PKG_PARENT) not in ("site-packages", "dist-packages"):
        env["MYPYPATH"] = PKG_PARENT
        env["PYTHONPATH"] = PKG_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "mypy.stubtest", "--ignore-disjoint-bases", "--allowlist", allowlist,
                        "--mypy-config-file", os.devnull, *[f"rmqcore.{m}" for m in COMPILED]],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_compiled_module_has_a_stub_and_the_package_is_typed():
    pkg = os.path.dirname(os.path.abspath(rmqcore.__file__))
    assert os.path.exists(os.path.join(pkg, "py.typed"))
    for m in COMPILED:
        assert os.path.exists(os.path.join(pkg, *m.split(".")) + ".pyi"), m


def test_public_names_have_docstrings():
    import inspect

    from rmqcore import StoreConfig, errors, store
    # CommitLog's class docstring belongs to rmqcore/commit_log.py (being rewritten elsewhere).
    names = [getattr(rmqcore, n) for n in rmqcore.__all__ if n != "CommitLog"]
    missing = [getattr(o, "__name__", repr(o)) for o in names if not (o.__doc__ or "").strip()]
    assert missing == []
    public = [n for n, f in inspect.getmembers(store.MessageStore) if not n.startswith("_") and callable(f)]
    undocumented = [n for n in public if not (getattr(store.MessageStore, n).__doc__ or "").strip()]
    assert undocumented == [], undocumented
    src = inspect.getsource(StoreConfig)
    for f in StoreConfig.__dataclass_fields__:
        # every field is followed by its docstring (meaning in RocketMQ, unit)
        assert re.search(rf"\n    {f}: [^\n]*\n    \"\"\"", src), f
    assert errors.RmqStoreError.__doc__


# Each line must be an error to both checkers: the API's results are typed (not Any) and broker.store is a store.
WRONG_RESULTS = '''
from rmqcore import Message, MessageStore
from rmqcore.broker import Broker
store = MessageStore.open("/tmp/x")
broker = Broker.open("/tmp/y")
a: str = store.put(Message("t", b"x"))
b: str = store.query_message("t", "k")
c: str = broker.send(Message("t", b"x"))
d: str = broker.store.max_offset("t", 0)
e: str = store.look_message(0)
'''


def _installed_rmqcore_file(cwd) -> str:
    """The rmqcore a program outside the source tree imports: what the install put on the interpreter's path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    r = subprocess.run([sys.executable, "-c", "import rmqcore; print(rmqcore.__file__)"], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    return os.path.realpath(r.stdout.strip()) if r.returncode == 0 else ""


def test_readme_snippets_check_clean_under_mypy_and_pyright_after_the_readme_install(tmp_path):
    """After README's own install (an editable one whose path a type checker can follow), mypy and pyright run as a
    user runs them, outside the source tree with no MYPYPATH, resolve ``import rmqcore`` and find no error in
    README's Python snippets, and do find the errors of a script that misuses the results (so they are not Any)."""
    if _installed_rmqcore_file(tmp_path) != os.path.realpath(rmqcore.__file__):
        pytest.skip("the rmqcore tested here is not the one installed for this interpreter (another checkout)")
    text = open(os.path.join(os.path.dirname(HERE), "README.md"), encoding="utf-8").read() \
        if os.path.exists(os.path.join(os.path.dirname(HERE), "README.md")) else ""
    if not text:
        pytest.skip("needs README.md")
    snippets = [s for s in re.findall(r"```python\n(.*?)```", text, re.S) if "from rmqcore" in s]
    assert len(snippets) >= 2, "README.md's quick start and broker snippets"
    files = {f"readme_{i}.py": s for i, s in enumerate(snippets)}
    files["wrong_results.py"] = WRONG_RESULTS
    for name, src in files.items():
        (tmp_path / name).write_text(src)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    wrong_lines = [i + 1 for i, line in enumerate(WRONG_RESULTS.split("\n")) if re.match(r"[a-e]: str = ", line)]

    r = subprocess.run([sys.executable, "-m", "mypy", "--python-executable", sys.executable, "--no-incremental",
                        "--config-file", os.devnull, "--show-error-codes", "--no-error-summary", *files],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    errors = [ln for ln in r.stdout.splitlines() if ": error:" in ln]
    assert not [e for e in errors if not e.startswith("wrong_results.py:")], r.stdout + r.stderr
    assert sorted({int(e.split(":")[1]) for e in errors}) == wrong_lines, r.stdout + r.stderr

    pytest.importorskip("pyright", reason="pyright is in the test extra")
    import json
    r = subprocess.run([sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "--outputjson", *files],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.stdout.strip().startswith("{"), r.stdout + r.stderr
    diags = [d for d in json.loads(r.stdout)["generalDiagnostics"] if d["severity"] == "error"]
    shown = "\n".join(f"{os.path.basename(d['file'])}:{d['range']['start']['line'] + 1}: {d['message']}" for d in diags)
    assert not [d for d in diags if os.path.basename(d["file"]) != "wrong_results.py"], shown
    assert sorted({d["range"]["start"]["line"] + 1 for d in diags}) == wrong_lines, shown


# A user's script over the public API as issue 40 found it: with both checkers in strict mode nothing is Any or
# unknown (aput's awaitable, put_async's Future, put_batch's and verify's parameters, Broker.open's checker).
STRICT_SCRIPT = '''
import asyncio
from concurrent.futures import Future

from rmqcore import GetResult, Message, MessageExt, MessageStore, PutResult, StoreConfig
from rmqcore.broker import Broker


def on_progress(phase: str, done: int, total: int) -> None:
    print(phase, done, total)


def check(half: MessageExt) -> bool | None:
    return half.topic == "orders"


def store_work(path: str) -> int:
    with MessageStore.open(path, StoreConfig()) as store:
        one: PutResult = store.put(Message("t", b"x", 0))
        many: list[PutResult] = store.put_batch([Message("t", b"y", 0)], properties={"CLUSTER": "c"})
        later: Future[PutResult] = store.put_async(Message("t", b"z", 0))
        got: GetResult = store.get_messages("g", "t", 0, 0, 32, tags="a || b")
        bodies = [bytes(m.body) for m in got.messages]
        report = store.verify(progress=on_progress)
        ok: bool = bool(report["ok"])

        async def put_one() -> PutResult:
            return await store.aput(Message("t", b"a", 0))
        awaited = asyncio.run(put_one())
        return one.queue_offset + len(many) + later.result().queue_offset + awaited.queue_offset + len(bodies) + ok


def broker_work(path: str) -> None:
    with Broker.open(path, transaction_checker=check) as b:
        sent: PutResult = b.send(Message("t", b"x", 0))
        batch: list[PutResult] = b.send_batch([Message("t", b"y", 0)])
        pulled: GetResult = b.pull("g", "t", 0, 0, tags=["a", "b"])
        print(sent, batch, pulled)
'''

# Each line an error under strict mode: the results are typed, not Any.
STRICT_WRONG = '''
import asyncio
from rmqcore import Message, MessageStore
store = MessageStore.open("/tmp/x")
async def f() -> None:
    a: str = await store.aput(Message("t", b"a", 0))
b: str = store.put_async(Message("t", b"z", 0)).result()
c: str = store.put_batch([Message("t", b"y", 0)])
'''


def test_a_users_script_passes_mypy_and_pyright_strict(tmp_path):
    errors, out = run_mypy({"strict_script": STRICT_SCRIPT, "strict_wrong": STRICT_WRONG}, tmp_path, "--strict")
    assert errors["strict_script"] == [], out
    assert sorted({int(e.split(":")[1]) for e in errors["strict_wrong"]}) == [6, 7, 8], out

    pytest.importorskip("pyright", reason="pyright is in the test extra")
    import json
    work = tmp_path / "pyright"
    work.mkdir()
    (work / "strict_script.py").write_text(STRICT_SCRIPT)
    (work / "strict_wrong.py").write_text(STRICT_WRONG)
    conf = {"typeCheckingMode": "strict", "pythonVersion": "3.11"}
    if os.path.basename(PKG_PARENT) not in ("site-packages", "dist-packages"):
        conf["extraPaths"] = [PKG_PARENT]          # a source tree (an installed package is found by itself)
    (work / "pyrightconfig.json").write_text(json.dumps(conf))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    r = subprocess.run([sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "--outputjson",
                        "strict_script.py", "strict_wrong.py"], cwd=work, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.stdout.strip().startswith("{"), r.stdout + r.stderr
    diags = [d for d in json.loads(r.stdout)["generalDiagnostics"] if d["severity"] == "error"]
    shown = "\n".join(f"{os.path.basename(d['file'])}:{d['range']['start']['line'] + 1}: {d['message']}" for d in diags)
    assert not [d for d in diags if os.path.basename(d["file"]) == "strict_script.py"], shown
    wrong = {d["range"]["start"]["line"] + 1 for d in diags if os.path.basename(d["file"]) == "strict_wrong.py"}
    assert {6, 7, 8} <= wrong, shown
