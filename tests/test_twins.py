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
from replay.job.decoding import rowdecode, rowloop

DECODING = os.path.dirname(rowdecode.__file__)
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
    assert rowdecode.compiled is not None, rowdecode.describe()
    assert rowdecode.loop is rowdecode.compiled
    assert rowdecode.describe() == "row decoding: compiled (Cython)"


def test_the_callers_take_only_what_the_loader_checks():
    """Every function the row decoders take from the compiled twin (``rowdecode.twin``)
    is one the loader requires, so none can be missing once it loaded."""
    taken = set()
    for name in os.listdir(DECODING):
        if name.endswith(".py"):
            with open(os.path.join(DECODING, name), encoding="utf-8") as f:
                taken |= set(re.findall(r'rowdecode\.twin\("(\w+)"', f.read()))
    assert taken and taken <= set(rowdecode.FUNCTIONS), taken - set(rowdecode.FUNCTIONS)


@needs_compiled
def test_a_build_without_a_function_is_not_used(monkeypatch):
    """A build lacking one function (an older .so beside newer sources) is not used at
    all: the pure twins run everywhere, and the reason names the function."""
    monkeypatch.delattr(rowdecode.compiled, "walk_rows")
    assert rowdecode._load() == (None, "built without walk_rows (reinstall the package)")


@needs_compiled
def test_a_build_of_another_version_is_not_used(monkeypatch):
    monkeypatch.setattr(rowdecode.compiled, "TWIN", rowloop.TWIN + 1)
    assert rowdecode._load() == (None, "built from another version (reinstall the package)")
    monkeypatch.undo()
    assert rowdecode._load() == (rowdecode.compiled, "compiled")


def test_the_pure_switch_turns_off_every_twin(monkeypatch):
    monkeypatch.setenv(speedups.PURE_ENV, "1")
    assert rowdecode._load() == (None, f"turned off by {speedups.PURE_ENV}")
    assert speedups._load() == (None, f"turned off by {speedups.PURE_ENV}")


def test_twin_picks_the_pure_function_when_the_pure_loop_runs(monkeypatch):
    def pure():
        return "pure"

    monkeypatch.setattr(rowdecode, "loop", rowloop)
    assert rowdecode.twin("rows_text", pure) is pure
    if rowdecode.compiled is not None:
        monkeypatch.setattr(rowdecode, "loop", rowdecode.compiled)
        assert rowdecode.twin("rows_text", pure) is rowdecode.compiled.rows_text
