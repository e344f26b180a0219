"""`mysqlbackup base --method dump` against a live MySQL server (9.7, through chroot:
sandbox.mysql), with MySQL's own mysqldump (host-side wrappers of the tree's tools first
on PATH): a base during traffic whose GTID set is the one its binlog file:pos stands
for (checked against the dump's own lines and the binlog file), the wrong product's
client refused in one line, and a failed base that leaves nothing in the archive."""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import zstandard

from mysqlbackup.archive.manifest import parse_manifest
from mysqlbackup.archive.names import base_key, format_key
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.base.client import (ToolError, find_client, mysql_client_options,
                                     options_file, options_text)
from mysqlbackup.base import server as source_server
from mysqlbackup.base.dump import DumpError, Snapshot, dump_argv
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MysqlGtidSet
from mysqlbackup.binlog.position import Position
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.sandbox import find_binary
from mysqlbackup.sandbox.mysql import mysql_tree
from mysqlbackup.source.spec import SourceSpec
from mysqlbackup.source.tls import TlsSettings
from tests.helpers import cli_env, run_cli, tagged, wait_for

USER, PASSWORD = "backup", "b'ack\"up\\pw"
GRANTS = "SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION CLIENT"
SUMMARY = re.compile(r"^base (?P<id>\d{8}T\d{6}\.\d{3}Z) of (?P<source>\S+): dump, "
                     r"gtid (?P<gtid>\S+), binlog (?P<file>[\w.]+):(?P<pos>\d+), "
                     r"\d+ bytes raw, \d+ stored, \d+\.\d s$")
MARIADB_ONLY = ("--ignore-database", "--gtid", "--master-data", "--insert-ignore",
                "--system", "--ssl", "--skip-ssl")


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    """One MySQL server for the tests that only log in (refusals, TLS modes)."""
    from mysqlbackup.sandbox.mysql import MySQLSandbox, why_no_mysql
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    server = MySQLSandbox(semi_sync_timeout_ms=1000, gtid_mode="ON").start()
    add_user(server, GRANTS + ", FLUSH_TABLES")
    yield server
    server.stop(remove=True)


@pytest.fixture
def wrappers(tmp_path):
    """A folder of host-side mysqldump / mysql / mysqlbinlog running the tree's tools."""
    from mysqlbackup.sandbox.mysql import client_wrappers, why_no_mysql
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    return client_wrappers(tmp_path / "bin")


def add_user(server, privileges, user=USER):
    quoted = PASSWORD.replace("\\", "\\\\").replace("'", "\\'")
    server.execute("SET SESSION sql_log_bin = 0",
                   f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{quoted}'",
                   f"GRANT {privileges} ON *.* TO '{user}'@'127.0.0.1'")


def base(server, url, path, *extra, user=USER, password=PASSWORD, wait=True):
    """``mysqlbackup base`` of ``server`` with PATH ``path``: the CompletedProcess, or the
    Popen when not ``wait``."""
    env = dict(cli_env(password), PATH=path)
    argv = [sys.executable, "-m", "mysqlbackup", "base", "--source",
            f"mysql://{user}@127.0.0.1:{server.port}", "--archive", url, *extra]
    if not wait:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def first_on_path(folder):
    return folder + os.pathsep + os.environ.get("PATH", os.defpath)


def manifests(store):
    return [parse_manifest(store.read(name), name) for name in store.list()
            if name.endswith("/index.json") and "/base/" in name]


def assert_nothing_left(url):
    """No object of a base in the archive's listing, and on disk no folder of one, no
    temporary file."""
    assert [n for n in ArchiveStore(url).list() if "/base/" in n] == []
    root = url[len("file://"):]
    for folder, dirs, files in os.walk(root):
        if os.path.basename(folder) == "base":
            assert dirs == [] and files == [], (folder, dirs, files)
        assert [f for f in files if ".tmp-" in f] == [], folder


def gtid_at(path, position):
    """The GTID set a binlog file says was executed at ``position``: its Previous_gtids
    and every GTID (tagged or not) of the events before it; and whether an event starts
    there (or the file ends there)."""
    with open(path, "rb") as f:
        data = f.read()
    executed, starts = MysqlGtidSet(), {len(data)}
    for offset, event in iter_events(data, 4, None):
        starts.add(offset)
        if offset >= position:
            continue
        kind = event[4]
        if kind == ev.PREVIOUS_GTIDS:
            for sid, intervals in ev.parse_previous_gtids(event, True).items():
                for lo, hi in intervals:
                    executed.add_interval(sid, lo, hi)
        elif kind in (ev.GTID, ev.GTID_TAGGED):
            parse = ev.parse_mysql_gtid if kind == ev.GTID else ev.parse_mysql_gtid_tagged
            executed.add(*parse(event, True))
    return executed, position in starts


class Writer(threading.Thread):
    """Autocommit inserts into traffic.t, one transaction each, until stopped."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server, self.stop, self.count = server, threading.Event(), 0

    def run(self):
        conn = self.server.root(database="traffic")
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_transaction_compression = ON")  # payload events
            while not self.stop.is_set():
                cur.execute("INSERT INTO t (v) VALUES ('row')")
                self.count += 1
        conn.close()


# -- live ------------------------------------------------------------------------------------

def test_base_during_traffic_records_the_gtid_its_position_stands_for(make_mysql, wrappers,
                                                                       tmp_path, monkeypatch):
    """Writers commit throughout (compressed transactions; tagged GTIDs before, in the
    binlog file and in its Previous_gtids); the manifest's GTID set is the dump's own
    GTID_PURGED, and what the binlog file says was executed at the manifest's file:pos
    (where an event starts); the rows in the dump are exactly the transactions of that
    set; no MariaDB option reached MySQL's mysqldump, and the mysql schema's tables
    stayed out. The tool's own check (SHOW BINLOG EVENTS) agrees, a page of a few events
    at a time too, and refuses a position inside an event."""
    server = make_mysql()
    uuid = server.execute("SELECT @@server_uuid")[0][0]
    add_user(server, GRANTS + ", RELOAD, REPLICATION SLAVE")
    server.execute("CREATE DATABASE traffic", "CREATE TABLE traffic.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v VARCHAR(8))",
                   "CREATE TABLE traffic.audit (id INT PRIMARY KEY AUTO_INCREMENT, item INT)",
                   "CREATE TRIGGER traffic.t_ai AFTER INSERT ON traffic.t FOR EACH ROW "
                   "INSERT INTO traffic.audit (item) VALUES (NEW.id)",
                   "CREATE VIEW traffic.recent AS SELECT id FROM traffic.t WHERE id > 10",
                   "CREATE PROCEDURE traffic.touch() SELECT COUNT(*) FROM traffic.t",
                   "CREATE EVENT traffic.nightly ON SCHEDULE EVERY 1 DAY DISABLE DO "
                   "DELETE FROM traffic.audit")
    tagged(server, "INSERT INTO traffic.audit (item) VALUES (0)")
    server.execute("FLUSH BINARY LOGS")
    tagged(server, "INSERT INTO traffic.audit (item) VALUES (-1)")
    before = MysqlGtidSet.parse(server.execute("SELECT @@gtid_executed")[0][0])
    first = before.sids[uuid][-1][1] - 1  # the last gno before the writer's
    url = f"file://{tmp_path / 'archive'}"
    writer = Writer(server)
    writer.start()
    try:
        wait_for(lambda: writer.count > 100, what="the writer committing")
        at_start = writer.count
        began = time.monotonic()
        result = base(server, url, first_on_path(wrappers), "--source-name", "my1")
        took = time.monotonic() - began
        during = writer.count - at_start
    finally:
        writer.stop.set()
        writer.join(timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr  # the GTID was checked: no warning
    line = SUMMARY.match(result.stdout.strip())
    assert line, result.stdout
    assert during > 0
    print(f"base during traffic: {took:.2f} s, {during} transactions committed meanwhile")

    store = ArchiveStore(url)
    [manifest] = manifests(store)
    assert (manifest["gtid_flavor"], manifest["server_uuid"]) == ("mysql", uuid)
    assert (line["gtid"], line["file"], int(line["pos"])) == (
        manifest["gtid"], manifest["binlog_file"], manifest["binlog_pos"])
    assert "\n" not in manifest["gtid"]
    details = manifest["details"]
    assert details["tool"] == os.path.join(wrappers, "mysqldump")
    assert details["tool_version"].startswith("mysqldump Ver 9.")
    assert "--set-gtid-purged=ON" in details["arguments"]
    assert "--source-data=2" in details["arguments"]
    assert "--single-transaction" in details["arguments"]
    assert not [a for a in details["arguments"] if a.startswith(MARIADB_ONLY)]
    assert "--ignore-table=mysql.user" in details["arguments"]

    member = format_key(base_key("my1", manifest["id"], manifest["member"]))
    sql = zstandard.ZstdDecompressor().stream_reader(store.read(member)).read()
    purged = re.search(rb"^SET @@GLOBAL\.GTID_PURGED=/\*!80000 '\+'\*/ '([^']*)';$", sql,
                       re.M | re.S)
    source = re.search(rb"^-- CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE='([^']+)', "
                       rb"SOURCE_LOG_POS=(\d+);$", sql, re.M)
    gtid = MysqlGtidSet.parse(manifest["gtid"])
    assert gtid == MysqlGtidSet.parse(purged[1].decode())
    assert (source[1].decode(), int(source[2])) == (manifest["binlog_file"],
                                                     manifest["binlog_pos"])
    executed, starts = gtid_at(server.binlog_path(manifest["binlog_file"]),
                               manifest["binlog_pos"])
    assert starts and executed == gtid
    assert f"{uuid}:nightly" in gtid.sids and "nightly" in manifest["gtid"]

    spec = SourceSpec("127.0.0.1", server.port, USER, PASSWORD)
    conn = source_server.connect(spec)
    try:
        position = Position(manifest["binlog_file"], manifest["binlog_pos"])
        for page in (source_server.BINLOG_PAGE, 7):
            monkeypatch.setattr(source_server, "BINLOG_PAGE", page)
            expected, why_not = source_server.mysql_gtid_at(conn, position)
            assert why_not is None and MysqlGtidSet.parse(expected) == gtid, page
        with pytest.raises(DumpError, match=r"starts no event of the source's binlog"):
            source_server.mysql_gtid_at(conn, Position(position.file, position.offset + 1))
    finally:
        conn.close()

    # the rows are the writer's transactions up to the GTID set, no more, no fewer
    rows = sql.count(b",'row')")
    assert gtid.sids[uuid] == [(1, first + rows + 1)], (first, rows, gtid.sids)
    assert b"CREATE TABLE `t`" in sql and b"CREATE TABLE `audit`" in sql
    for what in (b"TRIGGER `t_ai`", b"VIEW `recent`", b"PROCEDURE `touch`",
                 b"EVENT `nightly`"):
        assert what in sql, what
    assert b"Table structure for table `user`" not in sql  # the mysql schema's tables
    assert b"Current Database: `sys`" not in sql


@pytest.mark.server
def test_mysql_source_with_only_mariadbs_client_is_refused_in_one_line(quiet, tmp_path):
    """mysqldump on PATH is MariaDB's (Debian's link to mariadb-dump): refused before it
    runs, in one line naming it, and nothing in the archive. A user without the
    privileges is refused before that, naming each (RELOAD or FLUSH_TABLES)."""
    mariadb_dump = find_binary("mariadb-dump")
    if mariadb_dump is None:
        pytest.fail("mariadb-dump not found: run scripts/test.sh, which installs "
                    "mariadb-client")
    server = quiet
    only = tmp_path / "only-mariadb"
    only.mkdir()
    for name in ("mysqldump", "mariadb-dump"):
        os.symlink(mariadb_dump, only / name)
    url = f"file://{tmp_path / 'archive'}"
    result = base(server, url, str(only))
    assert result.returncode == 1
    version = " ".join(subprocess.run([only / "mysqldump", "--version"], capture_output=True,
                                      text=True).stdout.split())
    assert result.stderr.splitlines() == [
        f"mysqlbackup: error: {only / 'mysqldump'} is MariaDB's client ({version}), not "
        f"MySQL's: a MySQL source needs MySQL's own mysqldump (package mysql-client) on "
        f"PATH"]
    assert not os.path.exists(tmp_path / "archive")

    add_user(server, "SELECT, REPLICATION SLAVE", user="weak")
    result = base(server, url, str(only), user="weak")
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        f"mysqlbackup: error: the source user weak@127.0.0.1:{server.port} lacks the global "
        f"privileges SHOW VIEW, TRIGGER, EVENT, RELOAD, REPLICATION CLIENT that base --method "
        f"dump needs (GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, RELOAD, REPLICATION CLIENT ON "
        f"*.* TO ...)"]
    assert not os.path.exists(tmp_path / "archive")


def test_a_killed_dump_leaves_nothing_in_the_archive(make_mysql, wrappers, tmp_path):
    """mysqldump is killed (SIGKILL) while its FLUSH TABLES waits for a table held
    LOCK TABLES ... WRITE: one line naming it, and neither an object nor a folder of
    the base in the archive (which holds an earlier base: untouched), nor the
    wrapper's copy of the options file."""
    server = make_mysql()
    add_user(server, GRANTS + ", FLUSH_TABLES")
    server.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)",
                   "INSERT INTO d.t VALUES (1), (2)")
    url = f"file://{tmp_path / 'archive'}"
    ok = base(server, url, first_on_path(wrappers), "--source-name", "earlier")
    assert ok.returncode == 0, ok.stderr
    assert "not checked against the binlog: the user may not read it" in ok.stderr
    holder = server.root()
    try:
        holder.cursor().execute("LOCK TABLES d.t WRITE")
        proc = base(server, url, first_on_path(wrappers), wait=False)
        waiting = wait_for(lambda: server.execute(
            f"SELECT id FROM information_schema.processlist WHERE user = '{USER}' AND "
            f"info LIKE 'FLUSH %'"), what="mysqldump waiting for its lock")
        assert waiting
        [tool] = wait_for(lambda: children_named(proc.pid, "mysqldump"), what="mysqldump")
        os.kill(tool, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        holder.close()
    assert proc.returncode == 1, err
    assert err.splitlines() == [
        "mysqlbackup: error: mysqldump failed (killed by SIGKILL): no message"]
    uuid = server.execute("SELECT @@server_uuid")[0][0]
    store = ArchiveStore(url)
    assert [n for n in store.list() if "/base/" in n and not n.startswith("earlier/")] == []
    root = tmp_path / "archive"
    assert os.listdir(root / uuid / "base") == []  # the base's folder went too
    assert [f for _, _, files in os.walk(root) for f in files if ".tmp-" in f] == []
    scratch = os.path.join(mysql_tree(), "tmp")  # the wrapper's copy of the options file
    wait_for(lambda: not [n for n in os.listdir(scratch)
                          if n.startswith("mysqlbackup-wrapper-")], what="the copy removed")


@pytest.mark.server
@pytest.mark.parametrize("mode", ["disabled", "preferred", "required"])
def test_mysqls_client_logs_in_through_our_options_file(quiet, wrappers, mode):
    """In each TLS mode, with caching_sha2_password's cache emptied (clear text then
    needs get-server-public-key): the session is encrypted unless disabled."""
    quiet.execute("FLUSH PRIVILEGES")
    spec = SourceSpec("127.0.0.1", quiet.port, USER, PASSWORD, TlsSettings(mode))
    with options_file(spec, flavor="mysql") as options:
        done = subprocess.run([os.path.join(wrappers, "mysql"),
                               f"--defaults-extra-file={options}", "--host=127.0.0.1",
                               f"--port={quiet.port}", "--protocol=tcp", "-N", "-e",
                               "SHOW SESSION STATUS LIKE 'Ssl_cipher'"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    cipher = done.stdout.split("\t")[1].strip() if "\t" in done.stdout else ""
    assert bool(cipher) == (mode != "disabled"), done.stdout


APP_PASSWORD = "app'pw\\\"ü"
ACCOUNTS = ("'app'@'%'", "'reader'@'%'", "'locked'@'%'")


def test_a_mysql_bases_accounts_restore_with_users_apply_and_skip(make_mysql, wrappers,
                                                                  tmp_path):
    """A source with an app user (a password, database, table and column grants, a role
    granted and set as its default) and a locked account: the base holds them between
    our lines, hashes as hex, MySQL's reserved accounts left out; restored into an empty
    MySQL server with --users apply, the app user logs in with its password under its
    default role, and every account's SHOW CREATE USER (the hash too) and SHOW GRANTS
    are the source's; with --users skip, none of them is made. A backup user who may
    not read the mysql schema is refused in one line."""
    import pymysql
    from mysqlbackup.base import users
    source = make_mysql()
    add_user(source, GRANTS + ", RELOAD, REPLICATION SLAVE")
    quoted = APP_PASSWORD.replace("\\", "\\\\").replace("'", "\\'")
    source.execute(
        "CREATE DATABASE shop", "CREATE TABLE shop.items (id INT PRIMARY KEY, note TEXT)",
        "INSERT INTO shop.items VALUES (1, 'one'), (2, 'two')",
        "CREATE ROLE 'reader'@'%'", "GRANT SELECT ON shop.* TO 'reader'@'%'",
        f"CREATE USER 'app'@'%' IDENTIFIED BY '{quoted}'",
        "GRANT INSERT, UPDATE ON shop.* TO 'app'@'%'",
        "GRANT SELECT (note), DELETE ON shop.items TO 'app'@'%'",
        "GRANT 'reader'@'%' TO 'app'@'%'", "SET DEFAULT ROLE 'reader'@'%' TO 'app'@'%'",
        "CREATE USER 'locked'@'%' IDENTIFIED BY 'locked-pw' ACCOUNT LOCK")
    path = first_on_path(wrappers)
    url = f"file://{tmp_path / 'archive'}"
    done = base(source, url, path, "--source-name", "my1")
    assert done.returncode == 0 and done.stderr == "", done.stderr

    store = ArchiveStore(url)
    [manifest] = manifests(store)
    details = manifest["details"]
    assert "skipped_accounts" not in details and "accounts_unread" not in details
    # app, locked, backup, and the sandbox's repl and root@127.0.0.1; reader is a role
    assert details["accounts"] == 5
    assert {"CREATE USER", "GRANT OPTION", "ROLE_ADMIN", "INSERT", "DELETE"} <= set(
        details["needs"])
    sql = zstandard.ZstdDecompressor().stream_reader(
        store.read(format_key(base_key("my1", manifest["id"], manifest["member"])))).read()
    begin, end = sql.index(b"-- mysqlbackup users: begin\n"), sql.index(
        b"-- mysqlbackup users: end\n")
    assert sql.count(b"-- mysqlbackup users: ") == 2 and sql[end:].count(b"\n") == 1
    conn = source_server.connect(SourceSpec("127.0.0.1", source.port, USER, PASSWORD))
    try:  # what base wrote is what the source's accounts read now
        assert sql[begin:] == users.section(users.survey_mysql(conn))
    finally:
        conn.close()
    section = sql[begin:].decode()
    assert re.search(r"^CREATE USER IF NOT EXISTS `app`@`%` IDENTIFIED WITH "
                     r"'caching_sha2_password' AS 0x[0-9A-F]{140} REQUIRE NONE ", section, re.M)
    assert "CREATE ROLE IF NOT EXISTS `reader`@`%`;" in section
    assert not [n for n in ("`mysql.sys`", "`mysql.session`", "`mysql.infoschema`",
                            "`root`@`localhost`") if n in section]
    # a restore replays the binlogs after its base: the source's files go to the archive
    source.execute("FLUSH BINARY LOGS")
    copy = tmp_path / "binlogs"
    copy.mkdir()
    for name in source.binlog_files():
        shutil.copyfile(source.binlog_path(name), copy / name)
    imported = run_cli("archive", "import", str(copy), "--archive", url, "--source-name", "my1")
    assert imported.returncode == 0, imported.stderr

    def restore(target, mode):
        done = run_cli("restore", "--archive", url, "--source-name", "my1", "--target",
                       f"mysql://root@127.0.0.1:{target.port}", "--users", mode,
                       password="", timeout=300, path=path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert target.execute("SELECT note FROM shop.items ORDER BY id") == (("one",), ("two",))
        return done

    def shown(server, what):  # (hashes as hex: the same text when the same bytes)
        return [server.execute("SET SESSION print_identified_with_as_hex = ON",
                               f"SHOW {what} {account}") for account in ACCOUNTS]

    target = make_mysql(server_id=2, semi_sync=False)
    restore(target, "apply")
    for what in ("CREATE USER", "GRANTS FOR"):
        assert shown(target, what) == shown(source, what), what
    app = pymysql.connect(host="127.0.0.1", port=target.port, user="app",  # (PyMySQL's
                          password=APP_PASSWORD.encode(), database="shop")  # str: latin-1)
    try:
        with app.cursor() as cur:
            cur.execute("SELECT CURRENT_USER(), CURRENT_ROLE()")
            assert cur.fetchall() == (("app@%", "`reader`@`%`"),)
            cur.execute("SELECT id FROM items ORDER BY id")  # through the role
            assert cur.fetchall() == ((1,), (2,))
    finally:
        app.close()
    with pytest.raises(pymysql.err.OperationalError) as refused:
        pymysql.connect(host="127.0.0.1", port=target.port, user="locked",
                        password="locked-pw")
    assert refused.value.args[0] == 3118  # ER_ACCOUNT_HAS_BEEN_LOCKED
    with pytest.raises(pymysql.err.OperationalError) as refused:
        pymysql.connect(host="127.0.0.1", port=target.port, user="app", password="wrong")
    assert refused.value.args[0] == 1045

    target = make_mysql(server_id=3, semi_sync=False)
    stock = target.execute("SELECT user, host FROM mysql.user ORDER BY 1, 2")
    skipped = restore(target, "skip")
    assert "users: 5 accounts and 1 role of the base left out (--users skip)" in \
        skipped.stdout + skipped.stderr
    assert target.execute("SELECT user, host FROM mysql.user ORDER BY 1, 2") == stock

    # a backup user without SELECT on the mysql schema (a partial revoke): refused before
    # mysqldump runs (it would fail on the schema's tables), nothing in the archive
    source.execute("SET GLOBAL partial_revokes = ON")
    add_user(source, GRANTS + ", RELOAD, REPLICATION SLAVE", user="blind")
    source.execute("REVOKE SELECT ON mysql.* FROM 'blind'@'127.0.0.1'")
    done = base(source, url, path, "--source-name", "my2", user="blind")
    assert done.returncode == 3, done.stderr
    assert done.stderr.splitlines() == [
        f"mysqlbackup: error: the source user blind@127.0.0.1:{source.port} may not read the "
        f"mysql schema (SELECT command denied to user 'blind'@'127.0.0.1' for table 'user'), "
        f"which base --method dump of a MySQL source needs: the accounts are read there, and "
        f"mysqldump reads its tables (GRANT SELECT ON mysql.* TO ...)"]
    assert [n for n in store.list() if n.startswith("my2/")] == []


def children_named(parent, name):
    """Pids of ``parent``'s child processes running ``name``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and any(os.path.basename(a) == name.encode() for a in argv[:3]):
            found.append(int(pid))
    return found


# -- the tool on PATH, the command line, the options file (no server) -----------------------

@pytest.mark.server
def test_mariadb_source_with_only_mysqls_client_is_refused(wrappers, monkeypatch):
    monkeypatch.setenv("PATH", wrappers)
    path, version = find_client(("mysqldump",), "mysql")
    assert path == os.path.join(wrappers, "mysqldump") and version.startswith("mysqldump Ver 9.")
    with pytest.raises(ToolError) as e:
        find_client(("mariadb-dump", "mysqldump"), "mariadb")
    assert str(e.value) == (f"{path} is MySQL's client ({version}), not MariaDB's: a MariaDB "
                            f"source needs MariaDB's own mariadb-dump (package mariadb-client) "
                            f"on PATH")
    monkeypatch.setenv("PATH", os.path.dirname(wrappers))  # nothing there
    with pytest.raises(ToolError, match=r"^mysqldump not found on PATH: install"):
        find_client(("mysqldump",), "mysql")


def test_mysql_command_line_has_only_mysqldumps_options():
    spec = SourceSpec("db1", 3306, "u", "p")
    argv = dump_argv("/usr/bin/mysqldump", "/tmp/o.cnf", spec, "mysql",
                     skip_tables=["user", "db"])
    assert argv == [
        "/usr/bin/mysqldump", "--defaults-extra-file=/tmp/o.cnf", "--host=db1", "--port=3306",
        "--protocol=tcp", "--single-transaction", "--quick", "--routines", "--events",
        "--triggers", "--hex-blob", "--default-character-set=utf8mb4", "--all-databases",
        "--ignore-table=mysql.user", "--ignore-table=mysql.db", "--source-data=2",
        "--set-gtid-purged=ON", "--no-tablespaces"]
    maria = dump_argv("/usr/bin/mariadb-dump", "/tmp/o.cnf", spec, "mariadb")
    assert "--ignore-database=mysql" in maria and "--gtid" in maria


@pytest.mark.parametrize("mode, extra, entries", [
    ("disabled", {}, [("ssl-mode", "DISABLED"), ("get-server-public-key", None)]),
    ("preferred", {"cert": "/c.pem", "key": "/k.pem"},
     [("ssl-mode", "PREFERRED"), ("ssl-cert", "/c.pem"), ("ssl-key", "/k.pem"),
      ("get-server-public-key", None)]),
    ("required", {"ca": "/ca.pem"}, [("ssl-mode", "REQUIRED")]),
    ("verify-ca", {"ca": "/ca.pem"}, [("ssl-mode", "VERIFY_CA"), ("ssl-ca", "/ca.pem")]),
    ("verify-identity", {"ca": "/ca.pem", "cert": "/c.pem"},
     [("ssl-mode", "VERIFY_IDENTITY"), ("ssl-ca", "/ca.pem"), ("ssl-cert", "/c.pem")]),
])
def test_mysql_tls_options_are_mysqls_names(mode, extra, entries):
    assert mysql_client_options(TlsSettings(mode, **extra)) == entries


def test_mysql_options_file():
    spec = SourceSpec("db1", 3306, "u", 'p "w"', TlsSettings("verify-ca", "/ca.pem"))
    assert options_text(spec, flavor="mysql").splitlines() == [
        "[client]", 'user="u"', 'password="p \\"w\\""', 'ssl-mode="VERIFY_CA"',
        'ssl-ca="/ca.pem"']


def test_a_mysql_gtid_set_that_is_not_the_positions_is_refused():
    from mysqlbackup.base.run import check_gtid, gtid_text
    uuid1, uuid2 = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4a8e5c1e-71ca-11e1-9e33-c80aa9429563"
    snapshot = Snapshot(Position("binlog.000002", 900), f"{uuid2}:1-3,\n{uuid1}:1-5")
    check_gtid(snapshot, f"{uuid1}:1-5,{uuid2}:1-3", "dump", "mysql")
    check_gtid(snapshot, None, "dump", "mysql")
    with pytest.raises(DumpError) as e:
        check_gtid(snapshot, f"{uuid1}:1-4,{uuid2}:1-3", "dump", "mysql")
    assert str(e.value) == (f"dump: GTID '{uuid1}:1-5,{uuid2}:1-3' at binlog.000002:900, but "
                            f"the source says its binlog there follows the GTID set "
                            f"'{uuid1}:1-4,{uuid2}:1-3'")
    assert gtid_text(snapshot, "mysql") == f"{uuid1}:1-5,{uuid2}:1-3"

