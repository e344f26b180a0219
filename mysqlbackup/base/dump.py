"""The dump method: the dump client's command line, and the snapshot's position
read from the dump's comment lines as they stream by (pure, no I/O).

MariaDB (``mariadb-dump --single-transaction --master-data=2 --gtid``) writes the
snapshot's binlog position near the top and its GTID position at the end::

    -- CHANGE MASTER TO MASTER_LOG_FILE='binlog.000001', MASTER_LOG_POS=883;
    ...
    -- SET GLOBAL gtid_slave_pos='0-1-3';

MySQL (``mysqldump --source-data=2 --set-gtid-purged=ON``) writes both near the top
(9.7: the GTID set first), read together under its FLUSH TABLES WITH READ LOCK::

    SET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ 'uuid:1-5,
    uuid2:1-3';
    -- CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE='binlog.000002', SOURCE_LOG_POS=157;

A MySQL source without GTIDs (``gtid_mode`` OFF, MySQL's default, or either permissive
mode) is dumped with ``--set-gtid-purged=OFF`` and its snapshot is the binlog position
alone (``Snapshot.gtid`` None): a restore from it starts by position. (Asked for
``--set-gtid-purged=ON`` there, mysqldump 9.7 prints "Error: Server has GTIDs
disabled." and exits 0 after the header: the snapshot would be missing.)

A data row never starts a line with these texts (the dump escapes newlines inside
values), but a routine's body is printed as written and could: the first binlog
position (the header precedes every database) and the last MariaDB GTID line (the
trailer follows everything) are the dump's own.
"""

import re
from dataclasses import dataclass

from mysqlbackup.binlog.position import Position
from mysqlbackup.errors import MysqlBackupError

CLIENTS = {"mariadb": ("mariadb-dump", "mysqldump"), "mysql": ("mysqldump",)}
# schemas that are the server's own: never dumped as data (users go as statements)
SYSTEM_SCHEMAS = ("mysql", "sys", "performance_schema", "information_schema")
_FILE_POS = re.compile(rb"-- CHANGE (?:MASTER|REPLICATION SOURCE) TO (?:MASTER|SOURCE)_LOG_FILE"
                       rb"='(?P<file>[^']+)', (?:MASTER|SOURCE)_LOG_POS=(?P<pos>\d+);")
_MARIA_GTID = re.compile(rb"-- SET GLOBAL gtid_slave_pos='(?P<gtid>[0-9,-]*)';")
_MYSQL_GTID = re.compile(rb"SET @@GLOBAL\.GTID_PURGED=(?:/\*!80000 '\+'\*/ )?'(?P<gtid>[^']*)';")
# the start of each line of ours (a newline, then the text), found with bytes.find
_POSITION_MARK = b"\n-- CHANGE "
_GTID_MARK = {"mariadb": b"\n-- SET GLOBAL gtid_slave_pos=",
              "mysql": b"\nSET @@GLOBAL.GTID_PURGED="}
KEEP = 1 << 20    # bytes of a line kept across chunks (a long GTID_PURGED set fits)


class DumpError(MysqlBackupError):
    """The dump does not say where its snapshot is."""


@dataclass(frozen=True)
class Snapshot:
    """Where a base's snapshot sits in the source's history."""

    position: Position   # binlog file:offset
    gtid: str            # GTID position (MariaDB) or executed set (MySQL); '' when empty;
    # None: the source keeps no GTIDs (MySQL with gtid_mode other than ON)


def dump_argv(tool, options_path, spec, flavor, users=True, skip_tables=(), gtids=True):
    """The dump client's arguments (the password is in ``options_path``); ``users``
    False: MariaDB's accounts are not dumped by the tool (``base.users`` writes them, as
    it always writes MySQL's: mysqldump is never given ``--users``); ``gtids`` False: a
    MySQL source without GTIDs (no GTID_PURGED line asked for).

    MySQL's mysqldump has no ``--ignore-database`` (nor ``--gtid``, ``--master-data``,
    ``--system``): it leaves out sys, performance_schema and information_schema by
    itself, and the tables of the mysql schema (``skip_tables``: their names, read
    from the source) one ``--ignore-table`` each; a database created while the dump
    starts is in it or in the binlogs after it, never in neither."""
    argv = [tool, f"--defaults-extra-file={options_path}", f"--host={spec.host}",
            f"--port={spec.port}", "--protocol=tcp", "--single-transaction", "--quick",
            "--routines", "--events", "--triggers", "--hex-blob",
            "--default-character-set=utf8mb4", "--all-databases"]
    if flavor == "mariadb":
        argv += [f"--ignore-database={name}" for name in SYSTEM_SCHEMAS[:2]]
        return argv + ["--master-data=2", "--gtid", "--insert-ignore"] + (
            ["--system=users"] if users else [])
    argv += [f"--ignore-table={SYSTEM_SCHEMAS[0]}.{name}" for name in skip_tables]
    return argv + ["--source-data=2", f"--set-gtid-purged={'ON' if gtids else 'OFF'}",
                   "--no-tablespaces"]


class SnapshotParser:
    """Feed the dump's bytes in order; ``snapshot()`` then says where it was taken.

    Only a bounded tail of the stream is kept between chunks. ``gtids`` False: the
    source keeps no GTIDs, the position is the whole snapshot."""

    def __init__(self, flavor, gtids=True):
        self.flavor, self.gtids = flavor, gtids
        self._tail = b"\n"
        self._position = None
        self._gtid = None

    def feed(self, chunk):
        data = self._tail + chunk
        if self._position is None:
            m = _first(_FILE_POS, data, _POSITION_MARK)
            if m:
                self._position = Position(m["file"].decode(), int(m["pos"]))
        if self.gtids and (self.flavor == "mariadb" or self._gtid is None):
            pattern = _MARIA_GTID if self.flavor == "mariadb" else _MYSQL_GTID
            found = _all(pattern, data, _GTID_MARK[self.flavor])
            if found:  # MariaDB: the last (the trailer); MySQL: the first (the header)
                self._gtid = found[-1 if self.flavor == "mariadb" else 0]["gtid"].decode()
        self._tail = self._keep(data)

    def _keep(self, data):
        """What of ``data`` the next chunk may complete into a line of ours: its last
        line (from its newline), or from the start of MySQL's GTID_PURGED statement
        (it spans lines); a sentinel instead of a data line longer than KEEP."""
        start = data.rfind(b"\n")
        if self.flavor == "mysql" and self.gtids and self._gtid is None:
            purged = data.rfind(b"\nSET @@GLOBAL.GTID_PURGED=")
            start = purged if purged >= 0 else start
        if start < 0 or len(data) - start > KEEP:
            return b"\0"  # mid-line: what follows does not start a line
        return data[start:]

    def snapshot(self, where, said=None):
        """The Snapshot, or DumpError naming ``where`` and what the dump lacks (``said``:
        the tool's last stderr line, which names the cause when there is one)."""
        cause = f": the tool said {said!r}" if said else ""
        if self._position is None:
            hint = cause or (": is the binary log on, and does the user have BINLOG MONITOR "
                             "/ REPLICATION CLIENT?")
            raise DumpError(f"{where}: the dump names no binlog position (no 'CHANGE MASTER "
                            f"TO MASTER_LOG_FILE' line){hint}")
        if self._gtid is None and self.gtids:
            raise DumpError(f"{where}: the dump names no GTID position (no "
                            f"{'gtid_slave_pos' if self.flavor == 'mariadb' else 'GTID_PURGED'}"
                            f" line){cause}")
        return Snapshot(self._position, self._gtid if self.gtids else None)


def _all(pattern, data, mark):
    """Matches of ``pattern`` at the start of a line (just after ``mark``'s newline),
    found with bytes.find: a regex scan of every byte of a dump is far slower."""
    found, at = [], data.find(mark)
    while at >= 0:
        m = pattern.match(data, at + 1)
        if m:
            found.append(m)
        at = data.find(mark, at + 1)
    return found


def _first(pattern, data, mark):
    found = _all(pattern, data, mark)
    return found[0] if found else None
