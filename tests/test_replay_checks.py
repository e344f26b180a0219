"""Replay's checks of what it reads (issue 10): each object against its index, the
chain across units, errors named by object, bad indexes, USE suppressed by the event.

Real binlog files from ../shared/binlogs; the archive is a file:// store in tmp_path
(no server, no Spark: the task function runs in this process)."""

import os
from dataclasses import replace

import pytest

from mysqlbackup.archive.index import build_index
from mysqlbackup.archive.names import binlog_key as _binlog_key
from mysqlbackup.archive.names import format_key
from mysqlbackup.archive.names import segment_key as _segment_key
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.names import next_binlog_name
from mysqlbackup.binlog.transactions import TrxTracker
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError, ResyncRequired
from replay.job.decoding.assemble import assemble
from replay.planning.plan import ReplayOptions, units_to_read
from replay.job.tasks import TaskResult, decode_unit
from replay.planning.units import (Unit, UnitObject, check_decoded, check_link,
                                       check_listed_sizes, plan_units)
from replay.job.sinks.statements import suppresses_use, transaction_steps
from tests.conftest import SHARED_BINLOGS
from tests.helpers import make_event, read

MARIA = "rust_mysql_common/mariadb-bin.000001"
NAME = "mariadb-bin.000001"

def binlog_key(*args, **kwargs):
    return format_key(_binlog_key(*args, **kwargs))


def segment_key(*args, **kwargs):
    return format_key(_segment_key(*args, **kwargs))


def real(relative):
    path = os.path.join(SHARED_BINLOGS, relative)
    if not os.path.isdir(SHARED_BINLOGS):
        pytest.skip(f"real binlogs missing: {SHARED_BINLOGS} (../shared/binlogs next to "
                    "the repository)")
    return read(path)


@pytest.mark.parametrize("relative", [MARIA, "mysql-binlog-connector-rust/mysql-bin.000080",
                                      "gh-ost/mysql-bin.000066",
                                      "rust_mysql_common/binlog_transaction_with_GTID.000001"])
def test_chain_facts_of_the_bytes_are_the_ones_the_index_records(relative):
    data = real(relative)
    facts = {}
    assemble(data, os.path.basename(relative), facts=facts)
    index = build_index(data, os.path.basename(relative))
    assert facts == {f: index[f] for f in ("gtid_before", "gtid_after", "next_file")}
    assert any(facts.values())  # each of these files has a GTID state or a ROTATE


@pytest.fixture
def sealed(tmp_path):
    """A file:// archive holding the real MariaDB file as a sealed object: (store, url)."""
    url = f"file://{tmp_path / 'archive'}"
    store = ArchiveStore(url)
    data = real(MARIA)
    store.put_bytes(binlog_key("s", NAME), data)
    store.put_json(binlog_key("s", NAME, index=True), build_index(data, NAME, source="s"))
    return store, url


def planned(url, allow_gaps=False):
    """The single unit of the archive as the driver plans it."""
    _, units, _ = units_to_read(ReplayOptions(url, {}, allow_gaps=allow_gaps))
    assert len(units) == 1
    return units[0]


def decoded(url, allow_gaps=False, unit=None):
    """The single unit of the archive (or ``unit``, planned before the archive changed),
    decoded as a Spark task would: (unit, result)."""
    unit = unit or planned(url, allow_gaps)
    return unit, decode_unit(unit, url, {})


def refused_at_plan(url, allow_gaps=False):
    """A size the listing shows against the index is refused before anything runs."""
    with pytest.raises(CorruptBinlog, match="the archive lists .* its index says"):
        planned(url, allow_gaps)


def test_a_sound_object_passes_and_gives_its_chain_facts(sealed):
    unit, result = decoded(sealed[1])
    assert check_decoded(unit, result) is False
    assert result.facts["gtid_after"] == unit.index["gtid_after"]
    assert len(result.transactions) == 2


def test_an_object_replaced_by_another_file_is_refused_by_name(sealed):
    store, url = sealed
    before = planned(url)  # changed between the plan and the decode: the sha256 check
    store.put_bytes(binlog_key("s", NAME), real("gh-ost/mysql-bin.000066"))
    refused_at_plan(url)
    unit, result = decoded(url, unit=before)
    assert result.error is None  # it decodes: only its index tells it is not the one
    with pytest.raises(CorruptBinlog, match=r"^s/binlog/mariadb-bin.000001: .*not the "
                                            r"archived object"):
        check_decoded(unit, result)


def test_an_object_cut_at_a_transaction_boundary_is_refused_by_name(sealed):
    store, url = sealed
    data = real(MARIA)
    first_end = assemble(data, NAME)[0][0].end
    before = planned(url)
    store.put_bytes(binlog_key("s", NAME), data[:first_end])
    refused_at_plan(url)
    unit, result = decoded(url, unit=before)
    assert result.error is None and result.incomplete is None
    with pytest.raises(CorruptBinlog, match=rf"s/binlog/{NAME}: stored as {first_end} "
                                            rf"bytes.*its index says {len(data)} bytes"):
        check_decoded(unit, result)


def test_a_flipped_byte_comes_back_as_the_decode_error_with_object_and_offset(sealed):
    store, url = sealed
    data = bytearray(real(MARIA))
    second = assemble(bytes(data), NAME)[0][1]
    data[second.start + 30] ^= 0x40
    store.put_bytes(binlog_key("s", NAME), bytes(data))
    unit, result = decoded(url)
    assert result.error.kind == "corrupt"  # not an exception Spark would wrap
    with pytest.raises(CorruptBinlog, match=rf"^s/binlog/{NAME} at offset "
                                            rf"{second.start}: .*CRC") as caught:
        check_decoded(unit, result)
    assert caught.value.exit_code == 6


def test_an_object_cut_inside_an_event_names_object_and_offset(sealed):
    store, url = sealed
    data = real(MARIA)
    second = assemble(data, NAME)[0][1]
    before = planned(url)
    store.put_bytes(binlog_key("s", NAME), data[:second.start + 10])
    refused_at_plan(url)
    unit, result = decoded(url, unit=before)
    with pytest.raises(CorruptBinlog, match=rf"^s/binlog/{NAME} at offset {second.start}: "
                                            r"torn event"):
        check_decoded(unit, result)


def test_an_index_that_lies_about_the_chain_is_refused(sealed):
    store, url = sealed
    index = store.read_json(binlog_key("s", NAME, index=True))
    index["gtid_after"] = "0-1-999"  # size and sha256 still right
    store.put_json(binlog_key("s", NAME, index=True), index)
    unit, result = decoded(url)
    with pytest.raises(CorruptBinlog, match=r"bytes give gtid_after '0-1-2', its index says "
                                            r"'0-1-999'"):
        check_decoded(unit, result)


def test_an_object_gone_after_the_plan_is_a_clear_error(sealed):
    store, url = sealed
    _, units, _ = units_to_read(ReplayOptions(url, {}))
    store.remove(binlog_key("s", NAME))
    result = decode_unit(units[0], url, {})
    with pytest.raises(MysqlBackupError, match="archive changed during the replay"):
        check_decoded(units[0], result)


@pytest.mark.parametrize("text", [b"{not json", b"[]", b"{}", b'{"name": 5}'])
def test_a_bad_sealed_index_is_refused_by_name_before_spark(sealed, text):
    store, url = sealed
    store.put_bytes(binlog_key("s", NAME, index=True), text)
    with pytest.raises(CorruptBinlog, match=rf"s/binlog/{NAME}.json: .*index") as caught:
        units_to_read(ReplayOptions(url, {}))
    assert caught.value.exit_code == 6


def segments(tmp_path, cut):
    """The real MariaDB file as the newest (partial) file in two segments cut at ``cut``."""
    url = f"file://{tmp_path / 'archive'}"
    store = ArchiveStore(url)
    data, tracker = real(MARIA), TrxTracker()
    for start, end in ((0, cut), (cut, len(data))):
        piece = data[start:end]
        store.put_bytes(segment_key("s", NAME, start, end), piece)
        store.put_json(segment_key("s", NAME, start, end, index=True),
                       build_index(piece, NAME, start=start, tracker=tracker, source="s"))
    return store, url, data


@pytest.fixture
def partial(tmp_path):
    data = real(MARIA)
    return segments(tmp_path, assemble(data, NAME)[0][0].end)


def test_segments_of_the_newest_file_are_each_checked_against_their_own_index(partial):
    store, url, data = partial
    unit, result = decoded(url)
    assert unit.partial and len(result.digests) == 2
    assert check_decoded(unit, result) is False
    first, second = unit.objects
    store.put_bytes(first.key, b"\xfebin" + b"\0" * (first.index["size"] - 4))
    unit, result = decoded(url)
    with pytest.raises(CorruptBinlog, match=rf"^{first.key}"):
        check_decoded(unit, result)


def test_a_lost_tail_of_the_newest_file_goes_on_only_with_allow_gaps(partial):
    store, url, data = partial
    key = [k for k in store.list("s/partial") if not k.endswith(".json")][-1]
    before = planned(url)
    store.put_bytes(key, store.read(key)[:-10])
    refused_at_plan(url)
    unit, result = decoded(url, unit=before)
    with pytest.raises(CorruptBinlog, match=rf"^{key}: stored as \d+ bytes"):
        check_decoded(unit, result)
    unit, result = decoded(url, allow_gaps=True)
    assert check_decoded(unit, result, allow_gaps=True) is True
    assert result.incomplete is not None  # the cut transaction is dropped, not applied


@pytest.mark.parametrize("text", [b"garbage", b"[]", b"{}"])
def test_a_bad_segment_index_is_refused_by_name(partial, text):
    store, url, _ = partial
    key = sorted(k for k in store.list("s/partial") if k.endswith(".json"))[0]
    store.put_bytes(key, text)
    with pytest.raises(CorruptBinlog, match=rf"^{key}: .*index"):
        units_to_read(ReplayOptions(url, {}))


def unit(name, partial=False):
    return Unit(name, (), {"name": name}, partial, f"s/binlog/{name}", ())


def test_the_chain_must_hold_between_the_units_replayed():
    a = (unit("b.000001"), {"gtid_after": "0-1-5", "next_file": "b.000002"})
    check_link(a, (unit("b.000002"), {"gtid_before": "0-1-5"}))
    with pytest.raises(CorruptBinlog, match=r"^s/binlog/b.000001: its ROTATE names b.000002, "
                                            r"but the replay goes on with b.000003"):
        check_link(a, (unit("b.000003"), {"gtid_before": "0-1-5"}))
    with pytest.raises(CorruptBinlog, match=r"^s/binlog/b.000002: starts after GTIDs "
                                            r"'0-1-4', but b.000001 ends at '0-1-5'"):
        check_link(a, (unit("b.000002"), {"gtid_before": "0-1-4"}))
    no_rotate = (unit("b.000009"), {"gtid_after": "0-1-5", "next_file": None})
    check_link(no_rotate, (unit("b.000010"), {"gtid_before": "0-1-5"}))
    assert next_binlog_name("b.000009") == "b.000010"


def test_a_sealed_file_ending_inside_a_transaction_is_refused_before_apply():
    index = {"size": 10, "sha256": "0" * 64, "gtid_before": None, "gtid_after": None,
             "next_file": None, "name": "b.000001", "first_commit": None}
    units, _ = plan_units("s", [("b.000001", "s/binlog/b.000001", index)], None)
    result = TaskResult("b.000001", False, digests=[(10, "0" * 64)], facts={
        "gtid_before": None, "gtid_after": None, "next_file": None},
        incomplete={"start": 4})
    with pytest.raises(ResyncRequired, match="s/binlog/b.000001 ends inside a transaction"):
        check_decoded(units[0], result)


def test_create_database_runs_without_use_as_its_event_says():
    data = real("rust_mysql_common/vector.binlog")
    transactions, _, fde_event = assemble(data, "vector.binlog")
    fde = ev.parse_format_description(fde_event)
    seen = {}
    for trx in transactions:
        for event in trx.events:
            if event[4] != ev.QUERY:
                continue
            sql = ev.parse_query(event, True, fde).sql
            if sql.split()[0].upper() in ("CREATE", "DROP"):
                steps = transaction_steps(trx, fde, True)
                seen[sql.split("(")[0].strip()] = [w for k, w in steps if k == "sql"
                                                   and w.startswith("USE")]
                assert suppresses_use(event) == (" DATABASE " in f" {sql.upper()} ")
    assert seen["CREATE DATABASE dtb CHARSET utf8mb4"] == []
    assert seen["drop database dtb"] == []
    assert seen["CREATE TABLE foo"] == ["USE `dtb`"]


def test_the_suppress_use_flag_is_the_header_bit_0x8():
    body = b"\0" * 13
    assert suppresses_use(make_event(ev.QUERY, body, 100, flags=0x8))
    assert not suppresses_use(make_event(ev.QUERY, body, 100, flags=0x4 | 0x10))


def test_an_object_the_store_cannot_read_is_named(sealed):
    store, url = sealed
    _, units, _ = units_to_read(ReplayOptions(url, {}))
    unreadable = replace(units[0], keys=("s/binlog",))  # a folder, not an object
    result = decode_unit(unreadable, url, {})
    assert result.error.kind == "unreadable"
    with pytest.raises(MysqlBackupError, match=rf"^s/binlog/{NAME}: cannot read the object: "):
        check_decoded(unreadable, result)


def test_listed_sizes_refuse_a_replaced_or_cut_object_before_anything_is_applied():
    key = "s/binlog/b.000002"
    unit = Unit("b.000002", (key,), {"size": 500}, False, key,
                (UnitObject(key, 0, {"size": 500}),))
    check_listed_sizes([unit], {"s/binlog/b.000002": 500})
    with pytest.raises(CorruptBinlog, match="s/binlog/b.000002: the archive lists 420 bytes"):
        check_listed_sizes([unit], {"s/binlog/b.000002": 420})
    segment = "s/partial/b.000003/0-100"
    newest = Unit("b.000003", (segment,), {"size": 100}, True, "s/partial/b.000003",
                  (UnitObject(segment, 0, {"size": 100}),))
    check_listed_sizes([newest], {"s/partial/b.000003/0-100": 60}, allow_gaps=True)
    with pytest.raises(CorruptBinlog):
        check_listed_sizes([newest], {"s/partial/b.000003/0-100": 60})
