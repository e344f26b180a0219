"""What one transaction changed, from its plain events: per table and kind of change
the rows it holds, and the statement behind each (pure).

``ChangeCollector`` takes a transaction's events one at a time (plain ones: a
compressed event is expanded by the caller, as ``assemble`` does) and ``finish`` gives
its ``Change`` list, in the order the changes first appear:

- rows events: their table (from the TABLE_MAP before them), kind (insert / update /
  delete) and row count (``rowcount``: no value decoded); the statement is the query
  the server annotated them with (MariaDB's ANNOTATE_ROWS, MySQL's ROWS_QUERY with
  binlog_rows_query_log_events=ON), when there is one;
- a statement (QUERY event, BEGIN and COMMIT aside): DDL, or DML logged as a statement
  (binlog_format STATEMENT or MIXED), whose rows the binlog does not tell (``rows``
  None); its tables and kind from its text (``sqltext``), the statement its own text.

A statement's text is kept to ``STATEMENT_CAP`` characters, whitespace runs made one
space. ``TrxSummary`` is a transaction with its changes, as ``archive find`` reports it
and ``replay --sql`` heads it (``format_changes``).
"""

from dataclasses import dataclass
from typing import NamedTuple, Optional

from mysqlbackup.utc import iso
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import gtid_text
from replay.job.decoding.rowcount import ROW_KINDS, TableLayout, count_rows, table_id_size
from replay.job.decoding.sqltext import printable, statement_kind, statement_tables

STATEMENT_CAP = 300   # characters of a statement kept
_READ_CAP = 4096      # bytes of a statement read to find its kind, tables and text
_LAYOUT_CACHE = 4096  # TABLE_MAP layouts a collector keeps across transactions


class Change(NamedTuple):
    """One kind of change to one table in a transaction: ``table`` ('db.table', 'db.*'
    for a whole schema, '' for a statement that names none), ``kind`` ('insert',
    'update', 'delete', 'ddl'), ``rows`` (None: the binlog does not tell, or they were
    not ``counted``) and the ``statement`` behind it (None: the binlog does not hold
    it), which is the logged statement itself (``source`` 'query') or the query the
    rows were annotated with ('annotate')."""

    table: str
    kind: str
    rows: Optional[int] = None
    statement: Optional[str] = None
    source: Optional[str] = None
    counted: bool = True

    def text(self):
        """'shop.orders delete 3 rows', 'shop.orders ddl', 'shop.t update ? rows' (the
        binlog does not tell), 'shop.t insert' (not counted)."""
        if self.kind == "ddl":
            return f"{self.table} ddl" if self.table else "ddl"
        if not self.counted:
            return f"{self.table} {self.kind}"
        count = "?" if self.rows is None else str(self.rows)
        return f"{self.table} {self.kind} {count} row{'' if self.rows == 1 else 's'}"


@dataclass(frozen=True)
class TrxSummary:
    """A transaction as ``archive find`` lists it."""

    gtid: str            # None without a GTID
    commit_ts: int       # epoch seconds (the header timestamp of its last event)
    file: str
    start: int
    end: int
    changes: tuple       # of Change
    epoch: int = 1

    @property
    def commit_time(self):
        """The commit time, ISO 8601 UTC ('2026-11-26T10:00:00Z')."""
        return iso(self.commit_ts)

    @property
    def rows(self):
        """Rows changed, over the changes that tell it."""
        return sum(c.rows for c in self.changes if c.rows is not None)


def format_changes(changes):
    """The changes as one line of text: 'shop.orders delete 3 rows, shop.t update 1 row'
    ('no changes' for none)."""
    return ", ".join(c.text() for c in changes) or "no changes"


def make_summary(gtid, commit_ts, file, start, end, changes, epoch=1):
    """The TrxSummary of a transaction a scan followed (``gtid``: the tracker's tuple)."""
    return TrxSummary(gtid_text(gtid) if gtid else None, commit_ts, file, start, end,
                      tuple(changes), epoch)


class ChangeCollector:
    """One transaction's plain events in (``event``), its changes out (``finish``); then
    ready for the next. ``fde`` / ``checksum``: the file's format description (parsed)
    and whether its events carry a CRC32 (``set_format`` when a file begins).
    ``wants(table, kind)``: whether the rows of such a change are counted (None: all);
    the others come out with ``counted`` False."""

    def __init__(self, fde=None, checksum=False, wants=None):
        self.wants, self._wanted, self._layouts = wants, {}, {}
        self._kinds = {ev.TABLE_MAP: self._table_map, ev.QUERY: self._query,
                       ev.MARIA_ANNOTATE_ROWS: self._annotate, ev.ROWS_QUERY: self._annotate}
        self.set_format(fde, checksum)
        self.reset()

    def set_format(self, fde, checksum):
        """The format description of the file whose events come next."""
        self.fde, self.checksum = fde, checksum
        self._id_size = {etype: table_id_size(fde, etype) for etype in ROW_KINDS}
        self._layouts.clear()

    def reset(self):
        """Forget the transaction taken so far."""
        self.maps, self.changes, self.annotate = {}, {}, None

    def event(self, event):
        """Take the next plain event of the transaction."""
        etype = event[4]
        if etype in ROW_KINDS:
            self.rows(event, etype)
        else:
            handler = self._kinds.get(etype)
            if handler is not None:
                handler(event)

    def finish(self, texts=True):
        """The transaction's changes ([Change]), in order; the collector is reset.
        ``texts`` False: an annotated query stays raw bytes (``readable`` makes it
        text), so that a transaction nobody looks at costs no decoding."""
        out = [Change(table, kind, rows, statement, None if statement is None else source,
                      counted)
               for (table, kind), (rows, statement, source, counted) in self.changes.items()]
        self.reset()
        return readable(out) if texts else out

    def rows(self, event, etype):
        """Take a rows event (type ``etype``)."""
        size = self._id_size[etype]
        table_id = int.from_bytes(event[ev.HEADER_LEN:ev.HEADER_LEN + size], "little")
        layout = self.maps.get(table_id)
        table = layout.name if layout is not None else f"(table id {table_id})"
        key = (table, ROW_KINDS[etype])
        counted = self._wanted.get(key)
        if counted is None:
            counted = self._wanted[key] = self.wants is None or self.wants(*key)
        rows = count_rows(event, layout, self.fde, self.checksum) if counted else None
        held = self.changes.get(key)
        if held is None:
            self.changes[key] = [rows, self.annotate, "annotate", counted]
        else:
            held[0] = None if held[0] is None or rows is None else held[0] + rows
            if held[1] is None:
                held[1] = self.annotate

    def _add(self, table, kind, statement):
        held = self.changes.get((table, kind))
        if held is None:
            self.changes[(table, kind)] = [None, statement, "query", True]
        elif held[1] is None:
            held[1:3] = [statement, "query"]

    def _table_map(self, event):
        body = bytes(event[ev.HEADER_LEN:len(event) - (ev.CRC_LEN if self.checksum else 0)])
        layout = self._layouts.get(body)
        if layout is None:
            try:
                layout = TableLayout.parse(event, self.fde, self.checksum)
            except ValueError:
                return  # its rows events are then named by table id, their rows unknown
            if len(self._layouts) >= _LAYOUT_CACHE:
                self._layouts.clear()
            self._layouts[body] = layout
        self.maps[layout.table_id] = layout

    def _query(self, event):
        query = ev.parse_query(event, self.checksum, self.fde, max_sql=_READ_CAP)
        kind = statement_kind(query.sql)
        if kind in ("begin", "commit", "savepoint"):
            return
        text = clip(query.sql)
        for table in statement_tables(query.sql, query.db) or [""]:
            self._add(table, kind, text)

    def _annotate(self, event):
        body = ev.event_body(event, self.checksum)
        if event[4] == ev.ROWS_QUERY:
            body = body[1:]  # a length byte (the text's length modulo 256), then the text
        self.annotate = bytes(body[:4 * STATEMENT_CAP])


def readable(changes):
    """``changes`` with each statement held as bytes made text (``clip``)."""
    return [c._replace(statement=clip(c.statement.decode("utf-8", "replace")))
            if isinstance(c.statement, bytes) else c for c in changes]


def clip(text, cap=STATEMENT_CAP):
    """``text`` on one line (whitespace runs one space, other control characters as
    \\xNN: nothing that a terminal would act on), cut to ``cap`` characters ('...' ends
    a cut one)."""
    line = printable(" ".join(text.split()))
    return line if len(line) <= cap else line[:cap - 3] + "..."
