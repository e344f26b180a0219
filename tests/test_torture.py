"""The torture suite's quick run (scripts/torture.py --quick), one test per scenario.

One subprocess runs every scenario against one throwaway primary (one Spark start
for all replays); each test reads its scenario's JSON line. Also the fault tools
themselves (tests/faults.py) on a loopback echo server.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests import faults
from tests.helpers import REPO

pytestmark = pytest.mark.torture

TORTURE = os.path.join(REPO, "scripts", "torture.py")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """{scenario: summary} of ``scripts/torture.py --quick`` (every scenario)."""
    work = tmp_path_factory.mktemp("torture")
    proc = subprocess.run([sys.executable, TORTURE, "--quick", "--seed", "7",
                           "--workdir", str(work)], capture_output=True, text=True,
                          timeout=1200)
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"torture.py printed no summary (exit {proc.returncode}): {proc.stderr[-3000:]}"
    return {r["scenario"]: r for r in lines}


def summary(quick_run, name):
    assert name in quick_run, f"scenario {name} did not report: {sorted(quick_run)}"
    result = quick_run[name]
    assert "traceback" not in result, "\n".join(result["messages"] + [result["traceback"]])
    if result.get("skipped"):
        pytest.skip(f"{name}: {result['skipped']}")
    return result


def assert_nothing_lost(r):
    assert r["acknowledged"] > 100, r
    assert r["lost"] == 0, r["messages"]
    assert r["duplicates"] == 0, r["messages"]
    assert r["files_identical"] is True, r["messages"]
    assert r["exit_codes"]["final_sigterm"] == 0, r["messages"]


def test_kill_9_under_semi_sync_load_loses_nothing(quick_run):
    r = summary(quick_run, "kills")
    assert r["kills"] == 10
    assert_nothing_lost(r)
    assert r["exit_codes"]["self_exits"] == {}, r["messages"]
    assert r["unacked_commits"] == 0, "the primary committed without an ACK"
    # every id acknowledged before a kill was in the local files right after that kill
    assert r["lost_at_kill"] == 0, r["messages"]
    assert r["ok"], r["messages"]


def test_proxy_cuts_stalls_and_setup_cuts_are_survived(quick_run):
    r = summary(quick_run, "proxy")
    assert_nothing_lost(r)
    assert len(r["resume_seconds"]) == 11  # 3 setup cuts, 6 cuts, a stall, a blackhole
    assert all(v is not None for v in r["resume_seconds"].values()), r["messages"]
    # a cut after healthy streaming is retried at once (backoff reset)
    cuts = [v for k, v in r["resume_seconds"].items() if k.startswith("cut-")]
    assert max(cuts) < 5, r["resume_seconds"]
    assert r["ok"], r["messages"]


def test_sigterm_ends_the_daemon_in_every_state(quick_run):
    r = summary(quick_run, "sigterm")
    assert r["exit_codes"] == {"streaming": 0, "backing-off": 0, "blackholed": 0}, r["messages"]
    assert max(r["stop_seconds"].values()) <= 3, r["stop_seconds"]
    assert r["ok"], r["messages"]


@pytest.mark.parametrize("name", ["store-freeze", "store-restart"])
def test_object_store_faults_keep_acks_and_archive_everything(quick_run, name):
    r = summary(quick_run, name)
    assert_nothing_lost(r)
    assert r["acked_during_fault"] >= 10, r["messages"]
    assert r["exit_codes"]["verify"] == 0, r["messages"]
    assert r["ok"], r["messages"]


def test_status_shows_a_frozen_store(quick_run):
    shown = summary(quick_run, "store-freeze")["status_during_freeze"]
    assert shown.get("last_error") or shown.get("backlog_files") or \
        shown.get("upload_in_progress"), shown


@pytest.mark.parametrize("name", ["fs-full", "fs-fsize"])
def test_refusing_file_system_exits_8_naming_the_path_and_resumes(quick_run, name):
    r = summary(quick_run, name)
    assert r["exit_codes"]["refused"] == 8, r["messages"]
    assert r["refusal"].startswith("mysqlbackup: error: "), r["refusal"]
    assert_nothing_lost(r)
    assert r["ok"], r["messages"]


def test_empty_file_with_a_binlog_name_is_refused_and_checkpoint_kept(quick_run):
    r = summary(quick_run, "foreign-file")
    assert r["exit_codes"]["empty binlog.000099"] == 8, r["messages"]
    assert r["exit_codes"]["empty next"] == 8, r["messages"]
    assert_nothing_lost(r)
    assert r["ok"], r["messages"]


def test_every_archive_fault_is_refused_by_name(quick_run):
    r = summary(quick_run, "archive-faults")
    codes = r["exit_codes"]
    assert codes["verify pristine"] == 0 and codes["replay pristine"] == 0, r["messages"]
    assert r["live_verify"].split("/")[0] == r["live_verify"].split("/")[1].split()[0], \
        r["messages"]
    for name in faults.ARCHIVE_FAULTS:
        assert codes[f"verify {name}"] == 1, (name, r["messages"])
        # a deleted object or index is a hole in the chain: resync required (7) or 6
        wanted = (6, 7) if name.startswith("delete") else (6,)
        assert codes[f"replay {name}"] in wanted, (name, r["messages"])
    assert codes["replay replace-object --target"] == 6, r["messages"]
    assert r["messages"] == []  # each names the object, nothing at all applied
    assert r["ok"]


# -- the fault tools themselves -------------------------------------------------------------

@pytest.fixture
def echo_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(
                lambda: c.recv(100), b"")], daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()


def connect(proxy):
    conn = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
    conn.settimeout(0.5)
    return conn


def test_proxy_forwards_cuts_stalls_and_blackholes(echo_server):
    proxy = faults.TcpProxy("127.0.0.1", echo_server).start()
    try:
        conn = connect(proxy)
        conn.sendall(b"hello")
        assert conn.recv(10) == b"hello"
        proxy.stall(True)
        conn.sendall(b"x")
        with pytest.raises(socket.timeout):
            conn.recv(10)
        proxy.stall(False)
        assert conn.recv(10) == b"x"
        proxy.cut()
        assert conn.recv(10) == b""
        proxy.cut_after(3)
        conn = connect(proxy)
        conn.sendall(b"abcdef")
        time.sleep(0.2)
        assert conn.recv(10) == b"abc" and conn.recv(10) == b""
        proxy.cut_after(None)
        proxy.blackhole(True)
        conn = connect(proxy)
        conn.sendall(b"abc")
        with pytest.raises(socket.timeout):
            conn.recv(10)
        assert proxy.accepted == 3
    finally:
        proxy.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1)
