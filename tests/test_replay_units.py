"""Replay's pure parts: options, per-transaction decisions, statements, planning."""

from dataclasses import replace

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.position import Position
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.errors import CorruptBinlog, ResyncRequired, UsageError
from replay.job.decoding.assemble import assemble, attach_events, detach_events
from replay.job.decoding.transaction import Transaction
from mysqlbackup.utc import parse_datetime
from replay.planning.options import build_selection
from replay.planning.units import Unit, drop_before_start, pick_source, plan_units
from replay.job.sinks.statements import step_sql, transaction_steps
from tests.helpers import read, selection_of

MARIA = "rust_mysql_common/mariadb-bin.000001"


def test_datetime_is_utc_unless_a_zone_is_named():
    assert parse_datetime("2026-11-21 10:00:00") == parse_datetime("2026-11-21T10:00:00Z")
    assert parse_datetime("2026-11-21T12:00:00+02:00") == parse_datetime("2026-11-21T10:00:00")
    with pytest.raises(UsageError, match="ISO 8601"):
        parse_datetime("yesterday")


def test_bad_options_are_refused():
    with pytest.raises(UsageError, match="one GTID"):
        selection_of(stop_before_gtid="0-1-5,1-1-3")
    with pytest.raises(UsageError, match="DB.TABLE"):
        build_selection(tables=["nodot"])
    with pytest.raises(UsageError, match="FILE:POS"):
        selection_of(stop_position="binlog.000001")
    for option in ("stop_before_gtid", "stop_datetime", "stop_position", "start_gtid",
                   "exclude_gtids"):
        with pytest.raises(UsageError, match=r"^--%s is empty$" % option.replace("_", "-")):
            selection_of(**{option: " "})  # "$(cat file)" of an empty file: no silent "all"


def trx(seq, ts=100, file="b.000001", start=4, end=50, tables=("d.t",)):
    return Transaction(gtid_parts=[0, 1, seq], commit_ts=ts, file=file, start=start,
                       end=end, tables=list(tables), db="d")


def test_decisions():
    sel = selection_of(start_gtid="0-1-5", stop_before_gtid="0-1-9", exclude_gtids="0-1-7",
                       databases=["d"])
    assert sel.decide(trx(5)) == ("skip", "in the start GTID set")
    assert sel.decide(trx(6)) == ("apply", None)
    assert sel.decide(trx(7)) == ("skip", "excluded")
    assert sel.decide(trx(8, tables=("other.t",))) == ("skip", "filtered out")
    assert sel.decide(trx(9)) == ("stop", "stop before GTID 0-1-9")
    by_time = selection_of(stop_datetime="1970-01-01T00:02:00Z")
    assert by_time.decide(trx(1, ts=119))[0] == "apply"
    assert by_time.decide(trx(2, ts=120)) == ("stop", "stop datetime reached")


def test_events_detached_in_the_task_come_back_equal_on_the_driver(shared_binlog):
    data = read(shared_binlog(MARIA))
    whole, _, _ = assemble(data, "mariadb-bin.000001")
    light, _, _ = assemble(data, "mariadb-bin.000001")
    fingerprint = detach_events(light, data)
    assert all(t.events is None for t in light)
    assert [len(t.event_lengths) for t in light] == [len(t.events) for t in whole]
    attach_events(light, data, "mariadb-bin.000001", fingerprint)
    assert light == whole


def test_bytes_that_changed_after_the_decode_are_refused(shared_binlog):
    data = read(shared_binlog(MARIA))
    light, _, _ = assemble(data, "mariadb-bin.000001")
    fingerprint = detach_events(light, data)
    changed = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(CorruptBinlog, match="changed between decode and apply"):
        attach_events(light, changed, "mariadb-bin.000001", fingerprint)


def test_steps_of_a_real_mariadb_transaction(shared_binlog):
    data = read(shared_binlog(MARIA))
    transactions, incomplete, fde_event = assemble(data, "mariadb-bin.000001")
    assert incomplete is None and len(transactions) == 2
    fde = ev.parse_format_description(fde_event)
    steps = transaction_steps(transactions[0], fde, True)
    assert [k for k, _ in steps] == ["begin", "binlog", "commit"]
    assert steps[0][1] == "BEGIN" and step_sql(*steps[1]).startswith("BINLOG '")
    assert [e[4] for e in steps[1][1]] == [ev.TABLE_MAP, 23]  # whole events, in order
    assert transactions[0].gtid_parts == [0, 1, 1]
    assert transactions[0].tables == ["toddy_test.outbox"]


def test_only_row_transactions_committed_by_an_xid_may_share_a_commit(shared_binlog):
    from replay.job.sinks.statements import mergeable
    data = read(shared_binlog("gh-ost/mysql-bin.000066"))  # 2 DDL, then 11 row trx
    transactions, _, fde_event = assemble(data, "mysql-bin.000066")
    fde = ev.parse_format_description(fde_event)
    assert [mergeable(t, True, fde) for t in transactions] == [False] * 2 + [True] * 11
    commit_query = replace(transactions[2], events=transactions[2].events[:-1])
    assert not mergeable(commit_query, True, fde)  # no XID: not a transactional commit


def test_binlog_statements_are_cut_only_where_a_row_statement_ends(shared_binlog):
    from replay.job.sinks.statements import binlog_chunks, row_events
    data = read(shared_binlog("gh-ost/mysql-bin.000066"))
    transactions, _, fde_event = assemble(data, "mysql-bin.000066")
    fde = ev.parse_format_description(fde_event)
    rows = [e for t in transactions for e in row_events(t)]
    ends = [e for e in rows if e[4] in ev.ROWS_EVENTS and ev.rows_statement_end(e, fde)]
    chunks = binlog_chunks(rows, fde, cap=1)  # cut at every statement end
    assert len(chunks) == len(ends) == 16
    assert all(c[0][4] == ev.TABLE_MAP and c[-1] in ends for c in chunks)
    assert [e for c in chunks for e in c] == rows
    assert binlog_chunks(rows, fde, cap=1 << 20) == [rows]


def test_compressed_transactions_become_the_plain_events_they_hold(shared_binlog):
    """A MySQL TRANSACTION_PAYLOAD (zstd) is decoded into its events, whole and
    checksummed as the file's own (binlog/compressed.py; more in test_compressed.py)."""
    data = read(shared_binlog("rust_mysql_common/transaction_compression.000001"))
    transactions, incomplete, _ = assemble(data, "transaction_compression.000001")
    assert transactions and incomplete is None
    kinds = [[e[4] for e in trx.events] for trx in transactions]
    assert all(ev.TRANSACTION_PAYLOAD not in k for k in kinds)
    assert [ev.ANONYMOUS_GTID, ev.QUERY, ev.TABLE_MAP, 30, ev.XID] in kinds  # 30: WRITE_ROWS_V2


def index(name, before, after, next_file=None):
    return {"name": name, "gtid_before": before, "gtid_after": after, "next_file": next_file,
            "first_commit": None}


def test_plan_refuses_a_hole_unless_allowed():
    sealed = [("b.000001", "k1", index("b.000001", "", "0-1-5", "b.000002")),
              ("b.000003", "k3", index("b.000003", "0-1-9", "0-1-12", "b.000004"))]
    with pytest.raises(ResyncRequired, match="b.000002: missing"):
        plan_units("s", sealed, None)
    units, cut = plan_units("s", sealed, None, allow_gaps=True)
    assert [u.name for u in units] == ["b.000001", "b.000003"] and not cut


def test_plan_skips_files_before_the_start_and_after_the_stop():
    sealed = [(f"b.00000{i}", f"k{i}", index(f"b.00000{i}", f"0-1-{i * 10}",
                                             f"0-1-{i * 10 + 10}", f"b.00000{i + 1}"))
              for i in range(1, 5)]
    units, cut = plan_units("s", sealed, None, start=lambda ix: ix["name"] == "b.000001",
                            stop=lambda ix: ix["name"] == "b.000004")
    assert [u.name for u in units] == ["b.000002", "b.000003"] and cut


def test_files_before_the_start_position_are_never_read():
    """Its own file stays (its earlier transactions are skipped one by one); with a
    history, a unit's epoch against the start's decides before the file names do."""
    def unit(name, position=(0, 0)):
        return Unit(name, (name,), {"name": name}, False, name, (), position=position)
    one = [unit(f"b.00000{i}") for i in range(1, 5)]
    assert [u.name for u in drop_before_start(one, Position("b.000003", 400))] == [
        "b.000003", "b.000004"]
    assert drop_before_start(one, None) == one
    two = [unit("b.000005", (-1, 0)), unit("b.000001"), unit("b.000002"),
           unit("b.000001", (1, 0))]
    assert drop_before_start(two, Position("b.000002", 4)) == two[2:]


def test_pick_source():
    assert pick_source(["a"], None) == "a"
    with pytest.raises(UsageError, match="--source-name"):
        pick_source(["a", "b"], None)
    with pytest.raises(UsageError, match="no source 'c'"):
        pick_source(["a", "b"], "c")


def test_rewrite_db_rebuilds_table_maps(shared_binlog):
    from mysqlbackup.binlog.tablemap import table_of
    from replay.job.decoding.transaction import rewrite_transaction
    from replay.planning.options import parse_rewrites
    data = read(shared_binlog(MARIA))
    transactions, _, _ = assemble(data, "mariadb-bin.000001")
    trx = rewrite_transaction(transactions[0], parse_rewrites(["toddy_test:restored_copy"]),
                              True)
    table_map = [e for e in trx.events if e[4] == ev.TABLE_MAP][0]
    assert table_of(table_map) == "restored_copy.outbox"
    assert ev.crc_ok(table_map)
    assert ev.parse_header(table_map).size == len(table_map)
    original = [e for e in transactions[0].events if e[4] == ev.TABLE_MAP][0]
    assert len(table_map) == len(original) + len("restored_copy") - len("toddy_test")
    with pytest.raises(UsageError, match="FROM:TO"):
        parse_rewrites(["nocolon"])


def test_query_status_vars_of_real_files(shared_binlog):
    from mysqlbackup.binlog.query_vars import raw_query, session_statements
    from mysqlbackup.binlog.transactions import TrxTracker
    seen = 0
    for name in ("rust_mysql_common/mariadb-bin.000001", "rust_mysql_common/binlog_transaction_with_GTID.000001"):
        path = shared_binlog(name)
        tracker = TrxTracker()
        for _, event in iter_events(read(path), 4, None, file=path):
            tracker.feed(event)
            if event[4] != ev.QUERY:
                continue
            q = raw_query(event, tracker.checksum, tracker.fde)
            assert q.sql.decode() == ev.parse_query(event, tracker.checksum, tracker.fde).sql
            assert {"flags2", "sql_mode", "charset"} <= set(q.status), q.status
            sets = session_statements(q)
            assert sets[0].startswith("SET TIMESTAMP=") and any("sql_mode=" in s for s in sets)
            seen += 1
    assert seen > 4


def test_what_a_ddl_says_when_it_runs_a_second_time():
    from replay.job.sinks.statements import errors_if_already_applied as again
    assert 1060 in again(b"ALTER TABLE m.t ADD COLUMN n INT")
    assert again(b"/* from the app */ CREATE TABLE IF NOT EXISTS a (x INT)") == {1050}
    assert again(b"CREATE TABLE x LIKE missing") == {1050}  # not 1146: that is real
    assert again(b"CREATE OR REPLACE DEFINER=`u`@`%` TRIGGER tr BEFORE INSERT ON t "
                 b"FOR EACH ROW SET @x = 1") == {1359}
    assert again("drop schema d") == {1008}
    assert again(b"TRUNCATE TABLE t") == set() and again(b"INSERT INTO t VALUES (1)") == set()


def test_plan_takes_an_unindexed_newest_segment_as_in_flight_but_not_a_hole():
    sealed = [("b.000001", "k1", index("b.000001", "", "0-1-5", "b.000002"))]
    seg = dict(index("b.000002", "0-1-5", "0-1-7"), first_commit=None)
    in_flight = ("b.000002", [(0, 100, "p0", seg), (100, 180, "p1", None)])
    units, _ = plan_units("s", sealed, in_flight)
    assert units[-1].keys == ("p0",)  # replayed up to the last indexed segment
    first = ("b.000002", [(0, 100, "p0", None)])  # the new file's first upload in flight
    units, _ = plan_units("s", sealed, first)
    assert [u.name for u in units] == ["b.000001"]  # not a file of no bytes (bad magic)
    hole = ("b.000002", [(0, 100, "p0", seg), (100, 180, "p1", None), (180, 200, "p2", seg)])
    with pytest.raises(ResyncRequired, match="segment missing at offset 100"):
        plan_units("s", sealed, hole)
