"""A primary failover followed by the daemon in the same --dir, as a user does it on
MariaDB: primary A (server_id 1) streamed and archived under --source-name db1 with
--follow-by-gtid, a base backup, writes over two of A's files; replica B (server_id 2,
--log-slave-updates, the same binlog basename "binlog", so A's and B's files share
names) caught up; A killed with SIGKILL; B promoted (STOP SLAVE; RESET SLAVE ALL); the
daemon stopped and started again against B with the same --dir and options; writes
over two of B's files, then a DROP TABLE (the "bad statement").

The archive then holds one history across the switch: restores into new servers stop
before a transaction of A (the state at T1), before the DROP on B (the state at T2,
across the switch) and at the end (B's final state, the table gone), each compared with
CHECKSUM TABLE of the server at that moment; verify exits 0; archive ls shows one
recovery window, up to B's last GTID, and the switch to server_id 2. A second scenario
kills the daemon with kill -9 right after it started streaming from B, starts it again,
writes more, and restores to the end."""

import contextlib
import hashlib
import json
import os

import pytest

from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.sandbox import MariaDBSandbox, find_binary
from tests.helpers import Daemon, caught_up, run_cli, wait_for, wait_semi_sync_client

TABLES = ["shop.items", "shop.orders", "shop.notes"]
DROPPED = "shop.orders"


def daemon_args(url):
    """The daemon's options, the same before and after the switch."""
    return ("--archive", url, "--archive-interval", "0.2", "--source-name", "db1",
            "--follow-by-gtid")


def checksums(server):
    """CHECKSUM TABLE of every table of TABLES (None for one that is gone)."""
    return dict(server.execute(f"CHECKSUM TABLE {', '.join(TABLES)}"))


def variable(server, name):
    return server.execute(f"SELECT @@{name}")[0][0]


def last_gtid(server, *statements):
    """Run ``statements`` in one autocommit session; the GTID of the last."""
    conn = server.root()
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
            cur.execute("SELECT @@last_gtid")
            return cur.fetchone()[0]
    finally:
        conn.close()


def archive_ls(url, *extra):
    out = run_cli("archive", "ls", "--archive", url, "--source-name", "db1", *extra)
    assert out.returncode == 0, out.stderr
    return out.stdout


def wait_archived_up_to(url, gtid, timeout=60):
    """Wait until archive ls shows a recovery window that ends at ``gtid``."""
    def restorable():
        windows = json.loads(archive_ls(url, "--json"))["windows"]
        return any(w["end_gtid"] == gtid for w in windows)
    try:
        wait_for(restorable, timeout=timeout, interval=0.2,
                 what=f"the archive to be restorable up to GTID {gtid}")
    except AssertionError as e:
        raise AssertionError(f"{e}; archive ls says:\n{archive_ls(url)}") from None


def wait_durable(daemon, server, timeout=60):
    """Wait until the daemon's durable GTID state is the server's whole binlog."""
    def durable():
        running(daemon)
        state = daemon.status().get("state") or {}
        return state.get("gtid") == variable(server, "gtid_binlog_pos")
    wait_for(durable, timeout=timeout, what=f"the daemon durable up to server_id "
             f"{server.server_id}'s {variable(server, 'gtid_binlog_pos')}")


def running(daemon):
    """Fail at once, with its output, when the daemon has exited."""
    code = daemon.proc.poll()
    if code is not None:
        raise AssertionError(f"the daemon exited with code {code}:\n{daemon.output()[-4000:]}")


def wait_streaming_from(daemon, server, timeout=30):
    """Wait until the daemon runs, holds its directory's lock, has checkpointed the
    server as its source and the server has a semi-sync replica (after a kill -9 the
    dead dump thread may still count; the durable GTID waits that follow prove it)."""
    def streaming():
        running(daemon)
        status = daemon.status()
        state = status.get("state") or {}
        lock = status.get("lock") or {}
        return (lock.get("held") and lock.get("pid") == daemon.proc.pid
                and state.get("source_identity") == f"server-id-{server.server_id}"
                and int(server.status("Rpl_semi_sync_master_clients")) >= 1)
    wait_for(streaming, timeout=timeout, what=f"the daemon streaming from server_id "
             f"{server.server_id}")


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def archive_error(daemon):
    return (daemon.status().get("archive") or {}).get("last_error")


def restore(url, target, *stop):
    result = run_cli("restore", "--archive", url, "--source-name", "db1", "--target",
                     f"mysql://root@127.0.0.1:{target.port}", *stop, password="", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


class Pair:
    """A (server_id 1), its replica B (server_id 2, --log-slave-updates), the archive, the
    daemon's directory, and the daemon now running (replaced as it follows a failover)."""

    def __init__(self, root, a_args=(), **b_options):
        self.a = MariaDBSandbox(str(root / "a"), server_id=1, semi_sync_timeout_ms=1000,
                                extra_args=list(a_args))
        self.b = MariaDBSandbox(str(root / "b"), server_id=2, semi_sync_timeout_ms=1000,
                                extra_args=["--log-slave-updates"], **b_options)
        self.url, self.directory = f"file://{root / 'archive'}", root / "backup"
        self.daemon = None


@contextlib.contextmanager
def pair(root, a_args=(), **b_options):
    """Start a Pair: both servers, B replicating A, the daemon on A (``daemon_args``) as
    A's semi-sync replica; everything stopped at the end, the daemon's exit checked."""
    if find_binary("mariadbd") is None:
        pytest.fail("mariadbd not found: run scripts/test.sh, which installs mariadb-server")
    p = Pair(root, a_args, **b_options)
    try:
        p.a.start()
        p.b.start()
        p.b.replicate_from(p.a)
        p.daemon = Daemon(p.a, p.directory, *daemon_args(p.url)).start()
        wait_semi_sync_client(p.a)
        yield p
    finally:
        code = p.daemon.stop() if p.daemon is not None else None
        p.a.stop(remove=True)
        p.b.stop(remove=True)
    assert code == 0, p.daemon.output()[-4000:]


@contextlib.contextmanager
def failover_history(root, kill9_after_switch=False):
    """Build the scenario under ``root``; yield what was recorded; stop everything."""
    with pair(root) as p:
        a, b, url, directory = p.a, p.b, p.url, p.directory
        w = {"url": url, "a": a, "b": b, "directory": directory}
        daemon = p.daemon

        # -- on A ----------------------------------------------------------------------
        a.execute("CREATE DATABASE shop",
                  "CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT)",
                  "CREATE TABLE shop.orders (id INT PRIMARY KEY AUTO_INCREMENT, item INT, "
                  "qty INT)",
                  "CREATE TABLE shop.notes (at INT, note VARCHAR(60))",  # no key
                  "INSERT INTO shop.items SELECT seq, CONCAT('item ', seq), seq % 7 "
                  "FROM shop.seq_1_to_200",
                  *[f"INSERT INTO shop.orders (item, qty) VALUES ({i}, {i % 5})"
                    for i in range(1, 31)])
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{a.port}", "--archive",
                       url, "--source-name", "db1", password="", timeout=120)
        assert base.returncode == 0, base.stderr
        a.execute(*[f"UPDATE shop.items SET qty = qty + 1 WHERE id % 10 = {i}"
                    for i in range(10)],
                  "FLUSH BINARY LOGS",
                  *[f"INSERT INTO shop.notes VALUES ({i}, 'on A, second file')"
                    for i in range(20)])
        w["at_t1"] = checksums(a)
        w["stop_on_a"] = last_gtid(a, "UPDATE shop.items SET qty = qty + 100 WHERE id <= 20")
        a.execute(*[f"INSERT INTO shop.orders (item, qty) VALUES ({i}, 9)" for i in range(10)],
                  "INSERT INTO shop.notes VALUES (99, 'A, last')")
        w["a_files"] = a.binlog_files()
        w["a_last_gtid"] = variable(a, "gtid_binlog_pos")
        wait_for(lambda: variable(b, "gtid_slave_pos") == w["a_last_gtid"],
                 what="B to catch up with A")
        w["at_a_end"] = checksums(a)
        assert checksums(b) == w["at_a_end"]
        wait_for(lambda: caught_up(a, directory), what="the daemon caught up with A")
        wait_durable(daemon, a)
        wait_archived_up_to(url, w["a_last_gtid"])

        # -- A dies, B is promoted, the daemon follows --------------------------------
        a.proc.kill()
        a.proc.wait()
        b.execute("STOP SLAVE", "RESET SLAVE ALL")
        w["b_files_at_promotion"] = b.binlog_files()
        w["b_at_promotion"] = {name: variable(b, name) for name in (
            "gtid_binlog_pos", "gtid_slave_pos", "gtid_current_pos")}
        assert daemon.stop() == 0, daemon.output()
        daemon = p.daemon = Daemon(b, directory, *daemon_args(url)).start()
        wait_streaming_from(daemon, b)
        if kill9_after_switch:
            daemon.kill9()
            daemon = p.daemon = Daemon(b, directory, *daemon_args(url)).start()
            wait_streaming_from(daemon, b)

        # -- on B ----------------------------------------------------------------------
        b.execute(*[f"INSERT INTO shop.notes VALUES ({i}, 'on B, first file')"
                    for i in range(20)],
                  "UPDATE shop.items SET name = CONCAT(name, ' (B)') WHERE id % 3 = 0",
                  "FLUSH BINARY LOGS",
                  *[f"INSERT INTO shop.orders (item, qty) VALUES ({i}, 7)" for i in range(15)])
        w["at_t2"] = checksums(b)
        w["drop_gtid"] = last_gtid(b, f"DROP TABLE {DROPPED}")
        b.execute(*[f"INSERT INTO shop.notes VALUES ({i}, 'on B, after the drop')"
                    for i in range(10)])
        w["final"] = checksums(b)
        w["b_files"] = b.binlog_files()
        w["b_last_gtid"] = variable(b, "gtid_binlog_pos")
        wait_durable(daemon, b)
        wait_archived_up_to(url, w["b_last_gtid"])
        assert archive_error(daemon) is None
        health = run_cli("status", "--dir", str(directory), "--check")
        assert health.returncode == 0, health.stdout + health.stderr
        running(daemon)
        w["sha256"] = {(server, name): sha256_of(s.binlog_path(name))
                       for server, s in (("a", a), ("b", b)) for name in ("binlog.000001",)}
    yield w


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    with failover_history(tmp_path_factory.mktemp("failover-history")) as w:
        yield w


@pytest.mark.server
def test_the_history_recorded_is_the_one_meant(history):
    """The scenario's own premises: A's files and B's files share names."""
    assert history["a_files"] == ["binlog.000001", "binlog.000002"]
    assert history["b_files_at_promotion"] == ["binlog.000001"]  # FLUSH is not replicated
    assert history["b_files"][:2] == ["binlog.000001", "binlog.000002"]
    assert history["at_t1"] != history["at_t2"] != history["final"]
    assert history["final"][DROPPED] is None


@pytest.mark.server
def test_each_servers_files_are_archived_under_an_epoch_of_their_own(history):
    """A's binlog.000001 and B's binlog.000001 are both archived, each byte-identical to
    its own server's file; B's epoch has its history object; A's last file stays as its
    segments up to where the daemon's durable end was at the switch."""
    store = ArchiveStore(history["url"])
    a_index = json.loads(store.read("db1/binlog/binlog.000001.json"))
    b_index = json.loads(store.read("db1/epoch/2/binlog/binlog.000001.json"))
    assert a_index["sha256"] == history["sha256"]["a", "binlog.000001"]
    assert b_index["sha256"] == history["sha256"]["b", "binlog.000001"]
    assert (a_index["server_id"], b_index["server_id"]) == (1, 2)
    epoch = json.loads(store.read("db1/epoch/2/history.json"))
    assert (epoch["epoch"], epoch["server_id"], epoch["first_file"]) == (2, 2, "binlog.000001")
    assert epoch["start_gtid"] == history["a_last_gtid"]
    segments = [k for k in store.list("db1/partial/binlog.000002") if k.endswith(".json")]
    last = json.loads(store.read(max(segments)))
    assert (last["end"], last["gtid_after"]) == (epoch["previous_pos"], history["a_last_gtid"])


def test_restore_before_the_switch(history, make_server):
    target = make_server(server_id=91, semi_sync=False)
    out = restore(history["url"], target, "--stop-before-gtid", history["stop_on_a"])
    assert f"stopped: stop before GTID {history['stop_on_a']}" in out, out
    assert checksums(target) == history["at_t1"]


def test_restore_across_the_switch_stops_before_the_drop(history, make_server):
    target = make_server(server_id=92, semi_sync=False)
    out = restore(history["url"], target, "--stop-before-gtid", history["drop_gtid"])
    assert f"stopped: stop before GTID {history['drop_gtid']}" in out, out
    assert checksums(target) == history["at_t2"]


def test_restore_to_the_end_is_the_new_primary(history, make_server):
    target = make_server(server_id=93, semi_sync=False)
    out = restore(history["url"], target)
    assert "stopped: end of the archive" in out, out
    assert checksums(target) == history["final"]
    assert ("orders",) not in target.execute("SHOW TABLES FROM shop")


@pytest.mark.server
def test_verify_and_archive_ls_show_one_window_across_the_switch(history):
    url = history["url"]
    verified = run_cli("verify", "--archive", url, "--source-name", "db1")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    summary = json.loads(archive_ls(url, "--json"))
    [window] = summary["windows"]
    assert window["end_gtid"] == history["b_last_gtid"]
    assert summary["holes"] == [] and summary["unusable"] == [] and summary["problems"] == []
    text = archive_ls(url)
    # the switch: a line naming the new server and the GTID state where it took over
    assert [line for line in text.splitlines() if "server_id 2" in line
            and history["a_last_gtid"] in line], text


def test_daemon_killed_right_after_the_switch_resumes_on_the_new_primary(tmp_path,
                                                                          make_server):
    with failover_history(tmp_path, kill9_after_switch=True) as w:
        target = make_server(server_id=94, semi_sync=False)
        out = restore(w["url"], target)
        assert "stopped: end of the archive" in out, out
        assert checksums(target) == w["final"]
        verified = run_cli("verify", "--archive", w["url"], "--source-name", "db1")
        assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_switch_while_the_archive_lags_behind_loses_nothing(make_server, tmp_path):
    """The daemon on A archives once (at its start) and is then killed with kill -9 while
    A's writes since sit in its local files only (the archive behind, an upload never
    made); A dies; the daemon follows B in the same directory with --keep-local 0: epoch 1
    is archived to its durable end from the local files (A's sealed file, and its last
    file's segments to where the history says epoch 1 ends), then A's local files go, and
    a restore to just before A's last transaction and one to the end equal those states."""
    a = make_server(server_id=1)
    b = make_server(server_id=2, extra_args=["--log-slave-updates"])
    b.replicate_from(a)
    url, directory = f"file://{tmp_path / 'archive'}", tmp_path / "backup"
    store = ArchiveStore(url)
    lagging = ("--archive", url, "--archive-interval", "3600", "--source-name", "db1",
               "--follow-by-gtid")
    daemon = Daemon(a, directory, *lagging).start()
    try:
        wait_semi_sync_client(a)
        wait_for(lambda: (daemon.status().get("archive") or {}).get("last_success"),
                 what="the archiver's first pass")
        a.execute("CREATE DATABASE shop", "CREATE TABLE shop.items (id INT PRIMARY KEY, "
                  "name VARCHAR(40), qty INT)", "CREATE TABLE shop.orders (id INT PRIMARY "
                  "KEY AUTO_INCREMENT, item INT, qty INT)", "CREATE TABLE shop.notes (at INT, "
                  "note VARCHAR(60))", *[f"INSERT INTO shop.items VALUES ({i}, 'i', {i})"
                                          for i in range(30)])
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{a.port}", "--archive",
                       url, "--source-name", "db1", password="", timeout=120)
        assert base.returncode == 0, base.stderr
        a.execute("FLUSH BINARY LOGS", *[f"INSERT INTO shop.orders (item, qty) VALUES ({i}, 1)"
                                         for i in range(20)])
        at_last = checksums(a)
        last_on_a = last_gtid(a, "UPDATE shop.items SET qty = qty + 5")
        wait_for(lambda: variable(b, "gtid_slave_pos") == variable(a, "gtid_binlog_pos"),
                 what="B to catch up with A")
        wait_durable(daemon, a)
        assert store.list("db1/partial/binlog.000002") == []  # the archive lags behind
    finally:
        daemon.kill9()
    a.proc.kill()
    a.proc.wait()
    b.execute("STOP SLAVE", "RESET SLAVE ALL")
    daemon = Daemon(b, directory, "--archive", url, "--archive-interval", "0.2",
                    "--source-name", "db1", "--follow-by-gtid", "--keep-local", "0").start()
    try:
        wait_streaming_from(daemon, b)
        b.execute(*[f"INSERT INTO shop.notes VALUES ({i}, 'on B')" for i in range(10)])
        final, end = checksums(b), variable(b, "gtid_binlog_pos")
        wait_durable(daemon, b)
        wait_archived_up_to(url, end)
        history = json.loads(store.read("db1/epoch/2/history.json"))
        assert history["start_gtid"] == last_on_a  # where A's durable end was
        segments = sorted(k for k in store.list("db1/partial/binlog.000002")
                          if k.endswith(".json"))
        assert json.loads(store.read(segments[-1]))["end"] == history["previous_pos"]
        wait_for(lambda: (directory / "epoch" / "2").is_dir() and sorted(
            os.listdir(directory / "epoch" / "2")) and not [
            n for n in os.listdir(directory) if n.startswith("binlog.")],
            what="A's local files to go once epoch 1 is archived (--keep-local 0)")
    finally:
        assert daemon.stop() == 0, daemon.output()
    before = make_server(server_id=95, semi_sync=False)
    restore(url, before, "--stop-before-gtid", last_on_a)
    assert checksums(before) == at_last
    after = make_server(server_id=96, semi_sync=False)
    restore(url, after)
    assert checksums(after) == final


@pytest.mark.server
def test_drill_across_the_switch(history, tmp_path):
    """The monthly drill on the archive with its failover: a scratch server restored to
    the end, every transaction the indexes list between the base and the end logged
    once (A's and B's, B's copies of A's skipped), every table answering CHECKSUM."""
    drill = run_cli("drill", "--archive", history["url"], "--source-name", "db1",
                    "--workdir", str(tmp_path), timeout=300)
    assert drill.returncode == 0, drill.stdout + drill.stderr
    assert "drill passed" in drill.stdout.splitlines(), drill.stdout
