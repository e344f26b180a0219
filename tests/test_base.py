"""`mysqlbackup base`: base backups of real throwaway servers into the archive."""

import hashlib
import os
import re
import subprocess
import sys
import threading

import pytest
import zstandard

from mysqlbackup.archive.manifest import parse_manifest
from mysqlbackup.archive.names import BASE_MEMBERS, base_key, format_key
from mysqlbackup.archive.options import parse_options
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.sandbox import MariaDBSandbox, find_binary
from tests.faults import Tmpfs, can_mount_tmpfs
from tests.conftest import STORES
from tests.helpers import Daemon, caught_up, cli_env, run_cli, wait_for

BACKUP_USER, BACKUP_PASSWORD = "backup", "b'ack\"up\\pw"
SUMMARY = re.compile(r"^base (?P<id>\d{8}T\d{6}\.\d{3}Z) of (?P<source>\S+): (?P<method>\w+), "
                     r"gtid (?P<gtid>\S+), binlog (?P<file>[\w.]+):(?P<pos>\d+), "
                     r"(?P<raw>\d+) bytes raw, (?P<stored>\d+) stored, \d+\.\d s$")


def _server(tmp_path_factory, name, server_id):
    if find_binary("mariadbd") is None:
        pytest.fail("mariadbd not found: run scripts/test.sh, which installs mariadb-server")
    server = MariaDBSandbox(str(tmp_path_factory.mktemp(name)), server_id=server_id,
                            semi_sync_timeout_ms=1000).start()
    return server


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A MariaDB source with a backup user and some data of every kind."""
    server = _server(tmp_path_factory, "base-source", 31)
    quoted = BACKUP_PASSWORD.replace("\\", "\\\\").replace("'", "\\'")
    server.execute(
        f"CREATE USER '{BACKUP_USER}'@'127.0.0.1' IDENTIFIED BY '{quoted}'",
        f"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, BINLOG MONITOR, RELOAD, PROCESS, "
        f"LOCK TABLES ON *.* TO '{BACKUP_USER}'@'127.0.0.1'",
        "CREATE DATABASE shop CHARACTER SET utf8mb4",
        "CREATE TABLE shop.items (id INT PRIMARY KEY AUTO_INCREMENT, name VARCHAR(64), "
        "photo BLOB, price DECIMAL(10,2), added DATETIME(6)) ENGINE=InnoDB",
        "CREATE TABLE shop.audit (id INT PRIMARY KEY AUTO_INCREMENT, item INT) ENGINE=InnoDB",
        "CREATE TRIGGER shop.items_ai AFTER INSERT ON shop.items FOR EACH ROW "
        "INSERT INTO shop.audit (item) VALUES (NEW.id)",
        "CREATE VIEW shop.cheap AS SELECT id, name FROM shop.items WHERE price < 10",
        "CREATE PROCEDURE shop.touch() SELECT COUNT(*) FROM shop.items",
        "CREATE EVENT shop.nightly ON SCHEDULE EVERY 1 DAY DISABLE DO DELETE FROM shop.audit",
        "CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'",
        "GRANT SELECT, INSERT ON shop.* TO 'app'@'%'", "CREATE ROLE reader",
        "GRANT SELECT ON shop.* TO reader", "GRANT reader TO 'app'@'%'",
        "SET DEFAULT ROLE reader FOR 'app'@'%'")
    server.execute(*[f"INSERT INTO shop.items (name, photo, price, added) VALUES "
                     f"('ítem {i} ✓', UNHEX(SHA2('{i}', 256)), {i}.25, NOW(6))"
                     for i in range(300)])
    yield server
    server.stop(remove=True)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    server = MariaDBSandbox(str(tmp_path_factory.mktemp("base-target")), server_id=32,
                            semi_sync=False).start()
    yield server
    server.stop(remove=True)


def base_cli(server, archive_url, *extra, options=(), password=BACKUP_PASSWORD,
             user=BACKUP_USER, env=None):
    args = ["base", "--source", f"mysql://{user}@127.0.0.1:{server.port}",
            "--archive", archive_url, *[f"--archive-option={o}" for o in options], *extra]
    return run_cli(*args, password=password, timeout=300)


def errors_of(stderr):
    """stderr's lines but the warning naming the accounts the source ignores."""
    return [line for line in stderr.splitlines() if "account(s) the source ignores" not in line]


def user_tables(server):
    return [f"{db}.{t}" for db, t in server.execute(
        "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = "
        "'BASE TABLE' AND table_schema NOT IN ('mysql', 'sys', 'performance_schema', "
        "'information_schema') ORDER BY 1, 2")]


def checksums(server, tables):
    return dict(server.execute(f"CHECKSUM TABLE {', '.join(tables)}"))


def load_sql(server, sql):
    done = subprocess.run([find_binary("mariadb"), "--no-defaults", f"--socket={server.socket}",
                           "-uroot", "--binary-mode"], input=sql, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def read_base(store, manifest):
    member = format_key(base_key(manifest["source"], manifest["id"], manifest["member"]))
    return store.read(member)


def manifests(store):
    return [parse_manifest(store.read(name), name) for name in store.list()
            if name.endswith("/index.json") and "/base/" in name]


# -- the dump end to end -------------------------------------------------------------------

@pytest.mark.server
def test_dump_base_loads_into_a_new_server_with_equal_checksums(source, target, archive):
    url, options = archive
    before = source.execute("SHOW MASTER STATUS")[0][:2]
    gtid_before = source.execute("SELECT @@gtid_binlog_pos")[0][0]
    clock_before = float(source.execute("SELECT UNIX_TIMESTAMP(NOW(6))")[0][0])
    result = base_cli(source, url, "--source-name", "db1", options=options)
    clock_after = float(source.execute("SELECT UNIX_TIMESTAMP(NOW(6))")[0][0])
    assert result.returncode == 0, result.stderr
    line = SUMMARY.match(result.stdout.strip())
    assert line, result.stdout

    store = ArchiveStore(url, parse_options(options))
    [manifest] = manifests(store)
    assert line["id"] == manifest["id"] and line["source"] == "db1"
    assert (manifest["method"], manifest["member"], manifest["compression"]) == (
        "dump", BASE_MEMBERS["dump"], "zstd")
    assert (manifest["binlog_file"], manifest["binlog_pos"]) == before
    assert manifest["gtid"] == gtid_before and manifest["gtid_flavor"] == "mariadb"
    assert (manifest["server_id"], manifest["server_uuid"]) == (31, None)
    assert manifest["server_version"] == source.execute("SELECT VERSION()")[0][0]
    start, end = (_epoch(manifest[k]) for k in ("start_time", "end_time"))
    assert clock_before <= start <= end <= clock_after
    stored = read_base(store, manifest)
    sql = zstandard.ZstdDecompressor().stream_reader(stored).read()
    assert len(stored) == manifest["stored_size"] and len(sql) == manifest["raw_size"]
    assert hashlib.sha256(stored).hexdigest() == manifest["sha256"]
    assert hashlib.sha256(sql).hexdigest() == manifest["raw_sha256"]

    # the server's own accounts as installed: root@<hostname> it ignores is left out, named
    ignored = [f"'root'@'{h}'" for (h,) in source.execute(
        "SELECT host FROM mysql.user WHERE user = 'root' AND host NOT IN ('localhost', "
        "'127.0.0.1', '::1')")]
    assert ignored and manifest["details"]["skipped_accounts"] == ignored
    assert (f"1 account(s) the source ignores (skip_name_resolve: a host that is a name) left "
            f"out of the base: {ignored[0]}") in result.stderr
    assert "--system=users" not in manifest["details"]["arguments"]
    assert_users_restore(source, target, sql)


def assert_users_restore(source, target, sql):
    """``sql`` loaded into ``target`` gives the source's tables and the app account, with
    its role and default role."""
    target.execute("DROP DATABASE IF EXISTS shop", "DROP USER IF EXISTS 'app'@'%'",
                   "DROP ROLE IF EXISTS reader")
    load_sql(target, sql)
    tables = user_tables(source)
    assert tables == user_tables(target) and "shop.items" in tables
    assert checksums(target, tables) == checksums(source, tables)
    for account in ("'app'@'%'", "reader"):
        assert target.execute(f"SHOW GRANTS FOR {account}") == source.execute(
            f"SHOW GRANTS FOR {account}")
    for what in ("TRIGGERS FROM shop", "PROCEDURE STATUS WHERE Db = 'shop'",
                 "EVENTS FROM shop", "FULL TABLES FROM shop WHERE Table_type = 'VIEW'"):
        assert len(target.execute(f"SHOW {what}")) == 1, what


@pytest.mark.server
def test_without_ignored_accounts_the_dump_tool_writes_them(source, target, tmp_path):
    """A source without accounts it ignores: mariadb-dump --system=users writes them, as
    before, and nothing is named as left out."""
    hosts = source.execute("SELECT host FROM mysql.user WHERE user = 'root' AND host NOT IN "
                           "('localhost', '127.0.0.1', '::1')")
    source.execute("SET SESSION sql_log_bin = 0", *[f"DROP USER 'root'@'{h}'" for (h,) in hosts])
    try:
        url = f"file://{tmp_path / 'archive'}"
        result = base_cli(source, url)
        assert result.returncode == 0 and "ignores" not in result.stderr, result.stderr
        store = ArchiveStore(url)
        [manifest] = manifests(store)
        assert "--system=users" in manifest["details"]["arguments"]
        assert "skipped_accounts" not in manifest["details"]
        sql = zstandard.ZstdDecompressor().stream_reader(read_base(store, manifest)).read()
        assert b"-- mysqlbackup users: begin" not in sql
        assert_users_restore(source, target, sql)
    finally:
        # as installed again: made, then ignored once the grant tables are read again
        source.execute("SET SESSION sql_log_bin = 0",
                       *[f"CREATE USER 'root'@'{h}'" for (h,) in hosts],
                       "FLUSH NO_WRITE_TO_BINLOG PRIVILEGES")


def _epoch(text):
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- refusals: one line, non-zero, no manifest ---------------------------------------------

def assert_nothing_indexed(url, tmp_dir=None):
    store = ArchiveStore(url)
    assert [n for n in store.list() if "/base/" in n] == []
    if tmp_dir:
        assert [f for _, _, files in os.walk(tmp_dir) for f in files if ".tmp-" in f] == []


@pytest.mark.server
def test_missing_dump_client_is_one_line(source, tmp_path):
    url = f"file://{tmp_path / 'archive'}"
    env = dict(cli_env(BACKUP_PASSWORD), PATH=str(tmp_path))  # no mariadb-dump there
    result = subprocess.run([sys.executable, "-m", "mysqlbackup", "base", "--source",
                             f"mysql://{BACKUP_USER}@127.0.0.1:{source.port}", "--archive", url],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "mysqlbackup: error: mariadb-dump / mysqldump not found on PATH: install the server's "
        "client tools (Debian: mariadb-client, mariadb-backup; MySQL: mysql-client)"]
    assert_nothing_indexed(url)


@pytest.mark.server
@pytest.mark.parametrize("method, missing", [("dump", "SHOW VIEW, TRIGGER, EVENT"),
                                             ("physical", "RELOAD, PROCESS, LOCK TABLES")])
def test_user_without_privileges_is_refused_before_anything_runs(source, tmp_path, method,
                                                                  missing):
    from mysqlbackup.sandbox import REPL_PASSWORD, REPL_USER
    url = f"file://{tmp_path / 'archive'}"
    result = base_cli(source, url, "--method", method, user=REPL_USER, password=REPL_PASSWORD)
    assert result.returncode == 3
    every = ("SELECT, SHOW VIEW, TRIGGER, EVENT, BINLOG MONITOR" if method == "dump"
             else "RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR")
    assert result.stderr.splitlines() == [
        f"mysqlbackup: error: the source user {REPL_USER}@127.0.0.1:{source.port} lacks the "
        f"global privileges {missing} that base --method {method} needs (GRANT {every} ON *.* "
        f"TO ...)"]
    assert not os.path.exists(tmp_path / "archive")


@pytest.mark.server
def test_full_store_is_one_line_and_leaves_nothing(source, tmp_path):
    if not can_mount_tmpfs():
        pytest.skip("needs root and mount(8) for a small tmpfs")
    with Tmpfs(tmp_path / "small", size="1m") as fs:
        os.makedirs(tmp_path / "small" / "archive")
        fs.fill(leave=8192)
        url = f"file://{tmp_path / 'small' / 'archive'}"
        result = base_cli(source, url)
        assert result.returncode == 11  # ExitCode.STORE
        [line] = errors_of(result.stderr)
        assert re.match(rf"mysqlbackup: error: archive {re.escape(url)}: write server-id-31/base/"
                        rf"\d{{8}}T\d{{6}}\.\d{{3}}Z/dump\.sql\.zst failed: OSError: \[Errno 28\] "
                        rf"No space left on device", line), line
        assert_nothing_indexed(url, tmp_path / "small" / "archive")


@pytest.mark.server
def test_dump_client_failing_midway_is_one_line_and_leaves_nothing(source, tmp_path):
    """The dump is stopped while it waits for a locked table, after it has streamed
    the tables before it: its own last error line is ours, and nothing is indexed."""
    source.execute("CREATE DATABASE midway", "CREATE TABLE midway.a (id INT PRIMARY KEY)",
                   "INSERT INTO midway.a VALUES (1), (2)", "CREATE TABLE midway.z (id INT)")
    holder = source.root()
    try:
        holder.cursor().execute("LOCK TABLES midway.z WRITE")
        url = f"file://{tmp_path / 'archive'}"
        args = ["base", "--source", f"mysql://{BACKUP_USER}@127.0.0.1:{source.port}",
                "--archive", url]
        proc = subprocess.Popen([sys.executable, "-m", "mysqlbackup", *args],
                                env=cli_env(BACKUP_PASSWORD), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        waiting = wait_for(lambda: source.execute(
            f"SELECT id FROM information_schema.processlist WHERE user = '{BACKUP_USER}' AND "
            f"state LIKE 'Waiting for table metadata lock'"), what="the dump waiting on midway.z")
        source.execute(f"KILL QUERY {waiting[0][0]}")
        out, err = proc.communicate(timeout=60)
    finally:
        holder.close()
        source.execute("DROP DATABASE midway")
    assert proc.returncode == 1, err
    [line] = errors_of(err)
    assert line.startswith("mysqlbackup: error: mariadb-dump failed (exit 2): mariadb-dump: ")
    assert "FROM `z`" in line and "interrupted" in line, line
    assert_nothing_indexed(url, tmp_path / "archive")


# -- while the daemon streams and writers commit -------------------------------------------

class Writer(threading.Thread):
    """Autocommit inserts, one transaction each, until stopped."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server, self.stop, self.count = server, threading.Event(), 0

    def run(self):
        conn = self.server.root(database="traffic")
        with conn.cursor() as cur:
            while not self.stop.is_set():
                cur.execute("INSERT INTO t (v) VALUES (REPEAT('w', 200))")
                self.count += 1
        conn.close()


def gtid_seq(server):
    [(pos,)] = server.execute("SELECT @@gtid_binlog_pos")
    return int(pos.split("-")[2])


@pytest.mark.server
def test_base_while_the_daemon_streams_and_writers_commit(source, target, tmp_path):
    """No FLUSH TABLES WITH READ LOCK, writers commit throughout, and the base's
    position is exact: its rows are the transactions up to its GTID, and the
    archived binlogs from its file:pos hold exactly the ones after it."""
    source.execute("CREATE DATABASE traffic",
                   "CREATE TABLE traffic.t (id INT PRIMARY KEY AUTO_INCREMENT, v TEXT)")
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(source, tmp_path / "copy", "--archive", url, "--archive-interval",
                    "0.5").start()
    writer = Writer(source)
    try:
        wait_for(lambda: source.status("Rpl_semi_sync_master_clients") == "1",
                 what="the daemon as a semi-sync replica")
        first = gtid_seq(source)
        flushes = int(source.status("Com_flush"))
        writer.start()
        wait_for(lambda: writer.count > 200, what="writers committing")
        at_start = writer.count
        result = base_cli(source, url)
        during = writer.count - at_start
        wait_for(lambda: writer.count > at_start + during + 20,
                 what="writers committing after the base")
        writer.stop.set()
        writer.join(timeout=30)
        wait_for(lambda: caught_up(source, tmp_path / "copy"), what="the daemon caught up")
        assert int(source.status("Com_flush")) == flushes  # no FTWRL, no FLUSH at all
    finally:
        writer.stop.set()
        assert daemon.stop() == 0, daemon.output()
    assert result.returncode == 0, result.stderr
    assert during > 0
    store = ArchiveStore(url)
    [manifest] = manifests(store)
    assert manifest["source"] == "server-id-31"
    assert any(n.startswith(("server-id-31/binlog/", "server-id-31/partial/"))
               for n in store.list())  # base and binlogs under the same source
    seq = int(manifest["gtid"].split("-")[2])
    assert first < seq < gtid_seq(source)
    assert source.execute(f"SELECT BINLOG_GTID_POS('{manifest['binlog_file']}', "
                          f"{manifest['binlog_pos']})")[0][0] == manifest["gtid"]

    sql = zstandard.ZstdDecompressor().stream_reader(read_base(store, manifest)).read()
    target.execute("DROP DATABASE IF EXISTS traffic")
    load_sql(target, sql)
    assert target.execute("SELECT COUNT(*), MAX(id) FROM traffic.t")[0] == (seq - first,
                                                                            seq - first)
    after = _gtids_from(tmp_path / "copy", manifest["binlog_file"], manifest["binlog_pos"])
    assert after == list(range(seq + 1, gtid_seq(source) + 1))
    source.execute("DROP DATABASE traffic")


def _gtids_from(directory, name, pos):
    """seq_no of every GTID in the local copies from ``name``:``pos`` on."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.binlog.names import binlog_sort_key
    from mysqlbackup.binlog.scan import iter_events
    names = sorted((n for n in os.listdir(directory) if n.startswith("binlog.0")),
                   key=binlog_sort_key)
    seqs = []
    for n in names[names.index(name):]:
        with open(os.path.join(directory, n), "rb") as f:
            data = f.read()
        for _, event in iter_events(data, pos if n == name else 4, True):
            if event[4] == ev.MARIA_GTID:
                seqs.append(ev.parse_maria_gtid(event, True).seq)
    return seqs


# -- physical -----------------------------------------------------------------------------

@pytest.mark.server
def test_physical_base_restores_into_a_new_datadir_and_serves_equal_tables(source, tmp_path,
                                                                            archive):
    from mysqlbackup.sandbox import free_port
    from mysqlbackup.source.spec import SourceSpec
    from replay.restore.physical import restore_physical, stop_server
    url, options = archive
    status = source.execute("SHOW MASTER STATUS")[0][:2]
    gtid = source.execute("SELECT @@gtid_binlog_pos")[0][0]
    result = base_cli(source, url, "--method", "physical", options=options)
    assert result.returncode == 0, result.stderr
    line = SUMMARY.match(result.stdout.strip())
    assert line and line["method"] == "physical", result.stdout
    store = ArchiveStore(url, parse_options(options))
    [manifest] = manifests(store)
    assert (manifest["member"], manifest["source"], manifest["gtid"]) == (
        "backup.xbstream.zst", "server-id-31", gtid)
    assert (manifest["binlog_file"], manifest["binlog_pos"]) == status

    member = format_key(base_key(manifest["source"], manifest["id"], manifest["member"]))
    target = SourceSpec("127.0.0.1", free_port(), BACKUP_USER, BACKUP_PASSWORD)
    datadir = tmp_path / "restored"
    lines = []
    server = restore_physical(store, member, manifest, str(datadir), target, lines.append)
    try:
        restored = MariaDBSandbox(str(tmp_path))
        restored.socket, restored.port = f"/tmp/mysqlbackup-restore-{target.port}.sock", None
        tables = user_tables(source)
        assert user_tables(restored) == tables
        assert restored.execute("SELECT @@tmpdir")[0][0] == f"{datadir}.tmp"   # not /tmp
        assert checksums(restored, tables) == checksums(source, tables)
    finally:
        stop_server(server)
    assert any("mariadb-backup --prepare" in ln for ln in lines)
    # run again (an interrupted restore): the prepared copy is started, not extracted again
    lines.clear()
    server = restore_physical(store, member, manifest, str(datadir), target, lines.append)
    stop_server(server)
    assert lines[0] == f"restore: {datadir} holds base {manifest['id']} prepared: starting it"


@pytest.mark.server
def test_physical_restore_refuses_a_datadir_in_use(source, tmp_path):
    from mysqlbackup.errors import UsageError
    from replay.restore.physical import restore_physical
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ibdata1").write_bytes(b"x")
    manifest = {"id": "20261123T094100.123Z"}
    with pytest.raises(UsageError, match=r"--datadir .* is not empty \(and holds no prepared "
                       r"copy of base 20261123T094100.123Z\)"):
        restore_physical(None, "k", manifest, str(tmp_path / "data"), None)


# -- ArchiveStore.open_write ----------------------------------------------------------------

@pytest.mark.parametrize("archive", STORES, indirect=True)
def test_open_write_streams_parts_and_an_error_publishes_nothing(archive, monkeypatch):
    """Several parts on S3 (moto's real multipart API; part size at S3's 5 MiB minimum),
    one durable rename on file://; an error mid-way leaves neither an object nor, on S3,
    an open multipart upload."""
    import boto3

    import mysqlbackup.archive.store as store_module
    monkeypatch.setattr(store_module, "STREAM_BLOCK", 5 << 20)
    url, options = archive
    store = ArchiveStore(url, parse_options(options))
    chunks = [os.urandom(1 << 20) for _ in range(12)]
    with store.open_write("s/base/x/whole") as out:
        for chunk in chunks:
            out.write(chunk)
    assert store.read("s/base/x/whole") == b"".join(chunks)
    with pytest.raises(RuntimeError, match="the tool failed"):
        with store.open_write("s/base/x/torn") as out:
            for chunk in chunks:
                out.write(chunk)
            raise RuntimeError("the tool failed")
    assert store.list("s/base/x") == ["s/base/x/whole"]
    if url.startswith("s3://"):
        client = boto3.client("s3", endpoint_url=options[0].split("=", 1)[1])
        bucket = url[len("s3://"):].split("/")[0]
        assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    else:
        assert os.listdir(url[len("file://"):] + "/s/base/x") == ["whole"]
