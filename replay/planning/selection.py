"""Where a replay starts and stops, and what it keeps (pure).

Each point is judged here at two levels: a whole file from its index
(``wholly_applied``, ``wholly_after``: the planner leaves such files out) and
one transaction (``decide``: apply, skip, stop or gap). The stop rule itself is
``mysqlbackup.archive.stop``'s (``stop``), at both levels.
"""

from dataclasses import dataclass, field, replace

from mysqlbackup.binlog import events as ev
from mysqlbackup.archive.stop import END, Stop
from mysqlbackup.archive.window import Span
from mysqlbackup.binlog.gtid import contains
from mysqlbackup.binlog.position import Position
from mysqlbackup.binlog.tablemap import table_of
from mysqlbackup.errors import CorruptBinlog


# the schema where a replay keeps its checkpoint on the target (replay.job.sinks.session);
# a replay into a live server logs its rows there, and they must not be replayed again
BOOKKEEPING_SCHEMA = "mysqlbackup_replay"


@dataclass
class Selection:
    """Start, stop, exclusions and filters of a replay."""

    start_gtids: object = None         # MariaGtidPos or MysqlGtidSet
    start_position: Position = None    # transactions starting before it skip
    stop: Stop = END                   # the one stop point (mysqlbackup.archive.stop)
    exclude: set = field(default_factory=set)   # {(domain, server_id, seq)}
    databases: set = field(default_factory=set)
    tables: set = field(default_factory=set)    # {"db.table"}
    rewrite: dict = field(default_factory=dict)  # --rewrite-db {"from": "to"}

    def wholly_applied(self, index):
        """True when the start GTIDs hold every transaction of the file ``index``
        describes (its ``gtid_after`` is within them); False without start GTIDs."""
        if self.start_gtids is None:
            return False
        after = index.get("gtid_after")
        if not after:
            return False
        return contains(str(self.start_gtids), after)

    def wholly_after(self, index):
        """True when the file ``index`` describes commits its first transaction at or
        after the stop datetime; False without a stop datetime."""
        return self.stop.after_start_of(Span.of(index))

    def decide(self, trx):
        """('apply' | 'skip' | 'stop' | 'gap', reason) of one transaction, in file order:
        the stop point first, so that nothing at or after it is judged; 'gap': an
        INCIDENT marker before it (``gap_error`` is what the caller raises)."""
        stop = self.stop.reached(trx.gtid_key, trx.commit_ts, trx.end_position)
        if stop:
            return "stop", stop
        if trx.incident:
            return "gap", f"{trx.incident}: the source lost events here; resync required"
        parts = trx.gtid_key
        if parts and self.start_gtids is not None and self.start_gtids.contains(*parts):
            return "skip", "in the start GTID set"
        if self.start_position and trx.start_position < self.start_position:
            return "skip", "before the start position"
        if parts in self.exclude:
            return "skip", "excluded"
        if not self._wanted(trx):
            return "skip", "filtered out"
        return "apply", None

    def _wanted(self, trx):
        names = trx.tables
        if names and all(_bookkeeping(n) for n in names):
            return False  # an earlier replay's checkpoint rows, logged on a live server
        if not self.databases and not self.tables:
            return True
        if not names:  # a statement: judged by its default schema
            return not self.databases or trx.db in self.databases
        return any(self._table_wanted(n) for n in names)

    def _table_wanted(self, name):
        return not _bookkeeping(name) and (not self.databases or name.split(".", 1)[0] in self.databases) and (
            not self.tables or name in self.tables)

    def filter_events(self, trx, fde, checksum):
        """The transaction without the row events of tables that are filtered out.

        A row statement (its TABLE_MAPs, then rows events up to the one flagged
        STMT_END_F) keeps its end: when the flagged event goes, the last kept one
        takes the flag; a statement left without rows events goes whole. Otherwise the
        server would hold the statement open and skip later ones in the same BINLOG."""
        if not self.databases and not self.tables and not any(map(_bookkeeping, trx.tables)):
            return trx
        keep, statement, wanted_ids = [], [], {}
        for event in trx.events:
            etype = event[4]
            if etype not in ev.PLAIN_ROWS_EVENTS and etype != ev.TABLE_MAP:
                keep += self._close(statement, fde, checksum)
                statement = []
                keep.append(event)
                continue
            if etype == ev.TABLE_MAP:
                wanted_ids[_table_id(event)] = self._table_wanted(table_of(event))
            statement.append((event, wanted_ids.get(_table_id(event), True)))
            if etype in ev.PLAIN_ROWS_EVENTS and ev.rows_statement_end(event, fde):
                keep += self._close(statement, fde, checksum)
                statement = []
        keep += self._close(statement, fde, checksum)
        return replace(trx, events=keep)

    @staticmethod
    def _close(statement, fde, checksum):
        """The kept events of one row statement, its end flag on its last rows event."""
        kept = [e for e, wanted in statement if wanted]
        if not any(e[4] in ev.PLAIN_ROWS_EVENTS for e in kept):
            return []
        ended = any(e[4] in ev.PLAIN_ROWS_EVENTS and ev.rows_statement_end(e, fde) for e, _ in statement)
        if ended and not ev.rows_statement_end(kept[-1], fde):
            kept[-1] = ev.with_statement_end(kept[-1], fde, checksum)
        return kept


def gap_error(trx, reason):
    """The CorruptBinlog a replay stops with at an INCIDENT marker it reached."""
    return CorruptBinlog(reason, trx.file, trx.start)


def _bookkeeping(name):
    """True for a table of the replay's own schema (checkpoints): never replayed."""
    return name.split(".", 1)[0] == BOOKKEEPING_SCHEMA


def _table_id(event):
    return int.from_bytes(event[19:25], "little")

