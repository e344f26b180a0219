"""``mysqlbackup undo`` against live servers: one bad transaction's rows put back with
every later write to other rows kept (the table then equals one that never ran it:
CHECKSUM TABLE against a twin that got every statement but the bad one) on MariaDB 10.11,
11.8 and MySQL 9.7, a dry run and a conflict that change nothing, a second undo refused as
a conflict, the refusals, and ``--sql``'s script equal in effect to ``mariadb-binlog
--flashback`` piped to the client."""

import subprocess

import pytest

from mysqlbackup.sandbox import find_binary
from tests.helpers import run_cli
from tests.undo_world import (COLUMNS, _archive, _bad, _checksums, _later, _setup, last_gtid,
                              shop_server, undo)

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    yield from shop_server(tmp_path_factory)


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
