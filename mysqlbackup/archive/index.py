"""The JSON index kept beside each archived object (pure: built from bytes, whole or
streamed a chunk at a time).

Replay picks files for a stop point from these without reading the files: size,
sha256, first/last GTID, first/last commit time (UTC), transaction count, the
GTID set before and after the file, the server that wrote it, its predecessor
and the file its ROTATE names; ``statements``: how many of its transactions hold a
logged statement or its context (statement-based DML: a native apply runs those
one thread, ``replay.restore.native``; absent from an index written before it).

The checks over indexes live here too (``compare_index``, ``check_chain``,
``check_segments``): each problem is a short sentence naming the object and, where it
applies, the offset; ``verify``, ``archive import`` and the replay's plan feed them.
"""

import hashlib
import json

from mysqlbackup.archive.names import binlog_key, format_key, partial_prefix, segment_key
from mysqlbackup.archive.objects import form_problem
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import gtid_text
from mysqlbackup.binlog.names import next_binlog_name
from mysqlbackup.binlog.scan import EventStream
from mysqlbackup.binlog.transactions import IN_TRX, INERT_IN_TRX, TrxTracker, is_control
from mysqlbackup.errors import CorruptBinlog
from mysqlbackup.utc import iso

INDEX_VERSION = 1


def build_index(data, name, predecessor=None, start=0, tracker=None, source=None,
                where=None):
    """Index of ``data``: a whole file (start 0) or a segment of one beginning at ``start``
    (whole bytes in memory: ``IndexBuilder`` fed them at once).

    A segment after the first needs the ``tracker`` that followed the bytes before
    it (its checksum setting and GTID state); the tracker is advanced through it.
    Damaged bytes raise CorruptBinlog naming ``where`` (default: ``name``).
    """
    builder = IndexBuilder(name, predecessor, start, tracker, source, where,
                           end=start + len(data))
    builder.update(data)
    return builder.finish()


class IndexBuilder:
    """The index of a file or segment fed a chunk at a time, in one pass that holds one
    event at most: ``update(chunk)`` hashes the bytes and walks their events
    (``scan.EventStream``: magic, framing, every CRC), ``finish()`` checks the end and
    returns the index, the same as ``build_index`` over the same bytes. ``size`` and
    ``sha256`` are the raw bytes' so far: ``codec.encode`` takes a builder as the
    digest of the raw side (``raw``), so that the bytes it encodes are the bytes
    indexed. ``end``: the file offset the bytes will end at, when known (see
    EventStream). ``boundary``: where the last complete transaction ends."""

    def __init__(self, name, predecessor=None, start=0, tracker=None, source=None,
                 where=None, end=None):
        self.tracker = tracker = tracker or TrxTracker()
        self.name, self.predecessor, self.start, self.source = name, predecessor, start, source
        self.before = str(tracker.gtids) if tracker.gtids is not None else None
        self.info = {"first_gtid": None, "last_gtid": None, "first_commit": None,
                     "last_commit": None, "transactions": 0, "next_file": None,
                     "server_id": None, "statements": 0}
        self._statement_open = False  # the open transaction holds a statement
        self.size, self._sha = 0, hashlib.sha256()
        self.boundary = start or len(ev.MAGIC)
        self.stream = EventStream(self._event, where or name, start=start,
                                  checksum=None if start == 0 else tracker.checksum,
                                  end=end, bounded=True)

    def update(self, data):
        """The next raw bytes."""
        self._sha.update(data)
        self.size += len(data)
        self.stream.feed(data)

    @property
    def sha256(self):
        return self._sha.hexdigest()

    def _event(self, off, event):
        tracker = self.tracker
        if tracker.state == IN_TRX and event[4] in INERT_IN_TRX:
            return  # the bulk of a row-based file: nothing to count
        if tracker.state == IN_TRX and _is_statement(event, tracker):
            self._statement_open = True
        ended = _account(self.info, tracker, event, off == 4)
        if ended:
            self.info["statements"] += self._statement_open
            self._statement_open = False
        if event[4] == ev.FORMAT_DESCRIPTION and self.start == 0:
            self.before = None
        if event[4] in (ev.MARIA_GTID_LIST, ev.PREVIOUS_GTIDS) and self.before is None:
            self.before = str(tracker.gtids)
        if tracker.at_boundary:
            self.boundary = off + len(event)

    def finish(self):
        """The index of every byte fed; CorruptBinlog when they end inside an event."""
        self.stream.close()
        info, tracker = self.info, self.tracker
        return {
            "version": INDEX_VERSION, "name": self.name, "source": self.source,
            "start": self.start, "end": self.start + self.size, "size": self.size,
            "sha256": self.sha256, "predecessor": self.predecessor,
            "gtid_before": self.before,
            "gtid_after": str(tracker.gtids) if tracker.gtids is not None else None,
            "complete_transactions": tracker.at_boundary, **info,
            "first_commit": info["first_commit"] and iso(info["first_commit"]),
            "last_commit": info["last_commit"] and iso(info["last_commit"]),
        }


# events that carry a logged statement's context (INTVAR, RAND, USER_VAR, LOAD DATA)
STATEMENT_CONTEXT = frozenset({ev.INTVAR, ev.RAND, ev.USER_VAR, ev.BEGIN_LOAD_QUERY,
                               ev.APPEND_BLOCK, ev.EXECUTE_LOAD_QUERY})


def _is_statement(event, tracker):
    """True for an event inside a transaction that makes it statement-based: a QUERY
    that is more than BEGIN/COMMIT/savepoints/XA, or a statement's context."""
    if event[4] in STATEMENT_CONTEXT:
        return True
    return event[4] == ev.QUERY and not is_control(
        ev.parse_query(event, tracker.checksum, tracker.fde, max_sql=32).sql)


def _account(info, tracker, event, is_first):
    """Count ``event`` into ``info``; True when it ended a transaction."""
    header = ev.parse_header(event)
    if is_first:
        info["server_id"] = header.server_id
    count = tracker.transactions
    tracker.feed(event)
    if tracker.transactions > count:
        info["transactions"] += 1
        info["first_commit"] = info["first_commit"] or header.timestamp
        info["last_commit"] = header.timestamp  # a timestamp until build_index ends
        gtid = gtid_text(tracker.last_gtid)
        if gtid:
            info["first_gtid"] = info["first_gtid"] or gtid
            info["last_gtid"] = gtid
    if header.type == ev.ROTATE and not ev.is_artificial(header):
        info["next_file"] = ev.parse_rotate(event, tracker.checksum)[1]
    return tracker.transactions > count


_TEXT, _COUNT, _FLAG = (str,), (int,), (bool,)
_OPTIONAL_TEXT = (str, type(None))
_OPTIONAL_COUNT = (int, type(None))
# every field build_index writes, with the types a sound index may hold there
INDEX_FIELDS = {
    "version": _COUNT, "name": _TEXT, "source": _OPTIONAL_TEXT, "start": _COUNT,
    "end": _COUNT, "size": _COUNT, "sha256": _TEXT, "predecessor": _OPTIONAL_TEXT,
    "gtid_before": _OPTIONAL_TEXT, "gtid_after": _OPTIONAL_TEXT,
    "complete_transactions": _FLAG, "first_gtid": _OPTIONAL_TEXT, "last_gtid": _OPTIONAL_TEXT,
    "first_commit": _OPTIONAL_TEXT, "last_commit": _OPTIONAL_TEXT, "transactions": _COUNT,
    "next_file": _OPTIONAL_TEXT, "server_id": _OPTIONAL_COUNT,
}
_HEX = frozenset("0123456789abcdef")
# how the object is stored (codec.stored_fields); absent from indexes written before
# codecs, which mean: stored as it is (codec "none", stored size and sha256 the raw ones)
STORED_FIELDS = {"codec": _TEXT, "stored_size": _COUNT, "stored_sha256": _TEXT,
                 "key_ids": (list,)}
# fields added since, absent from older indexes (their readers say what absence means)
LATER_FIELDS = {"statements": _COUNT}
CODECS = ("none", "zstd", "age", "zstd+age")


def parse_index(raw, where, name=None, start=None, end=None):
    """The index dict in ``raw`` (the bytes of an index object) or CorruptBinlog naming it.

    ``name``, ``start``, ``end``: what the object's key says (see validate_index).
    """
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise CorruptBinlog("index is not JSON", file=where) from None
    return validate_index(obj, where, name, start, end)


def validate_index(obj, where, name=None, start=None, end=None):
    """``obj`` when it is a sound index, else CorruptBinlog naming ``where`` and the fault.

    Sound: a dict with every field ``build_index`` writes, each of its type, a
    64-digit sha256, ``end == start + size``; and, when given, the binlog ``name``
    and segment bounds the object's key says. The fields of how the object is stored
    (``STORED_FIELDS``: codec, stored_size, stored_sha256, key_ids) are optional: an
    index written before them means a plain object.
    """
    if not isinstance(obj, dict) or not obj:
        raise CorruptBinlog(f"index is not an index object: {_short(obj)}", file=where)
    problem = _field_problem(obj) or _consistency_problem(obj, name, start, end)
    if problem:
        raise CorruptBinlog(f"bad index: {problem}", file=where)
    return obj


def _field_problem(obj):
    missing = [f for f in INDEX_FIELDS if f not in obj]
    if missing:
        return "missing " + ", ".join(missing)
    for field, types in INDEX_FIELDS.items():
        value = obj[field]
        bad_bool = isinstance(value, bool) and bool not in types
        if bad_bool or not isinstance(value, types):
            return f"{field} is {_short(value)}"
        if types is _COUNT and value < 0:
            return f"{field} is {value}"
    if len(obj["sha256"]) != 64 or not set(obj["sha256"]) <= _HEX:
        return f"sha256 is {_short(obj['sha256'])}"
    return _stored_problem(obj)


def _stored_problem(obj):
    """What is wrong with the optional fields of how the object is stored, or None."""
    for field, types in {**STORED_FIELDS, **LATER_FIELDS}.items():
        value = obj.get(field)
        if field in obj and (isinstance(value, bool) or not isinstance(value, types)
                             or (types is _COUNT and value < 0)):
            return f"{field} is {_short(value)}"
    if obj.get("codec", "none") not in CODECS:
        return f"codec is {_short(obj['codec'])}"
    digest = obj.get("stored_sha256", obj["sha256"])
    if len(digest) != 64 or not set(digest) <= _HEX:
        return f"stored_sha256 is {_short(digest)}"
    if not all(isinstance(k, str) for k in obj.get("key_ids", [])):
        return f"key_ids is {_short(obj['key_ids'])}"
    return form_problem(obj)


def _consistency_problem(obj, name, start, end):
    if obj["end"] != obj["start"] + obj["size"]:
        return f"end {obj['end']} is not start {obj['start']} + size {obj['size']}"
    if name is not None and obj["name"] != name:
        return f"name {obj['name']!r} (the object is {name})"
    if start is not None and (obj["start"], obj["end"]) != (start, end):
        return f"covers {obj['start']}-{obj['end']} (the object is {start}-{end})"
    return None


def _short(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# index fields that must equal the ones recomputed from the object's bytes
_COMPARED = ("size", "sha256", "transactions", "first_gtid", "last_gtid", "first_commit",
             "last_commit", "next_file", "gtid_before", "gtid_after")


def compare_index(where, index, fresh):
    """Problems where ``index`` differs from ``fresh`` (recomputed from the object's bytes)."""
    return [f"{where}: index says {field} {index.get(field)!r}, the object has {fresh[field]!r}"
            for field in _COMPARED if index.get(field) != fresh[field]]


def check_chain(source, indexes):
    """Problems in the order of sealed files: missing files, GTID holes.

    ``indexes``: the index dicts of the sealed files, oldest first.
    """
    problems = []
    for prev, cur in zip(indexes, indexes[1:]):
        where = format_key(binlog_key(source, cur["name"]))
        expected = prev.get("next_file") or next_binlog_name(prev["name"])
        if expected != cur["name"]:
            problems.append(f"{format_key(binlog_key(source, expected))}: missing "
                            f"({prev['name']} is followed by it, the archive goes on with "
                            f"{cur['name']})")
        elif prev.get("gtid_after") != cur.get("gtid_before"):
            problems.append(f"{where}: GTID hole: {prev['name']} ends at "
                            f"{prev.get('gtid_after')!r}, {cur['name']} starts after "
                            f"{cur.get('gtid_before')!r}")
    return problems


def check_segments(source, name, segments, last_sealed, in_flight=()):
    """Problems of the active file's segments: contiguous from 0, after the last sealed file.

    ``segments``: (start, end, index or None) sorted by start; a segment whose start
    is in ``in_flight`` may lack its index (its upload is under way).
    """
    where = partial_prefix(source, name)
    problems, pos = [], 0
    for start, end, index in segments:
        if start != pos:
            problems.append(f"{where} at offset {pos}: segment missing (next starts at {start})")
        if index is None and start not in in_flight:
            problems.append(f"{format_key(segment_key(source, name, start, end))}: no index "
                            f"(upload not finished)")
        pos = end
    if last_sealed and last_sealed.get("next_file") not in (None, name):
        problems.append(f"{where}: follows {last_sealed['name']}, whose ROTATE names "
                        f"{last_sealed['next_file']}")
    return problems
