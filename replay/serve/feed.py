"""Archive objects -> the events of one binlog dump, as a primary would send them.

``dump_events`` walks the planned units (``replay.planning.plan.units_to_read``: sealed files and the
newest file's segments, through the archive's codec) from where the replica asks:

* by file:position (``COM_BINLOG_DUMP`` FILE, POS): the fake ROTATE to FILE:POS, the
  file's format description (resent with log_pos 0 past offset 4), then the events
  from POS, which must be the start of a transaction;
* by GTID (``@slave_connect_state``): the first file holding a transaction the state
  lacks (from the indexes' GTID states), the fake ROTATE to its offset 4, its
  header events, the transactions the replica holds skipped, then the fake GTID_LIST
  a server sends once the state is reached, then the rest.

Only whole transactions go out (an incomplete tail of the newest file never does;
a transaction waits whole, its events past ``SPOOL_LIMIT`` in a temporary file).
The replay's ``Selection`` decides each one: a stop point ends the stream (what
follows is heartbeats), an excluded one (or one of a replay's own bookkeeping)
goes out empty (its GTID event and its commit event), so that the replica's GTID
position stays gap-free. A position or state the archive lacks is a ``DumpRefused``:
the server's own ER 1236 message, never a silent jump. Every event's CRC32 is
checked as it is read, each object's size and sha256 against its index once it is
read whole (a mismatch then ends the dump with ER 1236).
"""

import queue
import struct
import tempfile
import threading
from dataclasses import dataclass

from mysqlbackup.binlog import compressed as cz
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos, gtid_text
from mysqlbackup.binlog.scan import EventStream
from mysqlbackup.binlog.transactions import OUTSIDE, TrxTracker, classify_sql
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError, TornEvent
from mysqlbackup.binlog.tablemap import table_of
from replay.job.decoding.transaction import Transaction
from replay.serve.protocol import packets as pk

NOT_IN_INDEX = "Could not find first log file name in binary log index file"
STATE_TOO_OLD = ("Could not find GTID state requested by slave in any binlog files. Probably "
                 "the slave state is too old and required binlog files have been purged.")
IMPOSSIBLE_POSITION = "Client requested master to start replication from impossible position"
BOGUS_DATA = "bogus data in log event"
NO_CHECKSUM = ("Slave can not handle replication events with the checksum that master is "
               "configured to log")
QUEUE_CHUNKS = 4


class DumpRefused(MysqlBackupError):
    """What the primary answers a dump it cannot serve: ER 1236 and its message."""

    def __init__(self, message, code=pk.ER_MASTER_FATAL_READING_BINLOG):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class EndInfo:
    """Where a dump ended: the file and position its heartbeats name, the last
    transaction the replica was sent (or holds), and why."""

    file: str
    pos: int
    last_gtid: str = None
    reason: str = "end of the archive"
    epoch: int = 1                # the epoch of the source's history ``file`` is in


@dataclass
class DumpStart:
    """Where the replica asked to start: a file and position, or a GTID state."""

    file: str = ""
    pos: int = 4
    gtids: MariaGtidPos = None   # set: by GTID (MariaDB @slave_connect_state)
    epoch: int = None            # the file's epoch when known (a dump resumed by serve)


def read_error(what, file, first, last_event=4, last_byte=4):
    """mariadbd's ER 1236 text for a dump it cannot read from: ``what``, then where
    (an empty file name shows as '.', as mariadbd shows it)."""
    file = file or "."
    return (f"{what}; the first event '{file}' at {first}, the last event read from "
            f"'{file}' at {last_event}, the last byte read from '{file}' at {last_byte}.")


def not_in_binlog(gtid):
    return (f"Error: connecting slave requested to start from GTID {gtid}, which is not in "
            "the master's binlog")


# --- where to start ---------------------------------------------------------------

def first_unit(units, start):
    """(index of the unit to start from, offset in it) for ``start``; DumpRefused when the
    archive does not hold it."""
    if not units:
        raise DumpRefused(NOT_IN_INDEX)
    if start.gtids is None:
        return _file_start(units, start)
    state = start.gtids
    _check_not_ahead(state, units[-1].index.get("gtid_after") or "")
    at = next((i for i, u in enumerate(units) if not _holds(state, u.index.get("gtid_after"))),
              len(units) - 1)
    before = MariaGtidPos.parse(units[at].index.get("gtid_before") or "")
    if not all(state.contains(d, s, n) for d, (s, n) in before.domains.items()):
        raise DumpRefused(STATE_TOO_OLD)
    return at, 4


def _check_not_ahead(state, last_text):
    """DumpRefused (as a server checks before it sends anything) when the replica's state
    names a GTID past the archive's last one in its domain, or of a domain it lacks."""
    last = MariaGtidPos.parse(last_text)
    for d, (s, n) in state.domains.items():
        held = last.domains.get(d)
        if held is None or n > held[1] or (n == held[1] and s != held[0]):
            raise DumpRefused(not_in_binlog(f"{d}-{s}-{n}"))


def _holds(state, text):
    """True when ``state`` holds every transaction up to the GTID state ``text``."""
    if not text or "-" not in text:
        return True
    return all(state.contains(d, s, n) for d, (s, n) in MariaGtidPos.parse(text).domains.items())


def _file_start(units, start):
    """The unit and offset of a dump by file:position (an empty name: the first file),
    refused as mariadbd refuses it: a name the archive lacks, a position before the
    first event (under 4) or past the file's end (a position inside an event is found
    as the file is read: ``_Walk.unit``)."""
    names = [u.name for u in units]
    if start.file and start.file not in names:
        raise DumpRefused(NOT_IN_INDEX)
    keys = [(u.epoch, u.name) for u in units]
    if start.epoch is not None and (start.epoch, start.file) in keys:
        at = keys.index((start.epoch, start.file))
    elif names.count(start.file) > 1:
        raise DumpRefused(f"{start.file} is in several epochs of the archive's history (a "
                        "failover to a server that reuses the file names): connect by GTID "
                        "(MASTER_USE_GTID) to be served across it")
    else:
        at = names.index(start.file) if start.file else 0
    if start.pos < 4 or start.pos > file_end(units[at]):
        raise DumpRefused(read_error(IMPOSSIBLE_POSITION, start.file, start.pos))
    return at, start.pos


def file_end(unit):
    """Where the unit's bytes end in its file (the newest file: its last segment's end)."""
    index = unit.index
    return index.get("end") or index.get("size") or 0


def gtid_state_at(units, file, pos):
    """The GTID state at FILE:POS when the indexes know it (a file's start or end)."""
    for unit in units:
        if unit.name == file:
            index = unit.index
            if pos <= 4:
                return index.get("gtid_before") or ""
            if pos == file_end(unit):
                return index.get("gtid_after")
    return None


# --- reading ----------------------------------------------------------------------

class _Closed(Exception):
    """The consumer went away: the reading thread stops."""


def unit_chunks(unit, url, options, keyring=None):
    """The raw bytes of one unit, a chunk at a time, read (and decoded) by a thread
    ahead of the consumer (a few chunks at most). Each object's raw size and sha256
    are compared with its index at its end (CorruptBinlog naming it)."""
    from replay.job.tasks import stream_unit
    chunks, closed = queue.Queue(maxsize=QUEUE_CHUNKS), threading.Event()

    def offer(item):
        while not closed.is_set():
            try:
                chunks.put(item, timeout=0.2)
                return
            except queue.Full:
                continue
        raise _Closed()

    def run():
        try:
            offer(("done", stream_unit(unit, url, options,
                                       lambda c: offer(("chunk", bytes(c))), keyring)))
        except _Closed:
            return
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            try:
                offer(("error", e))
            except _Closed:
                return
    threading.Thread(target=run, name=f"serve-read-{unit.name}", daemon=True).start()
    try:
        while True:
            kind, value = chunks.get()
            if kind == "chunk":
                yield value
            elif kind == "error":
                raise value
            else:
                return _check_objects(unit, value)
    finally:
        closed.set()


def _check_objects(unit, digests):
    for obj, (size, sha) in zip(unit.objects, digests):
        if (size, sha) != (obj.index.get("size"), obj.index.get("sha256")):
            raise CorruptBinlog(f"the object has {size} bytes, sha256 {sha[:16]}..., not "
                                "its index's: not the archived object (replaced or cut)",
                                obj.key)


def walk_events(chunks, name, newest):
    """(offset, event bytes) of the unit's events, each checked (framing, CRC32); the
    newest file may end inside an event (that tail is left out)."""
    found = []
    stream = EventStream(lambda off, event: found.append((off, bytes(event))), file=name)
    for chunk in chunks:
        stream.feed(chunk)
        batch, found[:] = list(found), []
        yield from batch
    try:
        stream.close()
    except TornEvent:
        if not newest:
            raise
    yield from found


SPOOL_LIMIT = 64 << 20   # bytes of one transaction's events held in memory


class Spool:
    """The events of one transaction: the first ones in memory up to ``SPOOL_LIMIT``
    bytes, the rest in a temporary file (a huge transaction is never held whole in
    memory until its end decides what to do with it). Iterable again and again;
    ``[0]`` and ``[-1]`` are always at hand; ``close`` drops the file."""

    def __init__(self, limit=None):
        self.limit = SPOOL_LIMIT if limit is None else limit
        self.head, self.size, self.count, self.last, self.file = [], 0, 0, None, None

    def append(self, event):
        self.count, self.last = self.count + 1, event
        if self.file is None and (not self.head or self.size + len(event) <= self.limit):
            self.head.append(event)
            self.size += len(event)
            return
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="mysqlbackup-serve-")
        self.file.write(struct.pack("<I", len(event)) + event)

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        if i == 0 and self.head:
            return self.head[0]
        if i == -1 and self.last is not None:
            return self.last
        raise IndexError("a spooled transaction gives its first and last event only")

    def __iter__(self):
        yield from self.head
        if self.file is None:
            return
        self.file.flush()
        self.file.seek(0)
        for _ in range(self.count - len(self.head)):
            size = struct.unpack("<I", self.file.read(4))[0]
            yield self.file.read(size)
        self.file.seek(0, 2)

    def __reversed__(self):
        return reversed(list(self))

    def close(self):
        if self.file is not None:
            self.file.close()
            self.file = None


class Grouper:
    """Events in, ('header', offset, event) or ('trx', Transaction) out: a transaction
    comes out once whole (``TrxTracker``'s boundaries), events outside one at once."""

    def __init__(self, name):
        self.name, self.tracker, self.current = name, TrxTracker(), None

    def take(self, off, event):
        """The item ``event`` completes, or None while a transaction is open."""
        tracker = self.tracker
        count = tracker.transactions
        # a compressed statement (MariaDB, log_bin_compress): the tracker reads its text
        tracker.feed(cz.maria_plain(event, tracker.checksum, tracker.fde, self.name, off)
                     if event[4] == cz.MARIA_QUERY_COMPRESSED else event)
        if self.current is None:
            if tracker.state == OUTSIDE and tracker.transactions == count:
                return "header", off, event
            self.current = {"start": off, "events": Spool(), "tables": set()}
        current = self.current
        current["events"].append(event)
        if event[4] == ev.TABLE_MAP:
            current["tables"].add(table_of(event))
        if tracker.state != OUTSIDE:
            return None
        self.current = None
        gtid = tracker.last_gtid
        return "trx", Transaction(
            file=self.name, start=current["start"], end=off + len(event), gtid=gtid_text(gtid),
            gtid_parts=list(gtid[1:]) if gtid else None,
            commit_ts=ev.parse_header(event).timestamp, tables=sorted(current["tables"]),
            events=current["events"])


# --- empty transactions -----------------------------------------------------------

def emptied(trx, checksum, fde):
    """The events of ``trx`` as an empty transaction: its GTID event and its commit
    (XID or COMMIT), or for a statement alone (a DDL) the GTID event and the statement
    turned into ``DO 0``; both keep their log_pos, so the replica's position moves as
    if it had all."""
    first, last = trx.events[0], trx.events[-1]
    if first[4] != ev.MARIA_GTID:
        raise DumpRefused(f"cannot skip the transaction at {trx.file}:{trx.start}: it has no "
                        "MariaDB GTID event")
    if last[4] == ev.XID or (last[4] == ev.QUERY and classify_sql(
            ev.parse_query(last, checksum, fde, max_sql=16).sql) == "commit"):
        return [first, last]
    statement = None
    for event in trx.events:  # forward: a spooled transaction is read back one event a time
        if event[4] == ev.QUERY:
            statement = event
        elif event[4] == cz.MARIA_QUERY_COMPRESSED:  # its header kept, sent plain
            statement = cz.maria_plain(event, checksum, fde, trx.file)
    if statement is None:
        raise DumpRefused(f"cannot skip the transaction at {trx.file}:{trx.start}: no "
                        "statement event to empty")
    return [first, with_sql(statement, b"DO 0", checksum, fde, log_pos=ev.parse_header(
        last).log_pos)]


def with_sql(event, sql, checksum, fde, log_pos):
    """The QUERY event with another statement text (its status and schema kept)."""
    body, _, _, sql_start = ev.query_parts(event, checksum, fde)
    new_body = bytes(body[:sql_start]) + sql
    header = ev.parse_header(event)
    return pk.make_event(ev.QUERY, new_body, header.server_id, log_pos, checksum, header.flags,
                         header.timestamp)


# --- the dump ---------------------------------------------------------------------

@dataclass
class DumpContext:
    """What ``dump_events`` needs besides the units: the reader, the selection, who we
    are and the replica's settings."""

    chunks: object            # callable unit -> iterator of raw chunks
    selection: object         # replay.planning.selection.Selection
    server_id: int
    checksum: bool            # the server's binlog_checksum (the fake events' CRC32)
    cut_reason: str = None    # why the plan left the archive's later files out
    annotate: bool = True     # the dump asked for ANNOTATE_ROWS (BINLOG_SEND_ANNOTATE_ROWS)
    heartbeat_v2: bool = False  # MySQL: the dump asked for HEARTBEAT_LOG_EVENT_V2
    rotate_checksum: bool = None  # the first fake ROTATE's CRC32: as the replica's
    # @master_binlog_checksum says (None: the server's setting)
    catalog: object = None    # catalog.Catalog: told of each TABLE_MAP sent


def dump_events(units, start, ctx, resume=False, walk_class=None):
    """Yield ('event', bytes) in dump order, then ('end', EndInfo) once the stop point
    or the end of the archive is reached. DumpRefused when the archive lacks the start.

    ``resume``: the dump goes on at ``start`` (file:position) after the archive grew
    while it waited: the replica has the file's ROTATE and FDE already (at offset 4 of
    a next file it gets them, as after a real ROTATE). ``walk_class``: the walk of the
    primary's flavor (``_Walk``, MariaDB's; ``mysqlfeed.MysqlWalk``)."""
    walk_class = walk_class or _Walk
    at, pos = walk_class.first_unit(units, start)
    walk = walk_class(start, ctx)
    for i, unit in enumerate(units[at:]):
        yield from walk.unit(unit, pos if i == 0 else 4, i == 0, i == 0 and resume and pos > 4)
        if walk.end is not None:
            break
    yield from walk.finish()


class _Walk:
    """The state of one dump across files (a MariaDB primary's)."""

    first_unit = staticmethod(first_unit)

    def __init__(self, start, ctx):
        self.ctx, self.start, self.state = ctx, start, start.gtids
        self.duplicates = MariaGtidPos()
        self.reached = {d: False for d in self.state.domains} if self.state is not None else {}
        self.list_sent = self.state is None
        self.file, self.pos, self.end, self.last_gtid = None, 4, None, None
        self.epoch = 1
        self.checksum = False
        if self.state is not None and self.state.domains:
            self.last_gtid = str(self.state)

    def unit(self, unit, offset, first, resumed=False):
        """The events of one unit from ``offset`` on (``resumed``: the replica has its
        ROTATE and FDE)."""
        ctx, name = self.ctx, unit.name
        self.file, self.pos, self.resumed = name, offset, resumed
        self.epoch = unit.epoch
        # a later epoch's first file: what the epoch before it ended with are duplicates
        self.duplicates = self._skip_set(unit)
        if not resumed:
            yield "event", pk.fake_rotate(name, offset, ctx.server_id,
                                          self._rotate_checksum(first))
        if first and self.state is not None:
            self._note_start_state(unit)
        grouper, checksum, fde = Grouper(name), False, None
        for off, event in walk_events(ctx.chunks(unit), name, unit.partial):
            if first and off < offset < off + len(event):  # never moved to the next event
                raise DumpRefused(read_error(BOGUS_DATA, name, offset, offset,
                                           offset + ev.HEADER_LEN))
            item = grouper.take(off, event)
            if item is None:
                continue
            if item[0] == "header":
                if event[4] == ev.FORMAT_DESCRIPTION:
                    fde = ev.parse_format_description(event)
                    checksum = self.checksum = fde.checksum_alg == ev.CHECKSUM_CRC32
                yield from self._header(off, event, offset, first)
                continue
            try:
                yield from self._transaction(item[1], offset, checksum, fde)
            finally:
                item[1].events.close()
            if self.end is not None:
                return

    def _rotate_checksum(self, first):
        """Whether a fake ROTATE carries a CRC32: the dump's first as the replica's
        @master_binlog_checksum says (mariadb-binlog and mysqlbinlog set 'NONE'), a later
        one as the events before it (the server sends it with the algorithm in force)."""
        if first:
            return self.ctx.checksum if self.ctx.rotate_checksum is None \
                else self.ctx.rotate_checksum
        return self.checksum

    def _note_start_state(self, unit):
        before = MariaGtidPos.parse(unit.index.get("gtid_before") or "")
        for d, (s, n) in self.state.domains.items():
            if before.domains.get(d) == (s, n):
                self.reached[d] = True

    def _header(self, off, event, offset, first):
        if event[4] == ev.FORMAT_DESCRIPTION:
            event = pk.without_in_use(event, self.checksum)
        if event[4] == ev.FORMAT_DESCRIPTION and offset > 4:
            if not self.resumed:
                yield "event", pk.resent_fde(event)
            return
        if event[4] == ev.FORMAT_DESCRIPTION and first and self.state and self.state.domains:
            yield "event", pk.resent_fde(event, clear_log_pos=False)
            self.pos = off + len(event)
            return
        if off < offset:
            return
        yield "event", event
        self.pos = off + len(event)
        if event[4] == ev.ROTATE:  # the replica now stands at the start of the next file
            self.file, self.pos = ev.parse_rotate(event, self.checksum)[1], 4

    def _transaction(self, trx, offset, checksum, fde):
        decision, reason = self.ctx.selection.decide(trx)
        if trx.start < offset:
            if trx.end > offset:
                raise DumpRefused(f"Client requested master to start replication from position "
                                f"{offset} of '{trx.file}', inside the transaction at "
                                f"{trx.start}-{trx.end} (only whole transactions are served)")
            self._refuse_held_stop(trx, decision)
            return
        if self._held(trx):
            self._refuse_held_stop(trx, decision)
            yield from self._skipped(trx)
            return
        if self._duplicate(trx):
            self.pos = trx.end  # sent already from the epoch before (a failover)
            return
        self._check_reached(trx)
        if decision == "stop":
            self.end = EndInfo(self.file, self.pos, self.last_gtid, reason, self.epoch)
            return
        events = trx.events if decision == "apply" else self._emptied(trx, checksum, fde)
        if not self.ctx.annotate:  # as a server does for a replica that did not ask
            events = (e for e in events if e[4] != ev.MARIA_ANNOTATE_ROWS)
        catalog = self.ctx.catalog
        for event in events:
            if event[4] == ev.TABLE_MAP and catalog is not None:
                catalog.saw(event, checksum, fde)
            yield "event", event
        self.pos, self.last_gtid = trx.end, trx.gtid or self.last_gtid

    def _skip_set(self, unit):
        """The GTIDs of ``unit`` the epoch before it sent already."""
        return MariaGtidPos.parse(unit.skip or "")

    def _duplicate(self, trx):
        """True for a transaction the epoch before sent already (a failover)."""
        return bool(trx.maria_gtid and self.duplicates.contains(*trx.maria_gtid))

    def _emptied(self, trx, checksum, fde):
        return emptied(trx, checksum, fde)

    def _held(self, trx):
        parts = trx.maria_gtid
        return self.state is not None and parts is not None and self.state.contains(*parts)

    def _refuse_held_stop(self, trx, decision):
        if decision == "stop":
            raise DumpRefused(f"the replica already holds {trx.gtid or trx.start_position}, "
                            "past the stop point this server serves to")

    def _skipped(self, trx):
        d, s, n = trx.maria_gtid
        if self.state.domains.get(d) == (s, n):
            self.reached[d] = True
        self.pos = trx.end
        if not self.list_sent and all(self.reached.values()):
            self.list_sent = True
            yield "event", pk.fake_gtid_list(self.state, trx.end, self.ctx.server_id,
                                             self.ctx.checksum)

    def _check_reached(self, trx):
        parts = trx.maria_gtid
        if parts is not None and self.state is not None and not self.reached.get(parts[0], True):
            d = parts[0]
            s, n = self.state.domains[d]
            raise DumpRefused(not_in_binlog(f"{d}-{s}-{n}"))

    def finish(self):
        """The closing item: ('end', EndInfo); DumpRefused when the replica's GTID state
        was never met."""
        missing = [d for d, done in self.reached.items() if not done]
        if missing and self.end is None:
            s, n = self.state.domains[missing[0]]
            raise DumpRefused(not_in_binlog(f"{missing[0]}-{s}-{n}"))
        yield "end", self.end or EndInfo(self.file, self.pos, self.last_gtid,
                                         self.ctx.cut_reason or "end of the archive",
                                         self.epoch)
