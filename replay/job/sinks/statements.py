"""One transaction -> the SQL that applies it on a MySQL/MariaDB target (pure).

Row events go as a ``BINLOG '<base64>'`` statement (the server's own row
applier, as for ``mariadb-binlog | mariadb``), after one BINLOG of the file's
format description per connection. Statements (DDL, statement-based DML) run
as their raw bytes (kind 'raw', in the source's character set) under ``USE db``
(none when the event's header flags LOG_EVENT_SUPPRESS_USE_F, as for CREATE DATABASE),
after the ``SET`` statements that recreate the source session (timestamp,
sql_mode, character sets, time zone, checks: ``mysqlbackup.query_vars``); the
session is reset afterwards. The original MariaDB GTID is kept through the
session variables ``gtid_domain_id``, ``server_id`` and ``gtid_seq_no``.
"""

import base64
import re
import struct

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.query_vars import RESET_SESSION, raw_query, session_statements
from mysqlbackup.binlog.transactions import classify_sql
from mysqlbackup.errors import CorruptBinlog

LOG_EVENT_SUPPRESS_USE_F = 0x0008  # header flag: run without USE (CREATE/DROP DATABASE)
BINLOG_CAP = 4 << 20  # raw bytes a BINLOG statement gathers before it ends at a statement
ROW_EVENTS = ev.PLAIN_ROWS_EVENTS | {ev.TABLE_MAP}
SKIPPED = {ev.MARIA_ANNOTATE_ROWS, ev.ROWS_QUERY, ev.GTID, ev.ANONYMOUS_GTID, ev.GTID_TAGGED,
           ev.MARIA_GTID, ev.XID}


def binlog_statement(events):
    """``BINLOG '...'`` carrying the given whole events."""
    return "BINLOG '" + base64.b64encode(b"".join(events)).decode("ascii") + "'"


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


def step_sql(kind, what):
    """The text (or the source's bytes) of one step, as a SQL file or client sends it."""
    return binlog_statement(what) if kind == "binlog" else what


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
          ("DROP", "FUNCTION"): {1305}, ("CREATE", "USER"): {1396}, ("DROP", "USER"): {1396}}
_OBJECTS = {"DATABASE": "DATABASE", "SCHEMA": "DATABASE", "TABLE": "TABLE", "VIEW": "VIEW",
            "INDEX": "INDEX", "TRIGGER": "TRIGGER", "PROCEDURE": "PROCEDURE",
            "FUNCTION": "FUNCTION", "USER": "USER"}


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


MYSQL_GTID_AUTOMATIC = "SET SESSION gtid_next='AUTOMATIC'"


def gtid_session(trx):
    """SET statement that makes the target log the transaction under its original GTID:
    MariaDB's domain, server_id and seq_no; MySQL's gtid_next (``mysql_gtid``: the
    session must set it again after the commit, ``MYSQL_GTID_AUTOMATIC``)."""
    if trx.maria_gtid:
        domain, server_id, seq = trx.maria_gtid
        return f"SET SESSION gtid_domain_id={domain}, server_id={server_id}, gtid_seq_no={seq}"
    if mysql_gtid(trx):
        return f"SET SESSION gtid_next='{trx.gtid}'"
    return None


def mysql_gtid(trx):
    """True when ``trx`` has a MySQL GTID (UUID:N or UUID:TAG:N)."""
    key = trx.gtid_key
    return bool(key) and len(key) == 2


def transaction_steps(trx, fde, checksum, cap=BINLOG_CAP):
    """[(kind, what)] for one transaction: 'sql' (text), 'binlog' (a list of whole row
    events for one BINLOG statement, which must end its packet), 'raw' (bytes: a
    packet of its own) and 'commit'.

    A transaction with a commit (XID or COMMIT) is wrapped in BEGIN/COMMIT; a
    standalone statement (DDL) runs alone. ``checksum``: events carry a CRC32.
    """
    steps, rows = [], []
    transactional = any(e[4] == ev.XID or _is_commit(e, checksum, fde) for e in trx.events)
    if transactional:
        steps.append(("sql", "BEGIN"))
    for event in trx.events:
        etype = event[4]
        if etype in ROW_EVENTS:
            rows.append(event)
            continue
        if etype in SKIPPED:
            continue  # an Annotate_rows between statements need not end a BINLOG
        if rows:
            steps += [("binlog", chunk) for chunk in binlog_chunks(rows, fde, cap)]
            rows = []
        steps.extend(_other(event, etype, checksum, fde, trx.db_map or {}))
    if rows:
        steps += [("binlog", chunk) for chunk in binlog_chunks(rows, fde, cap)]
    if transactional:
        steps.append(("commit", "COMMIT"))
    return steps


def _is_commit(event, checksum, fde):
    return event[4] == ev.QUERY and classify_sql(
        ev.parse_query(event, checksum, fde, max_sql=64).sql) == "commit"


def suppresses_use(event):
    """True when a QUERY event's header says to run it without ``USE db``: the server
    sets LOG_EVENT_SUPPRESS_USE_F on CREATE/DROP DATABASE, whose ``db`` is the very
    database they create or drop (mysqlbinlog prints no ``use`` for them either)."""
    return bool(ev.parse_header(event).flags & LOG_EVENT_SUPPRESS_USE_F)


def _other(event, etype, checksum, fde, db_map):
    if etype in SKIPPED:
        return []
    if etype == ev.QUERY:
        if classify_sql(ev.parse_query(event, checksum, fde, max_sql=64).sql) != "other":
            return []  # BEGIN / COMMIT come from the wrapping
        q = raw_query(event, checksum, fde)
        db = None if suppresses_use(event) else db_map.get(q.db, q.db)
        use = [("sql", f"USE `{db.replace('`', '``')}`")] if db else []
        return ([("sql", sql) for sql in session_statements(q)] + use
                + [("raw", q.sql), ("sql", RESET_SESSION)])
    if etype == ev.INTVAR:
        body = ev.event_body(event, checksum)
        kind, value = struct.unpack_from("<BQ", body, 0)
        name = "LAST_INSERT_ID" if kind == 1 else "INSERT_ID"
        return [("sql", f"SET {name}={value}")]
    raise CorruptBinlog(f"{ev.event_name(etype)} event: replay cannot apply it")
