"""The source's facts a base backup records, its clock, and the privilege check
(the parsing of SHOW GRANTS is pure; the queries are the only I/O here)."""

import re
from dataclasses import dataclass

import pymysql

from mysqlbackup.base.dump import DumpError
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MysqlGtidSet
from mysqlbackup.errors import SourceError
from mysqlbackup.source.client import ServerInfo
from mysqlbackup.source.connect import connect as tls_connect
from mysqlbackup.source.connect import denied, tls_failure

CONNECT_TIMEOUT = 10
_GLOBAL_GRANT = re.compile(r"^GRANT (?P<privs>.+?) ON \*\.\* TO ", re.S)
_UNKNOWN_VARIABLE, _ACCESS_DENIED, _SPECIFIC_ACCESS_DENIED = 1193, 1045, 1227
_GTID_NEXT = re.compile(r"GTID_NEXT\s*=\s*'(?P<gtid>[^']+)'")
BINLOG_PAGE = 10000   # rows of SHOW BINLOG EVENTS per statement
# what each method needs, as alternatives: any one name of a tuple will do
BINLOG_MONITOR = ("BINLOG MONITOR", "REPLICATION CLIENT", "SUPER")
NEEDED = {
    ("dump", "mariadb"): (("SELECT",), ("SHOW VIEW",), ("TRIGGER",), ("EVENT",),
                          BINLOG_MONITOR),
    # mysqldump 9.7 --single-transaction --source-data --set-gtid-purged=ON
    # --no-tablespaces (measured): FLUSH TABLES WITH READ LOCK (RELOAD or FLUSH_TABLES),
    # SHOW BINARY LOG STATUS (REPLICATION CLIENT); no PROCESS, no LOCK TABLES
    ("dump", "mysql"): (("SELECT",), ("SHOW VIEW",), ("TRIGGER",), ("EVENT",),
                        ("RELOAD", "FLUSH_TABLES"), ("REPLICATION CLIENT", "SUPER")),
    ("physical", "mariadb"): (("RELOAD",), ("PROCESS",), ("LOCK TABLES",), BINLOG_MONITOR),
    ("physical", "mysql"): (("RELOAD",), ("PROCESS",), ("LOCK TABLES",), BINLOG_MONITOR),
    # CLONE LOCAL DATA DIRECTORY needs BACKUP_ADMIN; SHOW BINARY LOGS (the snapshot's
    # GTID checked against the binlog) REPLICATION CLIENT
    ("clone", "mysql"): (("BACKUP_ADMIN",), ("REPLICATION CLIENT", "SUPER")),
}


@dataclass(frozen=True)
class SourceFacts:
    """Who the source is, as the manifest and the archive's folder name it."""

    version: str
    flavor: str          # "mariadb" or "mysql"
    server_id: int
    server_uuid: str     # None where the server has none (MariaDB)
    gtids: bool = True   # every transaction has a GTID (MariaDB; MySQL: gtid_mode ON)

    @property
    def identity(self):
        """The daemon's default source name: server_uuid, else ``server-id-N``."""
        return ServerInfo(self.version, self.server_id, self.server_uuid, True, None,
                          {}).identity


def connect(spec):
    """A short-lived control connection to the source, with its TLS settings
    (SourceError when refused, a TLS failure named)."""
    try:
        return tls_connect(spec, connect_timeout=CONNECT_TIMEOUT, read_timeout=60,
                           write_timeout=60, autocommit=True)
    except pymysql.err.MySQLError as e:
        code = e.args[0] if e.args else 0
        if code == _ACCESS_DENIED:
            raise denied(spec) from None
        raise tls_failure(e, spec) or SourceError(f"cannot connect to {spec.address}: "
                                                  f"{e.args[-1]}") from None


def query(conn, sql, args=None):
    """All rows of one statement; SourceError naming the statement when refused."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    except pymysql.err.MySQLError as e:
        raise SourceError(f"the source refused {sql!r}: {e.args[-1]}") from None


def read_facts(conn):
    """SourceFacts of the server behind ``conn``."""
    version = query(conn, "SELECT VERSION()")[0][0]
    server_id = int(query(conn, "SELECT @@server_id")[0][0])
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_uuid")
            server_uuid = cur.fetchall()[0][0]
    except pymysql.err.OperationalError as e:
        if (e.args[0] if e.args else 0) != _UNKNOWN_VARIABLE:
            raise SourceError(f"the source refused 'SELECT @@server_uuid': {e.args[-1]}") \
                from None
        server_uuid = None  # MariaDB has no server_uuid
    flavor = "mariadb" if ev.is_mariadb_version(version) else "mysql"
    gtids = flavor == "mariadb" or \
        query(conn, "SELECT @@GLOBAL.gtid_mode")[0][0].upper() == "ON"
    return SourceFacts(version, flavor, server_id, server_uuid, gtids)


def source_now(conn):
    """The source server's clock (epoch seconds, microseconds): the clock of the
    binlog commit times a restore compares a base's times with."""
    return float(query(conn, "SELECT UNIX_TIMESTAMP(NOW(6))")[0][0])


def binlog_gtid_pos(conn, position):
    """The GTID position the MariaDB source says ``position`` stands for (None when it
    no longer has that binlog file)."""
    return query(conn, "SELECT BINLOG_GTID_POS(%s, %s)",
                 (position.file, position.offset))[0][0]


def schema_tables(conn, schema):
    """The names of the tables of ``schema``."""
    return [row[0] for row in query(
        conn, "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
        "ORDER BY 1", (schema,))]


def mysql_gtid_at(conn, position):
    """(the GTID set a MySQL source had executed at ``position``, None) from its binlog
    (SHOW BINLOG EVENTS): the file's Previous_gtids and every GTID before the
    position: what MySQL has in place of MariaDB's BINLOG_GTID_POS. (None, why) when
    it cannot tell: the file is gone, or the user may not read the binlog
    (REPLICATION SLAVE). DumpError when ``position`` starts no event of the file.

    Reads the file up to the position, a page of BINLOG_PAGE events at a time (the
    events of a compressed transaction are listed after it, at the position that ends
    it: the next page starts there)."""
    if position.file not in [row[0] for row in query(conn, "SHOW BINARY LOGS")]:
        return None, f"the source no longer has {position.file}"
    executed, at, end = MysqlGtidSet(), 4, None
    while True:
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT %s",
                            (position.file, at, BINLOG_PAGE))
                rows = cur.fetchall()
        except pymysql.err.MySQLError as e:
            if (e.args[0] if e.args else 0) == _SPECIFIC_ACCESS_DENIED:
                return None, ("the user may not read it (SHOW BINLOG EVENTS needs "
                              "REPLICATION SLAVE)")
            raise SourceError(f"the source refused 'SHOW BINLOG EVENTS IN "
                              f"{position.file!r}': {e.args[-1]}") from None
        for _, pos, kind, _, end_pos, info in rows:
            if pos >= position.offset:
                end = pos
                break
            if kind == "Previous_gtids":
                _merge(executed, MysqlGtidSet.parse(info or ""))
            elif kind.startswith("Gtid"):  # Gtid, Gtid_tagged_log_event
                m = _GTID_NEXT.search(info or "")
                if m:
                    _merge(executed, MysqlGtidSet.parse(m["gtid"]))
            end = end_pos
        else:
            following = max((row[4] for row in rows), default=at)
            if len(rows) == BINLOG_PAGE and following > at:
                at = following
                continue
        break
    if end != position.offset:
        raise DumpError(f"{position} starts no event of the source's binlog (an event "
                        f"{'starts' if end > position.offset else 'ends'} at "
                        f"{position.file}:{end})")
    return str(executed), None


def _merge(into, other):
    for sid, intervals in other.sids.items():
        for lo, hi in intervals:
            into.add_interval(sid, lo, hi)


def global_privileges(grant_lines):
    """The global privileges (``ON *.*``) that SHOW GRANTS lines give, upper case."""
    found = set()
    for line in grant_lines:
        m = _GLOBAL_GRANT.match(line)
        if m:
            found.update(p.strip().upper() for p in m["privs"].split(","))
    return found


def missing_privileges(have, needed):
    """The needed privileges (first name of each alternative) that ``have`` lacks."""
    if "ALL PRIVILEGES" in have or "ALL" in have:
        return []
    return [alts[0] for alts in needed if not have.intersection(alts)]


def check_privileges(conn, user, method, flavor):
    """SourceError naming every global privilege ``method`` needs and ``user`` lacks.

    Checked before anything runs, because some gaps are silent: without BINLOG
    MONITOR mariadb-dump leaves out the binlog position, without TRIGGER the
    triggers, without global SELECT the databases it cannot see."""
    lines = [row[0] for row in query(conn, "SHOW GRANTS")]
    needed = NEEDED[(method, flavor)]
    missing = missing_privileges(global_privileges(lines), needed)
    if missing:
        every = ", ".join(alts[0] for alts in needed)
        raise SourceError(f"the source user {user} lacks the global privilege"
                          f"{'s' if len(missing) > 1 else ''} {', '.join(missing)} that "
                          f"base --method {method} needs (GRANT {every} ON *.* TO ...)")
