"""What serve answers the binlog clients that are not replicas (python-mysql-replication,
zongji, mysqlbinlog): variables with an alias, the binary log status in each engine's
spelling, SHOW BINARY LOGS, binlog_row_metadata and INFORMATION_SCHEMA.COLUMNS from the
archive's TABLE_MAPs (pure: fabricated facts and events)."""

from types import SimpleNamespace

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.tablemap import parse_table_map, row_metadata
from mysqlbackup.errors import CorruptBinlog, StoreError
from replay.serve.catalog import READ_TRIES, Catalog
from replay.serve.protocol.queries import ServerFacts, Session, answer
from tests.helpers import make_event

LOGS = [("binlog.000001", 3958), ("binlog.000002", 697729)]


def table_map(names=("id", "v"), key=(0,), schema=b"d", table=b"t", optional=True):
    """A TABLE_MAP of schema.table (INT NOT NULL, VARCHAR(40) NULL), its optional
    metadata as binlog_row_metadata=FULL writes it (names=None: MINIMAL's)."""
    body = (b"\x2a\x00\x00\x00\x00\x00" + b"\x01\x00" + bytes([len(schema)]) + schema + b"\0"
            + bytes([len(table)]) + table + b"\0" + b"\x02" + bytes([3, 15])
            + b"\x02" + b"\xa0\x00" + b"\x02")
    if optional:
        body += b"\x01\x01\x00"  # SIGNEDNESS: the INT signed
    if names is not None:
        value = b"".join(bytes([len(n)]) + n.encode() for n in names)
        body += b"\x04" + bytes([len(value)]) + value
        body += b"\x08" + bytes([len(key)]) + bytes(key)
    return make_event(ev.TABLE_MAP, body, 200)


def facts(flavor="mariadb", version="5.5.5-10.11.19-MariaDB-log", catalog=None):
    catalog = catalog or Catalog(flavor, lambda: iter([(table_map(), True, None)]))
    return ServerFacts(1, version, "CRC32", 0, "0-1-12", flavor=flavor,
                       binary_logs=lambda: LOGS, row_metadata=catalog.row_metadata,
                       table_columns=catalog.table)


def rows(sql, f=None):
    reply = answer(sql, Session(), f or facts(), now=1795466396)
    assert reply.kind == "rows", (sql, reply)
    return [c.name for c in reply.columns], reply.rows


def test_a_table_map_read_as_the_source_wrote_it():
    full = parse_table_map(table_map(), True)
    assert (full.schema, full.table, full.names, full.primary_key, full.nullable) == (
        "d", "t", ("id", "v"), (0,), (False, True))
    assert row_metadata(full, "mariadb") == "FULL"
    minimal = parse_table_map(table_map(names=None), True)
    assert minimal.names is None and row_metadata(minimal, "mariadb") == "MINIMAL"
    bare = parse_table_map(table_map(names=None, optional=False), True)
    assert row_metadata(bare, "mariadb") == "NO_LOG" and row_metadata(bare, "mysql") == "MINIMAL"
    with pytest.raises(CorruptBinlog, match="TABLE_MAP"):
        parse_table_map(table_map()[:30] + b"\0\0\0\0", True)
    with pytest.raises(CorruptBinlog, match="3 column names for 2 columns"):
        parse_table_map(table_map(names=("a", "b", "c")), True)


def test_selects_with_an_alias_and_a_limit():
    assert rows("select @@GLOBAL.binlog_checksum as checksum") == (["checksum"], [["CRC32"]])
    assert rows("SELECT VERSION() AS version") == (["version"], [["5.5.5-10.11.19-MariaDB-log"]])
    assert rows("SELECT @@GLOBAL.gtid_current_pos AS gtidPos") == (["gtidPos"], [["0-1-12"]])
    assert rows("select @@version_comment limit 1") == (["@@version_comment"],
                                                        [["mysqlbackup serve"]])
    assert rows("SELECT 1") == (["1"], [[1]])
    assert rows("SELECT @@GLOBAL.binlog_checksum") == (["@@GLOBAL.binlog_checksum"], [["CRC32"]])
    assert answer("SELECT 1 + 1", Session(), facts()).code == 1235
    assert answer("SELECT @@nope AS x", Session(), facts()).code == 1193


def test_the_binary_log_status_in_each_engines_spelling():
    status = (["File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB"],
              [["binlog.000002", 697729, "", ""]])
    assert rows("SHOW MASTER STATUS") == rows("show binlog status") == status
    refused = answer("SHOW BINARY LOG STATUS", Session(), facts())
    assert (refused.code, refused.message) == (1064, (
        "You have an error in your SQL syntax; check the manual that corresponds to your "
        "MariaDB server version for the right syntax to use near 'LOG STATUS' at line 1"))
    mysql = facts("mysql", "9.7.4")
    mysql.gtid_binlog_pos = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"
    assert rows("SHOW BINARY LOG STATUS", mysql) == (
        status[0] + ["Executed_Gtid_Set"],
        [["binlog.000002", 697729, "", "", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"]])
    assert answer("SHOW MASTER STATUS", Session(), mysql).code == 1064
    assert rows("SHOW MASTER STATUS", facts("mysql", "8.0.40"))[1][0][0] == "binlog.000002"
    assert rows("SHOW BINARY LOGS") == (["Log_name", "File_size"], [list(x) for x in LOGS])
    assert rows("show master logs", mysql) == (["Log_name", "File_size", "Encrypted"],
                                               [[n, s, "No"] for n, s in LOGS])


def test_binlog_row_metadata_as_the_archives_newest_table_map_shows_it():
    assert rows("SHOW VARIABLES LIKE 'BINLOG_ROW_METADATA';") == (
        ["Variable_name", "Value"], [["binlog_row_metadata", "FULL"]])
    scanned = []

    def scan():
        scanned.append(1)
        return iter([(table_map(names=None, optional=False), True, None)])
    catalog = Catalog("mariadb", scan)
    minimal = facts(catalog=catalog)
    assert rows("SELECT @@binlog_row_metadata", minimal)[1] == [["NO_LOG"]]
    assert rows("SELECT @@binlog_row_metadata", minimal)[1] == [["NO_LOG"]]
    assert scanned == [1]  # looked up once
    assert rows("SELECT @@binlog_row_metadata", facts(
        "mysql", "9.7.4", Catalog("mysql", lambda: iter([]))))[1] == [["MINIMAL"]]



def test_an_archive_changing_under_the_lookup_is_read_again_never_guessed(monkeypatch):
    """The first reading fails (the newest partial file's segments gave way to the
    sealed file under it): a new listing is read and the setting is the archive's;
    a store that keeps failing is raised, not answered with the engine's default (a
    client told MINIMAL would name every column UNKNOWN_COL). The waits between the
    readings are recorded, not slept."""
    from replay.serve import catalog as module
    waits = []
    monkeypatch.setattr(module, "time", SimpleNamespace(sleep=waits.append))
    tries = []

    def changing():
        tries.append(1)
        if len(tries) == 1:
            raise StoreError("binlog.000002 segment 0: no such object")
        return iter([(table_map(), True, None)])
    assert Catalog("mysql", changing).row_metadata() == "FULL" and len(tries) == 2

    def failing():
        tries.append(1)
        raise StoreError("connection refused")
    tries.clear()
    catalog = Catalog("mysql", failing)
    with pytest.raises(StoreError, match="connection refused"):
        catalog.row_metadata()
    assert len(tries) == READ_TRIES == 3
    with pytest.raises(StoreError):  # nothing guessed was kept: asked again next time
        catalog.row_metadata()
    assert len(tries) == 6
    assert waits == [0.1, 0.1, 0.2, 0.1, 0.2]  # a longer wait each time, none after the last


COLUMNS = ("SELECT COLUMN_NAME FROM INFORMATION_SCHEMA.COLUMNS\n"
           "            WHERE TABLE_SCHEMA = 'd' AND TABLE_NAME = 't'\n"
           "            ORDER BY ORDINAL_POSITION")


def test_the_columns_of_a_table_from_the_table_maps_the_dumps_sent():
    catalog = Catalog("mariadb", lambda: iter([]))
    f = facts(catalog=catalog)
    empty = answer(COLUMNS, Session(), f)
    assert (empty.kind, empty.rows) == ("rows", [])
    assert empty.warning == (
        "no TABLE_MAP naming the columns of d.t seen (the source's binlog_row_metadata is "
        "not FULL, or no dump sent one yet) and no dump base holding the table: answered "
        "\"SELECT COLUMN_NAME FROM "
        "INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = 'd' AND TABLE_NAME = 't' ORDER BY "
        "ORDINAL_POSITION\" with no rows")
    catalog.saw(table_map(names=None), True, None)  # MINIMAL: no names, nothing learnt
    assert answer(COLUMNS, Session(), f).rows == []
    catalog.saw(table_map(), True, None)
    assert rows(COLUMNS, f) == (["COLUMN_NAME"], [["id"], ["v"]])
    assert rows("select ordinal_position, `COLUMN_NAME`, DATA_TYPE, IS_NULLABLE, COLUMN_KEY "
                "from information_schema.columns where table_name='t' and table_schema='d'",
                f) == (["ordinal_position", "COLUMN_NAME", "DATA_TYPE", "IS_NULLABLE",
                        "COLUMN_KEY"], [[1, "id", "int", "NO", "PRI"],
                                        [2, "v", "varchar", "YES", ""]])
    catalog.saw(table_map(names=("id", "w")), True, None)  # an ALTER: the newest wins
    assert rows(COLUMNS, f)[1] == [["id"], ["w"]]
    unknown = answer(COLUMNS.replace("COLUMN_NAME FROM", "COLUMN_TYPE FROM"), Session(), f)
    assert (unknown.code, unknown.message.split(" (")[0]) == (
        1054, "Unknown column 'COLUMN_TYPE' in 'field list'")
    assert answer("SELECT COLUMN_NAME FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA "
                  "LIKE 'd%'", Session(), f).code == 1235


def test_a_table_no_table_map_named_gets_the_dump_bases_columns():
    from mysqlbackup.base.schemascan import Columns
    reads = []

    def base():
        reads.append(1)
        return {("d", "t"): Columns(("id", "old"), ("int", "int"), (False, True), (0,))}
    catalog = Catalog("mariadb", lambda: iter([]), base)
    f = facts(catalog=catalog)
    assert rows(COLUMNS, f)[1] == [["id"], ["old"]]
    assert rows(COLUMNS.replace("'t'", "'u'"), f)[1] == []
    assert reads == [1]  # the base is read once
    catalog.saw(table_map(), True, None)  # a TABLE_MAP naming them: newer than the base
    assert rows(COLUMNS, f)[1] == [["id"], ["v"]]


DUMP = b"""-- MariaDB dump 10.19
USE `shop`;
DROP TABLE IF EXISTS `items`;
CREATE TABLE `items` (
  `id` int(11) NOT NULL,
  `na``me` varchar(40) DEFAULT NULL,
  `pad` text NOT NULL,
  PRIMARY KEY (`id`,`pad`(10)),
  KEY `n` (`na``me`)
) ENGINE=InnoDB DEFAULT CHARSET=latin1;
INSERT INTO `items` VALUES (1,'""" + b"x" * 200_000 + b"""',''),(2,'CREATE TABLE `x` (','');
USE `other`;
CREATE TABLE `log` (
  `at` datetime(6) DEFAULT NULL
) ENGINE=MyISAM;
"""


def test_a_dump_bases_tables_read_as_it_streams():
    from mysqlbackup.base.schemascan import MAX_KEPT_LINE, Columns, SchemaScan
    for size in (1, 7, 4096, len(DUMP)):  # any cut of the stream gives the same tables
        scan = SchemaScan()
        for at in range(0, len(DUMP), size):
            assert scan.feed(DUMP[at:at + size]) == b""
        assert scan.finish() == b""
        assert scan.tables == {
            ("shop", "items"): Columns(("id", "na`me", "pad"), ("int", "varchar", "text"),
                                       (False, True, False), (0, 2)),
            ("other", "log"): Columns(("at",), ("datetime",), (True,))}, size
        assert len(scan._tail) <= MAX_KEPT_LINE  # the long INSERT was never kept
