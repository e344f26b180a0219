"""The one table of the binlog's column types (``mysqlbackup.binlog.tablemap``): the
metadata each type has, the size of its values in a row image, its SQL name, and the one
reader of a packed DECIMAL; the row counter reads TABLE_MAPs with ``parse_table_map`` (the
one TABLE_MAP parser) and sizes their values with ``value_size``. The sizes are checked
on every TABLE_MAP and rows event of the own and corpus files: the counted rows are the
rows the row decoder reads."""

import decimal

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.tablemap import (COLUMN_TYPES, DATA_TYPES, META_BYTES, ColumnType,
                                         decimal_groups, decimal_size, parse_table_map,
                                         value_size)
from replay.job.decoding import rowloop
from replay.job.decoding.changes import OPS
from replay.job.decoding.rowcount import TableLayout, count_rows
from replay.job.decoding.rowdecode import Plan, row_images
from tests.test_rowdecode import corpus_files, own_files, pack_decimal, parsed

T = ColumnType


def test_every_code_has_its_facts():
    assert set(COLUMN_TYPES) == set(ColumnType)
    assert META_BYTES[T.VARCHAR] == 2 and T.LONG not in META_BYTES
    assert DATA_TYPES[T.STRING] == "char" and DATA_TYPES[T.BLOB] == "blob"


@pytest.mark.parametrize("ctype, meta, size", [
    (T.LONGLONG, b"", (8, 0)),
    (T.VARCHAR, (255).to_bytes(2, "little"), (0, 1)),
    (T.VARCHAR, (256).to_bytes(2, "little"), (0, 2)),
    (T.STRING, bytes([T.STRING, 200]), (0, 1)),
    (T.STRING, bytes([T.ENUM, 2]), (2, 0)),           # an ENUM logged as STRING
    (T.STRING, bytes([0xEE, 0x80]), (0, 2)),          # CHAR(255) of utf8mb4: 1020 bytes
    (T.BIT, bytes([3, 2]), (3, 0)),                    # 19 bits
    (T.DATETIME2, bytes([6]), (8, 0)),
    (T.TIMESTAMP2, bytes([3]), (6, 0)),
    (T.TIME2, bytes([0]), (3, 0)),
    (T.NEWDECIMAL, bytes([65, 30]), (30, 0)),
    (T.BLOB, bytes([2]), (0, 2)),
    (T.JSON, bytes([4]), (0, 4)),
    (T.BLOB, bytes([5]), None),
    (T.DECIMAL, b"", None),
])
def test_value_sizes(ctype, meta, size):
    assert value_size(ctype, meta) == size


@pytest.mark.parametrize("text, precision, scale", [
    ("0.50", 12, 2), ("-0.00", 12, 2), ("-1234567890", 10, 0), ("-.0001", 4, 4),
    ("123456789012345678901234567890123.123456789012345678901234567890", 63, 30),
    ("99.9", 3, 1),
])
def test_one_decimal_reader(text, precision, scale):
    packed = pack_decimal(text, precision, scale)
    assert len(packed) == decimal_size(precision, scale)
    negative, whole, fraction, after = decimal_groups(b"xy" + packed, 2, precision, scale)
    assert after == 2 + len(packed)
    value = decimal.Decimal(("-" if negative else "") + "".join(whole) + "." +
                            "".join(fraction))
    assert value == decimal.Decimal(text)
    assert rowloop.read_decimal(packed, 0, precision, scale) == (value, len(packed))
    with pytest.raises(ValueError):
        decimal_groups(packed[:-1], 0, precision, scale)


@pytest.mark.parametrize("which", ["own", "corpus"])
def test_the_counted_rows_are_the_decoded_rows(which):
    """Every rows event whose rows the counter walks (``count_rows`` on the layout of its
    TABLE_MAP, read by ``parse_table_map``) has as many rows as the pure row loop reads
    with the same TABLE_MAP's plan."""
    compared = 0
    for path in own_files() if which == "own" else corpus_files():
        found = parsed(path)
        if found is None:
            continue
        transactions, fde, checksum = found
        for trx in transactions:
            layouts = {}
            for event in trx.events:
                if event[4] == ev.TABLE_MAP:
                    table = parse_table_map(event, checksum, fde)
                    layouts[table.table_id] = (TableLayout.parse(event, fde, checksum), table)
                elif event[4] in OPS:
                    table_id = int.from_bytes(event[19:25], "little")
                    if table_id not in layouts:
                        continue
                    layout, table = layouts[table_id]
                    assert (layout.table_id, layout.db, layout.table) == \
                        (table.table_id, table.schema, table.table)
                    counted = count_rows(event, layout, fde, checksum)
                    if counted is None:
                        continue
                    assert counted == sum(1 for _ in _rows(event, table, checksum, fde)), path
                    compared += 1
    assert compared >= (40 if which == "own" else 1)


def _rows(event, table, checksum, fde):
    """The rows of a rows event by the pure row loop, with a plan of ``table``'s integer
    and sized columns (each read as its size says: enough to count)."""
    columns = []
    for i, (ctype, meta) in enumerate(zip(table.types, table.metas)):
        fixed, prefix = value_size(ctype, meta)
        columns.append((rowloop.K_BYTES, prefix, None, f"c{i}") if prefix else
                       (rowloop.K_BIT, fixed, 8 * fixed, f"c{i}"))
    plan = Plan(tuple(columns), table.schema, table.table, table.table_id)
    data, pos, end, before, after = row_images(event, plan, checksum)
    rows, _ = rowloop.read_rows(data, pos, end, before, after)
    return rows
