"""The transactions an undo names, found in the archive (archive I/O here).

The files are those a replay of the source would read (``find.run.plan_search``); a file
is read only when its index says that a wanted GTID committed in it (its GTID state
before it lacks the GTID, after it holds it), or when its index knows no GTIDs. Each
object streams in ranged reads, decoded on the way (``job.tasks.stream_unit``), through
``EventStream`` and ``TrxTracker`` (the project's rules of where a transaction starts and
ends); a wanted transaction's events go, decompressed (MySQL's TRANSACTION_PAYLOAD,
MariaDB's compressed events), to a ``Spool``: a temporary file, so that memory holds one
event whatever the transaction's size, and the undo reads them again newest first.
"""

import os
import tempfile
from dataclasses import dataclass, field

from mysqlbackup.binlog import compressed as cz
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import contains, gtid_text
from mysqlbackup.binlog.scan import EventStream
from mysqlbackup.binlog.transactions import OUTSIDE, TrxTracker
from mysqlbackup.errors import MysqlBackupError, TornEvent, UsageError, mask_url
from replay.find.run import plan_search
from replay.job.tasks import stream_unit

_GTID_EVENTS = frozenset({ev.MARIA_GTID, ev.GTID, ev.GTID_TAGGED, ev.ANONYMOUS_GTID})
_HEADERS = frozenset({ev.FORMAT_DESCRIPTION, ev.ROTATE, ev.STOP, ev.PREVIOUS_GTIDS,
                      ev.MARIA_GTID_LIST, ev.MARIA_BINLOG_CHECKPOINT, ev.MARIA_START_ENCRYPTION,
                      ev.HEARTBEAT, ev.HEARTBEAT_V2, ev.INCIDENT})
POSITION = "at"  # the first part of a wanted key that names a transaction by where it starts


class Spool:
    """Whole events kept in a temporary file, read back by index (``spool[i]``) or in
    order; ``close`` removes it."""

    def __init__(self):
        self.file = tempfile.TemporaryFile(prefix="mysqlbackup-undo-")
        self.spans = []

    def append(self, event):
        """Keep one more event."""
        self.spans.append((self.file.seek(0, os.SEEK_END), len(event)))
        self.file.write(event)

    def __len__(self):
        return len(self.spans)

    def __getitem__(self, i):
        at, size = self.spans[i]
        self.file.seek(at)
        return self.file.read(size)

    def __iter__(self):
        for i in range(len(self.spans)):
            yield self[i]

    def close(self):
        """Remove the file."""
        self.file.close()


@dataclass
class Found:
    """One named transaction: its GTID, where it lies, its file's format description and
    its events (after its GTID event, decompressed) with the offset of each stored."""

    gtid: str
    file: str
    start: int
    fde_event: bytes
    fde: object
    checksum: bool
    events: Spool = field(default_factory=Spool)
    offsets: list = field(default_factory=list)

    @property
    def mariadb(self):
        """Whether the source is MariaDB."""
        return ev.is_mariadb_version(self.fde.server_version)

    @property
    def version(self):
        """The source's version as a tuple."""
        return ev.parse_version(self.fde.server_version)

    def where(self, i):
        """'FILE:POS' of event ``i`` (of its stored event, for a decompressed one)."""
        return f"{self.file}:{self.offsets[i]}"


def find_transactions(archive_url, archive_options, source_name, gtids, keyring=None):
    """(source, [Found]) of the wanted transactions, in commit order: ``gtids`` maps each
    key to its text as given, a key a GTID (a tuple, ``gtid.parse_one``) or (POSITION,
    file, offset) of where a transaction starts (a source without GTIDs); UsageError
    naming those the archive does not hold."""
    source, units = plan_search(archive_url, archive_options, source_name, keyring)
    wanted = dict(gtids)
    found = {}
    try:
        for unit in units:
            if len(found) == len(wanted):
                break
            if not _may_hold(unit, [(k, t) for k, t in wanted.items() if k not in found]):
                continue
            collector = _Collector(unit.name, wanted, found)
            stream_unit(unit, archive_url, archive_options or {}, collector.feed, keyring)
            collector.finish(unit.partial)
    except FileNotFoundError as e:  # the newest file's segments go once it is sealed
        for one in found.values():
            one.events.close()
        raise MysqlBackupError(f"the archive changed while it was read: {mask_url(e)} is "
                               "gone (the newest file was sealed meanwhile?); run it again") \
            from None
    except BaseException:
        for one in found.values():
            one.events.close()
        raise
    missing = [text for key, text in wanted.items() if key not in found]
    if missing:
        for one in found.values():
            one.events.close()
        raise UsageError(f"the archive of {source} holds no committed transaction "
                         f"{', '.join(missing)} (archive find shows what it holds)")
    return source, list(found.values())  # in binlog order: as the files were read


def _may_hold(unit, wanted):
    """Whether the unit may hold one of the ``wanted`` (key, text): by its name for a
    position, by the GTID states its index gives before and after it for a GTID."""
    before, after = unit.index.get("gtid_before"), unit.index.get("gtid_after")
    for key, text in wanted:
        if key[0] == POSITION:
            if key[1] == unit.name:
                return True
        elif not after or contains(after, text) and not (before and contains(before, text)):
            return True
    return False


class _Collector:
    """The wanted transactions of one file fed a chunk at a time."""

    def __init__(self, name, wanted, found):
        self.name, self.wanted, self.found = name, wanted, found
        self.tracker = TrxTracker()
        self.stream = EventStream(self._event, file=name)
        self.fde_event, self.current, self.current_key = None, None, None
        self.start = None  # where the open transaction started
    def feed(self, data):
        self.stream.feed(data)

    def finish(self, newest):
        try:
            self.stream.close()
        except TornEvent:
            if not newest:
                raise
        if self.current is not None:  # the newest file ends inside it: not committed
            self.current.events.close()
            self.current = None

    def _event(self, off, event):
        event, etype, tracker = bytes(event), event[4], self.tracker
        if tracker.state == OUTSIDE and etype not in _HEADERS:
            self.start = off
            self._opened((POSITION, self.name, off), f"{self.name}:{off}")
        if etype == ev.TRANSACTION_PAYLOAD:
            for inner in cz.plain_events(event, off, tracker.checksum, tracker.fde, self.name):
                self._keep(off, inner)
            tracker.feed(event)
        else:
            if etype in cz.MARIA_COMPRESSED:
                event = cz.maria_plain(event, tracker.checksum, tracker.fde, self.name, off)
            tracker.feed(event)
            if etype == ev.FORMAT_DESCRIPTION:
                self.fde_event = event
            elif etype in _GTID_EVENTS:
                gtid = tracker.pending_gtid
                if gtid and self.current is None:
                    self._opened(tuple(gtid[1:]), gtid_text(gtid))
                elif gtid and self.current is not None:
                    self.current.gtid = gtid_text(gtid)  # found by position: say its GTID
            else:
                self._keep(off, event)
        if self.current is not None and tracker.state == OUTSIDE:
            self.found[self.current_key], self.current = self.current, None

    def _opened(self, key, text):
        """Start keeping the transaction that started at ``self.start`` when ``key`` is
        wanted."""
        if key in self.wanted and key not in self.found:
            tracker, self.current_key = self.tracker, key
            self.current = Found(text, self.name, self.start, self.fde_event, tracker.fde,
                                 tracker.checksum)

    def _keep(self, off, event):
        if self.current is not None:
            self.current.events.append(event)
            self.current.offsets.append(off)
