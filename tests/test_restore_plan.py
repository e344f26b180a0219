"""The restore plan's --dry-run lines (pure: index and manifest dicts)."""

from mysqlbackup.archive.window import build_runs
from replay.planning.options import build_selection
from replay.restore.plan import describe, make_plan

BASE = {"id": "20261120T030500.000Z", "method": "dump", "member": "dump.sql.zst",
        "gtid": "0-1-5", "gtid_flavor": "mariadb", "binlog_file": "binlog.000001",
        "binlog_pos": 900, "start_time": "2026-11-20T03:05:00Z",
        "end_time": "2026-11-20T03:05:01Z", "stored_size": 100}


def index(name, before, after, last_commit, next_file=None, size=1000):
    return {"name": name, "gtid_before": before, "gtid_after": after,
            "first_commit": last_commit, "last_commit": last_commit,
            "first_gtid": after if last_commit else None,
            "last_gtid": after if last_commit else None, "next_file": next_file,
            "size": size}


def test_an_empty_newest_file_does_not_hide_where_the_target_will_be():
    """After a rotation (or a stopped server) the newest file holds no transaction:
    the plan names the last commit of the file before it, not '(none)'."""
    sealed = [index("binlog.000001", "", "0-1-10", "2026-11-20T03:09:00Z", "binlog.000002")]
    partial = index("binlog.000002", "0-1-10", "0-1-10", None, size=379)
    runs, holes = build_runs("db1", sealed, partial)
    plan = make_plan("db1", runs, holes, [BASE], build_selection().stop)
    lines = describe(plan)
    assert lines[3] == "GTIDs: after 0-1-5, through 0-1-10"
    assert lines[5] == ("target at: 2026-11-20T03:09:00Z, GTID 0-1-10 (the last commit "
                        "archived in binlog.000001)")
