"""More failovers followed by the daemon in the same --dir (stream --follow-by-gtid), on
real MariaDB servers, beyond tests/test_failover_history.py's one switch A -> B:

- a switch back: A primary, B its replica; A killed, B promoted (epoch 2); A started
  again on its datadir, made a replica of B, caught up; a planned switchover back to A
  (epoch 3). Restores before the first switch, between the switches and to the end each
  equal CHECKSUM TABLE at that moment; verify exits 0; archive ls shows one window and
  two failovers.
- another basename: B logs to replica-bin.*, A to binlog.*; a base on A and a newer base
  on B. Restores (statements, and --apply native through serve) to the end and to
  before a GTID of B equal the recorded states; retain --window 1s on a copy of the
  archive deletes what no promised moment needs: verify still exits 0 and a restore to
  the end still equals the final state."""

import contextlib
import json
import math
import shutil
import time

import pytest

from mysqlbackup.stream.archiver import Archiver
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.utc import epoch as epoch_seconds
from mysqlbackup.localdir.files import epoch_dir
from tests.helpers import Daemon, caught_up, run_cli, wait_for
from tests.test_failover_history import (
    archive_ls,
    checksums,
    daemon_args,
    last_gtid,
    pair,
    restore,
    running,
    variable,
    wait_archived_up_to,
    wait_durable,
    wait_streaming_from,
)

SCHEMA = ("CREATE DATABASE shop",
          "CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT)",
          "CREATE TABLE shop.orders (id INT PRIMARY KEY AUTO_INCREMENT, item INT, qty INT)",
          "CREATE TABLE shop.notes (at INT, note VARCHAR(60))",  # no key: twice shows
          ("INSERT INTO shop.items SELECT seq, CONCAT('item ', seq), seq % 7 "
           "FROM shop.seq_1_to_100"))


def notes(where, n, start=0):
    return [f"INSERT INTO shop.notes VALUES ({i}, '{where}')" for i in range(start, start + n)]


def orders(n, qty):
    return [f"INSERT INTO shop.orders (item, qty) VALUES ({i}, {qty})" for i in range(n)]


def take_base(server, url):
    out = run_cli("base", "--source", f"mysql://root@127.0.0.1:{server.port}", "--archive",
                  url, "--source-name", "db1", password="", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.split()[1]  # "base ID of db1: ..."


def promote(server):
    server.execute("STOP SLAVE", "RESET SLAVE ALL")


def follow(daemon, server, directory, url):
    """Stop ``daemon``; start it again against ``server`` (same --dir and options)."""
    assert daemon.stop() == 0, daemon.output()[-4000:]
    daemon = Daemon(server, directory, *daemon_args(url)).start()
    wait_streaming_from(daemon, server)
    return daemon


def settle(daemon, server, directory, url):
    """Wait until everything ``server`` wrote is durable in the daemon and archived
    (the local copy of the server's files is in the current epoch's folder)."""
    folder = epoch_dir(str(directory), (daemon.status().get("state") or {}).get("epoch"))
    wait_for(lambda: caught_up(server, folder), timeout=60,
             what=f"the daemon caught up with server_id {server.server_id} in {folder}")
    wait_durable(daemon, server)
    wait_archived_up_to(url, variable(server, "gtid_binlog_pos"))
    running(daemon)


def same_gtid_pos(replica, primary):
    return variable(replica, "gtid_slave_pos") == variable(primary, "gtid_binlog_pos")


def verify(url):
    out = run_cli("verify", "--archive", url, "--source-name", "db1", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def native(url, target, *extra):
    result = run_cli("restore", "--archive", url, "--source-name", "db1", "--target",
                     f"mysql://root@127.0.0.1:{target.port}", "--apply", "native", *extra,
                     password="", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def stopped(out, reason):
    assert f"stopped: {reason}" in out, out


# -- 1. a switch back: A -> B -> A ------------------------------------------------------------

@contextlib.contextmanager
def switch_back(root):
    # both with --log-slave-updates: each one's binlog holds what it applied as a replica,
    # so each can be the primary the daemon follows by GTID
    timings, t0 = {}, time.monotonic()
    with pair(root, a_args=["--log-slave-updates"]) as p:
        a, b, url, directory, daemon = p.a, p.b, p.url, p.directory, p.daemon
        w = {"url": url, "directory": directory, "timings": timings}

        # -- epoch 1: A ----------------------------------------------------------------------
        a.execute(*SCHEMA, *orders(10, 1))
        w["base_a"] = take_base(a, url)
        a.execute("UPDATE shop.items SET qty = qty + 1 WHERE id % 3 = 0", "FLUSH BINARY LOGS",
                  *notes("on A", 10))
        w["at_1"] = checksums(a)
        w["stop_on_a"] = last_gtid(a, "UPDATE shop.items SET qty = qty + 100 WHERE id <= 20")
        a.execute(*orders(5, 2), *notes("A, last", 1))
        w["a_end"] = variable(a, "gtid_binlog_pos")
        wait_for(lambda: same_gtid_pos(b, a), what="B to catch up with A")
        settle(daemon, a, directory, url)
        timings["epoch 1"] = time.monotonic() - t0

        # -- A dies, B is promoted, the daemon follows: epoch 2 ----------------------------
        a_port = a.port
        a.proc.kill()
        a.proc.wait()
        promote(b)
        daemon = p.daemon = follow(daemon, b, directory, url)
        b.execute(*notes("on B", 10, 100), "UPDATE shop.items SET name = CONCAT(name, ' B') "
                  "WHERE id % 4 = 0")
        w["at_2"] = checksums(b)
        w["stop_on_b"] = last_gtid(b, "DELETE FROM shop.orders WHERE qty = 2")
        b.execute(*orders(5, 3))

        # -- A comes back on its datadir, as a replica of B --------------------------------
        a.start()
        w["a_port_kept"] = (a_port, a.port)
        w["a_after_crash"] = {name: variable(a, name) for name in (
            "gtid_binlog_pos", "gtid_slave_pos", "gtid_current_pos")}
        # A was a primary: its gtid_slave_pos is empty (asking B from there would start
        # from the beginning of B's binlogs); it takes over from what it logged
        a.execute("SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos")
        a.replicate_from(b)
        b.execute(*notes("on B, A replicating", 5, 200), "FLUSH BINARY LOGS", *orders(3, 4))
        wait_for(lambda: same_gtid_pos(a, b) and variable(a, "gtid_binlog_pos")
                 == variable(b, "gtid_binlog_pos"), timeout=60, what="A to catch up with B")
        w["b_end"] = variable(b, "gtid_binlog_pos")
        w["at_b_end"] = checksums(b)
        assert checksums(a) == w["at_b_end"]
        settle(daemon, b, directory, url)
        timings["epoch 2"] = time.monotonic() - t0

        # -- planned switchover back to A: epoch 3 -----------------------------------------
        b.stop()
        promote(a)
        daemon = p.daemon = follow(daemon, a, directory, url)
        a.execute("UPDATE shop.items SET qty = qty * 2 WHERE id % 5 = 0", *notes("A again", 5))
        w["at_3"] = checksums(a)
        w["stop_on_a_again"] = last_gtid(a, "DELETE FROM shop.notes WHERE at < 3")
        a.execute(*orders(4, 5))
        w["final"] = checksums(a)
        w["end"] = variable(a, "gtid_binlog_pos")
        w["a_files"] = a.binlog_files()
        settle(daemon, a, directory, url)
        w["status"] = daemon.status()
        timings["epoch 3"] = time.monotonic() - t0
    yield w


@pytest.fixture(scope="module")
def back(tmp_path_factory):
    with switch_back(tmp_path_factory.mktemp("switch-back")) as w:
        print("switch back scenario timings:", w["timings"])
        yield w


@pytest.mark.server
def test_switch_back_premises(back):
    """A kept its port and came back from its datadir; its third file starts epoch 3;
    the recorded states differ from each other."""
    old, new = back["a_port_kept"]
    assert old == new
    assert back["a_after_crash"]["gtid_binlog_pos"] == back["a_end"]
    assert back["a_after_crash"]["gtid_slave_pos"] == ""
    assert len({json.dumps(s, sort_keys=True) for s in (
        back["at_1"], back["at_2"], back["at_b_end"], back["at_3"], back["final"])}) == 5
    state = back["status"]["state"]
    assert state["epoch"] == 3, back["status"]
    assert [f["identity"] for f in state["failovers"]] == ["server-id-2", "server-id-1"]


def test_switch_back_restore_before_the_first_switch(back, make_server):
    """(--apply native: the statements path is proved across a switch by the restores
    between the switches and to the end, and by test_failover_history)"""
    target = make_server(server_id=91, log_bin=False, semi_sync=False)
    stopped(native(back["url"], target, "--stop-before-gtid", back["stop_on_a"]),
            f"stop before GTID {back['stop_on_a']}")
    assert checksums(target) == back["at_1"]


def test_switch_back_restore_between_the_switches(back, make_server):
    target = make_server(server_id=92, semi_sync=False)
    stopped(restore(back["url"], target, "--stop-before-gtid", back["stop_on_b"]),
            f"stop before GTID {back['stop_on_b']}")
    assert checksums(target) == back["at_2"]


def test_switch_back_restore_after_the_second_switch(back, make_server):
    target = make_server(server_id=93, log_bin=False, semi_sync=False)
    stopped(native(back["url"], target, "--stop-before-gtid", back["stop_on_a_again"]),
            f"stop before GTID {back['stop_on_a_again']}")
    assert checksums(target) == back["at_3"]


def test_switch_back_restore_to_the_end(back, make_server):
    target = make_server(server_id=94, semi_sync=False)
    stopped(restore(back["url"], target), "end of the archive")
    assert checksums(target) == back["final"]


def test_switch_back_native_apply_to_the_end_and_between_the_switches(back, make_server):
    """--apply native (the target's applier fed by serve) over the three epochs, and to
    before a GTID of B (epoch 2)."""
    target = make_server(server_id=89, log_bin=False, semi_sync=False)
    out = native(back["url"], target)
    stopped(out, "end of the archive")
    assert checksums(target) == back["final"], out
    assert variable(target, "gtid_slave_pos") == back["end"], out
    between = make_server(server_id=90, log_bin=False, semi_sync=False)
    out = native(back["url"], between, "--stop-before-gtid", back["stop_on_b"])
    stopped(out, f"stop before GTID {back['stop_on_b']}")
    assert checksums(between) == back["at_2"], out


@pytest.mark.server
def test_switch_back_verify_and_one_window_two_failovers(back):
    verify(back["url"])
    summary = json.loads(archive_ls(back["url"], "--json"))
    [window] = summary["windows"]
    assert window["end_gtid"] == back["end"], summary
    assert summary["holes"] == [] and summary["unusable"] == [] and summary["problems"] == []
    failovers = [(f["epoch"], f["server_id"], f["first_file"], f["start_gtid"])
                 for f in summary["failovers"]]
    # epoch 3 starts with A's file after its restart, which holds B's transactions too
    assert failovers == [(2, 2, "binlog.000001", back["a_end"]),
                         (3, 1, back["a_files"][2], back["b_end"])], summary["failovers"]
    assert back["a_files"][2] == "binlog.000003"


# -- 2. another basename: A's binlog.* -> B's replica-bin.* -----------------------------------

@contextlib.contextmanager
def other_basename(root):
    t0 = time.monotonic()
    with pair(root, log_bin_name="replica-bin") as p:
        a, b, url, directory, daemon = p.a, p.b, p.url, p.directory, p.daemon
        w = {"url": url, "root": root, "directory": directory}

        a.execute(*SCHEMA, *orders(10, 1))
        w["base_a"] = take_base(a, url)
        a.execute("FLUSH BINARY LOGS", *notes("on A", 10),
                  "UPDATE shop.items SET qty = qty + 1 WHERE id % 3 = 0")
        w["a_end"] = variable(a, "gtid_binlog_pos")
        wait_for(lambda: same_gtid_pos(b, a), what="B to catch up with A")
        settle(daemon, a, directory, url)

        a.proc.kill()
        a.proc.wait()
        promote(b)
        daemon = p.daemon = follow(daemon, b, directory, url)
        b.execute(*notes("on B", 10, 100), "UPDATE shop.items SET name = CONCAT(name, ' B') "
                  "WHERE id % 4 = 0")
        w["at_b_stop"] = checksums(b)
        w["stop_on_b"] = last_gtid(b, "DELETE FROM shop.orders WHERE item < 5")
        b.execute(*orders(5, 3), "FLUSH BINARY LOGS")
        w["base_b"] = take_base(b, url)  # in replica-bin.000002, after the switch
        b.execute(*notes("on B, after its base", 10, 200),
                  "UPDATE shop.items SET qty = qty * 3 WHERE id % 7 = 0")
        w["final"] = checksums(b)
        w["end"] = variable(b, "gtid_binlog_pos")
        w["b_files"] = b.binlog_files()
        settle(daemon, b, directory, url)
        w["seconds"] = time.monotonic() - t0
    yield w


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    with other_basename(tmp_path_factory.mktemp("other-basename")) as w:
        print(f"other basename scenario: {w['seconds']:.1f}s")
        yield w


@pytest.mark.server
def test_other_basename_premises_and_one_window(renamed):
    assert renamed["b_files"][:2] == ["replica-bin.000001", "replica-bin.000002"]
    assert renamed["base_a"] < renamed["base_b"]
    verify(renamed["url"])
    summary = json.loads(archive_ls(renamed["url"], "--json"))
    [window] = summary["windows"]
    assert window["end_gtid"] == renamed["end"], summary
    assert summary["holes"] == [] and summary["unusable"] == [] and summary["problems"] == []
    [failover] = summary["failovers"]
    assert (failover["epoch"], failover["server_id"], failover["first_file"]) == (
        2, 2, "replica-bin.000001"), failover
    assert sorted(b["id"] for b in summary["bases"]) == sorted(
        [renamed["base_a"], renamed["base_b"]])


def test_other_basename_restore_before_a_gtid_of_b(renamed, make_server):
    """From A's base across the switch into B's replica-bin.000001."""
    target = make_server(server_id=95, semi_sync=False)
    out = restore(renamed["url"], target, "--stop-before-gtid", renamed["stop_on_b"])
    stopped(out, f"stop before GTID {renamed['stop_on_b']}")
    assert checksums(target) == renamed["at_b_stop"]


# -- 3. --apply native (the target's applier fed by serve) across the switch ----------------

def test_native_apply_to_the_end_across_the_switch(renamed, make_server):
    """From A's base (--base), across the switch to B's files."""
    target = make_server(server_id=98, log_bin=False, semi_sync=False)
    out = native(renamed["url"], target, "--base", renamed["base_a"])
    stopped(out, "end of the archive")
    assert checksums(target) == renamed["final"], out
    assert variable(target, "gtid_slave_pos") == renamed["end"], out
    assert target.execute("SHOW ALL SLAVES STATUS") == ()


def test_native_apply_to_the_end_from_the_new_primarys_base(renamed, make_server):
    target = make_server(server_id=99, log_bin=False, semi_sync=False)
    stopped(native(renamed["url"], target), "end of the archive")
    assert checksums(target) == renamed["final"]


def test_native_apply_before_a_gtid_of_the_new_primary(renamed, make_server):
    target = make_server(server_id=100, log_bin=False, semi_sync=False)
    out = native(renamed["url"], target, "--stop-before-gtid", renamed["stop_on_b"])
    stopped(out, f"stop before GTID {renamed['stop_on_b']}")
    assert checksums(target) == renamed["at_b_stop"], out


# -- 4. retain across the switch ------------------------------------------------------------

def test_retain_across_the_switch_keeps_what_is_promised(renamed, make_server, tmp_path):
    """On a copy of the archive (the other tests keep theirs): the newest base (on B, in
    B's second file) ended more than the window ago, so retain starts the window from it:
    base A and the sealed files before B's base (A's binlog.000001, B's
    replica-bin.000001) may go; afterwards verify exits 0, archive ls shows one window
    from B's base without a hole, and a restore to the end equals the final state."""
    copy = tmp_path / "archive"
    shutil.copytree(renamed["root"] / "archive", copy)
    url = f"file://{copy}"
    [base_b] = [b for b in json.loads(archive_ls(url, "--json"))["bases"]
                if b["id"] == renamed["base_b"]]
    ended = epoch_seconds(base_b["end_time"])
    # retain's oldest promised moment is floor(now - 1s); the anchor ended before it
    wait_for(lambda: ended < math.floor(time.time() - 1), timeout=10, interval=0.1,
             what=f"base {base_b['id']} to have ended more than 1s ago")
    out = run_cli("retain", "--archive", url, "--source-name", "db1", "--window", "1s",
                  "--yes", timeout=120)
    said = f"retain said:\n{out.stdout}{out.stderr}"
    assert out.returncode == 0, said
    assert f"deleted base {renamed['base_a']}" in out.stdout, said
    listed = archive_ls(url)
    summary = json.loads(archive_ls(url, "--json"))
    verified = run_cli("verify", "--archive", url, "--source-name", "db1", timeout=120)
    assert verified.returncode == 0, (f"{said}\nverify exited {verified.returncode}:\n"
                                      f"{verified.stdout}{verified.stderr}\n"
                                      f"archive ls:\n{listed}")
    target = make_server(server_id=101, semi_sync=False)
    restored = run_cli("restore", "--archive", url, "--source-name", "db1", "--target",
                       f"mysql://root@127.0.0.1:{target.port}", password="", timeout=300)
    assert restored.returncode == 0, (f"{said}\nrestore exited {restored.returncode}:\n"
                                      f"{restored.stdout}{restored.stderr}")
    stopped(restored.stdout, "end of the archive")
    assert checksums(target) == renamed["final"], said
    assert [b["id"] for b in summary["bases"]] == [renamed["base_b"]], said
    [window] = summary["windows"]
    assert (window["base_id"], window["end_gtid"]) == (renamed["base_b"], renamed["end"]), (
        f"{said}\narchive ls:\n{listed}")
    assert summary["holes"] == [] and summary["problems"] == [], (
        f"{said}\narchive ls:\n{listed}")
    # the daemon's archiver, on the same directory, uploads nothing retain deleted again
    # (epoch 1's last file has no sealed copy: its retired mark stands for its segments)
    store = ArchiveStore(url)
    before = sorted(store.list())
    archiver = Archiver(str(renamed["directory"]), store, "db1")
    archiver.run_once()
    store.invalidate()
    assert sorted(store.list()) == before, said
    assert run_cli("verify", "--archive", url, "--source-name", "db1").returncode == 0
