"""The pure parts of ``mysqlbackup base``: the snapshot a dump or mariadb-backup names
(parsed as it streams, MySQL without GTIDs included), the privileges SHOW GRANTS gives,
the GTID check of a snapshot, progress, and the users section the base writes."""

import pytest

from mysqlbackup.base.dump import DumpError, Snapshot, SnapshotParser, dump_argv
from mysqlbackup.base.physical import StderrSnapshot
from mysqlbackup.base.server import NEEDED, global_privileges, missing_privileges
from mysqlbackup.binlog.position import Position


MARIA_DUMP = (b"-- MariaDB dump 10.19\n-- CHANGE MASTER TO MASTER_USE_GTID=slave_pos;\n"
              b"-- CHANGE MASTER TO MASTER_LOG_FILE='binlog.000007', MASTER_LOG_POS=4711;\n"
              b"CREATE PROCEDURE p() BEGIN\n"
              b"-- CHANGE MASTER TO MASTER_LOG_FILE='binlog.000001', MASTER_LOG_POS=4;\n"
              b"-- SET GLOBAL gtid_slave_pos='9-9-9';\nEND;;\n"
              b"INSERT INTO t VALUES ('a\\n-- SET GLOBAL gtid_slave_pos=\\'1-1-1\\';');\n"
              b"-- SET GLOBAL gtid_slave_pos='0-31-1200,1-31-5';\n-- Dump completed\n")


@pytest.mark.parametrize("size", [1, 7, 64, len(MARIA_DUMP)])
def test_snapshot_parser_reads_the_dumps_own_lines_in_any_chunking(size):
    parser = SnapshotParser("mariadb")
    for i in range(0, len(MARIA_DUMP), size):
        parser.feed(MARIA_DUMP[i:i + size])
    snapshot = parser.snapshot("dump")
    assert (snapshot.position, snapshot.gtid) == (Position("binlog.000007", 4711),
                                                  "0-31-1200,1-31-5")


def test_snapshot_parser_mysql_gtid_purged_over_lines():
    uuid1, uuid2 = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4a8e5c1e-71ca-11e1-9e33-c80aa9429563"
    text = (f"-- CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE='binlog.000002', "
            f"SOURCE_LOG_POS=157;\n\nSET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ '{uuid1}:1-5,\n"
            f"{uuid2}:1-3';\n").encode()
    for size in (1, 5, len(text)):
        parser = SnapshotParser("mysql")
        for i in range(0, len(text), size):
            parser.feed(text[i:i + size])
        snapshot = parser.snapshot("dump")
        assert snapshot.position == Position("binlog.000002", 157)
        assert snapshot.gtid == f"{uuid1}:1-5,\n{uuid2}:1-3"


def test_snapshot_parser_names_what_the_dump_lacks():
    parser = SnapshotParser("mariadb")
    parser.feed(b"-- MariaDB dump\nCREATE TABLE t (a INT);\n")
    with pytest.raises(Exception, match="no binlog position .*BINLOG MONITOR"):
        parser.snapshot("mariadb-dump of db1")
    parser.feed(b"-- CHANGE MASTER TO MASTER_LOG_FILE='binlog.000001', MASTER_LOG_POS=4;\n")
    with pytest.raises(Exception, match="no GTID position"):
        parser.snapshot("mariadb-dump of db1")


def test_a_mysql_source_without_gtids_is_dumped_and_placed_by_position_alone():
    """gtid_mode OFF: mysqldump is asked for no GTID_PURGED (asked for one, 9.7 says
    "Error: Server has GTIDs disabled." and exits 0 after the header), and the snapshot
    is the position, its GTID None; a dump without a position names what the tool said."""
    from types import SimpleNamespace
    spec = SimpleNamespace(host="127.0.0.1", port=3306)
    argv = dump_argv("mysqldump", "/o.cnf", spec, "mysql", gtids=False)
    assert "--set-gtid-purged=OFF" in argv and "--set-gtid-purged=ON" not in argv
    assert "--set-gtid-purged=ON" in dump_argv("mysqldump", "/o.cnf", spec, "mysql")
    parser = SnapshotParser("mysql", gtids=False)
    parser.feed(b"-- CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE='binlog.000002', "
                b"SOURCE_LOG_POS=158;\n")
    assert parser.snapshot("dump") == Snapshot(Position("binlog.000002", 158), None)
    cut = SnapshotParser("mysql")
    cut.feed(b"-- MySQL dump 10.13\n")
    with pytest.raises(DumpError) as e:
        cut.snapshot("mysqldump of my1", "Error: Server has GTIDs disabled.")
    assert str(e.value) == ("mysqldump of my1: the dump names no binlog position (no 'CHANGE "
                            "MASTER TO MASTER_LOG_FILE' line): the tool said 'Error: Server "
                            "has GTIDs disabled.'")


def test_snapshot_parser_skips_long_data_lines_without_keeping_them():
    parser = SnapshotParser("mariadb")
    parser.feed(b"INSERT INTO t VALUES ('" + b"x" * (3 << 20))
    parser.feed(b"\n-- SET GLOBAL gtid_slave_pos='0-1-2';\n")  # the data line ends first
    parser.feed(b"-- CHANGE MASTER TO MASTER_LOG_FILE='binlog.000003', MASTER_LOG_POS=9;\n")
    assert parser.snapshot("dump").gtid == "0-1-2"
    assert len(parser._tail) < 100


def test_physical_stderr_position():
    parser = StderrSnapshot()
    for line in ["[00] 2026-11-23 17:15:05 Streaming xtrabackup_binlog_info",
                 "[00] 2026-11-23 17:15:05 MySQL binlog position: filename 'binlog.000001', "
                 "position '1926', GTID of the last change '0-1-9,2-5-7'",
                 "[00] 2026-11-23 17:15:05 completed OK!"]:
        parser.feed_line(line)
    snapshot = parser.snapshot("mariadb-backup")
    assert (snapshot.position, snapshot.gtid) == (Position("binlog.000001", 1926), "0-1-9,2-5-7")


def test_privileges_from_show_grants():
    lines = ["GRANT SELECT, SHOW VIEW, BINLOG MONITOR ON *.* TO `b`@`%` IDENTIFIED BY "
             "PASSWORD '*AB'", "GRANT ALL PRIVILEGES ON `shop`.* TO `b`@`%`",
             "GRANT `r` TO `b`@`%`"]
    have = global_privileges(lines)
    assert have == {"SELECT", "SHOW VIEW", "BINLOG MONITOR"}
    assert missing_privileges(have, NEEDED[("dump", "mariadb")]) == ["TRIGGER", "EVENT"]
    assert missing_privileges({"ALL PRIVILEGES"}, NEEDED[("physical", "mariadb")]) == []
    assert missing_privileges({"SUPER", "RELOAD", "PROCESS", "LOCK TABLES"},
                              NEEDED[("physical", "mariadb")]) == []


def test_a_gtid_that_is_not_the_positions_is_refused():
    from mysqlbackup.base.run import check_gtid
    snapshot = Snapshot(Position("binlog.000002", 900), "1-31-5,0-31-1200")
    check_gtid(snapshot, "0-31-1200,1-31-5", "dump")   # the same position, other order
    check_gtid(snapshot, None, "dump")                  # the file is gone: nothing to compare
    with pytest.raises(DumpError, match=r"^dump: GTID '1-31-5,0-31-1200' at binlog.000002:900, "
                       r"but the source says BINLOG_GTID_POS there is '0-31-1199'$"):
        check_gtid(snapshot, "0-31-1199", "dump")


def test_progress_reports_at_most_every_interval():
    from mysqlbackup.base.upload import Progress
    now, seen = [0.0], []
    progress = Progress(lambda raw, stored: seen.append((now[0], raw, stored)), every=5.0,
                        clock=lambda: now[0])
    for step in range(1, 23):
        now[0] = step * 1.0
        progress.tick(step * 100, step * 10)
    assert seen == [(5.0, 500, 50), (10.0, 1000, 100), (15.0, 1500, 150), (20.0, 2000, 200)]


def test_users_section_is_mariadb_dumps_shape():
    from mysqlbackup.base.users import Accounts, account_name, section
    accounts = Accounts(
        users=[(account_name("app", "%"), "CREATE USER `app`@`%` IDENTIFIED BY PASSWORD '*AB'",
                ["GRANT USAGE ON *.* TO `app`@`%` IDENTIFIED BY PASSWORD '*AB'",
                 "GRANT `r``1` TO `app`@`%`", "SET DEFAULT ROLE `r``1` FOR `app`@`%`"])],
        roles=[("r`1", ["GRANT USAGE ON *.* TO `r``1`", "GRANT SELECT ON `d`.* TO `r``1`"])],
        ignored=["'root'@'vm'"])
    assert section(accounts).decode().splitlines() == [
        "-- mysqlbackup users: begin",
        "CREATE USER IF NOT EXISTS `app`@`%` IDENTIFIED BY PASSWORD '*AB';",
        "SELECT COALESCE(CURRENT_ROLE(),'NONE') into @current_role;",
        "CREATE ROLE IF NOT EXISTS mariadb_dump_import_role;",
        "GRANT mariadb_dump_import_role TO CURRENT_USER();",
        "SET ROLE mariadb_dump_import_role;",
        "CREATE ROLE IF NOT EXISTS `r``1` WITH ADMIN mariadb_dump_import_role;",
        "GRANT USAGE ON *.* TO `app`@`%` IDENTIFIED BY PASSWORD '*AB';",
        "GRANT `r``1` TO `app`@`%`;", "SET DEFAULT ROLE `r``1` FOR `app`@`%`;",
        "GRANT USAGE ON *.* TO `r``1`;", "GRANT SELECT ON `d`.* TO `r``1`;",
        "SET ROLE NONE;", "DROP ROLE mariadb_dump_import_role;",
        "EXECUTE IMMEDIATE CONCAT('SET ROLE ', @current_role);",
        "-- mysqlbackup users: end"]
