"""Binlog bytes -> complete transactions (pure: runs inside a Spark task).

A transaction is a group as ``mysqlbackup.transactions.TrxTracker`` defines it
(GTID or BEGIN ... XID/COMMIT, a DDL alone), made a ``Transaction``
(``replay.decoding.transaction``). Each carries its GTID, file,
start/end position, commit time, the tables it touches, its raw events, its
commit group (``replay.groups``) and how many rows events it holds. A
group still open at the end of the bytes is incomplete: it is returned apart,
never as a transaction.
"""

import zlib

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import gtid_text
from mysqlbackup.binlog.scan import check_magic, iter_events
from mysqlbackup.binlog.transactions import OUTSIDE, TrxTracker
from mysqlbackup.errors import CorruptBinlog
from replay.decoding.groups import commit_group
from replay.decoding.transaction import Transaction

COMPRESSED = {165: "MARIA_QUERY_COMPRESSED", 166: "compressed rows", 167: "compressed rows",
              168: "compressed rows", 169: "compressed rows", 170: "compressed rows",
              171: "compressed rows", ev.TRANSACTION_PAYLOAD: "TRANSACTION_PAYLOAD"}
# Events replay can apply; anything else inside a transaction is refused by name.
APPLIABLE = ev.PLAIN_ROWS_EVENTS | {ev.QUERY, ev.XID, ev.TABLE_MAP, ev.INTVAR,
             ev.MARIA_ANNOTATE_ROWS, ev.ROWS_QUERY, ev.GTID, ev.ANONYMOUS_GTID,
             ev.MARIA_GTID}
HEADER_EVENTS = {ev.FORMAT_DESCRIPTION, ev.ROTATE, ev.STOP, ev.PREVIOUS_GTIDS,
                 ev.MARIA_GTID_LIST, ev.MARIA_BINLOG_CHECKPOINT}


def assemble(data, name, base=0, tracker=None, newest=False, facts=None):
    """(transactions, incomplete, fde_event) of ``data`` (a whole file when base == 0).

    ``newest``: the file may end inside an event (a torn tail), which then counts
    as an incomplete transaction; anywhere else a torn event is an error.
    ``facts``: a dict that receives what the bytes say of their place in the chain,
    as ``archive_index.build_index`` computes it: ``gtid_before``, ``gtid_after``
    and ``next_file`` (the file a real ROTATE names).
    """
    facts = {} if facts is None else facts
    facts.update(gtid_before=None, gtid_after=None, next_file=None)
    if base == 0:
        check_magic(data, name)
    tracker = tracker or TrxTracker()
    transactions, current, fde_event = [], None, None
    events = iter_events(data, 4 if base == 0 else 0, None if base == 0 else tracker.checksum,
                         file=name, base=base)
    events = _tolerate_torn_tail(events, newest)
    for off, event in events:
        etype = event[4]
        if etype == ev.FORMAT_DESCRIPTION:
            fde_event = bytes(event)
        _refuse(etype, off, name)
        if current is None and etype not in HEADER_EVENTS:
            current = {"file": name, "start": off, "events": [], "tables": set()}
        tracker.feed(event)
        _note(facts, event, etype, tracker, base == 0)
        if current is not None:
            _collect(current, event, tracker)
        if current is not None and tracker.state == OUTSIDE:
            transactions.append(_finish(current, off + len(event), event, tracker))
            current = None
    facts["gtid_after"] = str(tracker.gtids) if tracker.gtids is not None else None
    end = base + len(data)
    if current is None and events.torn_at is not None:
        current = {"start": events.torn_at, "events": []}
    incomplete = None if current is None else {"file": name, "start": current["start"],
                                               "events": len(current["events"]),
                                               "end": end}
    return transactions, incomplete, fde_event


class _tolerate_torn_tail:
    """Iterate events; with ``newest``, a torn last event ends the walk quietly."""

    def __init__(self, events, newest):
        self.events, self.newest, self.torn_at = events, newest, None

    def __iter__(self):
        try:
            yield from self.events
        except CorruptBinlog as e:
            if not (self.newest and str(e).split(": ", 1)[-1].startswith("torn event")):
                raise
            self.torn_at = e.offset


def _refuse(etype, off, name):
    if etype in COMPRESSED:
        raise CorruptBinlog(f"{COMPRESSED[etype]} event (compressed binlog): replay does not "
                            f"decode it yet; replay this range with the server's own tools",
                            name, off)
    if etype not in APPLIABLE and etype not in HEADER_EVENTS and etype != ev.INCIDENT:
        raise CorruptBinlog(f"{ev.event_name(etype)} event: replay cannot apply it", name, off)
    if etype == ev.INCIDENT:
        raise CorruptBinlog("INCIDENT event: the source lost events here; resync required",
                            name, off)


def _note(facts, event, etype, tracker, whole):
    """Chain facts of the bytes, the way ``archive_index.build_index`` records them."""
    if etype == ev.FORMAT_DESCRIPTION and whole:
        facts["gtid_before"] = None
    elif etype in (ev.MARIA_GTID_LIST, ev.PREVIOUS_GTIDS) and facts["gtid_before"] is None:
        facts["gtid_before"] = str(tracker.gtids)
    elif etype == ev.ROTATE and not ev.is_artificial(ev.parse_header(event)):
        facts["next_file"] = ev.parse_rotate(event, tracker.checksum)[1]


def _collect(current, event, tracker):
    etype = event[4]
    if etype == ev.TABLE_MAP:
        current["tables"].add(table_of(event))
    elif etype == ev.QUERY and "db" not in current:
        q = ev.parse_query(event, tracker.checksum, tracker.fde, max_sql=16)
        if q.sql.strip().upper() not in ("BEGIN", "COMMIT"):
            current["db"] = q.db
    current["events"].append(bytes(event))


def _finish(current, end, last_event, tracker):
    gtid = tracker.last_gtid
    return Transaction(
        file=current["file"], start=current["start"], end=end,
        gtid=gtid_text(gtid), gtid_parts=list(gtid[1:]) if gtid else None,
        commit_ts=ev.parse_header(last_event).timestamp,
        tables=sorted(current["tables"]), events=current["events"],
        db=current.get("db"),
        group=commit_group(current["events"][0], tracker.checksum),
        rows_events=sum(1 for e in current["events"] if e[4] in ev.ROWS_EVENTS))


def detach_events(transactions, data):
    """A decode result without its bytes: each transaction keeps its events' lengths
    (they are consecutive from its start), plus (size, CRC32) of the whole ``data``
    so that whoever attaches the bytes again can prove they are the ones decoded."""
    for trx in transactions:
        trx.event_lengths, trx.events = [len(e) for e in trx.events], None
    return len(data), zlib.crc32(data)


def attach_events(transactions, data, name, fingerprint):
    """Give transactions detached by ``detach_events`` their events back from ``data``
    (the same object, read again); refuses bytes that are not the decoded ones."""
    if (len(data), zlib.crc32(data)) != tuple(fingerprint):
        raise CorruptBinlog(f"the archived object changed between decode and apply "
                            f"(size/CRC32 {len(data)}/{zlib.crc32(data)}, decoded "
                            f"{fingerprint[0]}/{fingerprint[1]}); resync required", name, 0)
    view = memoryview(data)
    for trx in transactions:
        pos, events = trx.start, []
        for n in trx.event_lengths:
            events.append(bytes(view[pos:pos + n]))
            pos += n
        trx.events, trx.event_lengths = events, None


def table_of(event):
    """'db.table' named by a TABLE_MAP event (post-header: table_id 6, flags 2)."""
    body = memoryview(event)[ev.HEADER_LEN + 8:]
    db_len = body[0]
    db = bytes(body[1:1 + db_len]).decode("utf-8", "replace")
    t_len = body[2 + db_len]
    table = bytes(body[3 + db_len:3 + db_len + t_len]).decode("utf-8", "replace")
    return f"{db}.{table}"
