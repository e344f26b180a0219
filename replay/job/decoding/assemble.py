"""Binlog bytes -> complete transactions (pure: runs inside a Spark task).

A transaction is a group as ``mysqlbackup.transactions.TrxTracker`` defines it
(GTID or BEGIN ... XID/COMMIT, a DDL alone), made a ``Transaction``
(``replay.job.decoding.transaction``). Each carries its GTID, file,
start/end position, commit time, the tables it touches, its raw events, its
commit group (``replay.groups``) and how many rows events it holds. A
group still open at the end of the bytes is incomplete: it is returned apart,
never as a transaction.

Compressed events (MySQL's TRANSACTION_PAYLOAD, MariaDB's compressed query and rows
events: ``mysqlbackup.binlog.compressed``) come out as the plain events they stand for,
so that every sink and the change table see plain events: a transaction's ``events``
are plain, while its ``start``/``end`` and, detached, its ``event_lengths`` are those of
the events in the file (``attach_events`` / ``StreamAttach`` decompress again as they
cut them). A payload is decompressed a chunk at a time, one inner event held; its inner
events must be what a transaction holds after its GTID event (``INNER``).
"""


from dataclasses import replace

from mysqlbackup.binlog import compressed as cz
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import gtid_text
from mysqlbackup.binlog.scan import EventStream, check_magic, iter_events, read_fde
from mysqlbackup.binlog.transactions import OUTSIDE, TrxTracker, is_control
from mysqlbackup.errors import CorruptBinlog, TornEvent
from mysqlbackup.binlog.tablemap import table_of
from replay.job.decoding.groups import commit_group
from replay.job.decoding.transaction import Transaction

# Every event a transaction holds is kept as it is: nothing inside a transaction is
# judged here (a sink refuses, by name, what it cannot apply, and only for a transaction
# a replay applies: never one at or after its stop point). An INCIDENT becomes a marker
# (``Transaction.incident``) that the selection turns into an error where a replay
# reaches it. A TRANSACTION_PAYLOAD may hold only what follows a GTID event.
_COMPRESSED = cz.COMPRESSED
HEADER_EVENTS = {ev.FORMAT_DESCRIPTION, ev.ROTATE, ev.STOP, ev.PREVIOUS_GTIDS,
                 ev.MARIA_GTID_LIST, ev.MARIA_BINLOG_CHECKPOINT}
_NOT_INNER = HEADER_EVENTS | {ev.GTID, ev.ANONYMOUS_GTID, ev.GTID_TAGGED, ev.MARIA_GTID,
                              ev.TRANSACTION_PAYLOAD, ev.INCIDENT}
# events that carry a statement's context: a transaction holding one (or a statement
# other than BEGIN/COMMIT/XA/savepoints) runs alone, in the replay's main session
CONTEXT_EVENTS = {ev.INTVAR, ev.RAND, ev.USER_VAR, ev.BEGIN_LOAD_QUERY, ev.APPEND_BLOCK,
                  ev.EXECUTE_LOAD_QUERY}


def assemble(data, name, base=0, tracker=None, newest=False, facts=None):
    """(transactions, incomplete, fde_event) of ``data`` (a whole file when base == 0).

    ``newest``: the file may end inside an event (a torn tail), which then counts
    as an incomplete transaction; anywhere else a torn event is an error.
    ``facts``: a dict that receives what the bytes say of their place in the chain,
    as ``archive_index.build_index`` computes it: ``gtid_before``, ``gtid_after``
    and ``next_file`` (the file a real ROTATE names).
    """
    if base == 0:
        check_magic(data, name)
    assembler = Assembler(name, whole=base == 0, tracker=tracker, facts=facts)
    events = iter_events(data, 4 if base == 0 else 0,
                         None if base == 0 else assembler.tracker.checksum, file=name, base=base)
    events = _tolerate_torn_tail(events, newest)
    for off, event in events:
        assembler.event(off, event)
    return assembler.result(base + len(data), events.torn_at)


class Assembler:
    """Events in, complete transactions out, one event at a time (what ``assemble`` and
    ``StreamAssembly`` share). ``keep_events`` False: transactions come out detached
    (``event_lengths``, no bytes: see ``detach_events``), and no event is held past
    its call, or past its transaction's end with ``each`` (called with each
    transaction, with its events, as it ends)."""

    def __init__(self, name, whole=True, tracker=None, facts=None, keep_events=True,
                 each=None):
        self.name, self.whole, self.keep_events, self.each = name, whole, keep_events, each
        self._hold = keep_events or each is not None  # a transaction's events, until it ends
        self.facts = {} if facts is None else facts
        self.facts.update(gtid_before=None, gtid_after=None, next_file=None)
        self.tracker = tracker or TrxTracker()
        self.transactions, self.current, self.fde_event = [], None, None

    def event(self, off, event):
        """Take the event at file offset ``off``."""
        etype, tracker = event[4], self.tracker
        if etype == ev.FORMAT_DESCRIPTION:
            self.fde_event = bytes(event)
        if etype == ev.INCIDENT:
            tracker.feed(event)
            self._done(_incident(self.name, off, event, tracker.checksum, self._hold),
                       [len(event)])
            return
        if self.current is None and etype not in HEADER_EVENTS:
            self.current = {"file": self.name, "start": off, "events": [], "lengths": [],
                            "starts": [], "first": bytes(event), "rows": 0, "tables": set(),
                            "statements": False}
        if etype not in _COMPRESSED:
            plain = None
            tracker.feed(event)
        elif etype == ev.TRANSACTION_PAYLOAD:  # its inner events, one at a time, below
            plain = _inner_checked(cz.plain_events(event, off, tracker.checksum, tracker.fde,
                                                   self.name), off, self.name)
            tracker.feed(event)
        else:  # MariaDB's: the tracker reads the statement it holds
            plain = (cz.maria_plain(event, tracker.checksum, tracker.fde, self.name, off),)
            tracker.feed(plain[0])
        _note(self.facts, event, etype, tracker, self.whole)
        if self.current is not None:
            self.current["lengths"].append(len(event))
            try:
                for piece in (event,) if plain is None else plain:
                    _collect(self.current, piece, tracker, self._hold, off)
            except CorruptBinlog as e:
                if e.file is not None:
                    raise
                raise type(e)(e.detail, self.name, off) from None
        if self.current is not None and tracker.state == OUTSIDE:
            self._done(_finish(self.current, off + len(event), event, tracker, self._hold),
                       self.current["lengths"])
            self.current = None

    def _done(self, trx, lengths):
        """A transaction ends: handed to ``each`` with its events (a copy), then kept
        detached (its events' ``lengths`` in the file) unless ``keep_events``."""
        if self.each is not None:
            self.each(replace(trx))
            if not self.keep_events:
                trx.events, trx.event_starts, trx.event_lengths = None, None, lengths
        self.transactions.append(trx)

    def result(self, end, torn_at=None):
        """(transactions, incomplete, fde_event) once the bytes end at offset ``end``
        (``torn_at``: where a torn last event starts, tolerated by the caller)."""
        tracker, current = self.tracker, self.current
        self.facts["gtid_after"] = str(tracker.gtids) if tracker.gtids is not None else None
        if current is None and torn_at is not None:
            current = {"start": torn_at, "lengths": []}
        incomplete = None if current is None else {"file": self.name, "start": current["start"],
                                                   "events": len(current["lengths"]),
                                                   "end": end}
        return self.transactions, incomplete, self.fde_event


class StreamAssembly:
    """``assemble`` + ``detach_events`` over a whole file fed a chunk at a time
    (``feed``), never holding more than one event and the chunk completing it: magic,
    framing and every CRC checked (``scan.EventStream``), the (size, CRC32) fingerprint
    taken on the way. A fault in the bytes is kept and raised by ``finish``, after
    every byte was fed (the caller may still meet a read or decode error first, as
    when it read the whole file before assembling). ``each``: called with every
    transaction, with its events, as it ends (``Assembler``), before ``finish``
    proves the whole file: its caller keeps nothing of it when ``finish`` raises."""

    def __init__(self, name, newest=False, facts=None, each=None):
        self.name, self.newest = name, newest
        self.assembler = Assembler(name, facts=facts, keep_events=False, each=each)
        self.events = EventStream(self.assembler.event, file=name)
        self.size, self.crc, self.error = 0, 0, None

    def feed(self, data):
        """The next bytes of the file."""
        self.size += len(data)
        self.crc = ev.crc32(data, self.crc)
        if self.error is None:
            try:
                self.events.feed(data)
            except Exception as e:  # noqa: BLE001 - raised by finish, as assemble raises it
                self.error = e

    def finish(self):
        """(transactions detached, incomplete, fde_event, fingerprint) at the end of the
        bytes; raises what ``assemble`` would have raised on the same bytes."""
        if self.error is not None:
            raise self.error
        torn_at = None
        try:
            self.events.close()
        except TornEvent as e:
            if not self.newest:
                raise
            torn_at = e.offset
        transactions, incomplete, fde = self.assembler.result(self.size, torn_at)
        return transactions, incomplete, fde, (self.size, self.crc)


class _tolerate_torn_tail:
    """Iterate events; with ``newest``, a torn last event ends the walk quietly."""

    def __init__(self, events, newest):
        self.events, self.newest, self.torn_at = events, newest, None

    def __iter__(self):
        try:
            yield from self.events
        except TornEvent as e:
            if not self.newest:
                raise
            self.torn_at = e.offset


def _incident(name, off, event, checksum, keep_events=True):
    """The marker of an INCIDENT event at ``off``: the source lost events there (its one
    event held as a transaction's are: bytes, or detached, its length)."""
    _, kind, message = ev.parse_incident(event, checksum)
    what = f"INCIDENT event ({kind}{': ' + message if message else ''})"
    return Transaction(file=name, start=off, end=off + len(event),
                       commit_ts=ev.parse_header(event).timestamp, incident=what,
                       events=[bytes(event)] if keep_events else None,
                       event_starts=[off] if keep_events else None,
                       event_lengths=None if keep_events else [len(event)])


def _inner_checked(events, off, name):
    for event in events:
        if event[4] in _NOT_INNER:
            raise CorruptBinlog(f"TRANSACTION_PAYLOAD holds a {ev.event_name(event[4])} "
                                "event: replay cannot apply it", name, off)
        yield event


def expand_events(events, start, fde, checksum, name, starts=None):
    """The plain events of the consecutive events ``events`` of file ``name`` (the first
    at offset ``start``): each compressed one replaced by those it stands for;
    ``starts`` (a list) gets the file offset of the event each came from."""
    out, off = [], start
    for event in events:
        if event[4] == ev.TRANSACTION_PAYLOAD:
            pieces = list(_inner_checked(cz.plain_events(event, off, checksum, fde, name),
                                         off, name))
        elif event[4] in cz.MARIA_COMPRESSED:
            pieces = [cz.maria_plain(event, checksum, fde, name, off)]
        else:
            pieces = [event]
        out += pieces
        if starts is not None:
            starts += [off] * len(pieces)
        off += len(event)
    return out


def _note(facts, event, etype, tracker, whole):
    """Chain facts of the bytes, the way ``archive_index.build_index`` records them."""
    if etype == ev.FORMAT_DESCRIPTION and whole:
        facts["gtid_before"] = None
    elif etype in (ev.MARIA_GTID_LIST, ev.PREVIOUS_GTIDS) and facts["gtid_before"] is None:
        facts["gtid_before"] = str(tracker.gtids)
    elif etype == ev.ROTATE and not ev.is_artificial(ev.parse_header(event)):
        facts["next_file"] = ev.parse_rotate(event, tracker.checksum)[1]


def _collect(current, event, tracker, keep_events=True, off=None):
    etype = event[4]
    current["xid"] = etype == ev.XID  # the last one: committed by an XID (transactional)
    if etype == ev.TABLE_MAP:
        current["tables"].add(table_of(event))
    elif etype in CONTEXT_EVENTS:
        current["statements"] = True
    elif etype == ev.QUERY:
        q = ev.parse_query(event, tracker.checksum, tracker.fde, max_sql=32)
        if not is_control(q.sql):
            current["statements"] = True
            current.setdefault("db", q.db)
    current["rows"] += etype in ev.ROWS_EVENTS
    if keep_events:
        current["events"].append(bytes(event))
        current["starts"].append(off)


def _finish(current, end, last_event, tracker, keep_events=True):
    gtid = tracker.last_gtid
    return Transaction(
        file=current["file"], start=current["start"], end=end,
        gtid=gtid_text(gtid), gtid_parts=list(gtid[1:]) if gtid else None,
        commit_ts=ev.parse_header(last_event).timestamp,
        tables=sorted(current["tables"]),
        events=current["events"] if keep_events else None,
        event_starts=current["starts"] if keep_events else None,
        event_lengths=None if keep_events else current["lengths"],
        db=current.get("db"),
        # beside others only what commits as one transaction: a write to non-transactional
        # tables (committed by COMMIT) happens, and is logged, at once, out of order
        group=None if current["statements"] or not current.get("xid") else commit_group(
            current["first"], tracker.checksum),
        rows_events=current["rows"], statements=current["statements"])


def detach_events(transactions, data):
    """A decode result without its bytes: each transaction keeps the lengths of its
    events in ``data`` (consecutive from its start; a compressed event's own, not those of
    the plain events it holds), plus (size, CRC32) of the whole ``data`` so that whoever
    attaches the bytes again can prove they are the ones decoded."""
    for trx in transactions:
        trx.event_lengths, trx.events = _stored_lengths(data, trx.start, trx.end), None
        trx.event_starts = None
    return len(data), ev.crc32(data)


def _stored_lengths(data, start, end):
    lengths, pos = [], start
    while pos < end:
        lengths.append(ev.parse_header(data, pos).size)
        pos += lengths[-1]
    return lengths


def attach_events(transactions, data, name, fingerprint):
    """Give transactions detached by ``detach_events`` their events back from ``data``
    (the same object, read again); refuses bytes that are not the decoded ones."""
    _check_fingerprint(len(data), ev.crc32(data), name, fingerprint)
    view, plain = memoryview(data), _Plain(data)
    for trx in transactions:
        pos, events = trx.start, []
        for n in trx.event_lengths:
            events.append(bytes(view[pos:pos + n]))
            pos += n
        trx.events, trx.event_lengths = plain.of(trx, events), None


class _Plain:
    """Turns a transaction's events cut from a file into plain ones (``expand_events``),
    with the file's format description, read from the file's first bytes when needed."""

    def __init__(self, head=b""):
        self.head, self.fde = head, None

    def of(self, trx, events):
        """The plain events of ``trx``'s stored ``events``; ``trx.event_starts`` set."""
        starts = trx.event_starts = []
        if not any(e[4] in cz.COMPRESSED for e in events):
            off = trx.start
            for event in events:
                starts.append(off)
                off += len(event)
            return events
        if self.fde is None:
            self.fde = read_fde(self.head, trx.file)[1]
        checksum = self.fde.checksum_alg == ev.CHECKSUM_CRC32
        return expand_events(events, trx.start, self.fde, checksum, trx.file, starts)


def _check_fingerprint(size, crc, name, fingerprint):
    if (size, crc) != tuple(fingerprint):
        raise CorruptBinlog(f"the archived object changed between decode and apply "
                            f"(size/CRC32 {size}/{crc}, decoded "
                            f"{fingerprint[0]}/{fingerprint[1]}); resync required", name, 0)


class StreamAttach:
    """``attach_events`` over the bytes fed a chunk at a time (``feed``): only the
    transactions' own bytes are kept (cut into their events), the (size, CRC32)
    fingerprint is taken on the way; ``finish`` proves the bytes are the decoded ones
    before any transaction gets its events."""

    def __init__(self, transactions):
        self._todo = sorted(transactions, key=lambda t: t.start)
        self._next, self._pieces, self._held, self._cut = 0, [], 0, []
        self._taken = 0  # transactions handed out by ``take``
        self.size, self.crc = 0, 0
        self._head = bytearray()  # the magic and format description, for ``_Plain``

    def feed(self, data):
        """The next bytes of the file (from its offset 0 on)."""
        at, self.size = self.size, self.size + len(data)
        self.crc = ev.crc32(data, self.crc)
        if len(self._head) < _FDE_HEAD and len(self._head) == at:
            self._head += data[:_FDE_HEAD - at]
        view = memoryview(data)
        while self._next < len(self._todo):
            trx = self._todo[self._next]
            stop = trx.start + sum(trx.event_lengths)
            lo, hi = max(trx.start + self._held, at), min(stop, self.size)
            if lo >= hi:
                return
            self._pieces.append(bytes(view[lo - at:hi - at]))
            self._held += hi - lo
            if hi < stop:
                return
            self._cut.append(_split(b"".join(self._pieces), trx.event_lengths))
            self._pieces, self._held, self._next = [], 0, self._next + 1

    def finish(self, name, fingerprint):
        """Give every transaction its events; CorruptBinlog (as ``attach_events``) when
        the bytes fed are not the ones decoded."""
        _check_fingerprint(self.size, self.crc, name, fingerprint)
        plain = _Plain(_fde_head(self._head))
        for trx, events in zip(self._todo, self._cut):
            trx.events, trx.event_lengths = plain.of(trx, events), None

    def take(self):
        """The transactions cut so far (in file order) given their events, and forgotten
        here (the caller holds one transaction's events at a time): for a caller that
        calls ``finish`` after the last bytes, which proves them, and keeps nothing of
        what it took when that fails."""
        done, self._cut = self._cut, []
        plain = _Plain(_fde_head(self._head))
        first, self._taken = self._taken, self._taken + len(done)
        taken = self._todo[first:self._taken]
        self._todo[first:self._taken] = [None] * len(done)  # the caller's alone from now
        for trx, events in zip(taken, done):
            trx.events, trx.event_lengths = plain.of(trx, events), None
        return taken


_FDE_HEAD = 4 + 4096  # the magic and a format description event (a few hundred bytes)


def _fde_head(head):
    """The magic and whole format description event at the start of ``head``."""
    if len(head) >= 4 + ev.HEADER_LEN:
        return bytes(head[:4 + ev.parse_header(head, 4).size])
    return bytes(head)


def _split(data, lengths):
    view, pos, events = memoryview(data), 0, []
    for n in lengths:
        events.append(bytes(view[pos:pos + n]))
        pos += n
    return events
