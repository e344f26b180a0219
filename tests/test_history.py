"""A source's history across failovers (pure): epoch keys, history objects, runs that
go on across a sound switch and break at an unsound one, the base chosen across it,
retention over epochs, and the replay's plan of epochs with duplicates to skip."""

import json
from dataclasses import replace

import pytest

from mysqlbackup.archive.names import (epoch_source, format_key, history_key, parse_key,
                                       segment_key, split_epoch)
from mysqlbackup.archive.stop import StopGtid, StopPosition
from mysqlbackup.archive.window import (EpochHistory, build_runs, choose_base, parse_history,
                                        switch_problem)
from mysqlbackup.errors import CorruptBinlog, ResyncRequired, UsageError
from mysqlbackup.retention.policy import EpochFacts, Facts, plan_retention
from replay.planning.units import plan_epochs


def at(minute):
    return f"2026-11-20T03:{minute:02d}:00Z"


def index(n, before, after, first, last, server=1, next_file=True, epoch=1):
    """binlog.00000n holding 0-server-(before+1)..after, committed at those minutes."""
    return {"name": f"binlog.{n:06d}", "gtid_before": f"0-1-{before}" if before else "",
            "gtid_after": f"0-{server}-{after}", "first_commit": at(first),
            "last_commit": at(last), "first_gtid": f"0-{server}-{before + 1}",
            "last_gtid": f"0-{server}-{after}", "size": 1000, "epoch": epoch,
            "next_file": f"binlog.{n + 1:06d}" if next_file else None}


# A (server 1): binlog.000001 (1-10), binlog.000002 (11-20, A died: its segments).
# B (server 2, same names): binlog.000001 holds A's 1-20 replicated, then its own 21-25;
# binlog.000002 26-30 (active).
A = [index(1, 0, 10, 0, 9)]
A_LAST = dict(index(2, 10, 20, 10, 19, next_file=False), partial=True)
HISTORY = EpochHistory(2, 2, None, "server-id-2", "binlog.000001", "0-1-20", "binlog.000002",
                       5000, 1_790_000_000.0)
B = [dict(index(1, 0, 25, 20, 24, server=2, epoch=2), gtid_before="")]
B_LAST = dict(index(2, 25, 30, 25, 29, server=2, next_file=False, epoch=2),
              gtid_before="0-2-25", partial=True)


def manifest(base_id, gtid, end_minute):
    return {"id": base_id, "gtid": gtid, "end_time": at(end_minute),
            "binlog_file": "binlog.000001", "binlog_pos": 4, "method": "dump"}


def test_later_epochs_have_keys_of_their_own_that_round_trip():
    assert epoch_source("db1", 1) == "db1" and epoch_source("db1", 2) == "db1/epoch/2"
    assert split_epoch("db1/epoch/2") == ("db1", 2) and split_epoch("db1") == ("db1", 1)
    key = segment_key(epoch_source("db1", 3), "binlog.000001", 0, 4096, index=True)
    assert format_key(key) == "db1/epoch/3/partial/binlog.000001/000000000000-000000004096.json"
    assert parse_key(format_key(key)) == key
    assert format_key(history_key("db1", 2)) == "db1/epoch/2/history.json"
    assert parse_key("db1/epoch/2/history.json") == history_key("db1", 2)
    # epoch 1 is the plain layout; no base or lease lives under an epoch
    assert parse_key("db1/epoch/1/binlog/binlog.000001") is None
    assert parse_key("db1/epoch/2/base/20261120T030000.000Z/index.json") is None
    assert parse_key("db1/epoch/x/binlog/binlog.000001") is None


def test_a_history_object_reads_back_and_a_damaged_one_is_named():
    raw = json.dumps(HISTORY.to_dict())
    assert parse_history(raw, "k") == HISTORY
    with pytest.raises(CorruptBinlog, match="k: history field 'first_file'"):
        parse_history(json.dumps(dict(HISTORY.to_dict(), first_file=None)), "k")
    with pytest.raises(CorruptBinlog, match="not a history object"):
        parse_history("[]", "k")


def test_switch_problems():
    ok = switch_problem(HISTORY, "binlog.000002", "0-1-20", "binlog.000001", "")
    assert ok is None
    # the archive of A ends before B's first archived file starts: a hole
    gap = switch_problem(HISTORY, "binlog.000002", "0-1-20", "binlog.000001", "0-1-21")
    assert "GTID hole at the switch to server-id-2" in gap
    # A's archive holds transactions past where B took over: not in B's history
    past = switch_problem(HISTORY, "binlog.000002", "0-1-22", "binlog.000001", "")
    assert "past where server-id-2 took over (0-1-20)" in past
    other = switch_problem(HISTORY, "binlog.000002", "0-1-20", "binlog.000002", "")
    assert "starts with binlog.000001" in other


def test_one_run_across_a_sound_switch_and_the_base_chosen_across_it():
    runs, holes = build_runs("db1", A, A_LAST, [(HISTORY, B, B_LAST)])
    assert holes == [] and len(runs) == 1
    spans = runs[0].spans
    assert [s.label for s in spans] == ["binlog.000001", "binlog.000002",
                                        "binlog.000001 (epoch 2)", "binlog.000002 (epoch 2)"]
    assert spans[2].skip == "0-1-20" and spans[3].skip is None
    base = manifest("20261120T030500.000Z", "0-1-5", 5)
    before_drop = choose_base("db1", runs, holes, [base], StopGtid((0, 2, 27)))
    assert before_drop.keys == [(1, "binlog.000001"), (1, "binlog.000002"),
                                (2, "binlog.000001"), (2, "binlog.000002")]
    on_a = choose_base("db1", runs, holes, [base], StopGtid((0, 1, 15)))
    assert on_a.keys == [(1, "binlog.000001"), (1, "binlog.000002")]


def test_an_unsound_switch_splits_the_window():
    late = [dict(B[0], gtid_before="0-1-21")]
    runs, holes = build_runs("db1", A, A_LAST, [(HISTORY, late, B_LAST)])
    assert len(runs) == 2 and holes[0].switch
    assert (holes[0].after, holes[0].before) == ("binlog.000002", "binlog.000001 (epoch 2)")


def test_a_file_position_that_two_epochs_hold_is_refused():
    runs, holes = build_runs("db1", A, A_LAST, [(HISTORY, B, B_LAST)])
    from mysqlbackup.binlog.position import Position
    with pytest.raises(UsageError, match="binlog.000001 is in epochs 1 and 2"):
        choose_base("db1", runs, holes, [manifest("20261120T030500.000Z", "0-1-5", 5)],
                    StopPosition(Position("binlog.000001", 500)))


def test_retention_deletes_across_epochs_only_what_no_promised_moment_needs():
    base_b = manifest("20261120T032200.000Z", "0-2-22", 22)
    facts = Facts("db1", tuple(A), (manifest("20261120T030500.000Z", "0-1-5", 5), base_b),
                  A_LAST, later=(EpochFacts(HISTORY, tuple(B), B_LAST),))
    promised = 1_900_000_000  # far later than every base: the newest one anchors
    plan = plan_retention(facts, promised + 86400, 86400)
    assert plan.anchor["id"] == base_b["id"]
    # A's files go, its last one (segments: A died before sealing it) too; B's stay, the
    # window then starts in epoch 2 with nothing before it (no switch left to check)
    assert [(i.kind, i.epoch, i.name) for i in plan.deletions] == [
        ("binlog", 1, "binlog.000001"), ("binlog segments", 1, "binlog.000002"),
        ("base", 1, "20261120T030500.000Z")]
    assert [(w.first_file, w.last_file) for w in plan.after] == [
        ("binlog.000001 (epoch 2)", "binlog.000002 (epoch 2)")]
    # a base in A's last file keeps it and everything after
    base_a = manifest("20261120T031500.000Z", "0-1-15", 15)
    plan = plan_retention(replace(facts, manifests=(base_a,)), promised + 86400, 86400)
    assert [(i.kind, i.epoch, i.name) for i in plan.deletions] == [
        ("binlog", 1, "binlog.000001")]


def units_of(files, key_source, partial=None):
    sealed = [(f["name"], f"{key_source}/binlog/{f['name']}", f) for f in files]
    return sealed, partial


def test_the_replay_plans_epochs_in_order_with_the_duplicates_to_skip():
    epochs = [(1, "db1", None, *units_of(A, "db1"), (A[0], A[0])),
              (2, "db1/epoch/2", HISTORY, *units_of(B, "db1/epoch/2"), (B[0], B[0]))]
    units, cut = plan_epochs("db1", epochs)
    assert [(u.epoch, u.name, u.skip) for u in units] == [
        (1, "binlog.000001", None), (2, "binlog.000001", "0-1-10")]
    bad = [epochs[0], (2, "db1/epoch/2", HISTORY, *units_of(B, "db1/epoch/2"),
                       (dict(B[0], gtid_before="0-1-11"), B[0]))]
    with pytest.raises(ResyncRequired, match="db1/epoch/2: epoch 2: GTID hole at the switch"):
        plan_epochs("db1", bad)
    assert len(plan_epochs("db1", bad, allow_gaps=True)[0]) == 2
    holed = [(1, "db1", None, [(A[0]["name"], None, A[0])], None, (A[0], A[0])), epochs[1]]
    with pytest.raises(ResyncRequired) as e:  # each epoch's holes gathered in one line
        plan_epochs("db1", holed)
    assert str(e.value) == ("resync required: the archive has holes: db1/binlog/binlog.000001: "
                            "not verified or missing its object (--allow-gaps replays across "
                            "them)")
