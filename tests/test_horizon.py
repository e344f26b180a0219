"""The primary's purge horizon: the margin from a record (pure), and live: the daemon
records the primary's binlogs and purge settings, ``status`` says how close the purge
is, ``status --check`` and ``check`` fail ahead of time, also while the daemon is
down."""

import json

import pytest

from mysqlbackup.localdir.horizon import describe, margin, problem
from tests.helpers import Daemon, caught_up, module_primary, run_cli, wait_for

FILES = [["binlog.000003", 1000], ["binlog.000004", 2000], ["binlog.000005", 500]]


def record(**variables):
    return {"files": FILES, "variables": variables, "recorded_at": 1000.0}


def test_the_margin_counts_what_the_primary_holds_before_our_file():
    found = margin(record(binlog_expire_logs_seconds="7200", max_binlog_total_size="10000",
                          slave_connections_needed_for_purge="1"), "binlog.000005", 1600.0)
    assert found == {"recorded_at": 1000.0, "oldest": "binlog.000003", "purged": False,
                     "files_before": 2, "bytes_before": 3000, "seconds_left": 6600.0,
                     "bytes_left": 6500, "replicas_needed": 1}
    assert problem(found) is None
    assert describe(found) == ("purge horizon: 2 files (3000 bytes) on the primary before "
                               "ours, at least 6600 s before age can purge it, 6500 bytes to "
                               "its size limit, purges wait for 1 connected replica(s)")
    soon = margin(record(expire_logs_days="0.05"), "binlog.000003", 3000.0)  # 4320 s
    assert soon["seconds_left"] == 2320.0 and soon["files_before"] == 0
    assert problem(soon) == ("purge horizon: the primary may purge our file by age in 2320 s "
                             "(limit 3600 s), 0 files (0 bytes) before it")
    assert margin(record(), "binlog.000005", 5.0)["seconds_left"] is None  # no expiry
    off = record(binlog_expire_logs_seconds="60", binlog_expire_logs_auto_purge="OFF")
    assert margin(off, "binlog.000005", 1e9)["seconds_left"] is None
    newer = margin(record(), "binlog.000007", 5.0)  # made after the record
    assert (newer["purged"], newer["files_before"], newer["bytes_before"]) == (False, 3, 3500)
    gone = margin(record(), "binlog.000001", 5.0)
    assert gone["purged"] and problem(gone).startswith(
        "purge horizon: the primary no longer held our file when last seen (its oldest was "
        "binlog.000003)")
    assert margin(None, "binlog.000005", 5.0) is None and problem(None) is None


@pytest.mark.server
def test_status_and_check_say_how_close_the_primarys_purge_is(tmp_path_factory, tmp_path):
    server = module_primary(tmp_path_factory, "horizon",
                            "SET GLOBAL binlog_expire_logs_seconds = 1800",
                            "CREATE DATABASE h", "CREATE TABLE h.t (id INT PRIMARY KEY)")
    try:
        _watch_the_horizon(server, tmp_path)
    finally:
        server.stop(remove=True)


def _watch_the_horizon(server, tmp_path):
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(server, tmp_path / "backup", "--archive", url, "--source-name", "db1",
                    "--archive-interval", "0.2").start().wait_streaming()
    try:
        server.execute("INSERT INTO h.t VALUES (1)", "FLUSH BINARY LOGS",
                       "INSERT INTO h.t VALUES (2)")
        wait_for(lambda: caught_up(server, tmp_path / "backup"), what="caught up")
        wait_for(lambda: (tmp_path / "backup" / "mysqlbackup.horizon.json").exists(),
                 what="the daemon's record of the primary's binlogs")
        shown = json.loads(run_cli("status", "--dir", tmp_path / "backup", "--json").stdout)
        found = shown["horizon"]
        # binlog.000001 before ours (the record may be older than the rotation: a file
        # newer than its newest is one the primary made since)
        assert (found["files_before"], found["purged"]) == (1, False), found
        assert 1700 < found["seconds_left"] <= 1800
        ok = run_cli("status", "--dir", tmp_path / "backup", "--check", "--min-horizon", "60")
        assert ok.returncode == 0, ok.stdout
        soon = run_cli("status", "--dir", tmp_path / "backup", "--check")  # limit 3600 s
        assert soon.returncode == 1 and "purge horizon: the primary may purge our file by " \
            "age in" in soon.stdout, soon.stdout
        checked = run_cli("check", "--archive", url, "--dir", tmp_path / "backup", "--json")
        horizon = {c["name"]: c for c in json.loads(checked.stdout)["sources"][0]["checks"]}
        assert horizon["purge_horizon"]["ok"] is False, horizon
    finally:
        assert daemon.stop() == 0, daemon.output()
    # the daemon down: the last record still says how close the purge is
    down = run_cli("status", "--dir", tmp_path / "backup", "--check")
    assert down.returncode == 1 and "daemon down" in down.stdout
    assert "purge horizon: the primary may purge our file by age" in down.stdout, down.stdout


def test_the_metrics_give_the_horizon_from_the_newest_record():
    from prometheus_client import generate_latest

    from mysqlbackup.stream.metrics import StreamMetrics
    metrics = StreamMetrics(clock=lambda: 1600.0)
    text = generate_latest(metrics.registry).decode()
    assert "purge_horizon" not in text  # nothing recorded yet
    metrics.position("binlog.000005", 120, "0-1-9")
    metrics.horizon(record(binlog_expire_logs_seconds="7200"))
    text = generate_latest(metrics.registry).decode()
    assert "mysqlbackup_purge_horizon_files 2.0" in text
    assert "mysqlbackup_purge_horizon_bytes 3000.0" in text
    assert "mysqlbackup_purge_horizon_seconds 6600.0" in text
