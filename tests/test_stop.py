"""The stop point as one tagged value (mysqlbackup.archive.stop): each kind answers
every question asked of a stop, and two stops cannot be given (pure)."""

import pytest

from mysqlbackup.archive.stop import (END, Stop, StopDatetime, StopGtid, StopPosition,
                                      parse_stop)
from mysqlbackup.archive.window import Span
from mysqlbackup.binlog.position import Position
from mysqlbackup.errors import UsageError
from mysqlbackup.utc import epoch

T = epoch("2026-11-21T09:30:00Z")


def span(name="b.000002", first="2026-11-21T09:00:00Z", last="2026-11-21T10:00:00Z",
         before="0-1-10", after="0-1-20"):
    return Span(name, False, before, after, first, last, None, None, None, 100)


def test_each_option_gives_its_kind_and_none_gives_the_end():
    assert parse_stop() is END and END.is_end and END.option_text == ""
    at = parse_stop(stop_datetime="2026-11-21 10:30:00+01:00")
    assert at == StopDatetime(T) and not at.is_end
    assert at.option_text == "--stop-datetime 2026-11-21T09:30:00Z"
    gtid = parse_stop(stop_before_gtid="0-1-15")
    assert gtid == StopGtid((0, 1, 15)) and gtid.option_text == "--stop-before-gtid 0-1-15"
    assert parse_stop(stop_before_gtid="3E11FA47-71CA-11E1-9E33-C80AA9429562:7").gtid == (
        "3e11fa47-71ca-11e1-9e33-c80aa9429562", 7)
    position = parse_stop(stop_position="b.000002:4")
    assert position == StopPosition(Position("b.000002", 4))
    assert position.option_text == "--stop-position b.000002:4"


@pytest.mark.parametrize("given", [
    {"stop_datetime": "2026-11-21T09:30:00Z", "stop_before_gtid": "0-1-15"},
    {"stop_datetime": "2026-11-21T09:30:00Z", "stop_position": "b.000002:4"},
    {"stop_before_gtid": "0-1-15", "stop_position": "b.000002:4"},
    {"stop_datetime": "2026-11-21T09:30:00Z", "stop_before_gtid": "0-1-15",
     "stop_position": "b.000002:4"}])
def test_two_stops_are_refused(given):
    named = " and ".join("--" + k.replace("_", "-") for k in given)
    with pytest.raises(UsageError) as refused:
        parse_stop(**given)
    assert str(refused.value) == ("give at most one of --stop-datetime, --stop-before-gtid "
                                  f"and --stop-position (got {named})")


@pytest.mark.parametrize("given,message", [
    ({"stop_datetime": " "}, "--stop-datetime is empty"),
    ({"stop_before_gtid": ""}, "--stop-before-gtid is empty"),
    ({"stop_datetime": "yesterday"}, "bad --stop-datetime 'yesterday': use ISO 8601"),
    ({"stop_before_gtid": "0-1-5,0-1-6"}, "--stop-before-gtid takes one GTID"),
    ({"stop_position": "b.000002"}, "bad --stop-position: expected FILE:POS")])
def test_bad_values_are_refused(given, message):
    with pytest.raises(UsageError, match="^" + message):
        parse_stop(**given)


def test_one_transaction_is_judged_by_its_kind_alone():
    end = Position("b.000002", 500)
    assert END.reached((0, 1, 15), T + 1, end) is None
    assert StopDatetime(T).reached((0, 1, 15), T, end) == "stop datetime reached"
    assert StopDatetime(T).reached((0, 1, 15), T - 1, end) is None
    assert StopGtid((0, 1, 15)).reached((0, 1, 15), T - 1, end) == "stop before GTID 0-1-15"
    assert StopGtid((0, 1, 15)).reached((0, 1, 14), T + 1, end) is None  # its time: no matter
    assert StopPosition(Position("b.000002", 499)).reached(None, 0, end) == (
        "stop position reached")
    assert StopPosition(Position("b.000002", 500)).reached(None, 0, end) is None


def test_a_file_is_judged_by_the_kind_of_stop():
    s = span()
    assert (END.may_hold(s), END.after_start_of(s), END.passes(s)) == (False, False, True)
    assert StopDatetime(T).may_hold(s) and not StopDatetime(T).passes(s)
    assert StopDatetime(epoch("2026-11-21T08:00:00Z")).after_start_of(s)
    assert StopDatetime(epoch("2026-11-21T11:00:00Z")).passes(s)
    assert StopGtid((0, 1, 15)).may_hold(s) and not StopGtid((0, 1, 25)).may_hold(s)
    assert not StopGtid((0, 1, 15)).after_start_of(s) and not StopGtid((0, 1, 15)).passes(s)
    assert StopPosition(Position("b.000002", 4)).may_hold(s)
    assert not StopPosition(Position("b.000003", 4)).may_hold(s)


def test_the_words_of_each_kind():
    kinds = [END, StopDatetime(T), StopGtid((0, 1, 15)), StopPosition(Position("b.000002", 4))]
    assert [k.describe() for k in kinds] == [
        "at the end of the archive", "before 2026-11-21T09:30:00Z", "before GTID 0-1-15",
        "at b.000002:4"]
    assert [k.reason for k in kinds] == [
        "end of the archive", "stop datetime reached", "stop before GTID 0-1-15",
        "stop position reached"]
    assert [k.target_at() for k in kinds[1:]] == [
        "just before 2026-11-21T09:30:00Z (the stop datetime)", "just before GTID 0-1-15",
        "b.000002:4 (the stop position)"]


def test_a_stop_holds_one_kind_and_one_value():
    """Two stops cannot be represented: a Stop has one kind, and its value is that kind's
    only field."""
    from dataclasses import fields
    assert [f.name for f in fields(Stop)] == []
    assert [[f.name for f in fields(k)] for k in (StopDatetime, StopGtid, StopPosition)] == [
        ["at"], ["gtid"], ["position"]]
    with pytest.raises(TypeError):
        StopDatetime(T, (0, 1, 15))
