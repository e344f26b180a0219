"""``mysqlbackup undo`` against live servers: one bad transaction's rows put back with
every later write to other rows kept (the table then equals one that never ran it:
CHECKSUM TABLE against a twin that got every statement but the bad one), a dry run and
a conflict that change nothing, a second undo refused as a conflict, the refusals, and
``--sql``'s script equal in effect to ``mariadb-binlog --flashback`` piped to the client.
"""

import shutil
import subprocess

import pytest

from mysqlbackup.sandbox import find_binary
from mysqlbackup.binlog.gtid import MysqlGtidSet
from tests.helpers import current_binlog, module_primary, run_cli

pytestmark = pytest.mark.server



# every column type the check compares; NULLs, zero dates, negative TIME, a BIT, a SET
TYPES = ("id INT NOT NULL PRIMARY KEY, ti TINYINT, su SMALLINT UNSIGNED, mi MEDIUMINT, "
         "bu BIGINT UNSIGNED, f FLOAT, d DOUBLE, de DECIMAL(20,6), dt DATETIME(3), "
         "da DATE, tm TIME(2), ts TIMESTAMP(6) NULL, y YEAR, ch CHAR(5), "
         "vc VARCHAR(300) CHARACTER SET latin1, bi BINARY(6), vb VARBINARY(20), tx TEXT, "
         "bl BLOB, en ENUM('a','b','c'), st SET('x','y','z'), bt BIT(10), js JSON, "
         "gen INT AS (id * 2) VIRTUAL")
COLUMNS = ("id, ti, su, mi, bu, f, d, de, dt, da, tm, ts, y, ch, vc, bi, vb, tx, bl, en, st, "
           "bt, js")


def row(i):
    return (f"({i}, {i % 128 - 64}, {i * 300}, {-i * 1000}, {18446744073709551615 - i}, "
            f"{i}.1, {i}.000001, {i}.123456, '2026-01-0{i % 9 + 1} 10:00:0{i % 10}.5{i % 10}', "
            f"{'0000-00-00' if i % 7 == 0 else '2026-02-28'}, '-{i}:30:00.25', "
            f"{'NULL' if i % 5 == 0 else f'FROM_UNIXTIME({1700000000 + i})'}, {1990 + i % 50}, "
            f"'c{i}', 'caf\\xe9 {i}', X'0102', X'00ff{i:02x}', 'text {i}', X'deadbeef00', "
            f"'{'abc'[i % 3]}', 'x,z', b'101{i % 2}', '{{\"k\": {i}, \"s\": \"v\"}}')")


LATER = ["UPDATE shop.items SET tx = 'later', f = 0.3 WHERE id BETWEEN 31 AND 40",
         "INSERT INTO shop.items (id, tx) VALUES (100, 'new')",
         "DELETE FROM shop.items WHERE id = 39",
         "INSERT INTO shop.nokey VALUES (9, 'later')"]
BAD = ["BEGIN",
       "UPDATE shop.items SET de = 0, tx = NULL, bl = X'00', js = '[]' WHERE id <= 10",
       "DELETE FROM shop.items WHERE id BETWEEN 11 AND 20",
       "INSERT INTO shop.items (id, tx) VALUES (50, 'bad'), (51, 'bad')",
       "UPDATE shop.items SET id = id + 1000 WHERE id = 21",
       "DELETE FROM shop.nokey WHERE k <= 2",
       "UPDATE shop.nokey SET v = 'bad' WHERE k = 3",
       "COMMIT"]


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    server = module_primary(tmp_path_factory, "undo",
                            "SET GLOBAL sql_mode = ''",
                            "CREATE DATABASE shop")
    try:
        yield server
    finally:
        server.stop(remove=True)


def _setup(server):
    server.execute(
        "SET SESSION sql_mode = ''",
        "DROP TABLE IF EXISTS shop.items, shop.items_ref, shop.nokey, shop.nokey_ref",
        f"CREATE TABLE shop.items ({TYPES}) ENGINE=InnoDB",
        f"INSERT INTO shop.items ({COLUMNS}) VALUES " + ", ".join(row(i) for i in range(1, 41)),
        "CREATE TABLE shop.nokey (k INT, v VARCHAR(20)) ENGINE=InnoDB",
        "INSERT INTO shop.nokey VALUES (1, 'a'), (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
        "CREATE TABLE shop.items_ref LIKE shop.items",
        f"INSERT INTO shop.items_ref ({COLUMNS}) SELECT {COLUMNS} FROM shop.items",
        "CREATE TABLE shop.nokey_ref LIKE shop.nokey",
        "INSERT INTO shop.nokey_ref SELECT * FROM shop.nokey")


def last_gtid(server):
    """The GTID of the server's last transaction (MariaDB or MySQL)."""
    if hasattr(server, "current_binlog"):
        uuid = server.execute("SELECT @@server_uuid")[0][0]
        executed = server.execute("SELECT @@gtid_executed")[0][0].replace("\n", "")
        if not executed:
            return None  # gtid_mode=OFF
        return f"{uuid}:{MysqlGtidSet.parse(executed).sids[uuid][-1][1] - 1}"
    return server.execute("SELECT @@gtid_binlog_pos")[0][0].split(",")[-1]


def _bad(server):
    """Run the bad transaction; its GTID."""
    server.execute("SET SESSION sql_mode = ''", *BAD)
    return last_gtid(server)


def _later(server):
    twin = [s.replace("shop.items ", "shop.items_ref ").replace("shop.nokey ",
                                                                  "shop.nokey_ref ")
            for s in LATER]
    server.execute("SET SESSION sql_mode = ''", *LATER, *twin)


def _archive(server, tmp_path):
    server.execute("FLUSH BINARY LOGS")
    folder = tmp_path / "binlogs"
    folder.mkdir()
    newest = current_binlog(server)
    for name in [n for n in server.binlog_files() if n != newest]:
        shutil.copyfile(server.binlog_path(name), folder / name)
    url = f"file://{tmp_path / 'archive'}"
    done = run_cli("archive", "import", str(folder), "--archive", url, "--source-name", "db1")
    assert done.returncode == 0, done.stderr
    return url


def _checksums(server):
    rows = server.execute("CHECKSUM TABLE shop.items, shop.items_ref, shop.nokey, "
                          "shop.nokey_ref")
    return {name.split(".")[-1]: value for name, value in rows}


def undo(server, url, *args):
    user, password = getattr(server, "admin", ("root", ""))  # 11.8: root by socket only
    return run_cli("undo", "--archive", url, "--target", f"mysql://{user}@127.0.0.1:"
                   f"{server.port}", *args, password=password)


def test_undo_puts_the_rows_back_and_keeps_later_writes(shop, tmp_path):
    _undo_puts_the_rows_back(shop, tmp_path)


def test_undo_on_mysql(make_mysql, tmp_path):
    """The same on MySQL 9.7 (rows events v2, binary JSON, UUID GTIDs)."""
    server = make_mysql()
    server.execute("SET GLOBAL sql_mode = ''", "CREATE DATABASE shop")
    _undo_puts_the_rows_back(server, tmp_path)


def test_undo_on_mariadb_11_8(tmp_path):
    """The same on MariaDB 11.8 with its stock defaults (events inside a transaction
    carry no end position: binlog_legacy_event_pos OFF)."""
    from mysqlbackup.sandbox.tree import MariaDBTreeSandbox, why_no_tree
    problem = why_no_tree()
    if problem:
        pytest.skip(problem)
    server = MariaDBTreeSandbox().start()
    try:
        server.execute("SET GLOBAL sql_mode = ''", "CREATE DATABASE shop")
        _undo_puts_the_rows_back(server, tmp_path)
    finally:
        server.stop(remove=True)


def _undo_puts_the_rows_back(shop, tmp_path):
    _setup(shop)
    gtid = _bad(shop)
    _later(shop)
    url = _archive(shop, tmp_path)
    before = _checksums(shop)
    assert before["items"] != before["items_ref"]

    done = undo(shop, url, "--gtid", gtid, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "rolled back" in done.stdout
    assert _checksums(shop) == before

    done = undo(shop, url, "--gtid", gtid)
    assert done.returncode == 0, done.stderr
    assert f"1 transaction(s) ({gtid}), 27 row(s) in shop.items, shop.nokey reversed" \
        in done.stdout
    after = _checksums(shop)
    assert after["items"] == after["items_ref"]
    assert after["nokey"] == after["nokey_ref"]

    again = undo(shop, url, "--gtid", gtid)
    assert again.returncode == 12, again.stderr
    assert "no longer as the transaction(s) left them" in again.stderr
    assert _checksums(shop) == after


def test_a_row_written_since_refuses_the_whole_undo(shop, tmp_path):
    _setup(shop)
    gtid = _bad(shop)
    shop.execute("UPDATE shop.items SET tx = 'touched' WHERE id = 3",
                 "INSERT INTO shop.items (id) VALUES (12)")
    url = _archive(shop, tmp_path)
    before = _checksums(shop)
    done = undo(shop, url, "--gtid", gtid)
    assert done.returncode == 12, done.stderr
    assert "2 difference(s) in the " in done.stderr
    assert "shop.items (id=3): tx expected NULL, found 746F7563686564" in done.stderr
    assert "shop.items (id=12): (row) expected absent (the transaction deleted it), " \
           "found present (written again since)" in done.stderr
    assert _checksums(shop) == before


@pytest.mark.parametrize("statements, said", [
    (["ALTER TABLE shop.nokey ADD COLUMN z INT"], "holds a DDL statement"),
    (["SET SESSION binlog_format = 'STATEMENT'", "UPDATE shop.nokey SET v = 'x'"],
     "holds statement-based DML"),
    (["SET SESSION binlog_row_image = 'MINIMAL'", "UPDATE shop.items SET tx = 'm' "
      "WHERE id = 1"], "the source's binlog_row_image was MINIMAL or NOBLOB"),
    (["CREATE TRIGGER shop.t1 BEFORE INSERT ON shop.nokey FOR EACH ROW SET NEW.v = 'x'",
      "INSERT INTO shop.nokey VALUES (7, 'y')"], "has triggers on the target (t1)"),
    (["CREATE TABLE shop.child (id INT PRIMARY KEY, item INT, FOREIGN KEY (item) "
      "REFERENCES shop.items (id) ON DELETE CASCADE) ENGINE=InnoDB",
      "INSERT INTO shop.child VALUES (1, 5)", "DELETE FROM shop.items WHERE id = 5"],
     "has foreign keys that change other rows (shop.child (ON DELETE CASCADE))"),
    (["CREATE TABLE shop.my (id INT PRIMARY KEY) ENGINE=MyISAM",
      "INSERT INTO shop.my VALUES (1)"], "shop.my on the target is not an InnoDB table"),
])
def test_what_undo_cannot_reverse_is_refused(shop, tmp_path, statements, said):
    _setup(shop)
    shop.execute("DROP TABLE IF EXISTS shop.child, shop.my")
    shop.execute(*statements)
    gtid = shop.execute("SELECT @@gtid_binlog_pos")[0][0]
    url = _archive(shop, tmp_path)
    before = _checksums(shop)
    done = undo(shop, url, "--gtid", gtid)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert "restore --table" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert _checksums(shop) == before
    shop.execute("DROP TRIGGER IF EXISTS shop.t1", "DROP TABLE IF EXISTS shop.child, shop.my")


def test_a_gtid_the_archive_lacks_is_named(shop, tmp_path):
    _setup(shop)
    url = _archive(shop, tmp_path)
    done = undo(shop, url, "--gtid", "0-1-999999")
    assert done.returncode == 2
    assert "holds no committed transaction 0-1-999999" in done.stderr


def _client(server, script):
    client = find_binary("mariadb") or find_binary("mysql")
    done = subprocess.run([client, "--no-defaults", "-uroot", "-h127.0.0.1",
                           f"-P{server.port}"], input=script, capture_output=True)
    assert done.returncode == 0, done.stderr


def test_the_sql_script_does_what_flashback_does(shop, tmp_path):
    """``--sql``'s script and ``mariadb-binlog --flashback`` of the same transaction, each
    piped into the client from the same state, leave the same tables."""
    _setup(shop)
    start = shop.execute("SHOW MASTER STATUS")[0][:2]
    gtid = _bad(shop)
    end = shop.execute("SHOW MASTER STATUS")[0][1]
    url = _archive(shop, tmp_path)
    script = tmp_path / "undo.sql"
    done = run_cli("undo", "--archive", url, "--gtid", gtid, "--sql", str(script))
    assert done.returncode == 0, done.stderr
    assert "written to" in done.stdout and "(no conflict check)" in done.stdout
    text = script.read_bytes()
    assert b"-- NO CONFLICT CHECK" in text and text.count(b"BINLOG '") >= 7
    shop.execute("CREATE DATABASE IF NOT EXISTS saved",
                 "DROP TABLE IF EXISTS saved.items, saved.nokey",
                 "CREATE TABLE saved.items LIKE shop.items",
                 f"INSERT INTO saved.items ({COLUMNS}) SELECT {COLUMNS} FROM shop.items",
                 "CREATE TABLE saved.nokey SELECT * FROM shop.nokey")
    _client(shop, text)
    ours = _checksums(shop)
    assert ours["items"] == ours["items_ref"] and ours["nokey"] == ours["nokey_ref"]
    shop.execute("SET SESSION sql_mode = ''", "DELETE FROM shop.items",
                 f"INSERT INTO shop.items ({COLUMNS}) SELECT {COLUMNS} FROM saved.items",
                 "DELETE FROM shop.nokey", "INSERT INTO shop.nokey SELECT * FROM saved.nokey")
    flashback = subprocess.run(
        [find_binary("mariadb-binlog"), "--flashback", f"--start-position={start[1]}",
         f"--stop-position={end}", shop.binlog_path(start[0])], capture_output=True)
    assert flashback.returncode == 0, flashback.stderr
    _client(shop, flashback.stdout)
    assert _checksums(shop) == ours


def test_mysql_9_cascaded_rows_are_undone_too(make_mysql, tmp_path):
    """MySQL 9 logs the rows a foreign key's ON DELETE CASCADE changed: the undo puts the
    parent back and its children after it."""
    server = make_mysql()
    server.execute(
        "CREATE DATABASE shop",
        "CREATE TABLE shop.parent (id INT PRIMARY KEY, v INT) ENGINE=InnoDB",
        "CREATE TABLE shop.child (id INT PRIMARY KEY, parent INT, FOREIGN KEY (parent) "
        "REFERENCES shop.parent (id) ON DELETE CASCADE ON UPDATE CASCADE) ENGINE=InnoDB",
        "INSERT INTO shop.parent VALUES (1, 10), (2, 20)",
        "INSERT INTO shop.child VALUES (1, 1), (2, 1), (3, 2)")
    wanted = server.execute("CHECKSUM TABLE shop.parent, shop.child")
    server.execute("DELETE FROM shop.parent WHERE id = 1")
    gtid = last_gtid(server)
    assert server.execute("SELECT COUNT(*) FROM shop.child")[0][0] == 1
    url = _archive(server, tmp_path)
    done = undo(server, url, "--gtid", gtid)
    assert done.returncode == 0, done.stderr
    assert "3 row(s) in shop.child, shop.parent reversed" in done.stdout
    assert server.execute("CHECKSUM TABLE shop.parent, shop.child") == wanted


# (column definition, the value before, the bad transaction's, a later write's: the
# nearest other value, which the check must see as a difference)
PER_TYPE = [
    ("TINYINT", "-128", "0", "-127"),
    ("SMALLINT UNSIGNED", "65535", "0", "65534"),
    ("MEDIUMINT", "-8388608", "0", "-8388607"),
    ("INT", "2147483647", "0", "2147483646"),
    ("BIGINT UNSIGNED", "18446744073709551615", "0", "18446744073709551614"),
    ("FLOAT", "0.1", "0", "0.10000001"),
    ("DOUBLE", "0.1", "0", "0.10000000000000002"),
    ("DECIMAL(30,10)", "-12345678901234567890.0123456789", "0",
     "-12345678901234567890.0123456788"),
    ("DATE", "'0000-00-00'", "'2026-01-01'", "'0000-00-01'"),
    ("DATETIME(6)", "'1000-01-01 00:00:00.000001'", "'2026-01-01'",
     "'1000-01-01 00:00:00.000002'"),
    ("DATETIME", "'0000-00-00 00:00:00'", "'2026-01-01'", "'0000-00-00 00:00:01'"),
    ("TIME(3)", "'-838:59:58.999'", "'00:00:00'", "'-838:59:58.998'"),
    ("TIMESTAMP(2) NULL", "'2038-01-19 03:14:07.99'", "'2026-01-01'",
     "'2038-01-19 03:14:07.98'"),
    ("YEAR", "0", "2026", "2000"),
    ("CHAR(10)", "'Mixed '", "'x'", "'mixed '"),
    ("VARCHAR(20) CHARACTER SET latin1", "'caf\\xe9'", "'x'", "'cafe'"),
    ("BINARY(8)", "X'0100'", "X'02'", "X'0101'"),
    ("VARBINARY(10)", "X'00ff00'", "X'01'", "X'00ff'"),
    ("TEXT", "REPEAT('t', 60000)", "'x'", "CONCAT(REPEAT('t', 59999), 'T')"),
    ("BLOB", "X'00'", "NULL", "X'0000'"),
    ("ENUM('a','b','A ')", "'A '", "'a'", "'b'"),
    ("SET('x','y','z')", "''", "'x'", "'z'"),
    ("BIT(17)", "b'10000000000000001'", "0", "b'10000000000000011'"),
    ("JSON", "'{\"a\": [1, 2.5, \"x\"], \"b\": null}'", "'[]'", "'{\"a\": [1, 2.5, \"x\"]}'"),
    ("POINT", "POINT(1, 2)", "POINT(0, 0)", "POINT(1, 2.0000001)"),
    ("INET6", "'::ffff:1.2.3.4'", "'::'", "'::ffff:1.2.3.5'"),             # MariaDB
    ("UUID", "'123e4567-e89b-12d3-a456-426614174000'", "NULL",             # MariaDB
     "'123e4567-e89b-12d3-a456-426614174001'"),
    ("VECTOR(3)", "STRING_TO_VECTOR('[1,2,3]')", "STRING_TO_VECTOR('[0,0,0]')",  # MySQL
     "STRING_TO_VECTOR('[1,2,3.0000002]')"),
]
ONLY = {"INET6": "mariadb", "UUID": "mariadb", "VECTOR(3)": "mysql"}


@pytest.fixture(scope="module", params=["mariadb", "mysql"])
def one_server(request, tmp_path_factory):
    """A MariaDB 10.11 or a MySQL 9.7 server for the module, permissive sql_mode."""
    if request.param == "mariadb":
        server = module_primary(tmp_path_factory, "undotypes")
    else:
        from mysqlbackup.sandbox.mysql import MySQLSandbox, why_no_mysql
        problem = why_no_mysql()
        if problem:
            pytest.skip(problem)
        server = MySQLSandbox(semi_sync_timeout_ms=1000, gtid_mode="ON").start()
    server.execute("SET GLOBAL sql_mode = ''", "CREATE DATABASE shop")
    yield server
    server.stop(remove=True)


@pytest.mark.parametrize("definition, value, bad, near", PER_TYPE,
                         ids=[t[0].split("(")[0].split()[0].lower() for t in PER_TYPE])
def test_each_type_round_trips_and_its_nearest_change_is_a_conflict(
        one_server, tmp_path, definition, value, bad, near):
    server = one_server
    flavor = "mysql" if hasattr(server, "current_binlog") else "mariadb"
    if ONLY.get(definition, flavor) != flavor:
        pytest.skip(f"{definition} is a type of {ONLY[definition]} only")
    server.execute("SET SESSION sql_mode = ''", "DROP TABLE IF EXISTS shop.t, shop.t_ref",
                   f"CREATE TABLE shop.t (id INT PRIMARY KEY, v {definition}) ENGINE=InnoDB",
                   f"INSERT INTO shop.t VALUES (1, {value}), (2, {value}), (3, {value})",
                   "CREATE TABLE shop.t_ref LIKE shop.t",
                   "INSERT INTO shop.t_ref SELECT * FROM shop.t")
    wanted = server.execute("CHECKSUM TABLE shop.t_ref")[0][1]
    server.execute("SET SESSION sql_mode = ''", "BEGIN", f"UPDATE shop.t SET v = {bad} "
                   "WHERE id = 1", "DELETE FROM shop.t WHERE id = 2",
                   f"INSERT INTO shop.t VALUES (4, {value})", "COMMIT")
    gtid = last_gtid(server)
    server.execute("SET SESSION sql_mode = ''", f"UPDATE shop.t SET v = {near} WHERE id = 4")
    if server.execute("SELECT COUNT(*) FROM shop.t a JOIN shop.t_ref b ON b.id = 1 WHERE "
                      "a.id = 4 AND a.v <=> b.v AND HEX(a.v) <=> HEX(b.v)")[0][0]:
        pytest.fail(f"{near} is stored as {value}: not a change")
    url = _archive(server, tmp_path)
    changed = undo(server, url, "--gtid", gtid)
    assert changed.returncode == 12, changed.stderr
    assert "shop.t (id=4): v expected " in changed.stderr
    server.execute("SET SESSION sql_mode = ''", f"UPDATE shop.t SET v = {value} WHERE id = 4")
    done = undo(server, url, "--gtid", gtid)
    assert done.returncode == 0, done.stderr
    assert server.execute("CHECKSUM TABLE shop.t")[0][1] == wanted


def test_a_row_locked_by_another_session_fails_the_undo_cleanly(shop, tmp_path):
    _setup(shop)
    gtid = _bad(shop)
    url = _archive(shop, tmp_path)
    before = _checksums(shop)
    other = shop.root()
    try:
        with other.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT * FROM shop.items WHERE id = 5 FOR UPDATE")
            done = undo(shop, url, "--gtid", gtid, "--lock-timeout", "1")
        assert done.returncode == 1, done.stderr
        assert "the undo failed on the target" in done.stderr
        assert "Lock wait timeout exceeded" in done.stderr
        assert "rolled back, nothing was changed" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    finally:
        other.rollback()
        other.close()
    assert _checksums(shop) == before


PEAK = ("import resource, runpy, sys\n"
        "sys.argv = ['mysqlbackup'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('mysqlbackup', run_name='__main__')\n"
        "finally:\n"
        "    print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
        "file=sys.stderr)\n")


def test_a_big_transaction_undoes_in_bounded_memory(shop, tmp_path):
    """200,000 row updates in one transaction (28 MB of binlog): the undo's peak RSS is
    a 1,000-row undo's, give or take (the events spooled to a file, the expected rows in
    SQLite), whatever the process's baseline."""
    peaks = [_undo_peak_mb(shop, tmp_path / str(rows), rows) for rows in (1000, 200000)]
    assert peaks[1] - peaks[0] < 40, f"peak RSS {peaks[0]:.0f} MB, then {peaks[1]:.0f} MB"


def _undo_peak_mb(shop, tmp_path, rows):
    import os
    import sys
    tmp_path.mkdir()
    shop.execute("DROP TABLE IF EXISTS shop.big",
                 "CREATE TABLE shop.big (id INT PRIMARY KEY, a INT, s CHAR(32)) ENGINE=InnoDB",
                 f"INSERT INTO shop.big SELECT seq, seq, MD5(seq) FROM shop.seq_1_to_{rows}")
    wanted = shop.execute("CHECKSUM TABLE shop.big")[0][1]
    shop.execute("UPDATE shop.big SET a = 0, s = ''")
    gtid = last_gtid(shop)
    url = _archive(shop, tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", PEAK, "undo", "--archive", url, "--gtid", gtid, "--target",
         f"mysql://root@127.0.0.1:{shop.port}"], capture_output=True, text=True,
        env=dict(os.environ, MYSQLBACKUP_TARGET_PASSWORD=""), timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"{rows} row(s) in shop.big reversed" in done.stdout
    assert shop.execute("CHECKSUM TABLE shop.big")[0][1] == wanted
    return int(done.stderr.rsplit("peak ", 1)[1].split()[0]) / 1024


def test_two_transactions_undone_together_from_an_encrypted_archive(shop, tmp_path):
    """Two bad transactions, the second changing rows the first changed, undone in one go
    newest first; the archive's objects zstd-compressed and age-encrypted."""
    _setup(shop)
    first = _bad(shop)
    shop.execute("BEGIN", "UPDATE shop.items SET tx = 'second' WHERE id IN (1, 30)",
                 "DELETE FROM shop.items WHERE id = 50", "COMMIT")
    second = last_gtid(shop)
    _later(shop)
    keys = tmp_path / "keys"
    keys.mkdir()
    made = run_cli("keygen", "--identity", str(keys / "id"), "--recipient", str(keys / "pub"))
    assert made.returncode == 0, made.stderr
    shop.execute("FLUSH BINARY LOGS")
    folder = tmp_path / "binlogs"
    folder.mkdir()
    newest = current_binlog(shop)
    for name in [n for n in shop.binlog_files() if n != newest]:
        shutil.copyfile(shop.binlog_path(name), folder / name)
    url = f"file://{tmp_path / 'archive'}"
    done = run_cli("archive", "import", str(folder), "--archive", url, "--source-name", "db1",
                   "--compress", "zstd", "--encrypt-to", str(keys / "pub"))
    assert done.returncode == 0, done.stderr
    without = undo(shop, url, "--gtid", first, "--gtid", second)
    assert without.returncode == 2 and "identity" in without.stderr, without.stderr
    done = undo(shop, url, "--gtid", second, "--gtid", first, "--identity", str(keys / "id"))
    assert done.returncode == 0, done.stderr
    assert f"2 transaction(s) ({first}, {second})" in done.stdout
    after = _checksums(shop)
    assert after["items"] == after["items_ref"] and after["nokey"] == after["nokey_ref"]


def test_a_transaction_in_the_newest_files_archived_segments(shop, tmp_path):
    """The daemon streams the primary into the archive; the bad transaction lies in the
    newest file, archived as segments (not sealed)."""
    from tests.helpers import Daemon, wait_archived_to_the_end
    from mysqlbackup.archive.store import ArchiveStore
    _setup(shop)
    shop.execute("FLUSH BINARY LOGS")
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(shop, tmp_path / "d", "--archive", url, "--source-name", "db1",
                    "--archive-interval", "0.2", "--start-file", current_binlog(shop),
                    "--no-semi-sync", server_id=991).start()
    try:
        gtid = _bad(shop)
        _later(shop)
        wait_archived_to_the_end(shop, ArchiveStore(url))
        done = undo(shop, url, "--gtid", gtid)
        assert done.returncode == 0, done.stderr
    finally:
        assert daemon.stop() == 0, daemon.output()
    after = _checksums(shop)
    assert after["items"] == after["items_ref"] and after["nokey"] == after["nokey_ref"]


def test_mysql_without_gtids_undoes_by_position(make_mysql, tmp_path):
    """MySQL's default gtid_mode=OFF: the transaction named by where archive find says
    it starts (--at FILE:START)."""
    server = make_mysql(gtid_mode="OFF")
    server.execute("SET GLOBAL sql_mode = ''", "CREATE DATABASE shop")
    _setup(server)
    _bad(server)
    _later(server)
    url = _archive(server, tmp_path)
    found = run_cli("archive", "find", "--archive", url, "--table", "shop.nokey",
                    "--type", "delete")
    assert found.returncode == 0, found.stderr
    line = found.stdout.splitlines()[-1]
    assert line.startswith("- ")
    at = line.split()[2].split("-")[0]  # FILE:START of FILE:START-END
    done = undo(server, url, "--at", at)
    assert done.returncode == 0, done.stderr
    assert f"1 transaction(s) ({at}), 27 row(s)" in done.stdout
    after = _checksums(server)
    assert after["items"] == after["items_ref"] and after["nokey"] == after["nokey_ref"]
    wrong = undo(server, url, "--at", at.split(":")[0] + ":4")
    assert wrong.returncode == 2 and "holds no committed transaction" in wrong.stderr


def test_composite_keys_collations_and_long_decimals(one_server, tmp_path):
    """A primary key whose columns are not in the table's order, a string key in a
    collation that is not its character set's default, DECIMAL keys that differ past 28
    digits, a zero TIMESTAMP in a table without a key."""
    server = one_server
    server.execute(
        "SET SESSION sql_mode = ''", "DROP TABLE IF EXISTS shop.ck, shop.ck_ref, shop.z",
        "CREATE TABLE shop.ck (a VARCHAR(10) CHARACTER SET utf8mb4 COLLATE "
        "utf8mb4_unicode_ci, b DECIMAL(32,0), v INT, PRIMARY KEY (b, a)) ENGINE=InnoDB",
        "INSERT INTO shop.ck VALUES ('x', 12345678901234567890123456789011, 1), "
        "('x', 12345678901234567890123456789012, 2), ('y', 1, 3), ('z', 2, 4)",
        "CREATE TABLE shop.ck_ref LIKE shop.ck", "INSERT INTO shop.ck_ref SELECT * FROM shop.ck",
        "CREATE TABLE shop.z (t TIMESTAMP NULL, v INT) ENGINE=InnoDB",
        "INSERT INTO shop.z VALUES ('0000-00-00 00:00:00', 1)")
    wanted = server.execute("CHECKSUM TABLE shop.ck_ref")[0][1]
    server.execute("SET SESSION sql_mode = ''", "BEGIN",
                   "UPDATE shop.ck SET v = 0 WHERE b > 100",
                   "DELETE FROM shop.ck WHERE a = 'y'", "UPDATE shop.z SET v = 2", "COMMIT")
    gtid = last_gtid(server)
    server.execute("UPDATE shop.ck SET v = 5 WHERE a = 'z'",
                   "UPDATE shop.ck_ref SET v = 5 WHERE a = 'z'")
    url = _archive(server, tmp_path)
    done = undo(server, url, "--gtid", gtid)
    assert done.returncode == 0, done.stderr
    assert server.execute("CHECKSUM TABLE shop.ck")[0][1] == \
        server.execute("CHECKSUM TABLE shop.ck_ref")[0][1]
    assert server.execute("SELECT v FROM shop.z") == ((1,),)
    assert wanted  # the reference existed before the bad transaction


def test_a_transaction_not_named_between_two_named_ones_is_a_conflict(shop, tmp_path):
    _setup(shop)
    shop.execute("UPDATE shop.items SET tx = 'one' WHERE id = 1")
    first = last_gtid(shop)
    shop.execute("UPDATE shop.items SET tx = 'two' WHERE id = 1")  # not named
    shop.execute("UPDATE shop.items SET tx = 'three' WHERE id = 1")
    third = last_gtid(shop)
    url = _archive(shop, tmp_path)
    before = _checksums(shop)
    done = undo(shop, url, "--gtid", first, "--gtid", third)
    assert done.returncode == 12, done.stderr
    assert "shop.items (id=1): a transaction not named changed it between the named ones" \
        in done.stderr
    assert _checksums(shop) == before


def test_deleted_rows_of_a_table_without_a_key_alone_are_refused(shop, tmp_path):
    """Nothing to check: a second run would put them back twice."""
    _setup(shop)
    shop.execute("DELETE FROM shop.nokey WHERE k = 1")
    gtid = last_gtid(shop)
    url = _archive(shop, tmp_path)
    before = _checksums(shop)
    done = undo(shop, url, "--gtid", gtid)
    assert done.returncode == 2, done.stderr
    assert "nothing the undo changes can be checked" in done.stderr
    assert _checksums(shop) == before


def test_mysql_9_refuses_undoing_inserts_into_a_cascading_parent(make_mysql, tmp_path):
    server = make_mysql()
    server.execute(
        "CREATE DATABASE shop",
        "CREATE TABLE shop.parent (id INT PRIMARY KEY) ENGINE=InnoDB",
        "CREATE TABLE shop.child (id INT PRIMARY KEY, parent INT, FOREIGN KEY (parent) "
        "REFERENCES shop.parent (id) ON DELETE CASCADE) ENGINE=InnoDB",
        "INSERT INTO shop.parent VALUES (1)")
    gtid = last_gtid(server)
    server.execute("INSERT INTO shop.child VALUES (1, 1)")  # a child of it since
    url = _archive(server, tmp_path)
    done = undo(server, url, "--gtid", gtid)
    assert done.returncode == 2, done.stderr
    assert "undoing its inserts would delete or change parent rows" in done.stderr
    assert server.execute("SELECT COUNT(*) FROM shop.child")[0][0] == 1


@pytest.mark.parametrize("extra, generated", [
    ("VIRTUAL GENERATED", True), ("STORED GENERATED", True), ("PERSISTENT GENERATED", True),
    ("DEFAULT_GENERATED", False), ("DEFAULT_GENERATED on update CURRENT_TIMESTAMP", False),
    ("", False)])
def test_only_generated_columns_are_left_uncompared(extra, generated):
    from replay.undo.target import _column
    row = ("c", "datetime", "datetime", None, None, extra)
    assert _column(row, 18, b"\x00", False).generated is generated
