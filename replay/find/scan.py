"""One binlog file, fed a chunk at a time -> a ``TrxSummary`` of each complete
transaction (pure: the caller reads the bytes).

``FileScan`` walks the events with ``scan.EventStream`` (magic, framing and every CRC32
checked, one event held at most), follows transaction boundaries and GTIDs with
``TrxTracker`` (its rules: the ones every reader of the project shares) and hands each
event of an open transaction to a ``ChangeCollector``; compressed events (MySQL's
TRANSACTION_PAYLOAD, MariaDB's compressed query and rows events) are expanded first.
Row events of an open transaction go to the collector only (the tracker has nothing to
learn from them), as the archive's indexer does. At each boundary the transaction is
offered to ``keep(commit_ts, changes)`` and, when kept, handed to ``on_trx`` as a
``TrxSummary``; a trailing incomplete transaction (the newest file's) is left out.
``wants(table, kind)`` (default: all) says which changes get their rows counted: a search
for one table's deletes need not walk the rows of every other change.

Unlike replay's assembler, nothing is refused for being unappliable (USER_VAR, LOAD
DATA blocks, PARTIAL_UPDATE_ROWS, INCIDENT): a search reads what the file holds.
"""

import struct

from mysqlbackup.binlog import compressed as cz
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import EventStream
from mysqlbackup.binlog.transactions import IN_TRX, INERT_IN_TRX, OUTSIDE, TrxTracker
from mysqlbackup.errors import TornEvent
from replay.job.decoding.rowcount import ROW_KINDS
from replay.job.decoding.summary import ChangeCollector, make_summary, readable

HEADER_EVENTS = frozenset({ev.FORMAT_DESCRIPTION, ev.ROTATE, ev.STOP, ev.PREVIOUS_GTIDS,
                           ev.MARIA_GTID_LIST, ev.MARIA_BINLOG_CHECKPOINT,
                           ev.MARIA_START_ENCRYPTION, ev.HEARTBEAT, ev.HEARTBEAT_V2,
                           ev.INCIDENT})


_TIMESTAMP = struct.Struct("<I").unpack_from  # an event header's first field


def keep_all(commit_ts, changes):
    """The default ``keep``: every transaction."""
    return True


class FileScan:
    """The transactions of one file (``name``) fed a chunk at a time (``feed``, then
    ``finish``). ``newest``: the file may end inside an event (the active file's last
    segment as archived), which then ends the scan quietly; ``epoch`` is carried into
    each summary; ``skip``: a GTID set (``contains(*gtid_key)``) whose transactions are
    left out (a later epoch's copies of the one before)."""

    def __init__(self, name, on_trx, keep=keep_all, newest=False, epoch=1, skip=None,
                 wants=None):
        self.name, self.on_trx, self.keep = name, on_trx, keep
        self.newest, self.epoch, self.skip = newest, epoch, skip
        self.tracker = TrxTracker()
        self.collector = ChangeCollector(wants=wants)
        self.stream = EventStream(self._event, file=name)
        self.start, self.size, self.transactions = None, 0, 0

    def feed(self, data):
        """The next bytes of the file (from its offset 0 on)."""
        self.size += len(data)
        self.stream.feed(data)

    def finish(self):
        """The end of the bytes: CorruptBinlog when they end inside an event, unless the
        file is the newest one."""
        try:
            self.stream.close()
        except TornEvent:
            if not self.newest:
                raise

    def _event(self, off, event):
        etype, tracker = event[4], self.tracker
        if tracker.state == IN_TRX and etype in INERT_IN_TRX:  # rows, TABLE_MAPs, annotations
            if etype in ROW_KINDS:
                self.collector.rows(event, etype)
            elif etype in cz.MARIA_COMPRESSED:
                self.collector.event(cz.maria_plain(event, tracker.checksum, tracker.fde,
                                                    self.name, off))
            else:
                self.collector.event(event)
            return
        if self.start is None and etype not in HEADER_EVENTS:
            self.start = off
        if etype in cz.COMPRESSED:
            self._compressed(off, event, etype)
        else:
            tracker.feed(event)
            if etype == ev.FORMAT_DESCRIPTION:
                self.collector.set_format(tracker.fde, tracker.checksum)
            elif self.start is not None:
                self.collector.event(event)
        if self.start is not None and tracker.state == OUTSIDE:
            self._boundary(off + len(event), _TIMESTAMP(event)[0])

    def _compressed(self, off, event, etype):
        tracker = self.tracker
        plain = cz.plain_events(event, off, tracker.checksum, tracker.fde, self.name)
        if etype == ev.TRANSACTION_PAYLOAD:
            for inner in plain:
                self.collector.event(inner)
            tracker.feed(event)
        else:
            inner = next(plain)
            tracker.feed(inner)
            self.collector.event(inner)

    def _boundary(self, end, commit_ts):
        start, self.start = self.start, None
        changes = self.collector.finish(texts=False)
        self.transactions += 1
        if not self.keep(commit_ts, changes):
            return
        gtid = self.tracker.last_gtid
        if gtid and self.skip is not None and self.skip.contains(*gtid[1:]):
            return
        self.on_trx(make_summary(gtid, commit_ts, self.name, start, end, readable(changes),
                                 self.epoch))
