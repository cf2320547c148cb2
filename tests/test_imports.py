"""rmqcore's modules import each other without a cycle (parsed with ast, no import run).

Every import counts, those inside functions too: a lazy import only hides a cycle until a second caller imports
the other module first, and it still says that one module depends on the other. The faces (cli.py, mqadmin.py,
serve/cli.py, console/) share what they all show through rmqcore.admin_views, below all of them.
"""
from __future__ import annotations

import ast
import importlib.machinery
import pathlib

import rmqcore

ROOT = pathlib.Path(rmqcore.__file__).parent


def _modules() -> dict[str, pathlib.Path]:
    """Dotted name -> file, for every Python module and every compiled module (a leaf here: its .pyx in a checkout,
    only its built extension in an installed wheel or sdist build)."""
    mods = {}
    compiled = [p for suffix in importlib.machinery.EXTENSION_SUFFIXES for p in sorted(ROOT.rglob("*" + suffix))]
    for p in sorted(ROOT.rglob("*.py")) + sorted(ROOT.rglob("*.pyx")) + compiled:
        parts = ["rmqcore", *p.relative_to(ROOT).parent.parts, p.name.split(".", 1)[0]]
        if parts[-1] == "__init__":
            parts.pop()
        mods.setdefault(".".join(parts), p)
    return mods


def _known(name: str, mods) -> str | None:
    """The module ``name`` is, or the package it is a name in (``rmqcore.broker.Broker`` -> ``rmqcore.broker``)."""
    while name not in mods and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in mods else None


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        graph[mod] = deps = set()
        if path.suffix != ".py":
            continue
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                # `from pkg import name`: name is a submodule when there is one, else a name in pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                known = _known(t, mods)
                if known and known != mod:
                    deps.add(known)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_cycles_finds_a_cycle():
    # the checker itself: the cycle this test was written for (cli -> server.cli -> console -> console.data ->
    # mqadmin -> cli) is found, lazy imports included
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_graph_sees_lazy_and_relative_imports():
    g = import_graph()
    assert "rmqcore.mqadmin" in g["rmqcore.cli"]               # a lazy import inside build_parser
    assert "rmqcore.admin_views" in g["rmqcore.console.data"]  # a relative import of a sibling package's module
    assert "rmqcore.broker._send" in g["rmqcore.broker.broker"]  # a compiled module is a module, not its package


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_faces_do_not_import_each_other_back():
    # the console's data layer serves the CLI's admin (mqadmin.local_admin): it must not import the CLI's modules
    g = import_graph()
    for console in ("rmqcore.console", "rmqcore.console.app", "rmqcore.console.data", "rmqcore.console.metrics"):
        assert not g[console] & {"rmqcore.cli", "rmqcore.mqadmin", "rmqcore.serve.cli"}, console


def test_protocol_wings_do_not_import_each_other():
    # gRPC (rmqcore.server) and remoting (rmqcore.remoting) share rmqcore.serve; only its command imports the wings
    g = import_graph()
    wing = {"rmqcore.server": "rmqcore.remoting", "rmqcore.remoting": "rmqcore.server"}
    for mod, deps in g.items():
        for mine, other in wing.items():
            if mod == mine or mod.startswith(mine + "."):
                assert not {d for d in deps if d == other or d.startswith(other + ".")}, mod
    shared = [m for m in g if m.startswith("rmqcore.serve.") and m != "rmqcore.serve.cli"]
    assert shared
    for mod in shared:
        assert not {d for d in g[mod] if d.startswith(("rmqcore.server", "rmqcore.remoting"))}, mod
