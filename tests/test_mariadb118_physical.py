"""A physical base of MariaDB 11.8 by its own mariadb-backup, and ``restore --datadir`` of
it by the same (``--prepare``) and 11.8's own mariadbd: the tree's tools through chroot
(``sandbox.mysql.client_wrappers``, ``server_wrapper``), their folders where the chroot
and the host see one path (``shared_dir``: the base's scratch copy, the restored
datadir). The base is taken while a writer commits; the archived binlogs after it are
replayed into the restored server: its tables and GTID position are the primary's."""

import json
import os
import re
import threading

import pymysql
import pytest

from mysqlbackup.archive.store import ArchiveStore
from tests.helpers import (Daemon, run_cli, wait_archived_to_the_end, wait_for,
                           wait_semi_sync_client)
from tests.test_mariadb118 import tree_server

pytestmark = pytest.mark.server
TABLES = "CHECKSUM TABLE d.t, d.n"


def tools_path(tmp_path):
    """PATH with the tree's mariadb-backup, clients and mariadbd first."""
    from mysqlbackup.sandbox.mysql import client_wrappers, server_wrapper
    from mysqlbackup.sandbox.tree import TOOLS, mariadb_tree
    tree = mariadb_tree()
    folder = client_wrappers(tmp_path / "bin", tree, TOOLS)
    server_wrapper(folder, tree, name="mariadbd")
    return folder + os.pathsep + os.environ["PATH"]


class Writer(threading.Thread):
    """Commits one insert after another until told to stop."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server, self.count, self.stop = server, 0, threading.Event()

    def run(self):
        conn = self.server.root()
        with conn.cursor() as cur:
            while not self.stop.is_set():
                cur.execute(f"INSERT INTO d.n (v) VALUES ({self.count})")
                self.count += 1
        conn.close()


def test_physical_base_of_118_restored_into_a_datadir_then_replayed(shared_118, tmp_path,
                                                                    monkeypatch):
    shared = shared_118
    monkeypatch.setenv("TMPDIR", shared)  # the base's scratch copy: seen by mariadb-backup
    path = tools_path(tmp_path)
    primary = tree_server(semi_sync_timeout_ms=5000)
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(primary, tmp_path / "backup", "--start-file", primary.binlog_files()[0],
                    "--archive", url, "--archive-interval", "0.2", "--source-name",
                    "db1").start().wait_streaming()
    user, password = primary.admin
    restored = None
    try:
        wait_semi_sync_client(primary)
        primary.execute("CREATE DATABASE d",
                        "CREATE TABLE d.t (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB",
                        "CREATE TABLE d.n (id INT PRIMARY KEY AUTO_INCREMENT, v INT)",
                        *[f"INSERT INTO d.t VALUES ({i}, REPEAT('x', {i}))" for i in range(50)])
        writer = Writer(primary)
        writer.start()
        try:
            wait_for(lambda: writer.count > 20, what="the writer committing")
            base = run_cli("base", "--source", f"mysql://{user}@127.0.0.1:{primary.port}",
                           "--archive", url, "--source-name", "db1", "--method", "physical",
                           password=password, timeout=300, path=path, process=True)
            after_base = writer.count
            wait_for(lambda: writer.count > after_base + 50, what="traffic after the base")
        finally:
            writer.stop.set()
            writer.join(timeout=30)
        assert base.returncode == 0, base.stdout + base.stderr
        store = ArchiveStore(url)
        [key] = [k for k in store.list() if "/base/" in k and k.endswith("/index.json")]
        manifest = json.loads(store.read(key))
        assert manifest["details"]["tool"] == str(tmp_path / "bin" / "mariadb-backup")
        assert manifest["server_version"].startswith("11.8.")
        primary.execute("FLUSH BINARY LOGS", "UPDATE d.t SET v = 'y' WHERE id < 10",
                        "DELETE FROM d.n WHERE v % 7 = 0")
        end, sums = primary.execute("SELECT @@gtid_binlog_pos")[0][0], primary.execute(TABLES)
        wait_archived_to_the_end(primary, ArchiveStore(url))
        datadir = os.path.join(shared, f"restored-{os.getpid()}")
        from mysqlbackup.sandbox import free_port
        port = free_port()
        done = run_cli("restore", "--archive", url, "--source-name", "db1", "--target",
                       f"mysql://{user}@127.0.0.1:{port}", "--datadir", datadir,
                       password=password, timeout=600, path=path, process=True)
        started = re.search(r"^server: mariadbd pid (\d+) on ", done.stdout, re.M)
        restored = (int(started[1]), datadir) if started else None
        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(r"^restore of db1: base \S+ \(physical, GTID \S+\) loaded$",
                         done.stdout, re.M), done.stdout
        conn = pymysql.connect(host="127.0.0.1", port=port, user=user, password=password)
        with conn.cursor() as cur:
            cur.execute(TABLES)
            got = cur.fetchall()
            cur.execute("SELECT VERSION()")
            version = cur.fetchone()[0]
        conn.close()
        assert got == sums and version.startswith("11.8.")
        assert re.search(rf"^last applied: GTID {end} committed ", done.stdout, re.M), done.stdout
    finally:
        if restored:
            from replay.restore.physical import RestoredServer, stop_server
            stop_server(RestoredServer(None, restored[0], restored[1], None))
        assert daemon.stop() == 0, daemon.output()
        primary.stop(remove=True)
