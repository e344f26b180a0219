"""`mysqlbackup check`: can a restore to the newest archived moment be planned now? A live
MariaDB archived by the daemon into a file:// archive with a base (one module-wide world),
then copies of the archive damaged one way each: no base, a hole, another source without
a base; a stale base; the daemon's directory ahead of the archive; a wrong URL; bad
usage. The exact lines (Nagios-style) and exit codes (0 OK, 2 CRITICAL, 3 UNKNOWN)."""

import json
import os
import re
import shutil
import time

import pytest
from click.testing import CliRunner

from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.utc import epoch
from replay.check.cli import check
from replay.check.verdict import Check, Limits, Planned, SourceFacts, evaluate, format_age
from tests.helpers import (Daemon, caught_up, module_primary, run_cli,
                           wait_archived_to_the_end, wait_for)


def insert(server, count):
    server.execute(*[f"INSERT INTO shop.t (v) VALUES (REPEAT('v', {100 + i}))"
                     for i in range(count)])


def archive_lag(directory):
    """The archive lag ``status`` reads in the daemon's directory (None: unknown)."""
    out = run_cli("status", "--dir", str(directory), "--json")
    return (json.loads(out.stdout).get("archive") or {}).get("lag_s")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A file:// archive of db1 with a base and four binlog files after it; ``healthy``: a
    copy of the daemon's directory with everything archived; ``lagging``: the daemon's
    directory after it streamed on without --archive (durable past the archive)."""
    root = tmp_path_factory.mktemp("check")
    primary = module_primary(tmp_path_factory, "check-primary", "CREATE DATABASE shop",
                             "CREATE TABLE shop.t (id INT PRIMARY KEY AUTO_INCREMENT, v TEXT)")
    url, backup = f"file://{root / 'archive'}", root / "backup"
    try:
        daemon = Daemon(primary, backup, "--archive", url, "--archive-interval", "0.3",
                        "--source-name", "db1").start()
        try:
            insert(primary, 20)
            primary.execute("FLUSH BINARY LOGS")
            base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{primary.port}",
                           "--archive", url, "--source-name", "db1", password="", timeout=120)
            assert base.returncode == 0, base.stderr
            for _ in range(3):
                insert(primary, 20)
                primary.execute("FLUSH BINARY LOGS")
            insert(primary, 20)
            wait_archived_to_the_end(primary, ArchiveStore(url))
            wait_for(lambda: archive_lag(backup) == 0, what="nothing left to archive")
        finally:
            assert daemon.stop() == 0, daemon.output()
        shutil.copytree(backup, root / "healthy")
        plain = Daemon(primary, backup).start()  # the daemon streams on, the archive stays
        try:
            insert(primary, 20)
            wait_for(lambda: caught_up(primary, backup), what="the daemon to catch up")
        finally:
            assert plain.stop() == 0, plain.output()
    finally:
        primary.stop(remove=True)
    listed = json.loads(run_cli("archive", "ls", "--archive", url, "--json").stdout)
    return {"root": root, "url": url, "healthy": root / "healthy", "lagging": backup,
            "base": listed["bases"][-1], "files": listed["files"]}


def copy_archive(world, name):
    """A copy of the world's archive to damage: (its path, its URL)."""
    path = world["root"] / name
    shutil.copytree(world["root"] / "archive", path)
    return path, f"file://{path}"


def run_check(*args):
    """``mysqlbackup check ARGS``: (exit code, stdout lines)."""
    out = run_cli("check", *args)
    return out.returncode, out.stdout.splitlines()


def restorable(world):
    """The healthy line's text up to the base's age: (prefix, the last file's row)."""
    last = world["files"][-1]
    return (f"CHECK OK - source db1: restorable to {last['last_commit']} (base "
            f"{world['base']['id']}, "), last


@pytest.mark.server
def test_healthy(world):
    prefix, _ = restorable(world)
    code, lines = run_check("--archive", world["url"], "--source-name", "db1",
                            "--dir", str(world["healthy"]))
    assert code == 0 and len(lines) == 1, lines
    assert re.fullmatch(re.escape(prefix) + r"\d+[smhd] ago; archive 0 s behind the daemon\)",
                        lines[0]), lines
    code, lines = run_check("--archive", world["url"])  # every source; no --dir: no lag
    assert code == 0 and re.fullmatch(re.escape(prefix) + r"\d+[smhd] ago\)", lines[0]), lines


@pytest.mark.server
def test_healthy_json(world):
    code, lines = run_check("--archive", world["url"], "--dir", str(world["healthy"]),
                            "--json")
    doc = json.loads("\n".join(lines))
    assert code == 0 and doc["status"] == "OK" and doc["exit_code"] == 0
    (source,) = doc["sources"]
    assert source["source"] == "db1" and source["ok"] is True
    assert source["base"] == world["base"]["id"]
    assert source["restorable_to"] == world["files"][-1]["last_commit"]
    assert [(c["name"], c["ok"]) for c in source["checks"]] == [
        ("base", True), ("binlogs", True), ("keys", True), ("base_age", True),
        ("archive_lag", True), ("purge_horizon", True)]
    assert source["checks"][4]["detail"] == "archive 0 s behind the daemon (limit 5m)"
    assert source["checks"][2]["detail"] == "no object of the plan is encrypted"


@pytest.mark.server
def test_base_less(world):
    path, url = copy_archive(world, "base-less")
    shutil.rmtree(path / "db1" / "base")
    code, lines = run_check("--archive", url, "--source-name", "db1")
    assert (code, lines) == (2, [
        "CHECK CRITICAL - source db1: base failed",
        "db1 base: no base backup in the archive (mysqlbackup base takes one)"])
    code, lines = run_check("--archive", url, "--json")
    checks = {c["name"]: c["ok"] for c in json.loads("\n".join(lines))["sources"][0]["checks"]}
    assert code == 2 and checks == {"base": False, "binlogs": None, "keys": None,
                                    "base_age": None, "archive_lag": None,
                                    "purge_horizon": None}


@pytest.mark.server
def test_stale_base(world):
    base = world["base"]
    wait_for(lambda: time.time() - epoch(base["end_time"]) > 1.5, what="the base to age")
    code, lines = run_check("--archive", world["url"], "--max-base-age", "1s")
    assert code == 2 and len(lines) == 2, lines
    assert lines[0] == "CHECK CRITICAL - source db1: base_age failed"
    assert re.fullmatch(rf"db1 base_age: base {base['id']} ended \d+[smhd] ago \(limit 1s\)",
                        lines[1]), lines
    code, lines = run_check("--archive", world["url"], "--max-base-age", "14d")
    assert code == 0, lines


@pytest.mark.server
def test_lagging(world):
    lagging = world["lagging"]
    wait_for(lambda: (archive_lag(lagging) or 0) > 1.5, what="an archive lag over 1 s")
    state = json.loads(run_cli("status", "--dir", str(lagging), "--json").stdout)["state"]
    last = world["files"][-1]
    assert state["durable_file"] == last["file"] and state["durable_pos"] > last["size"]
    code, lines = run_check("--archive", world["url"], "--dir", str(lagging),
                            "--max-archive-lag", "1s")
    assert code == 2 and len(lines) == 2, lines
    assert lines[0] == "CHECK CRITICAL - source db1: archive_lag failed"
    assert re.fullmatch(
        r"db1 archive_lag: archive \d+ s behind the daemon \(limit 1s\): "
        + re.escape(f"{lagging} is durable to {state['durable_file']}:{state['durable_pos']}, "
                    f"the archive ends at {last['file']}:{last['size']} (0 sealed files and "
                    f"{state['durable_pos'] - last['size']} bytes of the newest file not "
                    "archived)"), lines[1]), lines
    code, lines = run_check("--archive", world["url"], "--dir", str(lagging))  # 5m: OK
    assert code == 0 and re.search(r"; archive \d+ s behind the daemon\)$", lines[0]), lines


@pytest.mark.server
def test_daemon_of_another_archive(world):
    path, url = copy_archive(world, "elsewhere")
    code, lines = run_check("--archive", url, "--dir", str(world["healthy"]))
    assert (code, lines[1:]) == (2, [f"db1 archive_lag: the daemon at {world['healthy']} "
                                     f"archives to {world['url']}, not {url}"]), lines
    assert lines[0] == "CHECK CRITICAL - source db1: archive_lag failed"


@pytest.mark.server
def test_hole(world):
    path, url = copy_archive(world, "hole")
    middle = world["files"][-3]["file"]  # sealed, after the base
    os.remove(path / "db1" / "binlog" / middle)
    code, lines = run_check("--archive", url)
    assert code == 2 and lines[0] == "CHECK CRITICAL - source db1: binlogs failed", lines
    assert len(lines) == 2 and lines[1].startswith("db1 binlogs: the archive has holes: ")
    assert f"db1/binlog/{middle}: not verified or missing its object" in lines[1], lines
    os.remove(path / "db1" / "binlog" / f"{middle}.json")  # no index either: a hole
    code, lines = run_check("--archive", url)
    assert code == 2 and lines[0] == "CHECK CRITICAL - source db1: binlogs failed", lines
    assert lines[1].startswith(f"db1 binlogs: the binlogs from base {world['base']['id']} "), lines
    assert f"db1/binlog/{middle} is missing" in lines[1], lines


@pytest.mark.server
def test_a_second_source_without_base(world):
    path, url = copy_archive(world, "two-sources")
    shutil.copytree(path / "db1" / "binlog", path / "db2" / "binlog")
    prefix, _ = restorable(world)
    code, lines = run_check("--archive", url)
    assert code == 2 and len(lines) == 2, lines
    assert re.fullmatch(re.escape(prefix.replace("CHECK OK", "CHECK CRITICAL"))
                        + r"\d+[smhd] ago\); source db2: base failed", lines[0]), lines
    assert lines[1] == "db2 base: no base backup in the archive (mysqlbackup base takes one)"
    assert run_check("--archive", url, "--source-name", "db1")[0] == 0
    code, lines = run_check("--archive", url, "--source-name", "db3")
    assert (code, lines) == (2, ["CHECK CRITICAL - source db3: base failed",
                                 f"db3 base: archive {url}: no source 'db3' in it (it holds: "
                                 "db1, db2)"])


@pytest.mark.server
def test_wrong_url(world, tmp_path):
    code, lines = run_check("--archive", f"file://{tmp_path / 'nothing'}")
    assert (code, lines) == (3, [f"CHECK UNKNOWN - the archive cannot be read: archive "
                                 f"file://{tmp_path / 'nothing'}: not an archive: no such "
                                 "directory"])
    (tmp_path / "empty").mkdir()
    code, lines = run_check("--archive", f"file://{tmp_path / 'empty'}")
    assert (code, lines) == (2, [f"CHECK CRITICAL - archive file://{tmp_path / 'empty'} is "
                                 "empty: nothing archived yet"])
    code, lines = run_check("--archive", "nosuch://bucket/x")
    assert code == 3 and lines[0].startswith("CHECK UNKNOWN - the archive cannot be read: "
                                             "cannot use archive nosuch://bucket/x: "), lines
    code, lines = run_check("--archive", world["url"], "--dir", str(tmp_path / "none"))
    assert (code, lines[1:]) == (2, [f"db1 archive_lag: {tmp_path / 'none'} does not exist"])


@pytest.mark.server
def test_store_unreachable(world):
    code, lines = run_check("--archive", "s3://bucket/x",
                            "--archive-option", "endpoint_url=http://127.0.0.1:1")
    assert code == 3 and lines[0].startswith(
        "CHECK UNKNOWN - the archive cannot be read: archive s3://bucket/x: list / failed: "
        "EndpointConnectionError: "), lines


@pytest.mark.server
def test_encrypted_base_keys(world, tmp_path):
    """A base stored encrypted (its manifest says so): without --identity its key is not
    checked (OK, keys null); with an identity that is not its key: CRITICAL."""
    path, url = copy_archive(world, "encrypted")
    manifest = path / "db1" / "base" / world["base"]["id"] / "index.json"
    doc = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(dict(doc, codec="zstd+age", key_ids=["0123456789abcdef"])))
    code, lines = run_check("--archive", url, "--json")
    (source,) = json.loads("\n".join(lines))["sources"]
    assert code == 0 and [c["ok"] for c in source["checks"]] == [True, True, None, True, None,
                                                                 None]
    assert source["checks"][2]["detail"].startswith("not checked: the plan's objects are "
                                                    "encrypted and no --identity was given")
    identity = tmp_path / "archive.key"
    assert run_cli("keygen", "--identity", str(identity), "--recipient",
                   str(tmp_path / "archive.pub")).returncode == 0
    code, lines = run_check("--archive", url, "--identity", str(identity))
    assert code == 2 and lines[0] == "CHECK CRITICAL - source db1: keys failed", lines
    assert lines[1].startswith(f"db1 keys: db1/base/{world['base']['id']}/dump.sql.zst: "
                               "encrypted to key id 0123456789abcdef; the identity "), lines


@pytest.mark.parametrize("args, message", [
    ([], "--archive URL is required"),
    (["--archive", "file:///x", "--max-base-age", "26"],
     "Invalid value for '--max-base-age': bad duration '26': a positive whole number and "
     "one unit of s, m, h, d, w (e.g. 14d, 12h, 30m)"),
    (["--archive", "file:///x", "--max-archive-lag", "5m"],
     "--max-archive-lag needs --dir (the daemon's directory): without it the archive lag "
     "is not checked"),
    (["--archive", "file:///x", "--archive-option", "nonsense"],
     "bad --archive-option 'nonsense': expected KEY=VALUE"),
    (["--archive", "file:///x", "--source-name", "../x"],
     "bad source name '../x': use letters, digits, '.', '_' or '-'"),
])
def test_bad_usage_is_unknown(args, message):
    result = CliRunner().invoke(check, args)
    assert result.exit_code == 3, result.output
    assert result.stdout.splitlines() == [f"CHECK UNKNOWN - bad usage: {message}"]


def test_help_names_the_exit_codes():
    out = CliRunner().invoke(check, ["--help"]).stdout
    assert "0 OK; 2 CRITICAL" in out and "3 UNKNOWN" in out
    assert "mysqlbackup check --archive s3://backups/mysql --source-name db1" in out


def test_verdicts_without_a_server():
    """The pure part: the OK line's age, a lag over its limit, a daemon of another source."""
    from replay.check.verdict import DaemonFacts, Report
    planned = Planned("20261126T090000Z", "2026-11-26T09:00:00Z", "2026-11-26T12:00:03Z",
                      "0-1-9", 2, "binlog.000002", "binlog.000003")
    facts = SourceFacts("db1", planned, archived_end="binlog.000003:900")
    now = epoch("2026-11-26T12:00:05Z")
    daemon = DaemonFacts("/d", "db1", 2.0, "binlog.000003:900")
    report = Report("file:///a", now, (evaluate(facts, daemon, Limits(), now),))
    assert report.lines() == ["CHECK OK - source db1: restorable to 2026-11-26T12:00:03Z "
                              "(base 20261126T090000Z, 3h ago; archive 2 s behind the daemon)"]
    slow = DaemonFacts("/d", "db1", 400.0, "binlog.000003:1000", 0, 100, "boom")
    verdict = evaluate(facts, slow, Limits(), now)
    assert verdict.checks[-2] == Check(
        "archive_lag", False, "archive 400 s behind the daemon (limit 5m): /d is durable "
        "to binlog.000003:1000, the archive ends at binlog.000003:900 (0 sealed files and "
        "100 bytes of the newest file not archived); last error: boom")
    other = DaemonFacts("/d", "db2", 0.0)
    assert evaluate(facts, other, Limits(), now).checks[-2].ok is None
    assert evaluate(facts, other, Limits(), now, named=True).checks[-2].ok is False
    # the purge horizon from the daemon's last record: none yet, far, near
    assert verdict.checks[-1] == Check("purge_horizon", None, "not checked: the daemon at /d "
                                       "has not recorded the primary's binlogs yet")
    near = {"purged": False, "oldest": "binlog.000003", "files_before": 0, "bytes_before": 0,
            "seconds_left": 60.0, "bytes_left": None, "replicas_needed": None}
    close = DaemonFacts("/d", "db1", 2.0, "binlog.000003:900", horizon=near)
    assert evaluate(facts, close, Limits(), now).checks[-1] == Check(
        "purge_horizon", False, "purge horizon: the primary may purge our file by age in 60 s "
        "(limit 3600 s), 0 files (0 bytes) before it")
    far = DaemonFacts("/d", "db1", 2.0, "binlog.000003:900",
                      horizon=dict(near, seconds_left=86400.0))
    assert evaluate(facts, far, Limits(), now).checks[-1].ok is True
    assert [format_age(s) for s in (5, 119.4, 600, 7300, 200000)] == [
        "5s", "119s", "10m", "2h", "2d"]
