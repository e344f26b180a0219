"""A failover on MariaDB 11.8 (``.mariadb/tree``, stock defaults: events inside a
transaction carry no end position) followed with ``--follow-by-gtid`` in the same
directory: A primary, B its replica (``--log-slave-updates``; the same binlog names), a
dump base of A by 11.8's own mariadb-dump; A killed, B promoted (STOP SLAVE; RESET
SLAVE ALL), the daemon started again on B. The archive then holds epoch 2, verify
exits 0, archive ls shows the switch and no hole, ``replay --sql`` holds each
transaction of B's binlog once (B's copies of A's transactions skipped), and restores
into new 11.8 servers from A's base across the switch equal B before a DELETE and at
the end."""

import json
import re

import pytest

from tests.helpers import Daemon, run_cli, wait_for
from tests.test_failover_history import (daemon_args, last_gtid, variable, wait_archived_up_to,
                                         wait_durable, wait_streaming_from)
from tests.test_mariadb118 import tree_server
from tests.test_mariadb118_physical import tools_path

pytestmark = pytest.mark.server


def inserts(first, count):
    return [f"INSERT INTO d.t VALUES ({i}, {i % 9})" for i in range(first, first + count)]


def checksum(server):
    return server.execute("CHECKSUM TABLE d.t")


def sql_gtids(path):
    """The GTID of each transaction of a ``replay --sql`` file, in order."""
    with open(path) as f:
        return re.findall(r"^-- (\d+-\d+-\d+) \S+:\d+-\d+$", f.read(), re.M)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """The failover, archived: what the tests compare with (``b`` still running)."""
    tmp_path = tmp_path_factory.mktemp("failover118")
    path = tools_path(tmp_path)
    url, directory = f"file://{tmp_path / 'archive'}", tmp_path / "backup"
    servers = [tree_server(server_id=1, semi_sync_timeout_ms=5000)]
    try:
        a = servers[0]
        b = tree_server(server_id=2, semi_sync_timeout_ms=5000,
                        extra_args=["--log-slave-updates"])
        servers.append(b)
        b.replicate_from(a)
        daemon = Daemon(a, directory, "--start-file", a.binlog_files()[0],
                        *daemon_args(url)).start()
        try:
            wait_streaming_from(daemon, a)
            a.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)",
                      *inserts(0, 20))
            user, password = a.admin
            base = run_cli("base", "--source", f"mysql://{user}@127.0.0.1:{a.port}",
                           "--archive", url, "--source-name", "db1", password=password,
                           timeout=120, path=path)
            assert base.returncode == 0, base.stdout + base.stderr
            a.execute("FLUSH BINARY LOGS", *inserts(20, 10))
            wait_durable(daemon, a)
            end_of_a = variable(a, "gtid_binlog_pos")
            wait_for(lambda: variable(b, "gtid_slave_pos") == end_of_a, what="B caught up")
        finally:
            assert daemon.stop() == 0, daemon.output()
        a.proc.kill()
        a.proc.wait()
        b.execute("STOP SLAVE", "RESET SLAVE ALL")
        daemon = Daemon(b, directory, *daemon_args(url)).start()
        try:
            wait_streaming_from(daemon, b)
            b.execute("FLUSH BINARY LOGS", *inserts(100, 10))
            before_delete = checksum(b)
            delete = last_gtid(b, "DELETE FROM d.t WHERE v < 5")
            b.execute(*inserts(110, 5))
            end = variable(b, "gtid_binlog_pos")
            wait_durable(daemon, b)
            wait_archived_up_to(url, end)
        finally:
            assert daemon.stop() == 0, daemon.output()
        yield {"url": url, "path": path, "directory": directory, "b": b, "end": end,
               "delete": delete, "before_delete": before_delete, "final": checksum(b)}
    finally:
        for server in servers:
            server.stop(remove=True)


def test_the_archive_holds_both_epochs_and_verifies(history):
    assert (history["directory"] / "epoch" / "2").is_dir()
    verified = run_cli("verify", "--archive", history["url"])
    assert verified.returncode == 0, verified.stdout + verified.stderr
    summary = json.loads(run_cli("archive", "ls", "--archive", history["url"], "--json").stdout)
    assert summary["holes"] == [] and summary["problems"] == [], summary
    [failover] = summary["failovers"]
    assert (failover["epoch"], failover["server_id"]) == (2, 2)


def test_replay_sql_holds_each_transaction_once(history, tmp_path):
    sql = tmp_path / "all.sql"
    replay = run_cli("replay", "--archive", history["url"], "--sql", str(sql), timeout=300)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    gtids, end = sql_gtids(sql), history["end"]
    assert len(gtids) == len(set(gtids)), "a transaction replayed twice"
    assert gtids[-1] == end and len(gtids) == int(end.split("-")[2])


@pytest.mark.parametrize("stop", [("--stop-before-gtid", "delete"), ()],
                         ids=["before-the-delete", "to-the-end"])
def test_restores_across_the_switch_into_118(history, stop):
    target = tree_server(server_id=30 + len(stop), semi_sync=False)
    try:
        user, password = target.admin
        args = (stop[0], history[stop[1]]) if stop else ()
        done = run_cli("restore", "--archive", history["url"], "--source-name", "db1",
                       "--target", f"mysql://{user}@127.0.0.1:{target.port}", *args,
                       password=password, timeout=300, path=history["path"])
        assert done.returncode == 0, done.stdout + done.stderr
        wanted = history["before_delete"] if stop else history["final"]
        assert checksum(target) == wanted, done.stdout
    finally:
        target.stop(remove=True)


def test_drill_across_the_switch_in_an_118_scratch_server(history, shared_118, monkeypatch):
    """The drill's scratch server is the first mariadbd on PATH: the host's 10.11 is
    refused in one line before any restore (older than the source), 11.8's (the tree's,
    its folder where the chroot sees it) restores and proves the archive."""
    shared = shared_118
    older = run_cli("drill", "--archive", history["url"], "--workdir", shared, process=True,
                    timeout=300)
    assert older.returncode == 2, older.stdout + older.stderr
    assert re.search(r"^mysqlbackup: error: drill's scratch mariadbd is 10\.11\.\S+, older "
                     r"than the source's 11\.8\.\S+ .*\(base \S+\): put the mariadbd and "
                     r"mariadb-install-db of MariaDB 11\.8 or later first on PATH$",
                     older.stderr, re.M), older.stderr
    monkeypatch.setenv("TMPDIR", shared)
    done = run_cli("drill", "--archive", history["url"], "--workdir", shared, process=True,
                   timeout=300, path=history["path"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^scratch server: mariadbd 11\.8\.", done.stdout, re.M), done.stdout
    assert done.stdout.rstrip().endswith("drill passed"), done.stdout
