"""Which fused stream loop runs: the compiled one (``mysqlbackup._speedups``, built by
Cython when a C compiler and zlib's headers are there at install time) or its pure
Python twin (``mysqlbackup.fusedloop``), which takes the same arguments and gives the
same results.

``fused`` is the module in use; ``compiled`` the configured compiled module, or None: not
built, failed to load, or turned off with ``MYSQLBACKUP_PURE_PYTHON=1``. ``describe()``
says which, for ``--version`` and the daemon's start-up line. Both write the same bytes
and raise the same errors.
"""

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import zipimport

from mysqlbackup import fusedloop
from mysqlbackup.binlog import events as ev
from mysqlbackup.source import protocol

PURE_ENV = "MYSQLBACKUP_PURE_PYTHON"
# events up to this size get their CRC from zlib inline; larger ones from ``ev.crc32``
# (zlib-ng's SIMD code when installed: many times faster on long events)
INLINE_CRC_MAX = 2048


def import_compiled(name):
    """Import the compiled module ``name`` (``mysqlbackup._speedups``,
    ``replay.job.decoding._rowloop``). When its package came from a zip (the sources
    Spark ships to a cluster's executors: a zip cannot hold an extension module), the
    module's file is taken from the first folder on sys.path that has it at its package
    path (``scripts/pack_replay_env.py`` puts the compiled modules, and them alone, in
    the executors' environment). ImportError when there is none; the caller checks
    that it is of this version (``TWIN``)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        package = sys.modules.get(name.rpartition(".")[0])
        found = _compiled_file(name) if isinstance(
            getattr(package, "__loader__", None), zipimport.zipimporter) else None
        if found is None:
            raise
    spec = importlib.util.spec_from_file_location(name, found)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _compiled_file(name):
    """The first file that is the extension module ``name`` at its package path under a
    folder of sys.path, or under the top package's folder as another importer of
    sys.meta_path finds it (an editable install's), or None."""
    *packages, last = name.split(".")
    roots = [entry for entry in sys.path if entry and os.path.isdir(entry)]
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
            continue  # sys.path's finder: the folders above (and the zip, first)
        try:
            spec = finder.find_spec(packages[0], None)
        except Exception:  # noqa: BLE001 - a finder of another project's: not ours to fix
            continue
        if spec is not None and spec.submodule_search_locations:
            roots += [os.path.dirname(place) for place in spec.submodule_search_locations]
    for entry in roots:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = os.path.join(entry, *packages, last + suffix)
            if os.path.isfile(candidate):
                return candidate
    return None


def load_twin(name, version, functions, configure):
    """The compiled twin ``name`` of a pure module, configured (``configure(module)``
    hands it what it calls back), and "compiled"; or (None, why not): turned off with
    ``MYSQLBACKUP_PURE_PYTHON``, not built, built from another version (its ``TWIN`` is
    not ``version``), or without one of ``functions`` (every function its callers take
    from it: a twin is whole or not used, never half), recorded in LOADED. The one
    loader of the project's compiled modules (the stream loop here; the row decoders'
    in ``rowdecode``, ``rowtext``, ``changejson`` and ``rowcount``)."""
    module, why = _twin(name, version, functions)
    if module is not None:
        configure(module)
    LOADED[name] = why
    return module, why


LOADED = {}  # each compiled module load_twin was asked for -> "compiled", or why not


def _twin(name, version, functions):
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None, f"turned off by {PURE_ENV}"
    try:
        module = import_compiled(name)
    except ImportError as e:
        return None, f"not built ({e})"
    if getattr(module, "TWIN", None) != version:
        return None, "built from another version (reinstall the package)"
    missing = [f for f in functions if not callable(getattr(module, f, None))]
    if missing:
        return None, f"built without {', '.join(missing)} (reinstall the package)"
    return module, "compiled"


# what the stream path takes from ``_speedups`` (``fusedloop`` is its twin)
FUNCTIONS = ("configure", "walk_events", "squeeze_packets")


def _load():
    """The compiled stream loop, configured, or (None, why not)."""
    return load_twin("mysqlbackup._speedups", fusedloop.TWIN, FUNCTIONS, lambda module: (
        module.configure(fusedloop.KINDS, ev.CRC_RESIDUE, ev.LOG_EVENT_ARTIFICIAL_F,
                         ev.FL_STANDALONE, protocol.MAX_PAYLOAD,
                         protocol.SEMI_SYNC_INDICATOR, protocol.SEMI_SYNC_NEED_ACK,
                         ev.crc32, INLINE_CRC_MAX, fusedloop.SQUEEZE_MAX)))


compiled, _why = _load()
fused = compiled if compiled is not None else fusedloop


def describe():
    """One line: which stream loop runs, and why when it is the pure Python one."""
    if compiled is not None:
        return "stream path: compiled (Cython)"
    return f"stream path: pure Python ({_why})"
