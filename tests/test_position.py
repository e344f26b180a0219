"""Position: one value type for file:offset (pure)."""

import pytest

from mysqlbackup.binlog.position import Position, format_position, parse_position
from mysqlbackup.errors import UsageError


def test_positions_order_by_file_sequence_then_offset():
    assert Position("binlog.000009", 900) < Position("binlog.000010", 4)
    assert Position("binlog.999999", 4) < Position("binlog.1000000", 4)
    assert Position("binlog.000010", 4) < Position("binlog.000010", 5)
    assert max(Position("b.000001", 7), Position("b.000001", 70)).offset == 70


def test_format_and_parse_are_inverse():
    pos = Position("mariadb-bin.000012", 4711)
    assert format_position(pos) == str(pos) == "mariadb-bin.000012:4711"
    assert parse_position(str(pos)) == pos


@pytest.mark.parametrize("text", ["binlog.000001", "binlog:12", "binlog.000001:x", "", ":4"])
def test_bad_positions_are_usage_errors(text):
    with pytest.raises(UsageError, match="expected FILE:POS"):
        parse_position(text)
