"""Binlog file names: pure functions, no I/O.

A server names its binlog files ``BASE.NNNNNN`` (at least six digits, growing as
needed). The numeric suffix orders the files; the next file after a rotation is
named by the ROTATE event itself, so these helpers only parse and sort.
"""

import re

_NAME = re.compile(r"^(?P<base>[^/\\]+)\.(?P<seq>\d{6,})$")


def parse_binlog_name(name):
    """Return (base, sequence number) of a binlog file name, or None if it is not one."""
    m = _NAME.match(name)
    if not m:
        return None
    return m.group("base"), int(m.group("seq"))


def is_binlog_name(name):
    """True when ``name`` looks like ``BASE.NNNNNN``."""
    return parse_binlog_name(name) is not None


def binlog_sort_key(name):
    """Sort key that orders binlog files of one base by their sequence number."""
    base, seq = parse_binlog_name(name)
    return (base, seq)


def next_binlog_name(name):
    """The name that follows ``name`` in its sequence (binlog.000009 -> binlog.000010),
    or None when ``name`` is not a binlog file name."""
    parsed = parse_binlog_name(name)
    if parsed is None:
        return None
    base, seq = parsed
    width = len(name) - len(base) - 1
    return f"{base}.{seq + 1:0{width}d}"
