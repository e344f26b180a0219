"""A place in a binlog sequence: file name and byte offset (pure, no I/O).

One value type from the socket to the checkpoint, the ACK, the archive and the
replay's start and stop points, instead of tuples and "FILE:POS" strings.
Positions order by the file's sequence number, then by offset.
"""

from dataclasses import dataclass
from functools import total_ordering

from mysqlbackup.binlog.names import binlog_sort_key, is_binlog_name
from mysqlbackup.errors import UsageError


@total_ordering
@dataclass(frozen=True)
class Position:
    """``file``:``offset`` in a binlog sequence (the offset of the next byte)."""

    file: str
    offset: int

    def __str__(self):
        return format_position(self)

    def __lt__(self, other):
        if not isinstance(other, Position):
            return NotImplemented
        return (binlog_sort_key(self.file), self.offset) < (binlog_sort_key(other.file),
                                                             other.offset)


def format_position(position):
    """'binlog.000012:4711' of a Position."""
    return f"{position.file}:{position.offset}"


def parse_position(text):
    """The Position of 'FILE:POS'; UsageError for anything else."""
    name, sep, offset = (text or "").rpartition(":")
    if not sep or not is_binlog_name(name) or not offset.isdigit():
        raise UsageError(f"bad position {text!r}: expected FILE:POS, e.g. binlog.000012:4711")
    return Position(name, int(offset))
