"""Which answer each query a replica sends gets (pure).

A MariaDB 10.11 replica's I/O thread sends, before its dump (seen on the wire):
``SELECT UNIX_TIMESTAMP()``, ``SHOW VARIABLES LIKE 'SERVER_ID'``,
``SET @master_heartbeat_period= NS``, ``SET @master_binlog_checksum=
@@global.binlog_checksum``, ``SELECT @master_binlog_checksum``,
``SET @mariadb_slave_capability=4``, then by GTID ``SELECT @@GLOBAL.gtid_domain_id``,
``SET @slave_connect_state='...'``, ``SET @slave_gtid_strict_mode=N``,
``SET @slave_gtid_ignore_duplicates=N``, or by file:position
``SELECT binlog_gtid_pos('FILE',POS)``. A semi-sync replica adds
``SET @rpl_semi_sync_slave=1``. A MySQL 9.7 replica's I/O thread (seen on the wire,
SOURCE_AUTO_POSITION=1): ``SELECT UNIX_TIMESTAMP()``, ``SELECT @@GLOBAL.SERVER_ID``,
``SET @master_heartbeat_period = NS, @source_heartbeat_period = NS``, ``SET
@master_binlog_checksum = @@global.binlog_checksum, @source_binlog_checksum = ...``,
``SELECT @source_binlog_checksum``, ``SELECT @@GLOBAL.GTID_MODE``, ``SELECT
@@GLOBAL.SERVER_UUID``, ``SET @slave_uuid = '...', @replica_uuid = '...'``, then
COM_REGISTER_SLAVE and COM_BINLOG_DUMP_GTID; a MySQL source's archive answers with
mysqld's variables (``_mysql_variables``). ``answer`` knows these (and the
variables a client commonly reads); anything else is refused as a server refuses
what it lacks.

A client's text never meets a regex that can backtrack: the statement patterns are
anchored with disjoint classes, SET items are split and read by hand, a LIKE
pattern is matched by ``limits.LikePattern``; a number is read as the server reads a
user variable (its leading digits, else 0), a heartbeat period kept within the
replica's bounds (1 ms to 4294967 s).
"""

import re
import time
from dataclasses import dataclass, field

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos
from mysqlbackup.errors import UsageError
from replay.serve.protocol import packets as pk
from replay.serve.protocol.limits import LikePattern

LONG, TEXT = pk.TYPE_LONGLONG, pk.TYPE_VAR_STRING
# MASTER_HEARTBEAT_PERIOD's range on a replica: 1 ms to 4294967 s (0: none)
HEARTBEAT_MIN_NS, HEARTBEAT_MAX_NS = 1_000_000, 4_294_967 * 10**9


@dataclass
class ServerFacts:
    """What the served archive says of the server it stands for."""

    server_id: int
    version: str                  # as the handshake shows it ('5.5.5-10.11.19-MariaDB...')
    checksum: str                 # 'CRC32' or 'NONE'
    domain_id: int = 0
    gtid_binlog_pos: str = ""     # the GTID state at the archive's end (when serve started)
    gtid_pos_at: object = None    # callable (file, pos) -> GTID state text or None
    gtid_binlog_pos_now: object = None  # callable -> the archive's end now (or None)
    flavor: str = "mariadb"       # 'mysql': the archive of a MySQL source, served as one
    server_uuid: str = None       # MySQL: the source's (the UUID of its own GTIDs)
    gtid_purged: str = ""         # MySQL: the GTIDs before the archive's first file
    binary_logs: object = None    # callable -> [(file, size)] the archive holds now
    row_metadata: object = None   # callable -> the source's binlog_row_metadata
    table_columns: object = None  # callable (schema, table) -> its columns (names, data_types,
    # nullable, primary_key: a TableMap naming them or a dump base's schemascan.Columns)


@dataclass
class Session:
    """What one replica connection has set with its SET statements."""

    heartbeat_ns: int = 0
    # the replica set @master_binlog_checksum (or @source_binlog_checksum): a server takes
    # that it is there as "this client reads checksummed events" (the events go as they
    # are stored), and its value as how the dump's first fake ROTATE goes
    checksum_aware: bool = False
    rotate_checksum: bool = False
    capability: int = 0
    connect_state: MariaGtidPos = None   # set: the dump goes by GTID
    semi_sync: bool = False
    user_vars: dict = field(default_factory=dict)


@dataclass
class Reply:
    """'ok', 'rows' (columns, rows) or 'error' (code, message)."""

    kind: str
    columns: list = None
    rows: list = None
    code: int = 0
    message: str = ""
    warning: str = None   # for serve's log: what the answer could not know

    def payloads(self):
        """The packets' payloads of this reply."""
        if self.kind == "ok":
            return [pk.ok_packet()]
        if self.kind == "rows":
            return pk.result_set(self.columns, self.rows)
        return [pk.err_packet(self.code, self.message)]


OK = Reply("ok")
_WORD = re.compile(r"\w+")
_INTEGER = re.compile(r"\s*([+-]?\d+)")
_LITERAL = re.compile(r"^[+-]?\d{1,18}$")
_VARIABLE = re.compile(r"^@@(?:global\.|session\.)?(\w+)$", re.IGNORECASE)
_USER_VAR = re.compile(r"^@(\w+)$", re.IGNORECASE)
_ALIAS = re.compile(r"^`?(\w+)`?$")
_GTID_POS = re.compile(r"^binlog_gtid_pos\(\s*'([^']*)'\s*,\s*([0-9]{1,20})\s*\)$",
                       re.IGNORECASE)
_SHOW_VARS = re.compile(r"^show\s+(?:global\s+|session\s+)?variables\s+like\s+'([^']*)'\s*$",
                        re.IGNORECASE)
_CONDITION = re.compile(r"^(table_schema|table_name)\s*=\s*'([^'\\]*)'$", re.IGNORECASE)
_FUNCTIONS = {"version()": "version", "unix_timestamp()": "now", "unix_timestamp(now())": "now",
              "database()": "database"}


def answer(sql, session, facts, now=None):
    """The Reply to ``sql`` (one statement) for ``session``, which it may change."""
    text = sql.strip().rstrip(";").strip()
    low = " ".join(text.lower().split())
    if low.startswith("set "):
        return _set(text[4:], session, facts)
    if low.startswith("select "):
        return _select(text[7:].strip(), session, facts, now)
    m = _SHOW_VARS.match(text)
    if m:
        return _show_variables(m.group(1), facts)
    if low in _STATUS_STATEMENTS:
        return _binlog_status(low, facts)
    if low in ("show binary logs", "show master logs"):
        return _binary_logs(facts)
    return unsupported(text)


def unsupported(text):
    """A server's refusal of a statement serve does not answer."""
    return Reply("error", code=pk.ER_NOT_SUPPORTED,
                 message=f"This server (mysqlbackup serve) does not support '{text[:80]}'")


def rows(name, type_, value):
    """A one-column, one-row result."""
    return Reply("rows", [pk.Column(name, type_)], [[value]])


def _select(body, session, facts, now):
    """``SELECT expression [AS alias] [LIMIT 1]``: an integer, a system or user variable,
    VERSION(), UNIX_TIMESTAMP(), DATABASE(), binlog_gtid_pos(); or the column query of
    INFORMATION_SCHEMA.COLUMNS (``_columns``)."""
    words = " ".join(body.lower().split())
    if " from information_schema.columns " in f" {words} ":
        return _columns(body, facts)
    if words.endswith(" limit 1"):
        body = body[:body.lower().rstrip().rfind("limit")].strip()
    expression, alias = _alias(body)
    label = alias or expression
    if _LITERAL.match(expression):
        return rows(label, LONG, int(expression))
    function = _FUNCTIONS.get(" ".join(expression.lower().split()))
    if function == "version":
        return rows(label, TEXT, facts.version)
    if function == "now":
        return rows(label, LONG, int(now if now is not None else time.time()))
    if function == "database":
        return rows(label, TEXT, None)
    m = _VARIABLE.match(expression)
    if m:
        return _select_variable(label, m.group(1).lower(), facts)
    m = _USER_VAR.match(expression)
    if m:
        return rows(alias or f"@{m.group(1)}", TEXT, session.user_vars.get(m.group(1).lower()))
    m = _GTID_POS.match(expression)
    if m:
        where = facts.gtid_pos_at(m.group(1), int(m.group(2))) if facts.gtid_pos_at else None
        return rows(label, TEXT, where)
    return unsupported(f"SELECT {body}")


def _alias(body):
    """(expression, alias or None) of ``expression [AS] alias`` (read by hand: the last
    word after a last ' as ')."""
    at = body.lower().rfind(" as ")
    if at > 0:
        m = _ALIAS.match(body[at + 4:].strip())
        if m:
            return body[:at].strip(), m.group(1)
    return body.strip(), None


_ARCHIVE_END = object()   # a value looked up only when asked for (it lists the archive)
_ROW_METADATA = object()  # the same, from the archive's newest TABLE_MAP


def _resolved(value, facts):
    """``value``, or the GTID state at the archive's end for _ARCHIVE_END, or the
    source's binlog_row_metadata for _ROW_METADATA."""
    if value is _ROW_METADATA:
        return facts.row_metadata() if facts.row_metadata else "FULL"
    if value is not _ARCHIVE_END:
        return value
    now = facts.gtid_binlog_pos_now() if facts.gtid_binlog_pos_now else None
    return facts.gtid_binlog_pos if now is None else now


def _variables(facts):
    pos = _ARCHIVE_END
    if facts.flavor == "mysql":
        return _mysql_variables(facts)
    return {"server_id": (LONG, facts.server_id), "binlog_checksum": (TEXT, facts.checksum),
            "gtid_domain_id": (LONG, facts.domain_id),
            "gtid_binlog_pos": (TEXT, pos), "gtid_current_pos": (TEXT, pos),
            "gtid_strict_mode": (LONG, 1), "log_bin": (LONG, 1),
            "binlog_format": (TEXT, "ROW"), "version": (TEXT, facts.version),
            "version_comment": (TEXT, "mysqlbackup serve"), "server_uuid": (TEXT, None),
            "rpl_semi_sync_master_enabled": (LONG, 0), "time_zone": (TEXT, "SYSTEM"),
            "collation_server": (TEXT, "latin1_swedish_ci"), "lower_case_table_names": (LONG, 0),
            "max_allowed_packet": (LONG, 1 << 30), "auto_increment_increment": (LONG, 1),
            "binlog_row_metadata": (TEXT, _ROW_METADATA), "binlog_row_image": (TEXT, "FULL")}


def _mysql_variables(facts):
    """What a MySQL 8.4/9.x primary answers for the variables a replica or a client
    reads (``mysqld``'s names and values)."""
    return {"server_id": (LONG, facts.server_id), "server_uuid": (TEXT, facts.server_uuid),
            "binlog_checksum": (TEXT, facts.checksum), "gtid_mode": (TEXT, "ON"),
            "enforce_gtid_consistency": (TEXT, "ON"), "gtid_executed": (TEXT, _ARCHIVE_END),
            "gtid_purged": (TEXT, facts.gtid_purged), "log_bin": (LONG, 1),
            "binlog_format": (TEXT, "ROW"), "version": (TEXT, facts.version),
            "version_comment": (TEXT, "mysqlbackup serve"),
            "rpl_semi_sync_source_enabled": (LONG, 0), "time_zone": (TEXT, "SYSTEM"),
            "collation_server": (TEXT, "utf8mb4_0900_ai_ci"),
            "lower_case_table_names": (LONG, 0), "max_allowed_packet": (LONG, 1 << 30),
            "auto_increment_increment": (LONG, 1),
            "binlog_row_metadata": (TEXT, _ROW_METADATA), "binlog_row_image": (TEXT, "FULL")}


def _select_variable(label, name, facts):
    known = _variables(facts)
    if name not in known:
        return Reply("error", code=pk.ER_UNKNOWN_SYSTEM_VARIABLE,
                     message=f"Unknown system variable '{name}'")
    type_, value = known[name]
    return rows(label, type_, _resolved(value, facts))


def _show_variables(pattern, facts):
    like = LikePattern(pattern)
    found = [[n, _resolved(v, facts)] for n, (_, v) in sorted(_variables(facts).items())
             if like.match(n)]
    return Reply("rows", [pk.Column("Variable_name", TEXT), pk.Column("Value", TEXT)], found)


# -- the binary logs: the archive's files as the source's -------------------------------

_STATUS_STATEMENTS = ("show master status", "show binlog status", "show binary log status")


def _binlog_status(statement, facts):
    """``SHOW MASTER STATUS`` (MariaDB; MySQL before 8.4), ``SHOW BINLOG STATUS``
    (MariaDB 10.5.2+), ``SHOW BINARY LOG STATUS`` (MySQL 8.2+): the archive's end, as
    the source's current file and position; the spelling the source lacks is a syntax
    error (1064), as on the server (python-mysql-replication tries one, then the other)."""
    mysql = facts.flavor == "mysql"
    version = ev.parse_version(facts.version)
    known = {"show master status": not mysql or version < (8, 4),
             "show binlog status": not mysql,
             "show binary log status": mysql and version >= (8, 2)}
    if not known[statement]:
        return Reply("error", code=pk.ER_PARSE_ERROR, message=(
            "You have an error in your SQL syntax; check the manual that corresponds to your "
            f"{'MySQL' if mysql else 'MariaDB'} server version for the right syntax to use "
            f"near '{statement.split()[-2].upper()} STATUS' at line 1"))
    logs = facts.binary_logs() if facts.binary_logs else []
    file, pos = logs[-1] if logs else (None, None)
    columns = [pk.Column("File", TEXT), pk.Column("Position", LONG),
               pk.Column("Binlog_Do_DB", TEXT), pk.Column("Binlog_Ignore_DB", TEXT)]
    row = [file, pos, "", ""]
    if mysql:
        columns.append(pk.Column("Executed_Gtid_Set", TEXT))
        row.append(_resolved(_ARCHIVE_END, facts))
    return Reply("rows", columns, [row] if logs else [])


def _binary_logs(facts):
    """``SHOW BINARY LOGS``: the archive's files and sizes (a partial newest file's up to
    its last whole transaction); MySQL adds ``Encrypted``."""
    logs = facts.binary_logs() if facts.binary_logs else []
    columns = [pk.Column("Log_name", TEXT), pk.Column("File_size", LONG)]
    if facts.flavor == "mysql":
        columns.append(pk.Column("Encrypted", TEXT))
        return Reply("rows", columns, [[n, s, "No"] for n, s in logs])
    return Reply("rows", columns, [[n, s] for n, s in logs])


# -- INFORMATION_SCHEMA.COLUMNS, from the archive's TABLE_MAPs --------------------------

_COLUMN_FIELDS = ("column_name", "ordinal_position", "data_type", "is_nullable", "column_key")


def _columns(body, facts):
    """``SELECT fields FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = 's' AND
    TABLE_NAME = 't' [ORDER BY ORDINAL_POSITION]`` (python-mysql-replication's, zongji's
    query): the columns as the newest TABLE_MAP of that table names them, else as the
    newest dump base's CREATE TABLE has them (``catalog.Catalog.table``). Fields a
    TABLE_MAP cannot give (COLUMN_TYPE, COLUMN_COMMENT...) are refused (1054) rather than
    guessed; a table no TABLE_MAP named gets no rows, with a warning for serve's log."""
    lowered = body.lower()
    at = lowered.find(" from ")
    fields = [f.strip().strip("`") for f in body[:at].split(",")]
    rest = " ".join(body[at + 6:].split())
    where = rest.lower().find(" where ")
    if at <= 0 or where < 0:
        return unsupported(f"SELECT {body}")
    condition = rest[where + 7:]
    cut = condition.lower().find(" order by ")
    if cut >= 0:
        if condition[cut + 10:].strip().lower() != "ordinal_position":
            return unsupported(f"SELECT {body}")
        condition = condition[:cut]
    wanted = {}
    for part in _split_and(condition):
        m = _CONDITION.match(part.strip())
        if not m:
            return unsupported(f"SELECT {body}")
        wanted[m.group(1).lower()] = m.group(2)
    unknown = [f for f in fields if f.lower() not in _COLUMN_FIELDS]
    if unknown or set(wanted) != {"table_schema", "table_name"}:
        return Reply("error", code=pk.ER_BAD_FIELD_ERROR, message=(
            f"Unknown column '{(unknown or ['table_schema'])[0]}' in 'field list' "
            "(serve answers COLUMNS' COLUMN_NAME, ORDINAL_POSITION, DATA_TYPE, IS_NULLABLE "
            "and COLUMN_KEY of one table, from the archive's TABLE_MAP events)"))
    table = facts.table_columns(wanted["table_schema"], wanted["table_name"]) \
        if facts.table_columns else None
    columns = [pk.Column(f, LONG if f.lower() == "ordinal_position" else TEXT)
               for f in fields]
    if table is None:
        return Reply("rows", columns, [], warning=(
            f"no TABLE_MAP naming the columns of {wanted['table_schema']}."
            f"{wanted['table_name']} seen (the source's binlog_row_metadata is not FULL, "
            "or no dump sent one yet) and no dump base holding the table: answered "
            f"{'SELECT ' + ' '.join(body.split())[:200]!r} with no rows"))
    return Reply("rows", columns, [[_column_field(table, i, f.lower()) for f in fields]
                                   for i in range(len(table.names))])


def _split_and(condition):
    parts, rest = [], condition
    while True:
        at = rest.lower().find(" and ")
        if at < 0:
            return parts + [rest]
        parts.append(rest[:at])
        rest = rest[at + 5:]


def _column_field(table, i, field):
    if field == "column_name":
        return table.names[i]
    if field == "ordinal_position":
        return i + 1
    if field == "data_type":
        return table.data_types[i]
    if field == "is_nullable":
        return "YES" if table.nullable[i] else "NO"
    return "PRI" if i in table.primary_key else ""


def _set(assignments, session, facts):
    for item in _split(assignments):
        parsed = _set_item(item)
        if parsed is None:
            continue  # SET NAMES utf8 and the like: nothing to keep
        marker, name, value = parsed
        if marker != "@":
            continue  # session variables (autocommit, names, sql_mode): accepted, unused
        problem = _set_user_var(session, facts, name, _value(value, facts))
        if problem:
            return problem
    return OK


def _set_item(item):
    """(marker '@', '@@' or '', lower-case name, value text) of one ``name = value`` item
    of a SET, or None when it is not one (read by hand: linear in the item)."""
    text, marker = item.strip(), ""
    for prefix in ("@@global.", "@@session.", "@@", "@"):
        if text[:len(prefix)].lower() == prefix:
            marker, text = prefix[:2] if prefix.startswith("@@") else "@", text[len(prefix):]
            break
    m = _WORD.match(text)
    if not m:
        return None
    rest = text[m.end():].lstrip()
    rest = rest[1:] if rest.startswith(":=") else rest
    if not rest.startswith("="):
        return None
    value = rest[1:].strip()
    return (marker, m.group(0).lower(), value) if value else None


def _number(value):
    """The integer a server reads from a user variable's text: its leading digits
    ('12abc' is 12), 0 when it has none ('abc': mariadbd then sends no heartbeats);
    at most 20 digits are read (a longer number is out of every range anyway)."""
    m = _INTEGER.match(str(value or ""))
    return int(m.group(1)[:21]) if m else 0


_SOURCE_NAMES = {"source_heartbeat_period": "master_heartbeat_period",
                 "source_binlog_checksum": "master_binlog_checksum",
                 "rpl_semi_sync_replica": "rpl_semi_sync_slave"}


def _set_user_var(session, facts, name, value):
    session.user_vars[name] = value
    name = _SOURCE_NAMES.get(name, name)  # MySQL 8.0.26+ sends both spellings
    if name == "master_heartbeat_period":
        ns = _number(value)
        session.heartbeat_ns = 0 if ns <= 0 else min(max(ns, HEARTBEAT_MIN_NS),
                                                     HEARTBEAT_MAX_NS)
    elif name == "mariadb_slave_capability":
        session.capability = _number(value)
    if name == "master_binlog_checksum":
        session.checksum_aware = True
        session.rotate_checksum = str(value).upper() == "CRC32"
    elif name == "rpl_semi_sync_slave":
        session.semi_sync = str(value) == "1"
    elif name == "slave_connect_state":
        try:
            session.connect_state = MariaGtidPos.parse(str(value or ""))
        except (UsageError, ValueError) as e:
            return Reply("error", code=1105, message=f"Could not parse GTID list: {e}")
    return None


def _value(text, facts):
    text = text.strip()
    if text.lower() in ("@@global.binlog_checksum", "@@binlog_checksum"):
        return facts.checksum
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _split(assignments):
    """The comma-separated items of a SET, commas inside quotes kept."""
    items, current, quote = [], [], None
    for ch in assignments:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == ",":
            items.append("".join(current))
            current = []
            continue
        current.append(ch)
    items.append("".join(current))
    return [i for i in items if i.strip()]
