"""One transaction -> the SQL that applies it on a MySQL/MariaDB target (pure).

The events are turned into statements as the engine's own binlog reader prints them
(``mariadb-binlog`` / ``mysqlbinlog``), so that ``... | mariadb`` and this replay apply
the same thing: row events as a ``BINLOG '<base64>'`` statement (the server's own row
applier), after one BINLOG of the file's format description per connection; a logged
statement (DDL, statement-based DML) as its raw bytes (kind 'raw', in the source's
character set) under ``USE db`` (none when the event's header flags
LOG_EVENT_SUPPRESS_USE_F, as for CREATE DATABASE), after the ``SET`` statements that
recreate the source session (``mysqlbackup.binlog.query_vars``: timestamp, the source
session's thread id, sql_mode, AUTO_INCREMENT steps, character sets, time zone, ...),
and after its context (``mysqlbackup.binlog.context``: INSERT_ID/LAST_INSERT_ID, the
RAND seeds, user variables); LOAD DATA as ``LOAD DATA LOCAL INFILE`` of the bytes its
load blocks carry (kind 'load'); an XA transaction's XA START / XA PREPARE from its
events; the session is reset afterwards. The original MariaDB GTID is kept through the
session variables ``gtid_domain_id``, ``server_id`` and ``gtid_seq_no``.

A transaction opened by BEGIN and committed by an XID ends with the kind 'commit': its
applier may put a row of its own into that commit. Any other one (DDL, a
non-transactional change committed by COMMIT, an XA PREPARE, XA COMMIT, MySQL's
CREATE ... SELECT) commits by itself. MariaDB's CREATE ... SELECT logged in rows is a
GTID group holding a DDL (its CREATE TABLE commits by itself) and then the rows: its
steps are the DDL, then a 'begin' and the rows up to the 'commit' (no client session
can log the two as one transaction: ``script.script_transaction`` logs the rows'
part under the GTID).
"""

import binascii
import re
from dataclasses import dataclass, replace

from mysqlbackup.binlog import context as cx
from mysqlbackup.binlog.collations import collation_of
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.query_vars import RESET_SESSION, raw_query, session_statements
from mysqlbackup.binlog.tablemap import parse_table_map
from mysqlbackup.binlog.transactions import classify_sql
from mysqlbackup.errors import MysqlBackupError
from mysqlbackup.binlog.tablemap import table_of

LOG_EVENT_SUPPRESS_USE_F = 0x0008  # header flag: run without USE (CREATE/DROP DATABASE)
LOG_EVENT_IGNORABLE_F = 0x0080     # header flag: an applier that does not know it skips it
# MySQL group replication's events: no change of data (mysqlbinlog prints comments)
_NO_SQL = {36, 37}  # TRANSACTION_CONTEXT, VIEW_CHANGE
BINLOG_CAP = 4 << 20  # raw bytes a BINLOG statement gathers before it ends at a statement
ROW_EVENTS = ev.PLAIN_ROWS_EVENTS | {ev.TABLE_MAP, ev.PARTIAL_UPDATE_ROWS}
SKIPPED = {ev.MARIA_ANNOTATE_ROWS, ev.ROWS_QUERY, ev.GTID, ev.ANONYMOUS_GTID, ev.GTID_TAGGED,
           ev.MARIA_GTID, ev.XID}
FL_DDL = 0x20  # MariaDB GTID event flag: the group holds a DDL
# MySQL 8.0.21+ logs CREATE ... SELECT as "CREATE TABLE t (...) START TRANSACTION ..."
_STARTS_TRANSACTION = re.compile(rb"\s*CREATE\b.*\)\s*START\s+TRANSACTION\b", re.I | re.S)
# MySQL and MariaDB start pseudo-replica mode as their binlog readers' output does: an XA
# transaction is let go of at XA PREPARE (the session goes on), BINLOG takes any event
PSEUDO_REPLICA = "SET @@session.pseudo_slave_mode=1"


class UnappliableEvent(MysqlBackupError):
    """A transaction holds an event the statements way cannot turn into SQL."""


@dataclass(frozen=True)
class LoadData:
    """A LOAD DATA statement and the bytes of its file: ``before`` + the file's name
    as a quoted string + ``after`` is the statement (``LOCAL INFILE`` in it)."""

    before: bytes
    after: bytes
    data: bytes

    def statement(self, path):
        """The statement reading the file ``path``."""
        quoted = path.replace("\\", "\\\\").replace("'", "\\'")
        return self.before + quoted.encode() + self.after


def binlog_bytes(events):
    """``BINLOG '...'`` carrying the given whole events, as ASCII bytes (what a file
    takes, without a copy to text)."""
    return b"BINLOG '" + binascii.b2a_base64(b"".join(events), newline=False) + b"'"


def binlog_statement(events):
    """``binlog_bytes`` as text (what a connection sends)."""
    return binlog_bytes(events).decode("ascii")


def binlog_chunks(events, fde, cap):
    """Consecutive row events cut into BINLOG-sized lists: each holds whole row
    statements (a TABLE_MAP through the rows event with STMT_END_F), and a new one
    begins once ``cap`` raw bytes are reached (a single larger statement stays whole)."""
    chunks, chunk, size = [], [], 0
    for event in events:
        chunk.append(event)
        size += len(event)
        if size >= cap and event[4] in ev.ROWS_EVENTS and ev.rows_statement_end(event, fde):
            chunks.append(chunk)
            chunk, size = [], 0
    if chunk:
        chunks.append(chunk)
    return chunks


def ddl_prefix(steps):
    """The number of steps before the 'begin' that follows a DDL (MariaDB's CREATE ...
    SELECT, see the module's docstring), else None."""
    seen_raw = False
    for i, (kind, _) in enumerate(steps):
        if kind == "begin":
            return i if seen_raw else None
        seen_raw = seen_raw or kind in ("raw", "load")
    return None


def step_sql(kind, what):
    """The text (or the source's bytes) of one step, as a SQL file or client sends it
    (a 'load' step: its statement with the file's name left to fill in)."""
    if kind == "binlog":
        return binlog_statement(what)
    return what.statement("{file}") if kind == "load" else what


def mergeable(trx, checksum, fde):
    """True when ``trx`` is only row changes committed by an XID (a transactional
    engine), so that it may share one target commit with its neighbours."""
    events = trx.events
    if not events or events[-1][4] != ev.XID:
        return False
    for event in events:
        etype = event[4]
        if etype in ROW_EVENTS or etype in SKIPPED:
            continue
        if etype == ev.QUERY and classify_sql(
                ev.parse_query(event, checksum, fde, max_sql=64).sql) == "begin":
            continue
        return False
    return True


# what a DDL says when it runs a second time: (verb, object) -> error codes
_AGAIN = {("CREATE", "DATABASE"): {1007}, ("DROP", "DATABASE"): {1008},
          ("CREATE", "TABLE"): {1050}, ("CREATE", "VIEW"): {1050},
          ("DROP", "TABLE"): {1051}, ("DROP", "VIEW"): {1051, 4092},
          ("ALTER", "TABLE"): {1054, 1060, 1061, 1091, 1146, 1826},
          ("RENAME", "TABLE"): {1050, 1146}, ("CREATE", "INDEX"): {1061},
          ("DROP", "INDEX"): {1091}, ("CREATE", "TRIGGER"): {1359},
          ("DROP", "TRIGGER"): {1360}, ("CREATE", "PROCEDURE"): {1304},
          ("CREATE", "FUNCTION"): {1304}, ("DROP", "PROCEDURE"): {1305},
          ("DROP", "FUNCTION"): {1305}, ("CREATE", "USER"): {1396}, ("DROP", "USER"): {1396},
          # XA: the XID prepared already (XAER_DUPID), committed or rolled back (XAER_NOTA)
          ("XA", "START"): {1440}, ("XA", "COMMIT"): {1397}, ("XA", "ROLLBACK"): {1397}}
_OBJECTS = {"DATABASE": "DATABASE", "SCHEMA": "DATABASE", "TABLE": "TABLE", "VIEW": "VIEW",
            "INDEX": "INDEX", "TRIGGER": "TRIGGER", "PROCEDURE": "PROCEDURE",
            "FUNCTION": "FUNCTION", "USER": "USER", "START": "START", "COMMIT": "COMMIT",
            "ROLLBACK": "ROLLBACK"}


def errors_if_already_applied(sql):
    """Error codes that mean "this DDL has already run" when ``sql`` (bytes or text)
    runs again (CREATE TABLE -> table exists, ...); empty for anything else."""
    text = sql.decode("utf-8", "replace") if isinstance(sql, bytes) else sql
    text = re.sub(r"/\*.*?\*/|--[^\n]*|#[^\n]*", " ", text[:1000], flags=re.S)
    words = re.findall(r"[A-Za-z_]+", text.upper())
    if not words:
        return set()
    noun = next((_OBJECTS[w] for w in words[1:8] if w in _OBJECTS), None)
    return _AGAIN.get((words[0], noun), set())


def row_events(trx):
    """The events of ``trx`` that go into BINLOG statements."""
    return [e for e in trx.events if e[4] in ROW_EVENTS]


def take_tables(trx, tables, checksum, fde):
    """(the row events of ``trx`` on ``tables`` ('db.table' names): their TABLE_MAPs and
    rows events, in order; ``trx`` without them). A MariaDB SEQUENCE's row, which a
    client session cannot log inside a transaction (``sinks.target`` says why), is
    taken out this way."""
    ids, taken, kept = set(), [], []
    for event in trx.events:
        if event[4] == ev.TABLE_MAP:
            if table_of(event) in tables:  # the name ``trx.tables`` holds
                ids.add(parse_table_map(event, checksum, fde).table_id)
                taken.append(event)
                continue
        elif event[4] in ev.ROWS_EVENTS and ev.rows_table_id(event, fde) in ids:
            taken.append(event)
            continue
        kept.append(event)
    return taken, replace(trx, events=kept)


MYSQL_GTID_AUTOMATIC = "SET SESSION gtid_next='AUTOMATIC'"


def gtid_session(trx):
    """The SET statements (a list; empty without a GTID) that make the target log the
    transaction under its original GTID: MariaDB's domain, server_id and seq_no, each a
    statement of its own (the server checks a seq_no against the domain and server_id
    in force before its SET); MySQL's gtid_next (``mysql_gtid``: the session must set
    it again after the commit, ``MYSQL_GTID_AUTOMATIC``)."""
    if trx.maria_gtid:
        domain, server_id, seq = trx.maria_gtid
        return [f"SET SESSION gtid_domain_id={domain}", f"SET SESSION server_id={server_id}",
                f"SET SESSION gtid_seq_no={seq}"]
    if mysql_gtid(trx):
        return [f"SET SESSION gtid_next='{trx.gtid}'"]
    return []


def mysql_gtid(trx):
    """True when ``trx`` has a MySQL GTID (UUID:N or UUID:TAG:N)."""
    key = trx.gtid_key
    return bool(key) and len(key) == 2


def transaction_steps(trx, fde, checksum, cap=BINLOG_CAP):
    """[(kind, what)] for one transaction: 'sql' (text), 'binlog' (a list of whole row
    events for one BINLOG statement, which must end its packet), 'raw' (bytes: a
    packet of its own), 'load' (a LoadData: a packet of its own) and, last, 'commit'
    for a transaction opened by BEGIN and committed by an XID (see the module's
    docstring). ``checksum``: events carry a CRC32. UnappliableEvent for an event
    that has no SQL form, naming the transaction."""
    walk = _Walk(trx, fde, checksum, cap)
    for event in trx.events:
        walk.event(event)
    return walk.finish()


class _Walk:
    """One transaction's events, in order, into its steps (``transaction_steps``)."""

    def __init__(self, trx, fde, checksum, cap):
        self.trx, self.fde, self.checksum, self.cap = trx, fde, checksum, cap
        self.mariadb = ev.is_mariadb_version(fde.server_version)
        self.steps, self.rows, self.blocks, self.begun = [], [], {}, False
        self.ddl_group = False  # a MariaDB GTID group holding a DDL and rows

    def event(self, event):
        etype = event[4]
        if etype in ROW_EVENTS:
            self.rows.append(event)
            return
        if (etype in SKIPPED and etype not in (ev.MARIA_GTID, ev.XID)) or etype in _NO_SQL \
                or ev.parse_header(event).flags & LOG_EVENT_IGNORABLE_F:
            return  # an Annotate_rows between statements need not end a BINLOG
        self._flush_rows()
        handler = _HANDLERS.get(etype)
        if handler is None:
            raise UnappliableEvent(
                f"transaction {self.trx.gtid or '(no GTID)'} at {self.trx.file}:"
                f"{self.trx.start} holds a {ev.event_name(etype)} event, which the "
                "statements way cannot apply: use --apply native, or the engine's own "
                "binlog reader")
        handler(self, event)

    def finish(self):
        self._flush_rows()
        return self.steps

    def _flush_rows(self):
        if self.rows:
            self.steps += [("binlog", chunk) for chunk in binlog_chunks(self.rows, self.fde,
                                                                       self.cap)]
            self.rows = []

    def _maria_gtid(self, event):
        g = ev.parse_maria_gtid(event, self.checksum)
        if g.flags & cx.FL_PREPARED_XA:
            xid = cx.maria_gtid_xid(event, self.checksum)
            self.steps.append(("raw", f"XA START {cx.xid_sql(xid)}".encode()))
        elif g.flags & FL_DDL and not g.flags & ev.FL_STANDALONE:
            self.ddl_group = True  # its BEGIN comes after the DDL (``_statement``)
        elif not g.flags & ev.FL_STANDALONE:
            self._begin()

    def _begin(self):
        self.steps.append(("begin", "BEGIN"))
        self.begun = True

    def _query(self, event):
        q = raw_query(event, self.checksum, self.fde)
        head = q.sql[:20].decode("ascii", "replace").strip().rstrip(";").strip().upper()
        if head in ("BEGIN", "START TRANSACTION"):
            return self._begin()
        if head in ("COMMIT", "ROLLBACK"):
            return self.steps.append(("sql", head))  # a non-transactional group's end
        self._statement(event, q, ("raw", q.sql))

    def _statement(self, event, q, step):
        db = None if suppresses_use(event) else (self.trx.db_map or {}).get(q.db, q.db)
        use = [("sql", f"USE `{db.replace('`', '``')}`")] if db else []
        self.steps += [("sql", sql) for sql in session_statements(q, self.mariadb)] + use
        self.steps.append(step)
        if _STARTS_TRANSACTION.match(q.sql):
            # MySQL's CREATE ... SELECT: nothing but its rows and COMMIT may follow, and
            # it commits by itself (no row of the applier's may join its commit)
            self.begun = False
            return
        self.steps.append(("sql", RESET_SESSION))
        if self.ddl_group and not self.begun:
            self._begin()

    def _load_block(self, event):
        file_id, data = cx.parse_load_block(event, self.checksum)
        self.blocks[file_id] = self.blocks.get(file_id, b"") + data

    def _execute_load(self, event):
        q = raw_query(event, self.checksum, self.fde)
        load = cx.parse_execute_load(event, self.checksum)
        dup = {cx.LOAD_DUP_IGNORE: b" IGNORE", cx.LOAD_DUP_REPLACE: b" REPLACE"}.get(
            load.dup, b"")
        step = LoadData(q.sql[:load.start] + b" LOCAL INFILE '",
                        b"'" + dup + b" INTO" + q.sql[load.end:],
                        self.blocks.pop(load.file_id, b""))
        self._statement(event, q, ("load", step))

    def _intvar(self, event):
        name, value = cx.parse_intvar(event, self.checksum)
        self.steps.append(("sql", f"SET {name}={value}"))

    def _rand(self, event):
        seed1, seed2 = cx.parse_rand(event, self.checksum)
        self.steps.append(("sql", f"SET @@RAND_SEED1={seed1}, @@RAND_SEED2={seed2}"))

    def _user_var(self, event):
        self.steps.append(("sql", user_var_sql(cx.parse_user_var(event, self.checksum))))

    def _xid(self, event):
        self.steps.append(("commit", "COMMIT") if self.begun else ("sql", "COMMIT"))

    def _xa_prepare(self, event):
        one_phase, xid = cx.parse_xa_prepare(event, self.checksum)
        verb = f"XA COMMIT {cx.xid_sql(xid)} ONE PHASE" if one_phase else \
            f"XA PREPARE {cx.xid_sql(xid)}"
        self.steps.append(("raw", verb.encode()))


_HANDLERS = {
    ev.MARIA_GTID: _Walk._maria_gtid, ev.QUERY: _Walk._query,
    ev.BEGIN_LOAD_QUERY: _Walk._load_block, ev.APPEND_BLOCK: _Walk._load_block,
    ev.EXECUTE_LOAD_QUERY: _Walk._execute_load, ev.INTVAR: _Walk._intvar,
    ev.RAND: _Walk._rand, ev.USER_VAR: _Walk._user_var, ev.XID: _Walk._xid,
    ev.XA_PREPARE: _Walk._xa_prepare,
}


def user_var_sql(var):
    """The SET of a user variable (a ``context.UserVar``), as mysqlbinlog prints it."""
    name = "@`" + var.name.replace("`", "``") + "`"
    if var.kind == "null":
        value = "NULL"
    elif var.kind == "string":
        try:
            charset, collation = collation_of(var.charset)
        except KeyError:
            raise UnappliableEvent(f"user variable {name} is in collation {var.charset}, "
                                   "which this replay does not know by name") from None
        value = f"_{charset} X'{var.value.hex().upper()}' COLLATE `{collation}`"
    elif var.kind == "real":
        value = repr(var.value)
        value += "" if "e" in value or "n" in value else "e0"  # a DOUBLE, not a DECIMAL
    else:
        value = str(var.value)
    return f"SET {name}:={value}"


def suppresses_use(event):
    """True when a QUERY event's header says to run it without ``USE db``: the server
    sets LOG_EVENT_SUPPRESS_USE_F on CREATE/DROP DATABASE, whose ``db`` is the very
    database they create or drop (mysqlbinlog prints no ``use`` for them either)."""
    return bool(ev.parse_header(event).flags & LOG_EVENT_SUPPRESS_USE_F)
