"""The retention plan (pure): what `mysqlbackup retain` deletes and keeps, and why, on
synthetic indexes and manifests: a window cutting through a file, tiers of older
bases, leases, no base old enough, orphans, holes; and durations."""

import pytest

from mysqlbackup.archive.window import parse_duration
from mysqlbackup.utc import iso
from mysqlbackup.errors import UsageError
from mysqlbackup.retention.policy import Facts, describe_plan, plan_retention

T0 = 1_800_000_000  # epoch of the first file's start
DAY = 86400


def name(i):
    return f"bin.{i:06d}"


def index(i):
    """File i: GTIDs 0-1-(10i+1) .. 0-1-(10i+10), committed T0+100i+5 .. T0+100i+95."""
    return {"name": name(i), "gtid_before": f"0-1-{10 * i}", "gtid_after": f"0-1-{10 * i + 10}",
            "first_commit": iso(T0 + 100 * i + 5), "last_commit": iso(T0 + 100 * i + 95),
            "first_gtid": f"0-1-{10 * i + 1}", "last_gtid": f"0-1-{10 * i + 10}",
            "next_file": name(i + 1), "size": 1000}


def base(i, seq_in_file=5, ended=50):
    """A base taken in file i after its ``seq_in_file``-th transaction, ended at
    T0+100i+``ended``."""
    moment = T0 + 100 * i + ended
    base_id = iso(moment).replace("-", "").replace(":", "")[:-1] + ".000Z"
    return {"id": base_id, "gtid": f"0-1-{10 * i + seq_in_file}", "end_time": iso(moment),
            "binlog_file": name(i), "binlog_pos": 100, "method": "dump"}


def facts(files=range(1, 7), bases=(1, 3, 5), **extra):
    return Facts("db1", tuple(index(i) for i in files), tuple(base(i) for i in bases), **extra)


def plan_at(promised, keep_base=0, **kw):
    """The plan for a window whose oldest promised moment is ``promised``."""
    now = promised + 14 * DAY
    return plan_retention(facts(**kw), now, 14 * DAY, keep_base)


def gone(plan):
    return [(i.kind, i.name) for i in plan.deletions]


def test_window_cutting_through_a_file_keeps_it_whole_and_the_base_before():
    plan = plan_at(T0 + 450)  # inside bin.000004 (its commits 405..495)
    assert plan.anchor["id"] == base(3)["id"]
    assert gone(plan) == [("binlog", name(1)), ("binlog", name(2)), ("base", base(1)["id"])]
    assert plan.deletions[0].reason == (f"before {name(3)}, the first file a restore from base "
                                        f"{base(3)['id']} reads")
    assert plan.deletions[2].reason == (f"older than base {base(3)['id']}, where the window "
                                        "starts, and beyond --keep-base 0")
    [before], [after] = plan.before, plan.after
    assert (before.base_id, before.start, before.first_file) == (base(1)["id"], iso(T0 + 150),
                                                                 name(1))
    assert (after.base_id, after.start, after.first_file, after.last_file) == (
        base(3)["id"], iso(T0 + 350), name(3), name(6))
    assert after.end == before.end == iso(T0 + 695)
    assert epoch_of(after.start) <= plan.promised  # the promise holds after


def epoch_of(text):
    from mysqlbackup.utc import epoch
    return epoch(text)


def test_cut_in_the_anchor_base_own_file_keeps_that_file():
    plan = plan_at(T0 + 370)  # bin.000003, after base 3 ended (350)
    assert plan.anchor["id"] == base(3)["id"]
    assert [n for k, n in gone(plan) if k == "binlog"] == [name(1), name(2)]


def test_a_base_ended_after_the_promised_moment_cannot_anchor():
    plan = plan_at(T0 + 340)  # base 3 ended at 350: too late; base 1 anchors
    assert plan.anchor["id"] == base(1)["id"]
    assert gone(plan) == []  # base 1's first file is bin.000001: nothing before it


def test_keep_base_keeps_older_bases_without_their_binlogs():
    plan = plan_at(T0 + 650, keep_base=1, bases=(1, 2, 3, 5))
    assert plan.anchor["id"] == base(5)["id"]
    assert gone(plan) == [("binlog", name(i)) for i in range(1, 5)] + [
        ("base", base(2)["id"]), ("base", base(1)["id"])]
    kept = {i.name: i.reason for i in plan.kept}
    assert kept == {base(5)["id"]: f"kept: the newest base ended before "
                    f"{iso(T0 + 650)}: the window starts from it",
                    base(3)["id"]: f"kept: --keep-base 1 (its own moment {iso(T0 + 350)} "
                    "only, loaded by hand; its binlogs go)"}
    [after] = plan.after  # the tier sits in no binlogs: not in the window
    assert after.base_id == base(5)["id"]


def test_no_base_older_than_the_window_deletes_nothing_and_says_so():
    plan = plan_at(T0 + 100)
    assert plan.anchor is None and plan.deletions == ()
    assert plan.note == (f"no base backup in the archived binlogs ended before "
                         f"{iso(T0 + 100)}: nothing is deleted (every base and binlog may be "
                         "needed)")
    assert plan.after == plan.before


def test_newest_base_and_binlogs_after_it_never_go():
    plan = plan_at(T0 + 10_000, partial=dict(index(7), partial=True))
    assert plan.anchor["id"] == base(5)["id"]
    assert [n for k, n in gone(plan) if k == "binlog"] == [name(i) for i in range(1, 5)]
    assert [n for k, n in gone(plan) if k == "base"] == [base(3)["id"], base(1)["id"]]
    [after] = plan.after
    assert (after.first_file, after.last_file) == (name(5), name(7))


def test_a_live_lease_keeps_its_base_and_every_file_its_restore_reads():
    lease = {"id": "L1", "base": base(1)["id"], "renewed": "x"}
    plan = plan_at(T0 + 650, leases=(lease,))
    assert plan.anchor["id"] == base(5)["id"]
    assert gone(plan) == [("base", base(3)["id"])]  # base 1 and bin.000001.. stay
    assert {i.name: i.reason for i in plan.kept}[base(1)["id"]] == \
        "kept: a restore holds lease L1 on it"
    assert plan.lease_ids == ("L1",)


def test_a_lease_on_a_newer_base_does_not_keep_older_files():
    lease = {"id": "L2", "base": base(5)["id"]}
    plan = plan_at(T0 + 650, leases=(lease,))
    assert [n for k, n in gone(plan) if k == "binlog"] == [name(i) for i in range(1, 5)]


@pytest.mark.parametrize("lease", [{"id": "L3", "source": "db1", "damaged": "db1/lease/L3.json"},
                                   {"id": "L4", "base": "20990101T000000.000Z"}])
def test_a_lease_whose_base_is_unknown_keeps_everything(lease):
    plan = plan_at(T0 + 650, leases=(lease,))
    assert plan.deletions == ()
    assert plan.note.startswith(f"a restore holds lease {lease['id']} (base ")
    assert plan.note.endswith("not found in the binlogs): nothing is deleted")


def test_orphans_before_the_first_kept_file_go_and_newer_ones_stay():
    loose_old, loose_new = "20000101T000000.000Z", "20990101T000000.000Z"
    plan = plan_at(T0 + 450, unindexed=(name(0), name(9)), loose_bases=(loose_old, loose_new))
    assert ("orphan binlog", name(0)) in gone(plan)
    assert ("orphan binlog", name(9)) not in gone(plan)
    assert ("orphan base", loose_old) in gone(plan)
    assert ("orphan base", loose_new) not in gone(plan)


def test_a_hole_before_the_anchor_base_files_before_it_go():
    plan = plan_at(T0 + 650, files=(1, 2, 4, 5, 6), bases=(1, 5))  # bin.000003 missing
    assert plan.anchor["id"] == base(5)["id"]
    assert [n for k, n in gone(plan) if k == "binlog"] == [name(1), name(2), name(4)]
    assert len(plan.before) == 2 and len(plan.after) == 1  # the run before the hole goes


def test_a_base_in_no_binlogs_cannot_anchor():
    plan = plan_at(T0 + 650, files=(3, 4, 5, 6), bases=(1, 3))  # base 1's file is gone
    assert plan.anchor["id"] == base(3)["id"]
    assert gone(plan) == [("base", base(1)["id"])]


def test_base_ended_exactly_at_the_promised_moment_cannot_anchor():
    plan = plan_at(T0 + 350)  # base 3 ended at 350: a restore to 350 cannot start from it
    assert plan.anchor["id"] == base(1)["id"]


def test_restore_after_retention_refuses_a_moment_before_the_window():
    """Files before the anchor's are gone: a stop before the base ended cannot be proved
    (the deleted file may hold commits after it), one after it can."""
    from mysqlbackup.archive.stop import StopDatetime
    from mysqlbackup.archive.window import NoBaseError, build_runs, choose_base
    at_start = base(3, seq_in_file=0, ended=2)  # B: at bin.000003's start, ended T0+302
    runs, holes = build_runs("db1", [index(i) for i in range(3, 7)])
    with pytest.raises(NoBaseError, match=f"base {at_start['id']}: it ended at "):
        choose_base("db1", runs, holes, [at_start], StopDatetime(T0 + 301))
    assert choose_base("db1", runs, holes, [at_start], StopDatetime(T0 + 303)).manifest == at_start
    assert choose_base("db1", runs, holes, [at_start], StopDatetime(T0 + 400)).first == 0


def test_describe_plan_lines():
    plan = plan_at(T0 + 450)
    assert describe_plan(plan) == [
        f"retain db1: every moment from {iso(T0 + 450)} on is to stay restorable",
        f"window before: restorable from {iso(T0 + 150)} to {iso(T0 + 695)} (base "
        f"{base(1)['id']}, up to GTID 0-1-70, {name(1)} .. {name(6)})",
        f"base {base(3)['id']}: kept: the newest base ended before {iso(T0 + 450)}: "
        "the window starts from it",
        f"base {base(5)['id']}: kept: newer than base {base(3)['id']} (in the window)"]


@pytest.mark.parametrize("text,seconds", [("14d", 14 * DAY), ("12h", 43200), ("30m", 1800),
                                          ("90s", 90), ("2w", 14 * DAY)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["14", "0d", "-1d", "1.5d", "d", "14 days", ""])
def test_parse_duration_refuses(text):
    with pytest.raises(UsageError, match=r"bad duration .*: a positive whole number and one "
                       r"unit of s, m, h, d, w \(e\.g\. 14d, 12h, 30m\)"):
        parse_duration(text)
