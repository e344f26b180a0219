"""The restore window and the choice of a base (pure: index and manifest dicts)."""

import pytest

from mysqlbackup.archive.stop import END, StopDatetime, StopGtid, StopPosition
from mysqlbackup.archive.window import NoBaseError, build_runs, choose_base, recovery_windows
from mysqlbackup.binlog.gtid import contains
from mysqlbackup.utc import epoch
from mysqlbackup.binlog.position import Position
from mysqlbackup.errors import ResyncRequired

T0 = "2026-11-20T03:00:00Z"


def at(minute):
    return f"2026-11-20T03:{minute:02d}:00Z"


def index(n, before, after, first, last, next_file=True):
    """The index of binlog.00000n holding seq before+1..after, committed at minutes."""
    return {"name": f"binlog.{n:06d}", "gtid_before": f"0-1-{before}" if before else "",
            "gtid_after": f"0-1-{after}", "first_commit": at(first), "last_commit": at(last),
            "first_gtid": f"0-1-{before + 1}", "last_gtid": f"0-1-{after}",
            "next_file": f"binlog.{n + 1:06d}" if next_file else None, "size": 1000}


def manifest(base_id, gtid, end_minute, file="binlog.000001", pos=4):
    return {"id": base_id, "gtid": gtid, "end_time": at(end_minute), "binlog_file": file,
            "binlog_pos": pos}


# files 1..4: seq 1-10 (min 0-9), 11-20 (10-19), 21-30 (20-29), 31-40 (30-39, active)
FILES = [index(1, 0, 10, 0, 9), index(2, 10, 20, 10, 19), index(3, 20, 30, 20, 29)]
ACTIVE = dict(index(4, 30, 40, 30, 39, next_file=False))
BASES = [manifest("20261120T030500.000Z", "0-1-5", 5),
         manifest("20261120T031500.000Z", "0-1-15", 15, "binlog.000002"),
         manifest("20261120T032500.000Z", "0-1-25", 25, "binlog.000003")]


def test_contains_mariadb_and_mysql_sets():
    assert contains("0-1-5,1-2-3", "0-1-4") and not contains("0-1-5", "0-1-6")
    assert contains("0-1-5", "") and not contains(None, "0-1-1")
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert contains(f"{uuid}:1-10", f"{uuid}:2-5") and not contains(f"{uuid}:1-4", f"{uuid}:3-6")


def test_one_run_without_holes_and_the_newest_base_for_no_stop():
    runs, holes = build_runs("s", FILES, ACTIVE)
    assert (len(runs), holes) == (1, [])
    choice = choose_base("s", runs, holes, BASES)
    assert choice.manifest["id"] == "20261120T032500.000Z"
    assert choice.files == ["binlog.000003", "binlog.000004"]


def test_stop_before_gtid_picks_the_newest_base_without_it():
    runs, holes = build_runs("s", FILES, ACTIVE)
    choice = choose_base("s", runs, holes, BASES, StopGtid((0, 1, 25)))
    assert choice.manifest["id"] == "20261120T031500.000Z"
    assert choice.files == ["binlog.000002", "binlog.000003"]
    choice = choose_base("s", runs, holes, BASES, StopGtid((0, 1, 26)))
    assert choice.manifest["id"] == "20261120T032500.000Z"  # 25 itself is in: fine


def test_stop_datetime_by_the_files_commit_times_and_the_base_end():
    runs, holes = build_runs("s", FILES, ACTIVE)
    # 03:22: in file 3 (commits 20-29); base 25 holds part of file 3 and ended at 03:25
    choice = choose_base("s", runs, holes, BASES, StopDatetime(epoch(at(22))))
    assert choice.manifest["id"] == "20261120T031500.000Z"
    assert choice.files == ["binlog.000002", "binlog.000003"]
    choice = choose_base("s", runs, holes, BASES, StopDatetime(epoch(at(26))))
    assert choice.manifest["id"] == "20261120T032500.000Z"
    # past the archive's end: every base qualifies, the newest wins
    choice = choose_base("s", runs, holes, BASES, StopDatetime(epoch("2026-11-21T00:00:00Z")))
    assert choice.manifest["id"] == "20261120T032500.000Z"


def test_stop_position_compares_with_the_base_position():
    runs, holes = build_runs("s", FILES, ACTIVE)
    choice = choose_base("s", runs, holes, BASES, StopPosition(Position("binlog.000002", 900)))
    assert choice.manifest["id"] == "20261120T031500.000Z"
    choice = choose_base("s", runs, holes, BASES, StopPosition(Position("binlog.000002", 3)))
    assert choice.manifest["id"] == "20261120T030500.000Z"


def test_a_missing_file_between_base_and_stop_is_named():
    runs, holes = build_runs("s", [FILES[0], FILES[2]], ACTIVE)
    assert len(runs) == 2 and holes[0].after == "binlog.000001"
    with pytest.raises(ResyncRequired) as e:
        choose_base("s", runs, holes, BASES[:1])
    assert "s/binlog/binlog.000002 is missing: binlog.000001 ends at GTID 0-1-10" in str(e.value)
    # a base after the hole is fine, the hole before it does not matter
    assert choose_base("s", runs, holes, BASES).manifest["id"] == "20261120T032500.000Z"


def test_a_gtid_hole_is_named():
    broken = [FILES[0], dict(FILES[1], gtid_before="0-1-12")]
    runs, holes = build_runs("s", broken)
    assert "GTID hole: binlog.000001 ends at 0-1-10, binlog.000002 starts after 0-1-12" \
        in holes[0].description


def test_no_base_before_the_stop():
    runs, holes = build_runs("s", FILES, ACTIVE)
    with pytest.raises(NoBaseError) as e:
        choose_base("s", runs, holes, BASES, StopGtid((0, 1, 3)))
    assert "no base backup can start a restore before GTID 0-1-3" in str(e.value)
    with pytest.raises(NoBaseError):
        choose_base("s", runs, holes, [], END)
    with pytest.raises(NoBaseError) as e:
        choose_base("s", runs, holes, BASES, StopGtid((0, 1, 99)))
    assert "is not in the archived binlogs" in str(e.value)


def test_base_id_given_must_qualify():
    runs, holes = build_runs("s", FILES, ACTIVE)
    choice = choose_base("s", runs, holes, BASES, base_id="20261120T030500.000Z")
    assert choice.files[0] == "binlog.000001"
    with pytest.raises(NoBaseError):
        choose_base("s", runs, holes, BASES, StopGtid((0, 1, 12)),
                    base_id="20261120T031500.000Z")


def test_a_base_not_yet_covered_by_the_archive_is_not_used():
    runs, holes = build_runs("s", FILES)  # file 4 not archived yet
    later = manifest("20261120T033500.000Z", "0-1-35", 35, "binlog.000004")
    assert choose_base("s", runs, holes, BASES + [later]).manifest["id"] == \
        "20261120T032500.000Z"


def test_recovery_windows_per_run():
    runs, holes = build_runs("s", [FILES[0], FILES[2]], ACTIVE)
    windows = recovery_windows("s", runs, BASES)
    assert [(w.base_id, w.start, w.end, w.end_gtid) for w in windows] == [
        ("20261120T030500.000Z", at(5), at(9), "0-1-10"),
        ("20261120T032500.000Z", at(25), at(39), "0-1-40")]
