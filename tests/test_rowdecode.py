"""The row decoder (replay.job.decoding.rowdecode) against the reference decoder
(mysql-replication): every rows event of the files in tests/data/binlogs (in every
clone: ``types-*`` hold every column type of MariaDB 10.11, 11.8 and MySQL 9.7) and of
the corpus in ../shared/binlogs decodes to the same values, type for type, or fails in
both; and the two outputs built on them (the change table's rows, ``--sql``'s ``###``
lines) are the same text whichever decoder ran."""

import datetime
import decimal
import os
from types import SimpleNamespace

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import CorruptBinlog
from replay.job.decoding import changejson, changes, rowdecode, rowloop, rowtext
from replay.job.decoding.assemble import assemble
from replay.job.decoding.changes import (OPS, ChangeDecodeError, Reader, decode_event,
                                         decode_rows_event, iter_changes)
from replay.job.decoding.rowtext import RowText
from tests.conftest import OWN_BINLOGS, SHARED_BINLOGS

# made by scripts/make_type_binlogs.py from the live servers of the tests
TYPES = ["types-mariadb-10.11.000001", "types-mariadb-11.8.000001", "types-mysql-9.7.000001"]
LOOPS = [pytest.param(rowloop, id="pure"),
         pytest.param(rowdecode.compiled, id="compiled", marks=pytest.mark.skipif(
             rowdecode.compiled is None, reason=rowdecode.describe()))]


@pytest.fixture(params=LOOPS, autouse=True)
def loop(request, monkeypatch):
    """Each test runs with the pure row loop and with the compiled one (when built)."""
    monkeypatch.setattr(rowdecode, "loop", request.param)
    return request.param


def read(path):
    with open(path, "rb") as f:
        return f.read()


def own_files():
    return [os.path.join(OWN_BINLOGS, n) for n in sorted(os.listdir(OWN_BINLOGS))]


def corpus_files():
    if not os.path.isdir(SHARED_BINLOGS):
        pytest.skip(f"needs the real-binlog corpus {SHARED_BINLOGS} (../shared/binlogs beside "
                    "the checkout; not part of a clone of the repository)")
    found = []
    for root, _, names in sorted(os.walk(SHARED_BINLOGS)):
        found += [os.path.join(root, n) for n in sorted(names)
                  if read(os.path.join(root, n))[:4] == ev.MAGIC]
    return found


def parsed(path):
    """(transactions, fde, checksum) of a file, or None when it does not assemble."""
    try:
        transactions, _, fde_event = assemble(read(path), os.path.basename(path), newest=True)
    except CorruptBinlog:
        return None
    if fde_event is None:
        return None
    fde = ev.parse_format_description(fde_event)
    return ([t for t in transactions if not t.incident and t.events], fde,
            fde.checksum_alg == ev.CHECKSUM_CRC32)


def same(a, b, ordered=True):
    """Equal and of the same types all the way down, dict keys in the same order (but in
    the none sources: a lookup by column name)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        if (list(a) if ordered else sorted(a)) != (list(b) if ordered else sorted(b)):
            return False
        return all(same(a[k], b[k], not str(k).endswith("none_sources")) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def outcome(call):
    """('ok', value) or ('error', exception type) of a call."""
    try:
        return "ok", call()
    except (ChangeDecodeError, CorruptBinlog) as e:
        return "error", type(e)


def compare_file(path):
    """Compare the two decoders on every rows event of one file: (events the row decoder
    read, events it left to the library, rows compared)."""
    found = parsed(path)
    if found is None:
        return 0, 0, 0
    transactions, fde, checksum = found
    reader = Reader.of(fde, checksum)
    fast = fallback = rows = 0
    for trx in transactions:
        table_map = {}
        for event in trx.events:
            etype = event[4]
            if etype == ev.TABLE_MAP:
                try:
                    table = decode_event(event, table_map, reader, trx)
                except (ChangeDecodeError, CorruptBinlog):
                    table_map.clear()
                    continue
                for i, column in enumerate(table.columns):  # as both consumers do: the
                    column.name = column.name or f"@{i + 1}"  # library loses the unnamed
                continue
            if etype not in OPS:
                continue
            table = table_map.get(int.from_bytes(event[19:25], "little"))
            try:
                rowdecode.plan_of(table, reader.dbms) if table else None
                fast += 1
            except rowdecode.Unsupported:
                fallback += 1
            mine = outcome(lambda: decode_rows_event(event, table_map, reader, trx, False))
            theirs = outcome(lambda: decode_rows_event(event, table_map, reader, trx, True))
            where = f"{os.path.basename(path)}: {ev.event_name(etype)} of {trx.gtid}"
            assert mine[0] == theirs[0], (where, mine, theirs)
            if mine[0] == "error":
                assert mine[1] is theirs[1], (where, mine, theirs)
                continue
            assert same(mine[1].rows, theirs[1].rows), (where, mine[1].rows, theirs[1].rows)
            assert (mine[1].schema, mine[1].table) == (theirs[1].schema, theirs[1].table)
            rows += len(mine[1].rows)
    return fast, fallback, rows


def test_the_type_files_hold_every_column_type():
    """The committed ``types-*`` files are there (scripts/make_type_binlogs.py) and their
    rows events read by the row decoder, every column type of the three servers."""
    for name in TYPES:
        fast, fallback, rows = compare_file(os.path.join(OWN_BINLOGS, name))
        assert fast >= 10 and rows >= 10, (name, fast, fallback, rows)


def test_every_own_file_decodes_the_same_both_ways():
    total = [0, 0, 0]
    for path in own_files():
        for i, n in enumerate(compare_file(path)):
            total[i] += n
    assert total[0] >= 60 and total[2] >= 60, total


def test_every_corpus_file_decodes_the_same_both_ways():
    total = [0, 0, 0]
    for path in corpus_files():
        for i, n in enumerate(compare_file(path)):
            total[i] += n
    assert total[0] >= 90 and total[2] >= 110, total


def outputs(path, monkeypatch, reference):
    """The change table's rows and the ``###`` lines of a file, with one decoder."""
    monkeypatch.setattr(changes, "REFERENCE_ONLY", reference)
    found = parsed(path)
    if found is None:
        return None
    transactions, fde, checksum = found
    table, lines, tables = [], [], {}
    for trx in transactions:
        table.append(outcome(lambda: list(iter_changes(trx, fde, checksum, []))))
        lines.extend(RowText(trx, fde, checksum, tables).lines(trx.events))
    return table, lines


@pytest.mark.parametrize("which", ["own", "corpus"])
def test_the_change_table_and_the_row_comments_are_the_same_text_both_ways(which,
                                                                            monkeypatch):
    paths = own_files() if which == "own" else corpus_files()
    compared = 0
    for path in paths:
        mine = outputs(path, monkeypatch, False)
        theirs = outputs(path, monkeypatch, True)
        assert mine == theirs, path
        compared += len(mine[1]) if mine else 0
    assert compared >= 50


def test_values_of_the_type_files():
    """A few values read by the row decoder, checked by hand against what the server
    was given (scripts/make_type_binlogs.py), beside the reference's agreement."""
    transactions, fde, checksum = parsed(os.path.join(OWN_BINLOGS, TYPES[0]))
    done = [outcome(lambda: list(iter_changes(t, fde, checksum, []))) for t in transactions]
    rows = [c for kind, changes_ in done if kind == "ok" for c in changes_]
    assert ("error", ChangeDecodeError) in done  # binlog_row_metadata=MINIMAL: refused
    first = rows[0]
    assert (first["op"], first["db"], first["table"], first["pk"]) == \
        ("insert", "ty", "a", '{"id":1}')
    after = first["after"]
    for text in ['"bu":18446744073709551615', '"dz":"-12345678901234567890123456789012345.'
                 '123456789012345678901234567890"', '"tm6":"-12:34:56.789012"',
                 '"tm1":"-00:00:00.500000"', '"vl":"café"', '"vg":"中"', '"s":["x","z"]',
                 '"b13":"1010101010101"', '"dt6":"9999-12-31T23:59:59.999999"',
                 '"ts6":"2038-01-19T03:14:07.999999Z"']:
        assert text in after, (text, after)


def test_decimal_and_temporal_edges_match_the_reference_by_construction():
    """Values built here, byte by byte, read as the library reads them."""
    plan = rowdecode.Plan(((rowloop.K_DECIMAL, 10, 2, "d"),), "s", "t", 1)
    event = _write_rows([b"\x00", bytes([0x7F, 0xFF, 0xFF, 0xFE, 0xFF])], plan)
    [row] = rowdecode.decode_rows(event, plan, False)
    assert same(row["values"]["d"], decimal.Decimal("-1.00"))
    plan = rowdecode.Plan(((rowloop.K_DATETIME2, 0, None, "t"),), "s", "t", 1)
    event = _write_rows([b"\x00", b"\x80\x00\x00\x00\x00"], plan)
    [row] = rowdecode.decode_rows(event, plan, False)
    assert row == {"values": {"t": None}, "none_sources": {"t": "out of datetime2 range"}}
    assert rowloop.time2(b"\x7f\xff\xff", 0) == -datetime.timedelta(seconds=1)


def _write_rows(image, plan):
    """A WRITE_ROWS (v1) event of one row image of ``plan``'s one column, no CRC."""
    body = (b"\x01\x00\x00\x00\x00\x00" + b"\x00\x00" + b"\x01" + b"\x01"
            + b"".join(image))
    header = b"\x00" * 4 + bytes([23]) + b"\x01\x00\x00\x00" + \
        (19 + len(body)).to_bytes(4, "little") + b"\x00" * 6
    return header + body


def test_a_timestamp_past_2038_is_read_where_mariadb_11_5_and_later_write_it():
    """MariaDB 11.5+ stores a TIMESTAMP up to 2106 in 4 unsigned bytes: the row loops read
    them unsigned, and the reference's signed reading (1904) is mended to the same."""
    plan = rowdecode.Plan(((rowloop.K_TIMESTAMP2, 2, None, "t"),), "s", "t", 1)
    seconds = 2208988800  # 2040-01-01 00:00:00 UTC, past 2**31
    event = _write_rows([b"\x00", seconds.to_bytes(4, "big"), bytes([25])], plan)
    [row] = rowdecode.decode_rows(event, plan, False)
    expected = datetime.datetime(2040, 1, 1, 0, 0, 0, 250000)
    assert same(row["values"]["t"], expected)
    signed = [{"values": {"t": expected - datetime.timedelta(seconds=1 << 32)}}]
    changes._mend_timestamps(signed, [SimpleNamespace(name="t", type=FIELD_TYPE.TIMESTAMP2)])
    assert same(signed[0]["values"]["t"], expected)


def row_comments(path):
    """The ``###`` lines of a file (``RowText``), with the row loop ``rowdecode.loop``."""
    found = parsed(path)
    if found is None:
        return []
    transactions, fde, checksum = found
    tables = {}
    return [line for trx in transactions
            for line in RowText(trx, fde, checksum, tables).lines(trx.events)]


def twins_agree(which, produce, monkeypatch):
    """``produce(path)`` of every own or corpus file is the same with the pure row loop
    and with the compiled one; what the pure one produced, file by file."""
    paths = own_files() if which == "own" else corpus_files()
    produced = []
    for path in paths:
        monkeypatch.setattr(rowdecode, "loop", rowloop)
        pure = produce(path)
        monkeypatch.setattr(rowdecode, "loop", rowdecode.compiled)
        assert produce(path) == pure, path
        produced.append(pure)
    return produced


@pytest.mark.skipif(rowdecode.compiled is None, reason=rowdecode.describe())
@pytest.mark.parametrize("which", ["own", "corpus"])
def test_the_compiled_row_line_writes_the_pure_ones_text(which, monkeypatch):
    # rowtext.row_line and its compiled twin (_rowtext.row_line), line for line
    produced = twins_agree(which, row_comments, monkeypatch)
    assert sum(line.startswith("### ") for lines in produced for line in lines) >= 50


@pytest.mark.skipif(rowdecode.compiled is None, reason=rowdecode.describe())
def test_the_compiled_row_line_cuts_as_the_pure_one():
    # a row past ROW_CAP, a value past VALUE_CAP, quotes, control characters, NULLs

    values = {f"c{i}": "x" * (i * 37 % 300) for i in range(40)}
    values.update({"q": "it's", "ctl": "a\x01b", "n": None, "i": -5, "gone": None})
    sources = {"n": "null", "gone": rowloop.COLS_BITMAP}
    parts = [("### UPDATE `d`.`t` WHERE", values, sources), ("SET", {"i": 7}, {})]
    for unknown in (set(), {"i"}):
        assert rowtext.compiled.row_line(parts, {}, {}, unknown) == \
            rowtext.row_line(parts, {}, {}, unknown)
    short = [("### INSERT INTO `d`.`t` SET", {"a": "ok", "b": None, "c": 3},
              {"b": "null"})]
    assert rowtext.compiled.row_line(short, {"a": "`a`"}, {}, set()) == \
        "### INSERT INTO `d`.`t` SET `a`='ok' b=NULL c=3"


def change_rows(path):
    """The change table's rows of a file (``iter_changes``; a transaction it refuses as
    its exception type), with the row loop ``rowdecode.loop``."""
    found = parsed(path)
    if found is None:
        return []
    transactions, fde, checksum = found
    tables = {}
    return [outcome(lambda: list(iter_changes(trx, fde, checksum, [], tables)))
            for trx in transactions]


@pytest.mark.skipif(rowdecode.compiled is None, reason=rowdecode.describe())
@pytest.mark.parametrize("which", ["own", "corpus"])
def test_the_compiled_json_image_gives_the_pure_ones_rows(which, monkeypatch):
    # changejson.image_values and its compiled twin (_changejson.json_image), row change for row change
    produced = twins_agree(which, change_rows, monkeypatch)
    compared = sum(len(rows) for outcomes in produced for kind, rows in outcomes
                   if kind == "ok")
    assert compared >= (50 if which == "own" else 10)  # (few corpus files have names)


def pack_decimal(text, precision, scale):
    """``text`` as the server packs a DECIMAL(precision, scale)."""
    dig2bytes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    negative, text = text.startswith("-"), text.lstrip("-")
    whole, _, frac = text.partition(".")
    whole, frac = whole.zfill(precision - scale), frac.ljust(scale, "0")
    out, lead = b"", (precision - scale) % 9
    if lead:
        out += int(whole[:lead]).to_bytes(dig2bytes[lead], "big")
    for i in range(lead, len(whole), 9):
        out += int(whole[i:i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(frac[i:i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac[scale - scale % 9:]).to_bytes(dig2bytes[scale % 9], "big")
    out = bytes([out[0] | 0x80]) + out[1:]
    return bytes(b ^ 0xFF for b in out) if negative else out


def pack_datetime2(y, mo, d, h, mi, s, micros=None):
    packed = (1 << 39) | (y * 13 + mo) << 22 | d << 17 | h << 12 | mi << 6 | s
    return packed.to_bytes(5, "big") + (b"" if micros is None else micros.to_bytes(3, "big"))


# (kind, parameter 1, parameter 2, name), the decoder's column type, a value's bytes
EDGE_COLUMNS = [
    ((rowloop.K_INT, 8, True, "a"), FIELD_TYPE.LONGLONG, (-1).to_bytes(8, "little", signed=True)),
    ((rowloop.K_INT, 4, False, "b"), FIELD_TYPE.LONG, (2 ** 32 - 1).to_bytes(4, "little")),
    ((rowloop.K_INT, 3, True, "c"), FIELD_TYPE.INT24, (-5).to_bytes(3, "little", signed=True)),
    ((rowloop.K_STRING, 1, "utf-8", "d"), FIELD_TYPE.VARCHAR, b"\x0dhello world-1"),
    ((rowloop.K_STRING, 1, "utf-8", "e"), FIELD_TYPE.VARCHAR, b"\x0ait's a \\ b"),
    ((rowloop.K_STRING, 1, "utf-8", "f"), FIELD_TYPE.VARCHAR, b"\x05caf\xc3\xa9"),
    ((rowloop.K_STRING, 1, "cp1252", "g"), FIELD_TYPE.STRING, b"\x04abc\x80"),
    ((rowloop.K_STRING, 2, None, "h"), FIELD_TYPE.BLOB, b"\x05\x00\x00\x01xyz"),
    ((rowloop.K_STRING, 1, None, "i"), FIELD_TYPE.STRING, b"\x05plain"),
    ((rowloop.K_STRING, 1, "utf-16-be", "k"), FIELD_TYPE.STRING, b"\x04okok"),
    ((rowloop.K_DECIMAL, 12, 2, "j1"), FIELD_TYPE.NEWDECIMAL, pack_decimal("0.50", 12, 2)),
    ((rowloop.K_DECIMAL, 12, 2, "j2"), FIELD_TYPE.NEWDECIMAL, pack_decimal("-0.00", 12, 2)),
    ((rowloop.K_DECIMAL, 10, 0, "j3"), FIELD_TYPE.NEWDECIMAL, pack_decimal("-1234567890", 10, 0)),
    ((rowloop.K_DECIMAL, 4, 4, "j4"), FIELD_TYPE.NEWDECIMAL, pack_decimal("-.0001", 4, 4)),
    ((rowloop.K_DECIMAL, 65, 30, "j5"), FIELD_TYPE.NEWDECIMAL,
     pack_decimal("-12345678901234567890123456789012345.123456789012345678901234567890", 65, 30)),
    ((rowloop.K_DATETIME2, 6, None, "t1"), FIELD_TYPE.DATETIME2,
     pack_datetime2(2024, 2, 29, 23, 59, 59, 123456)),
    ((rowloop.K_DATETIME2, 6, None, "t2"), FIELD_TYPE.DATETIME2,
     pack_datetime2(2026, 11, 28, 10, 0, 0, 0)),
    ((rowloop.K_DATETIME2, 0, None, "t3"), FIELD_TYPE.DATETIME2,
     pack_datetime2(2023, 2, 29, 1, 2, 3)),
    ((rowloop.K_DATETIME2, 0, None, "t4"), FIELD_TYPE.DATETIME2,
     pack_datetime2(2023, 4, 31, 1, 2, 3)),
    ((rowloop.K_DATETIME2, 0, None, "t5"), FIELD_TYPE.DATETIME2,
     pack_datetime2(2023, 4, 30, 24, 0, 0)),
    ((rowloop.K_DATETIME2, 0, None, "t6"), FIELD_TYPE.DATETIME2,
     pack_datetime2(1900, 2, 29, 0, 0, 0)),
    ((rowloop.K_DATETIME2, 0, None, "t7"), FIELD_TYPE.DATETIME2,
     pack_datetime2(2000, 2, 29, 0, 0, 0)),
    ((rowloop.K_TIMESTAMP2, 3, None, "ts"), FIELD_TYPE.TIMESTAMP2,
     (2208988800).to_bytes(4, "big") + (1234).to_bytes(2, "big")),
    ((rowloop.K_FLOAT, 4, None, "fl"), FIELD_TYPE.FLOAT, bytes.fromhex("cdcc8c3f")),
    ((rowloop.K_DATE, 3, None, "dt"), FIELD_TYPE.DATE,
     (2026 << 9 | 11 << 5 | 28).to_bytes(3, "little")),
    ((rowloop.K_INT, 4, True, "null"), FIELD_TYPE.LONG, None),
    ((rowloop.K_INT, 4, True, "absent"), FIELD_TYPE.LONG, None),
]


def edge_rows(specs, rows=2):
    """(row images' bytes, image plan, labels, columns, unknown) of ``rows`` rows of the
    columns ``specs``: every column present but the one named "absent", "null" NULL."""
    plan = rowdecode.Plan(tuple(s[0] for s in specs), "d", "t", 1)
    present = sum(1 << i for i, s in enumerate(specs) if s[0][3] != "absent")
    image = plan.image(present)
    shown = [s for s in specs if s[0][3] != "absent"]
    nulls = sum(1 << i for i, s in enumerate(shown) if s[0][3] == "null")
    row = nulls.to_bytes(image[3], "little") + b"".join(s[2] for s in shown if s[2] is not None)
    labels = tuple(f"`{s[0][3]}`" if i % 2 else s[0][3] for i, s in enumerate(specs))
    columns = tuple(SimpleNamespace(type=s[1], name=s[0][3]) for s in specs)
    unknown = tuple(s[0][3] == "a" for s in specs)
    return row * rows, image, labels, columns, unknown


@pytest.mark.skipif(rowdecode.compiled is None, reason=rowdecode.describe())
def test_the_compiled_rows_text_writes_the_pure_ones_bytes_at_the_edges():

    data, image, labels, columns, unknown = edge_rows(EDGE_COLUMNS)
    texts = []
    for after, heads in ((None, ("### INSERT INTO `d`.`t` SET",)),
                         (image, ("### UPDATE `d`.`t` WHERE", "SET"))):
        args = (data, 0, len(data), image, after, heads, labels, columns, unknown)
        pure = rowtext.rows_text(*args)
        assert rowtext.compiled.rows_text(*args) == pure
        assert pure[1] == len(data)
        texts.append(pure[0].decode("utf-8"))
    assert texts[1].count("\n") == 1 and " SET a=-1 " in texts[1]  # two images, one row
    text = texts[0]
    for shown in ["a=-1 (18446744073709551615)", "`b`=4294967295", "c=-5",
                  "`d`='hello world-1'", "e='it\\'s a \\\\ b'", "`f`='café'", "g='abc€'",
                  "`h`=X'000178797A'", "i='plain'", "`k`='\u6f6b\u6f6b'", "j1=0.50", "`j2`=-0.00",
                  "j3=-1234567890", "`j4`=-0.0001",
                  "j5=-12345678901234567890123456789012345.123456789012345678901234567890",
                  "`t1`='2024-02-29 23:59:59.123456'", "t2='2026-11-28 10:00:00'",
                  "`t3`='0000-00-00 00:00:00'", "t4='0000-00-00 00:00:00'",
                  "`t5`='0000-00-00 00:00:00'", "t6='0000-00-00 00:00:00'",
                  "`t7`='2000-02-29 00:00:00'", "ts='2040-01-01 00:00:00.123000+00:00'",
                  "`fl`=1.1", "dt='2026-11-28'", "`null`=NULL"]:
        assert shown in text, shown
    assert "absent" not in text and text.count("\n") == 2


@pytest.mark.skipif(rowdecode.compiled is None, reason=rowdecode.describe())
def test_the_compiled_rows_text_cuts_as_the_pure_one():
    # a row past ROW_CAP in the first image, and one cut in an update's second image

    for count in (40, 12):
        specs = [((rowloop.K_STRING, 1, "utf-8", f"c{i}"), FIELD_TYPE.VARCHAR,
                  bytes([200]) + b"x" * 200) for i in range(count)]
        data, image, labels, columns, unknown = edge_rows(specs)
        args = (data, 0, len(data), image, image, ("### UPDATE `d`.`t` WHERE", "SET"),
                labels, columns, unknown)
        pure = rowtext.rows_text(*args)
        assert rowtext.compiled.rows_text(*args) == pure
        line = pure[0].decode().split("\n")[0]
        assert line.endswith(f"... ({2 * count - 19} more values)"), line[-40:]
        assert ("SET" in line) == (count == 12)


def change_counts(path):
    """Each transaction's changes as ``summary.format_changes`` says them: the rows
    counted, not decoded (``rowcount.walk_rows``), with the row loop ``rowdecode.loop``."""
    from replay.job.decoding.summary import ChangeCollector, format_changes
    found = parsed(path)
    if found is None:
        return []
    transactions, fde, checksum = found
    collector, said = ChangeCollector(fde, checksum), []
    for trx in transactions:
        for event in trx.events:
            collector.event(event)
        said.append(format_changes(collector.finish()))
    return said


@pytest.mark.skipif(rowdecode.compiled is None, reason=rowdecode.describe())
@pytest.mark.parametrize("which", ["own", "corpus"])
def test_the_compiled_row_walk_counts_as_the_pure_one(which, monkeypatch):
    # rowcount.walk_rows and its compiled twin (_rowcount.walk_rows), transaction by
    # transaction
    produced = twins_agree(which, change_counts, monkeypatch)
    said = [line for lines in produced for line in lines]
    assert sum(any(c.isdigit() for c in line) for line in said) >= 50, said[:5]


@pytest.mark.skipif(rowdecode.compiled is None, reason=rowdecode.describe())
def test_the_compiled_image_json_writes_the_json_modules_text():
    import json
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    images = [{}, {"id": 1, "c": "plain", "n": None, "s": ["x", "y"], "e": []},
              {"q": 'say "hi"', "b": "back\\slash", "ctl": "a\x01b\nc\td", "u": "café 中 \u2028",
               "del": "\x7f", "big": 1 << 62, "neg": -(1 << 62) + 1, "huge": 1 << 70},
              {"t": True, "f": 1.5, "d": {"nested": [1, "2"]}}, {"sur": "a\ud800b"},
              {'k"ey': 1, "ké": "v"}]
    for image in images:
        assert changejson.compiled.image_json(image) == encoder.encode(image), image
    with pytest.raises(ValueError):
        changejson.compiled.image_json({"x": float("nan")})
