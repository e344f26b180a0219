"""The change table decoder (replay.changes) on real binlog files."""

import datetime
import decimal
import json
from types import SimpleNamespace

import pytest

from mysqlbackup import events as ev
from mysqlbackup.scan import iter_events
from replay.assemble import assemble
from replay.changes import ChangeDecodeError, encode_value, iter_changes
from tests.helpers import read

MARIA = "rust_mysql_common/mariadb-bin.000001"


def changes_of(path, name):
    transactions, _, fde_event = assemble(read(path), name)
    fde = ev.parse_format_description(fde_event)
    return [c for t in transactions for c in iter_changes(t, fde, fde.checksum_alg == 1)]


# -- pure decoding, real files ---------------------------------------------------------

def test_value_encoding_rules():
    set_column = SimpleNamespace(type=248, set_values=["x", "y", "z"])
    stamp_column = SimpleNamespace(type=17, set_values=None)
    assert encode_value(decimal.Decimal("0.00000001")) == "0.00000001"  # never 1E-8
    assert encode_value(decimal.Decimal("-12.30")) == "-12.30"
    assert encode_value(b"\x00\xff\x10") == "AP8Q"
    assert encode_value(datetime.datetime(2024, 1, 2, 3, 4, 5, 678000)) == \
        "2024-01-02T03:04:05.678000"
    assert encode_value(datetime.datetime(2024, 1, 2, 3, 4, 5), stamp_column) == \
        "2024-01-02T03:04:05Z"
    assert encode_value(datetime.date(2024, 2, 29)) == "2024-02-29"
    assert encode_value(-datetime.timedelta(hours=12, minutes=30)) == "-12:30:00"
    assert encode_value(datetime.timedelta(hours=838, microseconds=5)) == "838:00:00.000005"
    assert encode_value({"z", "x"}, set_column) == ["x", "z"]
    assert encode_value({b"k": [1, decimal.Decimal("2.5")]}) == {"k": [1, "2.5"]}
    with pytest.raises(ChangeDecodeError, match="cannot encode a object"):
        encode_value(object())


def test_changes_of_a_real_mariadb_file(shared_binlog):
    changes = changes_of(shared_binlog(MARIA), "mariadb-bin.000001")
    assert [(c["op"], c["db"], c["table"], c["pk"], c["before"], c["gtid"], c["position"],
             c["row_index"]) for c in changes] == [
        ("insert", "toddy_test", "outbox", '{"id":62}', None, "0-1-1", 612, 0),
        ("insert", "toddy_test", "outbox", '{"id":63}', None, "0-1-2", 984, 0)]
    assert json.loads(changes[0]["after"]) == {
        "id": 62, "topic": "foo", "event_type": "JSON", "event": "eyJmb28iOjF9",  # a BLOB
        "created": "2022-04-20T22:18:04Z"}                                       # TIMESTAMP
    assert changes[0]["commit_time"] == datetime.datetime(2022, 4, 20, 22, 18, 4,
                                                          tzinfo=datetime.timezone.utc)
    data = read(shared_binlog(MARIA))
    rows_at = [off for off, e in iter_events(data, 4, True) if e[4] == 23]
    assert [c["position"] for c in changes] == rows_at


def test_a_table_map_without_column_names_is_refused(shared_binlog):
    # MySQL 8.0.40 with binlog_row_metadata=MINIMAL
    with pytest.raises(ChangeDecodeError, match=r"^minimal_row_metadata\.000001:312: TABLE_MAP "
                       r"of noria\.t1 carries no column names: the source needs "
                       r"binlog_row_metadata=FULL for --parquet$"):
        changes_of(shared_binlog("rust_mysql_common/minimal_row_metadata.000001"),
                   "minimal_row_metadata.000001")


def test_statement_based_dml_is_refused_not_dropped(shared_binlog):
    # MySQL 5.6, MIXED: INSERTs logged as statements
    with pytest.raises(ChangeDecodeError, match=r":585: statement-based INSERT .*"
                       r"binlog_format=ROW"):
        changes_of(shared_binlog("rust_mysql_common/binlog_56_gtid_reserved_word.000001"),
                   "binlog_56_gtid_reserved_word.000001")

