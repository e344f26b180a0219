"""Transaction boundaries and GTID state of a binlog, followed event by event (pure).

``TrxTracker.feed(event)`` is called for every event written to a binlog file in
order. It knows, after each event, whether the position after it is a
transaction boundary (no transaction or statement group is open), and keeps the
GTID set of the transactions completed so far. Restart, checkpoints and (later)
replay all use the same rules, so they agree on where a transaction ends:

* a group opened by a GTID event, ``BEGIN`` or ``XA START`` ends at XID,
  ``COMMIT``, a bare ``ROLLBACK``, XA_PREPARE or a TRANSACTION_PAYLOAD;
* a MariaDB standalone GTID group (DDL, non-transactional statement) and any
  statement outside a transaction end at their QUERY event;
* INTVAR / RAND / USER_VAR / load blocks belong to the statement that follows.
"""

from mysqlbackup.binlog import compressed as cz
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos, MysqlGtidSet

OUTSIDE, IN_TRX, IN_STATEMENT = "outside", "in_trx", "in_statement"

# Events that never open or close a group: file headers and stream markers.
_NEUTRAL = {
    ev.FORMAT_DESCRIPTION, ev.ROTATE, ev.STOP, ev.PREVIOUS_GTIDS, ev.MARIA_GTID_LIST,
    ev.MARIA_BINLOG_CHECKPOINT, ev.MARIA_START_ENCRYPTION, ev.HEARTBEAT, ev.HEARTBEAT_V2,
    ev.INCIDENT, ev.START_V3,
}
_ENDERS = {ev.XID, ev.XA_PREPARE}
# Events ``feed`` does nothing with while a transaction is open (``state`` IN_TRX): its
# row events and what goes with them; a scan may leave them out of ``feed``.
INERT_IN_TRX = ev.ROWS_EVENTS | {ev.TABLE_MAP, ev.MARIA_ANNOTATE_ROWS}


def classify_sql(sql):
    """'begin', 'commit' or 'other' for the statement text of a QUERY event."""
    head = sql.lstrip()[:16].upper().strip().rstrip(";").strip()
    if head == "BEGIN" or head.startswith("XA START") or head.startswith("XA BEGIN"):
        return "begin"
    if head in ("COMMIT", "ROLLBACK"):
        return "commit"
    return "other"


_FRAMING = ("SAVEPOINT ", "RELEASE SAVEPOINT ", "ROLLBACK TO ", "XA ")


def is_control(sql):
    """True for the text of a QUERY event that only frames a transaction (BEGIN, COMMIT,
    ROLLBACK [TO SAVEPOINT], SAVEPOINT, RELEASE SAVEPOINT, XA ...), not a statement
    that changes data or schema by itself."""
    head = sql.lstrip()[:24].upper()
    return head.rstrip(";").strip() in ("BEGIN", "COMMIT", "ROLLBACK", "START TRANSACTION") \
        or head.startswith(_FRAMING)


class TrxTracker:
    """Follows one binlog's events and reports transaction boundaries and GTIDs."""

    def __init__(self, gtids=None, fde=None):
        self.gtids = gtids
        self.fde = fde
        self.checksum = bool(fde and fde.checksum_alg == ev.CHECKSUM_CRC32)
        self.state = OUTSIDE
        self.pending_gtid = None
        self.last_gtid = None  # GTID of the group that ended last (None when it had none)
        self.transactions = 0

    @property
    def at_boundary(self):
        """True when no transaction or statement group is open."""
        return self.state == OUTSIDE

    def feed(self, event):
        """Account for one whole event (bytes, header included)."""
        etype = event[4]
        if etype == ev.FORMAT_DESCRIPTION:
            self._on_fde(event)
        elif etype == ev.MARIA_GTID_LIST:
            self._on_gtid_list(event)
        elif etype == ev.PREVIOUS_GTIDS:
            self._on_previous_gtids(event)
        elif etype in (ev.MARIA_GTID, ev.GTID, ev.ANONYMOUS_GTID, ev.GTID_TAGGED):
            self._on_gtid(event, etype)
        elif etype in (ev.QUERY, ev.EXECUTE_LOAD_QUERY, cz.MARIA_QUERY_COMPRESSED):
            self._on_query(event, etype)
        elif etype in _ENDERS or (etype == ev.TRANSACTION_PAYLOAD and self.state != OUTSIDE):
            self._end_group()
        elif etype in ev.ROWS_EVENTS and self.state != IN_TRX:
            # rows outside BEGIN..COMMIT (non-transactional): the statement's end ends it
            if ev.rows_statement_end(event, self.fde):
                self._end_group()
            else:
                self.state = IN_STATEMENT
        elif etype not in _NEUTRAL and self.state == OUTSIDE:
            self.state = IN_STATEMENT

    def walked(self, opened, closed, in_trx):
        """Account for a run of events taken without ``feed`` (the fused stream
        path): MariaDB GTIDs that each opened a transaction (``opened``: (domain,
        server_id, seq_no) in order) and ``closed`` XIDs, alternating, the first XID
        closing the group open before when there is one more XID than GTIDs that
        closed; rows in between. ``in_trx``: the last GTID's group is still open."""
        ended = opened[:-1] if in_trx and opened else opened
        if closed > len(ended):  # the first XID ended the group open before the run
            self._end_group()
        if ended:  # as ``_end_group`` does for each
            if not isinstance(self.gtids, MariaGtidPos):
                self.gtids = MariaGtidPos()
            add = self.gtids.add
            for domain, server_id, seq in ended:
                add(domain, server_id, seq)
            self.last_gtid = ("mariadb",) + ended[-1]
            self.pending_gtid, self.state = None, OUTSIDE
            self.transactions += len(ended)
        if in_trx and opened:
            self.pending_gtid = ("mariadb",) + opened[-1]
            self.state = IN_TRX

    def _on_fde(self, event):
        self.fde = ev.parse_format_description(event)
        self.checksum = self.fde.checksum_alg == ev.CHECKSUM_CRC32
        if self.gtids is None and ev.is_mariadb_version(self.fde.server_version):
            self.gtids = MariaGtidPos()

    def _on_gtid_list(self, event):
        if not isinstance(self.gtids, MariaGtidPos):
            self.gtids = MariaGtidPos()
        for domain, server_id, seq in ev.parse_maria_gtid_list(event, self.checksum):
            self.gtids.add(domain, server_id, seq)

    def _on_previous_gtids(self, event):
        if not isinstance(self.gtids, MysqlGtidSet):
            self.gtids = MysqlGtidSet()
        for sid, intervals in ev.parse_previous_gtids(event, self.checksum).items():
            for lo, hi in intervals:
                self.gtids.add_interval(sid, lo, hi)

    def _on_gtid(self, event, etype):
        if etype == ev.MARIA_GTID:
            g = ev.parse_maria_gtid(event, self.checksum)
            self.pending_gtid = ("mariadb", g.domain, g.server_id, g.seq)
            self.state = IN_STATEMENT if g.flags & ev.FL_STANDALONE else IN_TRX
            return
        if etype == ev.GTID:
            sid, gno = ev.parse_mysql_gtid(event, self.checksum)
            self.pending_gtid = ("mysql", sid, gno)
        elif etype == ev.GTID_TAGGED:  # MySQL 8.4+: uuid:tag:gno
            sid, gno = ev.parse_mysql_gtid_tagged(event, self.checksum)
            self.pending_gtid = ("mysql", sid, gno)
        else:
            self.pending_gtid = None  # anonymous
        self.state = IN_STATEMENT

    def _on_query(self, event, etype):
        kind = "other"
        if etype == ev.QUERY:
            kind = classify_sql(ev.parse_query(event, self.checksum, self.fde, max_sql=64).sql)
        elif etype == cz.MARIA_QUERY_COMPRESSED:  # MariaDB log_bin_compress: its text zipped
            kind = classify_sql(cz.maria_statement_head(event, self.checksum, self.fde).decode(
                "utf-8", "replace"))
        if kind == "begin":
            self.state = IN_TRX
        elif kind == "commit" or self.state != IN_TRX:
            self._end_group()

    def _end_group(self):
        g = self.pending_gtid
        if g is not None and g[0] == "mariadb":
            if not isinstance(self.gtids, MariaGtidPos):
                self.gtids = MariaGtidPos()
            self.gtids.add(*g[1:])
        elif g is not None:
            if not isinstance(self.gtids, MysqlGtidSet):
                self.gtids = MysqlGtidSet()
            self.gtids.add(*g[1:])
        self.last_gtid = g
        self.pending_gtid = None
        self.state = OUTSIDE
        self.transactions += 1
