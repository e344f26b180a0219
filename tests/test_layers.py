"""The import contract (pure: the sources' import statements, read with ``ast``).

Layers, lowest first: ``binlog/`` (formats, no I/O) below ``source/``, ``archive/`` and
``localdir/`` (the daemon's local directory: its files, their formats and what they say);
those below ``stream/``, ``base/`` and ``retention/``, which do not import each other;
those below the command line (``cli/``, ``config``). The shared helpers (``errors``,
``durable``, ``loop``, ``logs``, ``httpd``, the package itself) sit under everything.
``replay/`` imports ``mysqlbackup/`` but never ``stream/`` or ``retention/`` (what it
needs of the daemon's directory is in ``localdir/``, the metrics server in ``httpd``),
and ``mysqlbackup/`` never imports ``replay/``. The test servers (``sandbox``) are for
tests, the demo and benchmarks: no other module imports them (``scratch`` gives
production its servers). Lazy imports (inside a function) count as imports, and ``from
P import X`` imports the module P.X when X is one.

Inside ``replay/`` the rooms are layered too (``REPLAY_LEVEL``, lowest first): Spark's
driver (``spark/``) below the planning every command uses (``planning/``), below the
job's tasks, engines, decoding and sinks (``job/``), below ``serve/`` and ``find/``
(neither imports the other), below ``restore/`` and ``undo/``, below the commands built
on a restore and the command lines. No module imports itself through others (no circle, lazy imports
counted), and no module of either package runs over MAX_LINES lines (``.pyx`` and its
included ``.pxi`` and declared ``.pxd`` files too).

KNOWN holds the imports that break the contract today, each to be removed: a new break
fails the test, and so does an entry of KNOWN that no longer happens (the list only
shrinks). Issue 29's layering work emptied it.
"""

import ast
import functools
import glob
import os

from tests.helpers import REPO

LEVEL = {"mysqlbackup": 0, "errors": 0, "durable": 0, "loop": 0, "logs": 0, "httpd": 0,
         "utc": 0, "scratch": 0, "sandbox": 0,
         "binlog": 1, "source": 2, "archive": 2, "localdir": 2,
         "guard": 2.5,  # above the archive it reads, below the daemon and retention
         "stream": 3, "base": 3, "retention": 3, "rekey": 3,
         "cli": 4, "__main__": 5}
# top-level modules that belong to a part: the fused loop of the source's packets and
# events (the client squeezes packets with it, the stream walks events: it sits with
# the source, below both), the command line's configuration
PART_OF = {"speedups": "source", "fusedloop": "source", "_speedups": "source",
           "config": "cli"}
SIBLINGS = {"stream", "base", "retention", "rekey"}  # one level, independent of each other
REPLAY_NEVER = {"stream", "retention", "rekey"}
# the test servers: tests, the demo and benchmarks import them, production code never
# (its servers of its own come from ``scratch``)
TEST_ONLY = {"sandbox"}

REPLAY_LEVEL = {"spark": 1, "planning": 2, "job": 3, "serve": 4, "find": 4, "restore": 5,
                "undo": 5,
                "drill": 6, "check": 6, "cli": 6, "spark_main": 7, "replay": 7}
MAX_LINES = 600

KNOWN = set()


@functools.cache  # the sources, parsed once for the tests of this module
def imports():
    """{(module, imported module)} of every import of a package module by another."""
    found = set()
    for package in ("mysqlbackup", "replay"):
        for folder, _, names in os.walk(os.path.join(REPO, package)):
            for name in (n for n in names if n.endswith(".py")):
                path = os.path.join(folder, name)
                module = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                module = module.removesuffix(".__init__")
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                for node in ast.walk(tree):
                    for target in _targets(node):
                        if target.split(".")[0] in ("mysqlbackup", "replay"):
                            found.add((module, target))
    return frozenset(found)


def _targets(node):
    """The modules an import statement imports: ``from P import X`` imports P.X (a
    module, when X is one: ``from mysqlbackup import speedups`` is an import of
    ``speedups``, not of the package)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}")
                else node.module for a in node.names]
    return []


def _is_module(dotted):
    """True when ``dotted`` names a module or package of this repository."""
    path = os.path.join(REPO, *dotted.split("."))
    return os.path.isfile(path + ".py") or os.path.isdir(path)


def part(module):
    """The layer part of a mysqlbackup module ('stream', 'errors', ...); None for replay."""
    pieces = module.split(".")
    if pieces[0] != "mysqlbackup":
        return None
    name = pieces[1] if len(pieces) > 1 else "mysqlbackup"
    return PART_OF.get(name, name)


def room(module):
    """The room of a replay module ('spark', 'job', ...; 'replay' for the package)."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "replay"


def replay_breaks(source, target):
    """Why replay module ``source`` may not import replay module ``target`` (or None)."""
    mine, theirs = room(source), room(target)
    if mine == theirs:
        return None
    if REPLAY_LEVEL[theirs] >= REPLAY_LEVEL[mine]:
        return (f"replay/{mine} (level {REPLAY_LEVEL[mine]}) imports replay/{theirs} "
                f"(level {REPLAY_LEVEL[theirs]})")
    return None


def breaks(source, target):
    """Why ``source`` may not import ``target`` (None when it may)."""
    if source.startswith("replay") and target.startswith("replay"):
        return replay_breaks(source, target)
    mine, theirs = part(source), part(target)
    if theirs in TEST_ONLY and part(source) not in TEST_ONLY:
        return f"production code imports the test servers ({theirs})"
    if mine is not None and target.startswith("replay"):
        return "mysqlbackup/ imports replay/"
    if mine is None:
        return f"replay/ imports {theirs}/" if theirs in REPLAY_NEVER else None
    if mine == theirs or theirs is None:
        return None
    if mine in SIBLINGS and theirs in SIBLINGS:
        return f"{mine}/ and {theirs}/ are one level: neither imports the other"
    if LEVEL[theirs] >= LEVEL[mine] and LEVEL[theirs] > 0:
        return f"{mine} (level {LEVEL[mine]}) imports {theirs} (level {LEVEL[theirs]})"
    return None


def test_every_module_is_placed():
    unknown = {part(m) for pair in imports() for m in pair if part(m) is not None} - set(LEVEL)
    assert not unknown, f"place these in LEVEL: {sorted(unknown)}"
    rooms = {room(m) for pair in imports() for m in pair if m.startswith("replay")}
    unplaced = rooms - set(REPLAY_LEVEL)
    assert not unplaced, f"place these in REPLAY_LEVEL: {sorted(unplaced)}"


def circles(pairs):
    """The circles (strongly connected sets of two or more modules) of the import graph
    ``pairs`` ({(module, imported module)}), each as a sorted list."""
    graph = {}
    for source, target in pairs:
        graph.setdefault(source, set()).add(target)
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):  # Tarjan's, iterative over the neighbours of one node at a time
        work = [(node, iter(sorted(graph.get(node, ()))))]
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[current] = min(low[current], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[current])
            if low[current] == index[current]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == current:
                        break
                if len(group) > 1:
                    found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others():
    assert circles({(s, t) for s, t in imports() if s != t}) == []


def test_what_a_circle_is():
    assert circles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")}) == [
        ["a", "b", "c"]]
    assert circles({("a", "b"), ("b", "c")}) == []


def test_no_module_runs_over_the_limit():
    long = []
    for package in ("mysqlbackup", "replay"):
        for ext in ("py", "pyx", "pxi", "pxd"):
            for path in glob.glob(os.path.join(REPO, package, "**", f"*.{ext}"),
                                  recursive=True):
                with open(path, encoding="utf-8") as f:
                    lines = sum(1 for _ in f)
                if lines > MAX_LINES:
                    long.append(f"{os.path.relpath(path, REPO)}: {lines}")
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_layers_hold_but_for_the_known_breaks():
    found = {(s, t): breaks(s, t) for s, t in imports()}
    broken = {pair for pair, why in found.items() if why}
    new = sorted(f"{s} -> {t}: {found[(s, t)]}" for s, t in broken - KNOWN)
    assert not new, "imports that break the layering:\n" + "\n".join(new)
    gone = sorted(f"{s} -> {t}" for s, t in KNOWN - broken)
    assert not gone, "no longer imported: drop from KNOWN:\n" + "\n".join(gone)


def test_what_breaks_the_layers():
    assert breaks("mysqlbackup.binlog.events", "mysqlbackup.archive.store")
    assert breaks("mysqlbackup.stream.daemon", "mysqlbackup.base.run")
    assert breaks("mysqlbackup.archive.store", "mysqlbackup.cli")
    assert breaks("replay.job", "mysqlbackup.stream.syncer")
    assert breaks("replay.check.cli", "mysqlbackup.retention.policy")
    assert breaks("mysqlbackup.archive.store", "replay.job")
    assert breaks("mysqlbackup.localdir.status", "mysqlbackup.stream.daemon")
    assert breaks("mysqlbackup.localdir.files", "mysqlbackup.archive.store")
    assert breaks("mysqlbackup.httpd", "mysqlbackup.stream.metrics")
    assert breaks("replay.job", "mysqlbackup.archive.store") is None
    assert breaks("replay.check.gather", "mysqlbackup.localdir.status") is None
    assert breaks("replay.serve.metrics", "mysqlbackup.httpd") is None
    assert breaks("mysqlbackup.stream.daemon", "mysqlbackup.archive.store") is None
    assert breaks("mysqlbackup.stream.daemon", "mysqlbackup.localdir.state") is None
    assert breaks("mysqlbackup.stream.metrics", "mysqlbackup.httpd") is None
    assert breaks("mysqlbackup.cli.options", "mysqlbackup.cli") is None
    assert breaks("replay.drill.run", "mysqlbackup.sandbox")
    assert breaks("mysqlbackup.base.clone", "mysqlbackup.sandbox.mysql")
    assert breaks("mysqlbackup.sandbox.tree", "mysqlbackup.sandbox") is None
    assert breaks("replay.drill.run", "mysqlbackup.scratch") is None
    assert breaks("mysqlbackup.source.client", "mysqlbackup.speedups") is None
    assert breaks("mysqlbackup.speedups", "mysqlbackup.stream.syncer")
    assert breaks("replay.serve.catalog", "replay.restore.load")  # serve below restore
    assert breaks("replay.planning.selection", "replay.job.decoding.assemble")
    assert breaks("replay.spark.jvm", "replay.planning.plan")
    assert breaks("replay.find.scan", "replay.serve.feed")  # one level: neither
    assert breaks("replay.restore.native", "replay.serve.server") is None
    assert breaks("replay.job.run", "replay.planning.plan") is None
    assert breaks("replay.spark.context", "replay.spark.jvm") is None


def test_from_the_package_import_is_an_import_of_the_module():
    tree = ast.parse("from mysqlbackup import speedups\nfrom replay.job import tasks\n"
                     "from mysqlbackup.binlog import events")
    assert [t for node in ast.walk(tree) for t in _targets(node)] == [
        "mysqlbackup.speedups", "replay.job.tasks", "mysqlbackup.binlog.events"]
