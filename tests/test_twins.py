"""The compiled twins load whole, or not at all, through the one loader
(``mysqlbackup.speedups.load_twin``): where a C compiler is there at install time every
compiled module is built and loaded (a silently missing one would run every row at half
speed and make the twin tests skips); a build of another version, or one that lacks a
function its callers take, leaves the pure Python twins running and says why."""

import os
import re
import shutil

import pytest

from mysqlbackup import speedups
from replay.job.decoding import changejson, rowcount, rowdecode, rowloop, rowtext

DECODING = os.path.dirname(rowdecode.__file__)
# each pure module and its compiled twin, side by side (the row loop's in rowdecode)
TWINS = {"rowdecode": rowdecode, "rowtext": rowtext, "changejson": changejson,
         "rowcount": rowcount}
needs_compiled = pytest.mark.skipif(rowdecode.compiled is None, reason=rowdecode.describe())


def test_every_compiled_twin_is_built_where_a_compiler_is():
    """CI has a compiler: there both twins are loaded, unless turned off on purpose."""
    if os.environ.get(speedups.PURE_ENV, "") not in ("", "0"):
        assert rowdecode.compiled is None and speedups.compiled is None
        assert rowdecode.describe() == f"row decoding: pure Python (turned off by " \
                                       f"{speedups.PURE_ENV})"
        return
    if shutil.which("cc") is None:
        pytest.skip("no C compiler here: the pure Python twins run")
    assert speedups.compiled is not None, speedups.describe()
    for name, module in TWINS.items():
        assert module.compiled is not None, (name, rowdecode.describe())
        assert module.compiled.__name__ == f"replay.job.decoding._{name}".replace(
            "_rowdecode", "_rowloop")  # side by side with its pure module
    assert rowdecode.loop is rowdecode.compiled
    assert rowdecode.describe() == "row decoding: compiled (Cython)"


def test_the_callers_take_only_what_the_loader_checks():
    """Every function the row decoders take from a compiled twin (``rowdecode.twin``)
    is one its loader requires, so none can be missing once it loaded."""
    taken = set()
    for name in os.listdir(DECODING):
        if name.endswith(".py"):
            with open(os.path.join(DECODING, name), encoding="utf-8") as f:
                for module, function in re.findall(
                        r'rowdecode\.twin\((\w+(?:\.\w+)?), "(\w+)"', f.read()):
                    # ``compiled``: the module's own twin; ``changejson.compiled``: another's
                    owner = name[:-3] if module == "compiled" else module.split(".")[0]
                    taken.add((owner, function))
    assert len(taken) >= 6
    for owner, function in taken:
        assert function in TWINS[owner].FUNCTIONS, (owner, function)


@needs_compiled
def test_a_build_without_a_function_is_not_used(monkeypatch):
    """A build lacking one function (an older .so beside newer sources) is not used at
    all: its pure twin runs, and the reason names the function."""
    monkeypatch.delattr(rowcount.compiled, "walk_rows")
    assert rowcount._load() == (None, "built without walk_rows (reinstall the package)")
    monkeypatch.delattr(rowdecode.compiled, "read_rows")
    assert rowdecode._load() == (None, "built without read_rows (reinstall the package)")


@needs_compiled
@pytest.mark.parametrize("name", list(TWINS))
def test_a_build_of_another_version_is_not_used(name, monkeypatch):
    """Each twin has its own version: a build of another is not used, and says why."""
    module = TWINS[name]
    version = module.compiled.TWIN
    monkeypatch.setattr(module.compiled, "TWIN", version + 1)
    assert module._load() == (None, "built from another version (reinstall the package)")
    monkeypatch.undo()
    assert module._load() == (module.compiled, "compiled")


def test_describe_names_the_twins_that_do_not_run(monkeypatch):
    monkeypatch.setitem(speedups.LOADED, "replay.job.decoding._rowtext", "not built (x)")
    if rowdecode.compiled is not None:
        assert rowdecode.describe() == "row decoding: pure Python in part (_rowtext: not " \
                                       "built (x))"


def test_the_pure_switch_turns_off_every_twin(monkeypatch):
    monkeypatch.setenv(speedups.PURE_ENV, "1")
    monkeypatch.setattr(speedups, "LOADED", dict(speedups.LOADED))  # (the loads record)
    for module in TWINS.values():
        assert module._load() == (None, f"turned off by {speedups.PURE_ENV}")
    assert speedups._load() == (None, f"turned off by {speedups.PURE_ENV}")


def test_twin_picks_the_pure_function_when_the_pure_loop_runs(monkeypatch):
    def pure():
        return "pure"

    monkeypatch.setattr(rowdecode, "loop", rowloop)
    assert rowdecode.twin(rowtext.compiled, "rows_text", pure) is pure
    assert rowdecode.twin(None, "rows_text", pure) is pure
    if rowdecode.compiled is not None:
        monkeypatch.setattr(rowdecode, "loop", rowdecode.compiled)
        assert rowdecode.twin(rowtext.compiled, "rows_text", pure) is rowtext.compiled.rows_text
