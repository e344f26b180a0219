"""Which fused stream loop runs: the compiled one (``mysqlbackup._speedups``, built by
Cython when a C compiler and zlib's headers are there at install time) or its pure
Python twin (``mysqlbackup.fusedloop``), which takes the same arguments and gives the
same results.

``fused`` is the module in use; ``compiled`` the configured compiled module, or None: not
built, failed to load, or turned off with ``MYSQLBACKUP_PURE_PYTHON=1``. ``describe()``
says which, for ``--version`` and the daemon's start-up line. Both write the same bytes
and raise the same errors.
"""

import os

from mysqlbackup import fusedloop
from mysqlbackup.binlog import events as ev
from mysqlbackup.source import protocol

PURE_ENV = "MYSQLBACKUP_PURE_PYTHON"
# events up to this size get their CRC from zlib inline; larger ones from ``ev.crc32``
# (zlib-ng's SIMD code when installed: many times faster on long events)
INLINE_CRC_MAX = 2048


def _load():
    """The compiled module, configured, or (None, why not)."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None, f"turned off by {PURE_ENV}"
    try:
        from mysqlbackup import _speedups
    except ImportError as e:
        return None, f"not built ({e})"
    if getattr(_speedups, "TWIN", None) != fusedloop.TWIN:
        return None, "built from another version (reinstall the package)"
    _speedups.configure(fusedloop.KINDS, ev.CRC_RESIDUE, ev.LOG_EVENT_ARTIFICIAL_F,
                        ev.FL_STANDALONE, protocol.MAX_PAYLOAD, protocol.SEMI_SYNC_INDICATOR,
                        protocol.SEMI_SYNC_NEED_ACK, ev.crc32, INLINE_CRC_MAX,
                        fusedloop.SQUEEZE_MAX)
    return _speedups, "compiled"


compiled, _why = _load()
fused = compiled if compiled is not None else fusedloop


def describe():
    """One line: which stream loop runs, and why when it is the pure Python one."""
    if compiled is not None:
        return "stream path: compiled (Cython)"
    return f"stream path: pure Python ({_why})"
