"""`mysqlbackup base --method clone` against a live MySQL server (9.7 through chroot:
sandbox.mysql) and `restore --datadir` of what it archived: a clone taken while a
writer commits, the binlogs after it archived by the daemon, a restore to a GTID equal
to the source there (CHECKSUM TABLE, gtid_executed); a MariaDB source and a user
without the privileges refused in one line, nothing archived, nothing left behind.

The source's mysqld writes the clone under ``sandbox.mysql.shared_dir()``, a folder the
chroot and the host know by one path (the base command's --clone-dir); a host-side
``mysqld`` (``sandbox.mysql.server_wrapper``) runs the tree's own server, for the
moment the base recovers its copy and for the restored server."""

import io
import os
import re
import subprocess
import sys
import tarfile
import time

import pymysql
import pytest

from mysqlbackup.archive.manifest import parse_manifest
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.base.clone import status_snapshot
from mysqlbackup.base.dump import DumpError
from mysqlbackup.base.tardir import TarDirError, TarReader
from mysqlbackup.binlog.gtid import MysqlGtidSet
from mysqlbackup.sandbox import free_port
from tests.helpers import Daemon, cli_env, run_cli, wait_for
from tests.test_mysql_base import PASSWORD, USER, Writer, add_user
from tests.test_mysql_live import archived_last, gtid_executed, last_of

CLONE_GRANTS = "BACKUP_ADMIN, REPLICATION CLIENT"
SUMMARY = re.compile(r"^base (?P<id>\d{8}T\d{6}\.\d{3}Z) of my1: clone, gtid (?P<gtid>\S+), "
                     r"binlog (?P<file>[\w.]+):(?P<pos>\d+), \d+ bytes raw, \d+ stored, "
                     r"\d+\.\d s$")
TABLES = "traffic.t, traffic.audit"


@pytest.fixture
def shared():
    """A folder of this test's own inside the one the chroot's mysqld and the host
    share (tests in other processes use that folder at the same time); it goes
    afterwards, with what the test left there (a restored datadir)."""
    from mysqlbackup.sandbox.mysql import private_shared_dir, why_no_mysql
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    with private_shared_dir() as folder:
        yield folder


@pytest.fixture
def server_bin(tmp_path):
    """A folder holding the host-side mysqld of the tree, for the front of PATH."""
    from mysqlbackup.sandbox.mysql import server_wrapper
    return server_wrapper(tmp_path / "bin")


def clone_base(server, url, shared, path, user=USER, password=PASSWORD):
    """``mysqlbackup base --method clone`` as a process, the copy in the shared folder."""
    env = dict(cli_env(password), PATH=path)
    argv = [sys.executable, "-m", "mysqlbackup", "base", "--method", "clone", "--source",
            f"mysql://{user}@127.0.0.1:{server.port}", "--archive", url, "--source-name",
            "my1", "--clone-dir", shared]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)


def checksums(conn_or_server, tables=TABLES):
    if hasattr(conn_or_server, "execute"):
        return dict(conn_or_server.execute(f"CHECKSUM TABLE {tables}"))
    with conn_or_server.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE {tables}")
        return dict(cur.fetchall())


def leftovers(shared):
    return [n for n in os.listdir(shared) if n.startswith("mysqlbackup-clone-")]


def test_clone_base_during_traffic_restores_to_a_gtid(make_mysql, shared, server_bin,
                                                      tmp_path, monkeypatch):
    """A writer commits throughout the clone (compressed transactions, a trigger's
    rows); the manifest's GTID set is the copy's own (clone_status, checked against the
    binlog by the base), a subset of what the source had when the base ended; the
    copy is gone from the shared folder. More traffic, archived by the daemon; then
    ``restore --datadir`` to just before an UPDATE: the restored server's tables and
    gtid_executed are the source's at that point."""
    server = make_mysql()
    add_user(server, CLONE_GRANTS + ", REPLICATION SLAVE")
    server.execute("SET SESSION sql_log_bin = 0",
                   f"GRANT INSERT ON mysql.plugin TO '{USER}'@'127.0.0.1'")
    server.execute("CREATE DATABASE traffic", "CREATE TABLE traffic.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v VARCHAR(8))",
                   "CREATE TABLE traffic.audit (id INT PRIMARY KEY AUTO_INCREMENT, item INT)",
                   "CREATE TRIGGER traffic.t_ai AFTER INSERT ON traffic.t FOR EACH ROW "
                   "INSERT INTO traffic.audit (item) VALUES (NEW.id)")
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(server, tmp_path / "dir", "--start-file", server.binlog_files()[0],
                    "--archive", url, "--archive-interval", "0.2", "--source-name",
                    "my1").start()
    path = server_bin + os.pathsep + os.environ["PATH"]
    writer = Writer(server)
    writer.start()
    try:
        wait_for(lambda: writer.count > 100, what="the writer committing")
        at_start, began = writer.count, time.monotonic()
        result = clone_base(server, url, shared, path)
        base_seconds, during = time.monotonic() - began, writer.count - at_start
        after_base = MysqlGtidSet.parse(gtid_executed(server))
        wait_for(lambda: writer.count > at_start + during + 200, what="traffic after the base")
    finally:
        writer.stop.set()
        writer.join(timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr  # its GTID checked against the binlog
    line = SUMMARY.match(result.stdout.strip())
    assert line, result.stdout
    assert during > 0 and leftovers(shared) == []
    [name] = [n for n in ArchiveStore(url).list() if n.endswith("/index.json")
              and "/base/" in n]
    manifest = parse_manifest(ArchiveStore(url).read(name), name)
    assert (manifest["method"], manifest["member"], manifest["gtid_flavor"]) == (
        "clone", "datadir.tar.zst", "mysql")
    assert (line["gtid"], line["file"], int(line["pos"])) == (
        manifest["gtid"], manifest["binlog_file"], manifest["binlog_pos"])
    gtid = MysqlGtidSet.parse(manifest["gtid"])
    assert gtid != after_base and _subset(gtid, after_base)
    details = manifest["details"]
    assert details["tool"] == "CLONE LOCAL DATA DIRECTORY" and details["files"] > 10
    assert manifest["raw_size"] > details["data_bytes"] > manifest["stored_size"]

    server.execute("INSERT INTO traffic.t (v) VALUES ('last')")
    at_stop = (checksums(server), gtid_executed(server))
    server.execute("UPDATE traffic.t SET v = 'changed' WHERE id % 3 = 0")
    stop = last_of(server)
    server.execute("INSERT INTO traffic.t (v) VALUES ('after')", "FLUSH BINARY LOGS",
                   "DELETE FROM traffic.audit WHERE id < 50")
    try:
        wait_for(lambda: archived_last(url) == last_of(server), timeout=60,
                 what="the archive at the source's last transaction")
    finally:
        assert daemon.stop() == 0, daemon.output()

    monkeypatch.setenv("PATH", path)  # the restore runs in this process
    port, datadir = free_port(), os.path.join(shared, f"restored-{free_port()}")
    began = time.monotonic()
    done = run_cli("restore", "--archive", url, "--source-name", "my1", "--target",
                   f"mysql://root@127.0.0.1:{port}", "--datadir", datadir,
                   "--stop-before-gtid", stop, password="", timeout=600)
    restore_seconds = time.monotonic() - began
    started = re.search(r"^server: \S+ pid (\d+) on ", done.stdout, re.M)
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(rf"^restore of my1: base {manifest['id']} \(clone, GTID \S+\) "
                         rf"loaded$", done.stdout, re.M), done.stdout
        # every transaction after the base's GTID set up to the stop, none of it again
        applied = re.search(r"^applied: (\d+) transactions,", done.stdout, re.M)
        assert applied and int(applied[1]) == _count(MysqlGtidSet.parse(at_stop[1])) - \
            _count(gtid), done.stdout
        conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="")
        try:
            assert checksums(conn) == at_stop[0]
            with conn.cursor() as cur:
                cur.execute("SELECT @@gtid_executed, @@server_uuid")
                restored_gtid, restored_uuid = cur.fetchone()
            assert MysqlGtidSet.parse(restored_gtid) == MysqlGtidSet.parse(at_stop[1])
            assert restored_uuid != server.execute("SELECT @@server_uuid")[0][0]
        finally:
            conn.close()
    finally:
        if started:
            from replay.restore.physical import RestoredServer, stop_server
            stop_server(RestoredServer(None, int(started[1]), datadir, None))
    # run again on the same datadir (as after an interruption): the server started on
    # what is there, nothing applied twice
    again = run_cli("restore", "--archive", url, "--source-name", "my1", "--target",
                    f"mysql://root@127.0.0.1:{port}", "--datadir", datadir,
                    "--stop-before-gtid", stop, password="", timeout=600)
    started = re.search(r"^server: \S+ pid (\d+) on ", again.stdout, re.M)
    try:
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"restore: {datadir} holds base {manifest['id']}: starting it" in again.stderr
        assert re.search(r"^applied: 0 transactions, ", again.stdout, re.M), again.stdout
        conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="")
        try:
            assert checksums(conn) == at_stop[0]
        finally:
            conn.close()
    finally:
        if started:
            stop_server(RestoredServer(None, int(started[1]), datadir, None))
    print(f"clone base: {base_seconds:.2f} s ({during} transactions committed meanwhile, "
          f"{manifest['raw_size']} bytes raw, {manifest['stored_size']} stored); restore "
          f"--datadir to a GTID: {restore_seconds:.2f} s")


def _count(gtids):
    return sum(hi - lo for intervals in gtids.sids.values() for lo, hi in intervals)


def _subset(small, big):
    """Every GTID of ``small`` is in ``big``."""
    return all(any(lo >= blo and hi <= bhi for blo, bhi in big.sids.get(sid, ()))
               for sid, intervals in small.sids.items() for lo, hi in intervals)


def test_clone_refusals_are_one_line_and_leave_nothing(make_mysql, shared, server_bin,
                                                       tmp_path):
    """A user without BACKUP_ADMIN is refused before anything runs, naming it; one with
    it but without the plugin loaded nor the right to install it, naming that; neither
    leaves a base in the archive nor a copy in the shared folder."""
    server = make_mysql()
    add_user(server, "REPLICATION CLIENT", user="weak")
    add_user(server, CLONE_GRANTS, user="noplugin")
    url = f"file://{tmp_path / 'archive'}"
    path = server_bin + os.pathsep + os.environ["PATH"]
    weak = clone_base(server, url, shared, path, user="weak")
    assert weak.returncode == 3
    assert weak.stderr.splitlines() == [
        f"mysqlbackup: error: the source user weak@127.0.0.1:{server.port} lacks the global "
        f"privilege BACKUP_ADMIN that base --method clone needs (GRANT BACKUP_ADMIN, "
        f"REPLICATION CLIENT ON *.* TO ...)"]
    refused = clone_base(server, url, shared, path, user="noplugin")
    assert refused.returncode == 3
    assert refused.stderr.splitlines() == [
        f"mysqlbackup: error: the source has no clone plugin loaded, and the source user "
        f"noplugin@127.0.0.1:{server.port} may not install it (INSTALL PLUGIN clone SONAME "
        f"'mysql_clone.so' needs INSERT ON mysql.plugin): grant that, or load it at the "
        f"server's start (plugin-load-add=mysql_clone.so)"]
    assert not os.path.exists(tmp_path / "archive") or not [
        n for n in ArchiveStore(url).list() if "/base/" in n]
    assert leftovers(shared) == []


@pytest.mark.server
def test_a_mariadb_source_is_refused_in_one_line(primary, tmp_path):
    url = f"file://{tmp_path / 'archive'}"
    result = run_cli("base", "--method", "clone", "--source", primary.url, "--archive", url)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "mysqlbackup: error: base --method clone needs a MySQL source (its clone plugin); "
        "for MariaDB use --method physical (mariadb-backup) or dump"]
    assert not os.path.exists(tmp_path / "archive") or not ArchiveStore(url).list()


# -- pure parts: the tar stream, the clone status --------------------------------------------

def test_a_directory_streams_as_tar_in_bounded_pieces(tmp_path, monkeypatch):
    """Folders and files, sorted, modes kept, owners left out, ``skip`` honoured; every
    read is at most the chunk asked for; tarfile reads back the same bytes."""
    import mysqlbackup.base.tardir as tardir
    monkeypatch.setattr(tardir, "CHUNK", 4096)
    root = tmp_path / "data"
    (root / "db" / "deep").mkdir(parents=True)
    files = {"ibdata1": os.urandom(10_000), "db/t.ibd": b"x" * 4096, "db/deep/e": b"",
             "a" * 120: b"long name", "auto.cnf": b"[auto]"}
    for name, data in files.items():
        (root / name).write_bytes(data)
    os.chmod(root / "ibdata1", 0o640)
    reader = TarReader(root, skip=["auto.cnf"])
    pieces = []
    while True:
        piece = reader.read(4096)
        assert len(piece) <= 4096
        if not piece:
            break
        pieces.append(piece)
    with tarfile.open(fileobj=io.BytesIO(b"".join(pieces)), mode="r:") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == ["a" * 120, "db", "db/deep", "db/deep/e",
                                             "db/t.ibd", "ibdata1"]
        assert {m.name: tar.extractfile(m).read() for m in members if m.isfile()} == {
            n: d for n, d in files.items() if n != "auto.cnf"}
        assert tar.getmember("ibdata1").mode == 0o640
        assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    assert (reader.files, reader.size) == (4, 10_000 + 4096 + 9)


def test_a_special_file_is_refused(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    os.symlink("/etc/hostname", root / "link")
    with pytest.raises(TarDirError, match=r"/link: neither a file nor a folder"):
        TarReader(root).read()


def test_the_clone_status_gives_the_snapshot():
    snapshot = status_snapshot([("Completed", "./binlog.000003", 481,
                                 "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-4,\n"
                                 "4a8e5c1e-71ca-11e1-9e33-c80aa9429563:1-2")])
    assert (snapshot.position.file, snapshot.position.offset) == ("binlog.000003", 481)
    assert snapshot.gtid == ("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-4,"
                             "4a8e5c1e-71ca-11e1-9e33-c80aa9429563:1-2")
    with pytest.raises(DumpError, match="names no binlog file: is the source's binary log"):
        status_snapshot([("Completed", "", 0, "")])
    with pytest.raises(DumpError, match="not one completed clone"):
        status_snapshot([("Failed", "", 0, "")])
