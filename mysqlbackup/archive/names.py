"""Object names in the archive: one pair of pure functions to build and parse them.

Layout under the archive root (``file:///path`` or ``s3://bucket/prefix``)::

    {source}/binlog/{name}                           sealed binlog file, byte-identical
    {source}/binlog/{name}.json                      its index, written last
    {source}/partial/{name}/{start}-{end}            a durable segment of the active file
    {source}/partial/{name}/{start}-{end}.json       its index
    {source}/base/{id}/{member}                      a base backup (dump.sql.zst, ...)
    {source}/base/{id}/index.json                    its manifest, written last
    {source}/lease/{id}.json                         a running restore's lease
    {source}/retired/{name}.json                     a binlog file retain deleted (its raw
                                                     size and sha256): never uploaded again
    {source}/epoch/{N}/history.json                  epoch N (2, 3...): the server that took
                                                     over after a failover, where it took over
    {source}/epoch/{N}/binlog/... partial/... retired/...  that server's files, as above

``source`` is the source's identity (server_uuid, ``server-id-N``) or ``--source-name``.
Epoch 1 is the first server's (the layout of archives written before epochs); each
server a daemon follows after a failover (``stream --follow-by-gtid``) gets the next
epoch, a namespace of its own: no server's file can collide with another's of the
same name. The binlog keys of epoch N > 1 carry ``{source}/epoch/{N}`` where epoch 1's
carry ``{source}`` (``epoch_source``), so that everything keyed by a source works on
one epoch unchanged. A base id is the
UTC time the backup started (``20261123T094100.123Z``, sorts in time order). An object whose
index is missing was never verified and does not count as archived. Names that
contain ``.tmp-`` are uploads in progress (``file://`` writes them, then renames).
"""

import re
from dataclasses import dataclass, replace

from mysqlbackup.binlog.names import is_binlog_name
from mysqlbackup.errors import UsageError

INDEX_SUFFIX = ".json"
TMP_MARK = ".tmp-"
_SOURCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_EPOCH = re.compile(r"^[1-9]\d{0,5}$")
_SEGMENT = re.compile(r"^(\d{12})-(\d{12})$")
_BASE_ID = re.compile(r"^\d{8}T\d{6}\.\d{3}Z$")
_LEASE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
BASE_INDEX = "index.json"
HISTORY = "history.json"
# the object a base backup of each method stores (zstd-compressed)
BASE_MEMBERS = {"dump": "dump.sql.zst", "physical": "backup.xbstream.zst",
                "clone": "datadir.tar.zst"}


@dataclass(frozen=True)
class ArchiveKey:
    """What an object name says: whose, which kind, which binlog, which segment."""

    source: str
    kind: str            # "binlog", "partial", "base", "lease", "retired" or "history"
    name: str            # binlog file name; base id; lease id; retired binlog file name
    is_index: bool = False
    start: int = None    # partial segments only
    end: int = None
    member: str = None   # base backups only: the object inside the base's folder


def check_source_name(source):
    """Raise UsageError unless ``source`` is usable as one path component."""
    if not _SOURCE.match(source or ""):
        raise UsageError(f"bad source name {source!r}: use letters, digits, '.', '_' or '-'")
    return source


def epoch_source(source, epoch):
    """The key source of a source's epoch: ``source`` for epoch 1, else
    ``{source}/epoch/{N}`` (sealed files, segments and retired marks live under it)."""
    return source if epoch == 1 else f"{source}/epoch/{epoch}"


def split_epoch(key_source):
    """(source, epoch) of a key source that ``epoch_source`` made."""
    parts = key_source.split("/")
    if len(parts) == 3 and parts[1] == "epoch" and _EPOCH.match(parts[2]):
        return parts[0], int(parts[2])
    return key_source, 1


def history_key(source, epoch):
    """The history object of epoch ``epoch`` (> 1) of ``source``."""
    return ArchiveKey(epoch_source(source, epoch), "history", HISTORY, True)


def epoch_prefix(source):
    """The folder of a source's later epochs."""
    return f"{source}/epoch"


def binlog_prefix(source):
    """The folder of a source's sealed binlog objects and their indexes."""
    return f"{source}/binlog"


def partial_prefix(source, name):
    """The folder of the segments (and their indexes) of one active binlog file."""
    return f"{source}/partial/{name}"


def base_prefix(source, base_id=None):
    """The folder of a source's base backups, or of one of them."""
    return f"{source}/base" + (f"/{base_id}" if base_id else "")


def lease_prefix(source):
    """The folder of a source's leases (restores running now)."""
    return f"{source}/lease"


def retired_prefix(source):
    """The folder of the marks of binlog files that retention deleted."""
    return f"{source}/retired"


def format_base_id(epoch):
    """The id of a base backup started at ``epoch`` (seconds, UTC)."""
    from datetime import datetime, timezone
    moment = datetime.fromtimestamp(epoch, timezone.utc)
    return moment.strftime("%Y%m%dT%H%M%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_base_id(text):
    """Epoch seconds (UTC) of a base id, or UsageError."""
    from datetime import datetime, timezone
    if not _BASE_ID.match(text or ""):
        raise UsageError(f"bad base id {text!r}: expected e.g. 20261123T094100.123Z")
    moment = datetime.strptime(text[:-1], "%Y%m%dT%H%M%S.%f")
    return moment.replace(tzinfo=timezone.utc).timestamp()


def base_key(source, base_id, member=BASE_INDEX):
    """The key of a base backup's object ``member`` (default: its manifest)."""
    return ArchiveKey(source, "base", base_id, member == BASE_INDEX, member=member)


def lease_key(source, lease_id):
    return ArchiveKey(source, "lease", lease_id, True)


def retired_key(source, name):
    """The mark that retention deleted the sealed binlog file ``name``."""
    return ArchiveKey(source, "retired", name, True)


def format_key(key):
    """The object name (relative to the archive root) of an ArchiveKey."""
    if key.kind == "history":
        return f"{key.source}/{HISTORY}"
    if key.kind == "retired":
        return f"{retired_prefix(key.source)}/{key.name}{INDEX_SUFFIX}"
    if key.kind == "base":
        return f"{base_prefix(key.source, key.name)}/{key.member}"
    if key.kind == "lease":
        return f"{lease_prefix(key.source)}/{key.name}{INDEX_SUFFIX}"
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
    if len(parts) >= 4 and parts[1] == "epoch" and _EPOCH.match(parts[2]) \
            and int(parts[2]) > 1:
        source = "/".join(parts[:3])
        if parts[3:] == [HISTORY[:-len(INDEX_SUFFIX)]] and is_index:
            return ArchiveKey(source, "history", HISTORY, True)
        key = _parse_parts([parts[0]] + parts[3:], is_index)
        if key is None or key.kind not in ("binlog", "partial", "retired"):
            return None
        return replace(key, source=source)
    return _parse_parts(parts, is_index)


def _parse_parts(parts, is_index):
    if len(parts) == 3 and parts[1] == "binlog" and is_binlog_name(parts[2]):
        return ArchiveKey(parts[0], "binlog", parts[2], is_index)
    if len(parts) == 4 and parts[1] == "base" and _BASE_ID.match(parts[2]):
        if parts[3] == BASE_INDEX and not is_index:
            return None
        member = parts[3] + (INDEX_SUFFIX if is_index else "")
        if member == BASE_INDEX or member in BASE_MEMBERS.values():
            return base_key(parts[0], parts[2], member)
    if len(parts) == 3 and parts[1] == "lease" and is_index and _LEASE_ID.match(parts[2]):
        return lease_key(parts[0], parts[2])
    if len(parts) == 3 and parts[1] == "retired" and is_index and is_binlog_name(parts[2]):
        return retired_key(parts[0], parts[2])
    if len(parts) == 4 and parts[1] == "partial" and is_binlog_name(parts[2]):
        m = _SEGMENT.match(parts[3])
        if m:
            return ArchiveKey(parts[0], "partial", parts[2], is_index, int(m[1]), int(m[2]))
    return None
