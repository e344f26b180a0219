"""Object names in the archive: one pair of pure functions to build and parse them.

Layout under the archive root (``file:///path`` or ``s3://bucket/prefix``)::

    {source}/binlog/{name}                           sealed binlog file, byte-identical
    {source}/binlog/{name}.json                      its index, written last
    {source}/partial/{name}/{start}-{end}            a durable segment of the active file
    {source}/partial/{name}/{start}-{end}.json       its index

``source`` is the source's identity (server_uuid, ``server-id-N``) or ``--source-name``,
so a failover or a rebuilt primary never overwrites older files. An object whose
index is missing was never verified and does not count as archived. Names that
contain ``.tmp-`` are uploads in progress (``file://`` writes them, then renames).
"""

import re
from dataclasses import dataclass

from mysqlbackup.binlog.names import is_binlog_name
from mysqlbackup.errors import UsageError

INDEX_SUFFIX = ".json"
TMP_MARK = ".tmp-"
_SOURCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SEGMENT = re.compile(r"^(\d{12})-(\d{12})$")


@dataclass(frozen=True)
class ArchiveKey:
    """What an object name says: whose, which kind, which binlog, which segment."""

    source: str
    kind: str            # "binlog" or "partial"
    name: str            # binlog file name
    is_index: bool = False
    start: int = None    # partial segments only
    end: int = None


def check_source_name(source):
    """Raise UsageError unless ``source`` is usable as one path component."""
    if not _SOURCE.match(source or ""):
        raise UsageError(f"bad source name {source!r}: use letters, digits, '.', '_' or '-'")
    return source


def binlog_prefix(source):
    """The folder of a source's sealed binlog objects and their indexes."""
    return f"{source}/binlog"


def partial_prefix(source, name):
    """The folder of the segments (and their indexes) of one active binlog file."""
    return f"{source}/partial/{name}"


def format_key(key):
    """The object name (relative to the archive root) of an ArchiveKey."""
    if key.kind == "partial":
        base = f"{partial_prefix(key.source, key.name)}/{key.start:012d}-{key.end:012d}"
    else:
        base = f"{binlog_prefix(key.source)}/{key.name}"
    return base + (INDEX_SUFFIX if key.is_index else "")


def binlog_key(source, name, index=False):
    return ArchiveKey(source, "binlog", name, index)


def segment_key(source, name, start, end, index=False):
    return ArchiveKey(source, "partial", name, index, start, end)


def parse_key(relative):
    """The ArchiveKey of an object name, or None for anything that is not ours."""
    if TMP_MARK in relative:
        return None
    is_index = relative.endswith(INDEX_SUFFIX)
    parts = (relative[:-len(INDEX_SUFFIX)] if is_index else relative).split("/")
    if len(parts) == 3 and parts[1] == "binlog" and is_binlog_name(parts[2]):
        return ArchiveKey(parts[0], "binlog", parts[2], is_index)
    if len(parts) == 4 and parts[1] == "partial" and is_binlog_name(parts[2]):
        m = _SEGMENT.match(parts[3])
        if m:
            return ArchiveKey(parts[0], "partial", parts[2], is_index, int(m[1]), int(m[2]))
    return None
