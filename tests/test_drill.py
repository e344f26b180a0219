"""`mysqlbackup drill` on a real archive (a primary's dump base and binlogs): a good
archive passes (exit 0, each transaction once, every table readable, the RTO); one
flipped byte inside the stored dump (its manifest left as it was) fails naming the
base (exit 1). The drill's transaction check itself, on made-up GTID lists."""

import os
import re
import shutil

import pytest

from mysqlbackup.binlog.gtid import MariaGtidPos
from replay.drill.check import Expected, check_applied, missing_gtids, on_bookkeeping
from tests.helpers import module_primary, run_cli

SCHEMA = ("CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY, v INT)",
          "CREATE TABLE shop.u (id INT PRIMARY KEY)")
AFTER_BASE = 30  # transactions committed after the base


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """(archive dir, base id, transactions after the base): a base, then inserts."""
    root = tmp_path_factory.mktemp("drill")
    primary = module_primary(tmp_path_factory, "drill-primary", *SCHEMA,
                             *[f"INSERT INTO shop.t VALUES ({i}, {i})" for i in range(20)])
    url = f"file://{root / 'archive'}"
    try:
        out = run_cli("base", "--source", f"mysql://root@127.0.0.1:{primary.port}",
                      "--archive", url, "--source-name", "db1", password="", timeout=120)
        assert out.returncode == 0, out.stderr
        base_id = out.stdout.split()[1]
        primary.execute(*[f"INSERT INTO shop.t VALUES ({i}, {i})" for i in range(20, 40)],
                        "FLUSH BINARY LOGS",
                        *[f"INSERT INTO shop.u VALUES ({i})" for i in range(AFTER_BASE - 20)])
        copy = root / "binlogs"
        copy.mkdir()
        for name in primary.binlog_files():
            shutil.copyfile(primary.binlog_path(name), copy / name)
        out = run_cli("archive", "import", str(copy), "--archive", url, "--source-name", "db1")
        assert out.returncode == 0, out.stderr
        gtid = primary.execute("SELECT @@gtid_binlog_pos")[0][0]
    finally:
        primary.stop(remove=True)
    yield root / "archive", base_id, gtid


def drill(path, *extra):
    return run_cli("drill", "--archive", f"file://{path}", "--workdir", str(path.parent),
                   *extra, password="", timeout=300)


@pytest.mark.server
def test_drill_on_a_good_archive_passes(archive):
    path, base_id, gtid = archive
    out = drill(path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    domain, _, seq = gtid.split("-")
    assert (f"transactions: {AFTER_BASE} applied, each once, after base {base_id} (GTID "
            f"{domain}-1-{int(seq) - AFTER_BASE}) through {domain}-*-{seq} as the indexes "
            "list") in lines, lines
    assert "tables: 2 readable (CHECKSUM TABLE on each)" in lines
    assert re.fullmatch(rf"RTO: \d+\.\ds \(plan, load of base {re.escape(base_id)}, replay\)",
                        lines[-2]), lines
    assert lines[-1] == "drill passed"
    assert re.match(r"scratch server: mariadbd 10\.11\.\S+ on 127\.0\.0\.1:\d+, datadir ",
                    lines[0]), lines[0]
    assert not [p for p in os.listdir(path.parent) if p.startswith("mysqlbackup-drill-")]


@pytest.mark.server
def test_drill_on_a_damaged_base_fails_naming_it(archive, tmp_path):
    path, base_id, _ = archive
    copy = tmp_path / "archive"
    shutil.copytree(path, copy)
    dump = copy / "db1" / "base" / base_id / "dump.sql.zst"
    data = bytearray(dump.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit inside the stored dump
    dump.write_bytes(bytes(data))
    out = drill(copy)
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAILED ")]
    assert len(failed) == 1 and failed[0].startswith(
        f"FAILED the restore from base {base_id} failed: "), lines
    assert f"db1/base/{base_id}/dump.sql.zst" in failed[0] or "refused the base" in failed[0]
    assert lines[-1] == "drill FAILED"


def expected(start, end, low=None):
    return Expected(MariaGtidPos.parse(start), MariaGtidPos.parse(low or end),
                    MariaGtidPos.parse(end))


def test_check_applied_each_once_in_range():
    problems, count, end = check_applied(expected("0-1-10", "0-1-13"),
                                         [(0, 1, 11), (0, 2, 12), (0, 1, 13)])
    assert (problems, count, str(end)) == ([], 3, "0-0-13")


def test_check_applied_names_twice_missing_held_and_short():
    problems, _, _ = check_applied(expected("0-1-10", "0-1-20"),
                                   [(0, 1, 9), (0, 1, 11), (0, 1, 11), (0, 1, 14)])
    assert problems == [
        "applied more than once: GTID seq_no 11 of domain 0",
        "applied though the base holds them: GTID seq_no 9 of domain 0 (the base is at 10)",
        "missing: GTID seq_no 12, 13 of domain 0 (2 of 11..14 not applied)",
        "domain 0: the target ends at seq_no 14, the indexes list transactions through 20"]


def test_check_applied_inside_the_stop_file_and_nothing_applied():
    within = expected("0-1-10", "0-1-30", low="0-1-20")
    assert check_applied(within, [(0, 1, n) for n in range(11, 26)])[0] == []
    assert check_applied(within, [(0, 1, n) for n in range(11, 18)])[0] == [
        "domain 0: the target ends at seq_no 17, the indexes put the stop point between 20 "
        "and 30"]
    assert check_applied(expected("0-1-10", "0-1-10"), [])[0] == []


def test_gaps_the_replay_leaves_out_on_purpose_are_not_missing():
    exp = expected("0-1-10", "0-1-14")
    logged = [(0, 1, 11), (0, 1, 14)]
    assert missing_gtids(exp, logged) == [(0, 12), (0, 13)]
    assert check_applied(exp, logged, frozenset({(0, 12), (0, 13)}))[0] == []
    assert check_applied(exp, logged, frozenset({(0, 12)}))[0] == [
        "missing: GTID seq_no 13 of domain 0 (1 of 11..14 not applied)"]


U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def mysql_expected(start, end, low=None):
    from mysqlbackup.binlog.gtid import MysqlGtidSet
    from replay.drill.check import MysqlExpected
    return MysqlExpected(*(MysqlGtidSet.parse(t) for t in (start, low or end, end)))


def test_mysql_gtids_each_once_none_held_none_missing():
    from replay.drill.check import check_mysql_applied
    exp = mysql_expected(f"{U1}:1-10", f"{U1}:1-13")
    problems, count, end = check_mysql_applied(exp, [(U1, 11), (U1, 12), (U1, 13)])
    assert (problems, count, str(end)) == ([], 3, f"{U1}:1-13")
    problems, _, _ = check_mysql_applied(exp, [(U1, 9), (U1, 11), (U1, 11), (U1, 14)])
    assert problems == [f"applied more than once: {U1}:11",
                        f"applied though the base holds them: {U1}:9",
                        f"missing: {U1}:12-13 (the indexes list them through the end)",
                        f"applied past where the indexes put the stop point: {U1}:14"]
    within = mysql_expected(f"{U1}:1-10", f"{U1}:1-30", low=f"{U1}:1-20")
    assert check_mysql_applied(within, [(U1, n) for n in range(11, 26)])[0] == []
    assert check_mysql_applied(within, [(U1, n) for n in range(11, 16)], frozenset(
        {(U1, n) for n in range(16, 21)}))[0] == []  # left out on purpose: not missing


def test_a_source_without_gtids_is_counted_against_the_indexes():
    from replay.drill.check import check_counted
    assert check_counted((22, 22), logged=20, applied=20, skipped=2) == []
    assert check_counted((22, 22), logged=21, applied=20, skipped=2) == [
        "the scratch server logged 21 transactions, the replay applied 20: some twice"]
    assert check_counted((22, 22), logged=19, applied=19, skipped=2) == [
        "the replay took 21 transactions (19 applied, 2 held by the base), the indexes "
        "list exactly 22 in the files it read"]
    assert check_counted((10, 22), logged=15, applied=15, skipped=2) == []
    assert check_counted((10, 22), logged=5, applied=5, skipped=2)[0].endswith(
        "the indexes list between 10 and 22 in the files it read")


def stop_of(given):
    """The Stop of a test's {"datetime": epoch} or {"position": "FILE:POS"} (END: {})."""
    from mysqlbackup.archive.stop import END, StopDatetime, StopPosition, parse_file_position
    if "datetime" in given:
        return StopDatetime(given["datetime"])
    if "position" in given:
        return StopPosition(parse_file_position(given["position"], "--stop-position"))
    return END


@pytest.mark.parametrize("stop,bounds", [
    ({}, (30, 30)),                           # the end: every transaction of the files read
    ({"datetime": 1_800_000_250}, (10, 20)),  # inside the second of them
    ({"position": "bin.000003:200"}, (20, 30))])
def test_counted_bounds_of_a_source_without_gtids(stop, bounds):
    """No GTIDs anywhere (MySQL's gtid_mode OFF): the base sits by its position, and the
    transactions the replay must take are counted from the indexes."""
    from mysqlbackup.archive.window import build_runs
    from replay.drill.check import counted_bounds
    from replay.restore.plan import make_plan
    from tests.test_retention import base, index
    bare = [dict(index(i), gtid_before="", gtid_after="", first_gtid=None, last_gtid=None,
                 transactions=10) for i in (1, 2, 3)]
    runs, holes = build_runs("db1", bare)
    manifest = dict(base(1, ended=50), gtid=None, member="dump.sql.zst")
    assert counted_bounds(make_plan("db1", runs, holes, [manifest], stop_of(stop))) == bounds


@pytest.mark.parametrize("db,sql,bookkeeping", [
    ("", "CREATE TABLE IF NOT EXISTS mysqlbackup_replay.checkpoint (a INT)", True),
    ("mysqlbackup_replay", "CREATE DATABASE IF NOT EXISTS mysqlbackup_replay", True),
    ("shop", "CREATE TABLE t (a INT)", False)])
def test_on_bookkeeping(db, sql, bookkeeping):
    assert on_bookkeeping(db, sql) is bookkeeping


@pytest.mark.parametrize("stop,low,high", [
    ({}, "0-1-40", "0-1-40"),                         # the end of the archive: exactly
    ({"datetime": 1_800_000_250}, "0-1-20", "0-1-30"),  # inside the second file
    ({"datetime": 1_800_001_000}, "0-1-40", "0-1-40"),  # after every commit: exactly
    ({"datetime": 1_800_000_160}, "0-1-15", "0-1-20")])  # inside the base's own file
def test_expected_of_a_restore_plan_from_the_indexes(stop, low, high):
    from mysqlbackup.archive.window import build_runs
    from replay.drill.check import expected_of
    from replay.restore.plan import make_plan
    from tests.test_retention import base, index
    runs, holes = build_runs("db1", [index(i) for i in (1, 2, 3)])
    manifest = dict(base(1, seq_in_file=5, ended=50), member="dump.sql.zst")
    exp = expected_of(make_plan("db1", runs, holes, [manifest], stop_of(stop)))
    assert (str(exp.start), str(exp.low), str(exp.high)) == ("0-1-15", low, high)


def test_a_deep_work_directory_gets_a_socket_path_a_server_can_bind():
    """A unix socket's path has at most 107 bytes: under a deep --workdir the scratch
    server's socket goes to the temporary folder (the server exited at once before)."""
    import tempfile

    from mysqlbackup.sandbox import SOCKET_MAX, socket_path
    assert socket_path("/srv/drill") == "/srv/drill/mysqld.sock"
    deep = "/tmp/" + "/".join(["a-rather-long-folder-name"] * 5)
    path = socket_path(deep)
    assert os.path.dirname(path) == tempfile.gettempdir() and len(path) <= SOCKET_MAX
    assert path == socket_path(deep + "/") != socket_path(deep + "-other")
