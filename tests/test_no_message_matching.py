"""No control flow on an exception's text: a kind of error is a type (``TornEvent``,
``ArchiveHoles``, ``NativeRefused``) or a field (``CorruptBinlog.detail``), never a
prefix cut off or a phrase looked for in ``str(error)``. A reworded message must not
turn a live archive's torn tail into a hard failure.

Read from the syntax tree of every module of ``mysqlbackup/`` and ``replay/``: within an
``except ... as NAME`` block, or a function taking an error (a parameter named
``error``/``exc``/``e``), ``str(NAME)`` (or a name bound to it) may be shown, logged or
stored, not split, searched or compared."""

import ast
import pathlib

from tests.helpers import REPO

LOOKING = {"split", "rsplit", "startswith", "endswith", "removeprefix", "removesuffix",
           "find", "rfind", "index", "partition", "rpartition"}
ERROR_PARAMS = {"error", "exc", "e", "err"}
# foreign exceptions that carry nothing but their text, each read in one place:
ALLOWED = {
    # pyrage raises one DecryptError for every failure; "No matching keys" is the only
    # way to tell a keyring without the object's key from a damaged header
    ("mysqlbackup/archive/codec.py", "_decrypt_error"),
    # a failed Spark job reaches the driver as a Py4JJavaError holding the executor's
    # traceback as text: its lines are read to say what failed, in one line
    ("replay/spark/shipping.py", "explain_failure"),
}


def _text_of(node, names):
    """True when ``node`` is ``str(NAME)`` for one of ``names``, or a name bound to one."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id == "str" and len(node.args) == 1 and \
            isinstance(node.args[0], ast.Name) and node.args[0].id in names:
        return True
    return isinstance(node, ast.Name) and node.id in names.texts


class _Names(set):
    texts = frozenset()


def _matches(body, errors):
    """The lines within ``body`` (statements) that read the text of ``errors``."""
    names = _Names(errors)
    texts = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Assign) and _text_of(node.value, names):
            texts.update(t.id for t in node.targets if isinstance(t, ast.Name))
    names.texts = frozenset(texts)
    found = []
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in LOOKING and _text_of(node.func.value, names):
            found.append(node.lineno)
        if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                _text_of(c, names) for c in node.comparators):
            found.append(node.lineno)
    return found


def _functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def message_matching(path, relative):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for function in _functions(tree):
        if (relative, function.name) in ALLOWED:
            continue
        params = {a.arg for a in function.args.args} & ERROR_PARAMS
        if params:
            found.update(_matches(function.body, params))
        for node in ast.walk(function):
            if isinstance(node, ast.ExceptHandler) and node.name:
                found.update(_matches(node.body, {node.name}))
    return sorted(found)


def test_no_control_flow_reads_an_errors_text():
    root = pathlib.Path(REPO)
    offenders = []
    for package in ("mysqlbackup", "replay"):
        for path in sorted((root / package).rglob("*.py")):
            relative = str(path.relative_to(root))
            offenders += [f"{relative}:{line}" for line in message_matching(path, relative)]
    assert offenders == []


def test_the_check_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def a():\n"
        "    try:\n        pass\n"
        "    except ValueError as e:\n"
        "        if 'torn event' in str(e):\n            pass\n"
        "def b(error):\n"
        "    text = str(error)\n"
        "    return text.split(': ', 1)[-1]\n"
        "def c():\n"
        "    try:\n        pass\n"
        "    except ValueError as e:\n"
        "        print(str(e))\n")
    assert message_matching(bad, "bad.py") == [5, 9]
