"""MySQL JSON columns in the change table: MySQL's binary JSON decoded to the text MySQL
prints (replay.job.decoding.mysqljson), checked on hand-made values and against a live MySQL
9.7: what `SELECT doc` shows and what `mysqlbinlog -vv` prints for the same events; a
partial JSON update (PARTIAL_UPDATE_ROWS) refused naming its file and offset; MariaDB's
JSON (a LONGTEXT) left as its text."""

import json
import math
import os
import random
import re
import struct
import subprocess
import time
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import iter_events
from replay.job.decoding.changes import ChangeDecodeError, iter_changes
from replay.job.decoding.mysqljson import (
    JsonBinaryError,
    decimal_text,
    double_text,
    json_text,
    temporal_text,
)
from replay.job.decoding.transaction import Transaction
from tests.helpers import Daemon, read, run_cli, wait_for
from tests.test_mysql_live import archived_last, last_of
from tests.test_parquet import archive_of

# -- pure: hand-made binary values -------------------------------------------------------


def _hex(text):
    return bytes.fromhex(re.sub(r"\s+", "", text))


def _nested_pairs(depth):
    """An array whose two entries both point at the same nested array, ``depth`` deep."""
    body = b"\x00\x00\x04\x00"  # []
    for _ in range(depth):
        body = struct.pack("<HH", 2, 10 + len(body)) + b"\x02\x0a\x00" * 2 + body
    return b"\x02" + body


def _nested(depth):
    """``depth`` arrays, each holding the next ([[...[1]...]])."""
    body = struct.pack("<HH", 1, 7) + b"\x05\x01\x00"  # [1]
    for _ in range(depth - 1):
        body = struct.pack("<HH", 1, 7 + len(body)) + b"\x02\x07\x00" + body
    return b"\x02" + body


CASES = [
    # the value: a small object, one key, a string by offset
    ("00 0100 1200 0b00 0100 0c 0c00 73 05 68656c6c6f", '{"s": "hello"}'),
    # MySQL's own bytes (9.7) for '{"s":"hello","n":1}': keys sorted, 1 inlined
    ("00 0200 1a00 1200 0100 1300 0100 05 0100 0c 1400 6e 73 05 68656c6c6f",
     '{"n": 1, "s": "hello"}'),
    # literals and integers at the top level
    ("04 00", "null"), ("04 01", "true"), ("04 02", "false"),
    ("05 ff7f", "32767"), ("05 0080", "-32768"), ("06 ffff", "65535"),
    ("07 00000080", "-2147483648"), ("08 ffffffff", "4294967295"),
    ("09 0000000000000080", "-9223372036854775808"),
    ("0a ffffffffffffffff", "18446744073709551615"),
    # doubles
    ("0b 9a9999999999b93f", "0.1"), ("0b 000000000000f03f", "1.0"),
    ("0b 0000000000000080", "-0.0"), ("0b 00003426f56b0c43", "1e15"),
    ("0b 000066373f2be642", "195000000000000.0"), ("0b 4d67e2f1059ea53c", "1.5e-16"),
    # a string whose size takes two bytes (200 = c8 01)
    ("0c c801" + "61" * 200, '"' + "a" * 200 + '"'),
    # escapes: " \ \b \f \n \r \t, other controls as \u00xx; / and DEL and UTF-8 as they are
    ("0c 10 22 5c 08 0c 0a 0d 09 01 1f 2f 7f c3a9 e298 95",
     '"\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f/\x7fé☕"'),
    # a small array: int16 and uint16 and a literal inlined, {} and an int32 by offset
    ("02 0500 1b00 05ffff 06ffff 040000 001300 071700 00000400 a0860100",
     "[-1, 65535, null, {}, 100000]"),
    # a large array (4-byte counts and offsets): an int32 inlined, a string by offset
    ("03 02000000 15000000 0700000100 0c12000000 02 6869", '[65536, "hi"]'),
    # a large object: a literal inlined in its 4-byte slot
    ("01 01000000 14000000 13000000 0100 0401000000 6b", '{"k": true}'),
    # opaque values: DECIMAL (precision, scale, binary), dates and times (packed, 8 bytes)
    ("0f f6 04 0302 8132", "1.50"),
    ("0f f6 04 0302 7ffa", "-0.05"),
    ("0f f6 0c 140a 810dfb38d200bc614e09", "1234567890.0123456789"),
    ("0f 0a 08 0000000000bab219", '"2024-02-29"'),
    ("0f 0c 08 40e201053144b219", '"2024-01-02 03:04:05.123456"'),
    ("0f 07 08 0000000100c20219", '"1970-01-01 00:00:01.000000"'),
    ("0f 0b 08 e05ef84737ffffff", '"-12:34:56.500000"'),
    ("0f 0b 08 000000fb6e340000", '"838:59:59.000000"'),
    # VAR_STRING prints as a string; anything else as base64:typeN: (a newline every 76)
    ("0f fd 03 616263", '"abc"'),
    ("0f 0f 02 00ff", '"base64:type15:AP8="'),
    ("0f fc 3c" + "00ff7f" * 20,
     '"base64:type252:' + "AP9/" * 19 + "\\n" + "AP9/" + '"'),
    # MySQL's own bytes (9.7) for '[1e300, 0.1, -0.0, 1.0, 100, 18446744073709551615, ...]'
    (("020c0080000b28000b30000b38000b40000564000a48000950000b58000b60000b68000b70000a7800"
      "9c7500883ce4377e9a9999999999b93f0000000000000080000000000000f03fffffffffffffffff0000"
      "00000000008000003426f56b0c430000901ec4bcd6421656e79eaf03d23cbc89d897b2d29c3c4ef330a6"
      "4b9bb601"),
     ("[1e300, 0.1, -0.0, 1.0, 100, 18446744073709551615, -9223372036854775808, 1e15, "
      "100000000000000.0, 0.000000000000001, 1e-16, 123456789012345678]")),
    # an empty value: the null literal, as MySQL reads it
    ("", "null"),
]


@pytest.mark.parametrize("raw, text", CASES)
def test_hand_made_binary_values(raw, text):
    assert json_text(_hex(raw)) == text


def test_the_text_is_json_and_nesting_reaches_mysqls_limit():
    for raw, text in CASES:
        json.loads(text)  # every text is valid JSON
    assert json_text(_nested(100)) == "[" * 100 + "1" + "]" * 100  # MySQL's deepest
    with pytest.raises(JsonBinaryError, match="nested deeper than 100 levels"):
        json_text(_nested(101))
    assert json_text(_nested_pairs(3)) == "[[[[], []], [[], []]], [[[], []], [[], []]]]"


@pytest.mark.parametrize("raw, error", [
    ("0d 00", "unknown JSON type 0x0d"),
    ("04 03", "unknown literal 03"),
    ("05 ff", "integer cut short"),
    ("0c 05 6162", "string cut short"),
    ("0c ff ff ff ff ff", "malformed variable-length size"),
    ("0c 01 ff", "string that is not UTF-8"),
    ("00 0100 ff00", "container of 255 bytes in 4"),
    ("02 0300 0600 0000", "header of 3 entries larger than its container"),
    ("02 0100 0700 0c 0000", "value offset 0 outside its container"),
    ("00 0100 0b00 0000 0100 04 0100", "key 0 outside its object"),
    ("0f f6 03 0302 81", "DECIMAL\\(3,2\\) of 1 bytes, not 2"),
    ("0f f6 06 0900 bb9aca00", "digit group 1000000000 over 9 digits"),
    ("0f 0c 07 00000000000000", "packed date/time of 7 bytes, not 8"),
])
def test_malformed_values_are_refused(raw, error):
    with pytest.raises(JsonBinaryError, match=error):
        json_text(_hex(raw))


def test_entries_pointing_into_each_other_are_refused_not_walked():
    data = _nested_pairs(40)  # 2**40 values to print from 405 bytes
    started = time.monotonic()
    with pytest.raises(JsonBinaryError, match="value entries point into each other"):
        json_text(data)
    assert time.monotonic() - started < 1


def test_doubles_print_as_mysql_prints_them():
    # MySQL 9.7: SELECT CAST('[...]' AS JSON) of these, as it printed them
    assert [double_text(x) for x in (
        1e300, -1e-300, 1.7976931348623157e308, 5e-324, 123456789012345678.0,
        1234567890123456.7, 12345678901234567.0, 0.000001, 1e21, -1.5e-7, 2.0, 100.0,
        0.30000000000000004, 1e22, -123.456e5, 9007199254740993.0, 1e14, 1e-15, 1e-16)] == [
        "1e300", "-1e-300", "1.7976931348623157e308", "5e-324", "1.2345678901234568e17",
        "1234567890123456.8", "1.2345678901234568e16", "0.000001", "1e21", "-0.00000015",
        "2.0", "100.0", "0.30000000000000004", "1e22", "-12345600.0",
        "9.007199254740992e15", "100000000000000.0", "0.000000000000001", "1e-16"]


def test_decimals_and_temporals_alone():
    assert decimal_text(bytes([3, 2]) + _hex("8000")) == "0.00"
    assert decimal_text(bytes([5, 0]) + _hex("800007")) == "7"
    assert temporal_text(10, bytes(8)) == "0000-00-00"
    assert temporal_text(11, _hex("0100000000000000")) == "00:00:00.000001"


def test_real_binlogs_of_mysql_9_and_8(shared_binlog):
    # MySQL 9.0.1, JSON with opaque values: the texts mysqlbinlog 9.7 -vv prints for them
    from tests.test_parquet import changes_of
    changes = changes_of(shared_binlog("rust_mysql_common/json-opaque.binlog"),
                         "json-opaque.binlog")
    assert [json.loads(c["after"])["a"] for c in changes] == [
        '{"a": "base64:type15:VQ=="}', '{"b": "2012-03-18"}',
        '{"c": "2012-03-18 11:30:45.000000"}', '{"c": "87:31:46.654321"}',
        '{"d": 123.456}', '{"e": 9.00}', '{"e": [0, 1, true, false]}', '{"e": null}']
    # MySQL 8.0.22 with minimal row metadata (and PARTIAL_JSON, refused by the live test
    # below): refused at its first TABLE_MAP, file and offset
    with pytest.raises(ChangeDecodeError, match=r"^json\.binlog\.000001:1000: TABLE_MAP of "
                       r"mysql\.t carries no column names"):
        changes_of(shared_binlog("rust_mysql_common/json.binlog.000001"), "json.binlog.000001")


# -- live: MySQL 9.7, streamed to an archive, replay --parquet --------------------------

def _random_doubles(count, seed=2024):
    rnd, out = random.Random(seed), []
    while len(out) < count:
        x = struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(x):
            out.append(x)
    out += [rnd.uniform(-1e6, 1e6) for _ in range(100)]
    out += [rnd.random() * 10.0 ** rnd.randint(-20, 20) for _ in range(100)]
    out += [10.0 ** k for k in range(-20, 25)] + [1.5 * 10.0 ** k for k in range(-20, 25)]
    return out


STRINGS = ["", "héllo wörld ☕ 𝄞 中文 \u2028 \x85",
           "q \" b \\ t \t n \n r \r bs \b ff \f c \x01 \x1f d \x7f", "/slash", "x" * 300]
DOCS = {  # id: the SQL of the doc column
    1: "'{\"s\":\"hello\"}'",
    2: "'{\"s\": \"x\", \"nested\": {\"a\": [1, 2, {\"b\": null}], \"e\": {}, \"f\": []}, "
       "\"t\": true, \"f\": false, \"n\": null, \"ключ\": \"значение\", \"k\\\\\"q\": 1}'",
    3: "'[0, -1, 32767, -32768, 32768, 65535, 65536, -2147483648, 2147483647, 2147483648, "
       "4294967295, 4294967296, 9223372036854775807, -9223372036854775808, "
       "18446744073709551615]'",
    4: None,  # the doubles (a parameter)
    5: None,  # the strings (a parameter)
    6: "'\"just a string\"'", 7: "'42'", 8: "'18446744073709551615'", 9: "'-3.25'",
    10: "'true'", 11: "'false'", 12: "'null'", 13: "NULL", 14: "'{}'", 15: "'[]'",
    16: "'{\"bb\": 1, \"a\": 2, \"ccc\": 3, \"ab\": 4, \"\": 5}'",
    17: "'" + "[" * 100 + "\"deep\"" + "]" * 100 + "'",
    18: None, 19: None,  # larger than 64 KiB: the large format (parameters)
    20: "CAST(CAST('2024-02-29' AS DATE) AS JSON)",
    21: "CAST(CAST('2024-01-02 03:04:05.123456' AS DATETIME(6)) AS JSON)",
    22: "CAST(CAST('-838:59:59' AS TIME) AS JSON)",
    23: "CAST(1.50 AS JSON)",
    24: "CAST(x'00ff10' AS JSON)",
    25: "JSON_OBJECT('now', NOW(6), 'today', CURDATE(), 'utc', UTC_TIMESTAMP(), "
        "'t', CURTIME(3))",
}
FROM_SOURCE = {  # id: the doc, built from the typed columns of j.src (opaque values)
    26: "JSON_OBJECT('ts', ts, 'y', y, 'b', b, 'bl', bl, 'vb', vb, 'bn', bn, 'g', g, "
        "'f', f, 'dt', dt, 'tm', tm, 'dc', dc, 'd', d, 'e', e, 'st', st)",
    27: "JSON_ARRAY(ts, y, b, bl, vb, bn, dt, tm, dc, d, CAST(0.5 AS DECIMAL(3,2)), -0.05, "
        "CAST(7 AS DECIMAL(5,0)), CAST(0 AS DECIMAL(4,2)), CAST(ts AS DATE))",
}
PARAMS = {
    4: lambda: json.dumps(_random_doubles(400)),
    5: lambda: json.dumps({"list": STRINGS, "ключ ☕": STRINGS[1], "": "empty key"},
                          ensure_ascii=False),
    18: lambda: json.dumps({"big": "b" * 70000, "k": [1, "a", 2.5, None, {"z": 1}],
                            "bb": 1, "a": 2}),
    19: lambda: json.dumps(["y" * 70000, 1, -1, 70000, 4294967295, -2147483648, True, None]),
}
UPDATES = [
    ("UPDATE j.docs SET doc = JSON_SET(doc, '$.s', 'bye', '$.when', "
     "CAST('2020-01-01 10:00:00' AS DATETIME)) WHERE id = 1"),
    "UPDATE j.docs SET note = 'touched' WHERE id IN (3, 4, 20, 26)",
    "UPDATE j.docs SET doc = NULL WHERE id = 7",
    "UPDATE j.docs SET doc = CAST('{\"was\": null}' AS JSON) WHERE id = 13",
    "DELETE FROM j.docs WHERE id IN (2, 6, 21)",
]


def _workload(server):
    server.execute(
        "CREATE DATABASE j",
        "CREATE TABLE j.docs (id INT PRIMARY KEY, doc JSON, note VARCHAR(20))",
        "CREATE TABLE j.src (ts TIMESTAMP(3), y YEAR, b BIT(10), bl BLOB, vb VARBINARY(20), "
        "bn BINARY(3), g POINT, f FLOAT, dt DATETIME, tm TIME(2), dc DECIMAL(65,30), d DATE, "
        "e ENUM('x', 'y'), st SET('a', 'b'))",
        "INSERT INTO j.src VALUES ('2024-03-04 05:06:07.891', 2024, b'1010101010', "
        "REPEAT(x'00ff7f', 40), x'0102', 'ABC', POINT(1.5, -2), 1.25, '2000-01-01 00:00:00', "
        "'-1:02:03.45', -12345678901234567890.123456789012345678901234567890, '1999-12-31', "
        "'y', 'a,b')")
    conn = server.root()
    try:
        with conn.cursor() as cur:
            for id_, sql in DOCS.items():
                if id_ in PARAMS:
                    cur.execute("INSERT INTO j.docs (id, doc) VALUES (%s, %s)",
                                (id_, PARAMS[id_]()))
                else:
                    cur.execute(f"INSERT INTO j.docs (id, doc) VALUES ({id_}, {sql})")
            for id_, sql in FROM_SOURCE.items():
                cur.execute(f"INSERT INTO j.docs (id, doc) SELECT {id_}, {sql} FROM j.src")
            cur.execute("FLUSH BINARY LOGS")
            for sql in UPDATES:
                cur.execute(sql)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A MySQL server with the JSON workload, streamed by the daemon into a file://
    archive, and `replay --parquet` of the whole archive."""
    from mysqlbackup.sandbox.mysql import MySQLSandbox, why_no_mysql
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    base = tmp_path_factory.mktemp("mysqljson")
    server = MySQLSandbox(semi_sync=False, gtid_mode="ON").start()
    try:
        url = f"file://{base / 'archive'}"
        daemon = Daemon(server, base / "dir", "--start-file", server.binlog_files()[0],
                        "--archive", url, "--archive-interval", "0.2",
                        "--source-name", "my1").start()
        try:
            _workload(server)
            wait_for(lambda: archived_last(url) == last_of(server), 60,
                     what="the archive up to the last transaction")
        finally:
            assert daemon.stop() == 0, daemon.output()
        out = base / "changes"
        started = time.monotonic()
        replay = run_cli("replay", "--archive", url, "--parquet", f"file://{out}", timeout=300)
        took = time.monotonic() - started
        assert replay.returncode == 0, replay.stdout + replay.stderr
        rows = [r for part in sorted(out.glob("part-*.parquet"))
                for r in pq.read_table(part).to_pylist()]
        yield SimpleNamespace(server=server, rows=[r for r in rows if r["table"] == "docs"],
                              replay_seconds=took)
    finally:
        server.stop(remove=True)


def _doc(image):
    return None if image is None else json.loads(image)["doc"]


@pytest.mark.server
def test_the_change_table_holds_what_select_shows(live):
    final = dict(live.server.execute("SELECT id, doc FROM j.docs"))
    last, deleted = {}, {}
    for row in live.rows:
        id_ = json.loads(row["pk"])["id"]
        if row["op"] != "insert":  # each before image is the value the previous change left
            assert _doc(row["before"]) == last[id_], (id_, row["op"])
        if row["op"] == "delete":
            deleted[id_] = last.pop(id_)
        else:
            last[id_] = _doc(row["after"])
    assert last.keys() == final.keys() and set(deleted) == {2, 6, 21}
    for id_, text in final.items():
        assert last[id_] == text, id_  # the very text MySQL prints
        if text is not None:
            assert json.loads(last[id_]) == json.loads(text)
    inserted = {json.loads(r["pk"])["id"]: _doc(r["after"]) for r in live.rows
                if r["op"] == "insert"}
    assert inserted[1] == '{"s": "hello"}'  # the value: no base64 ("aGVsbG8=")
    assert last[1] == '{"s": "bye", "when": "2020-01-01 10:00:00.000000"}'
    assert (inserted[12], inserted[13], last[13]) == ("null", None, '{"was": null}')
    assert (inserted[6], deleted[6]) == ('"just a string"', '"just a string"')
    assert inserted[8] == "18446744073709551615" and inserted[23] == "1.50"
    assert inserted[16] == '{"": 5, "a": 2, "ab": 4, "bb": 1, "ccc": 3}'  # as stored
    assert (inserted[20], deleted[21], inserted[22]) == (
        '"2024-02-29"', '"2024-01-02 03:04:05.123456"', '"-838:59:59.000000"')
    assert inserted[24] == '"base64:type15:AP8Q"'
    assert json.loads(inserted[4]) == _random_doubles(400)  # every double exact
    assert json.loads(inserted[5]) == json.loads(PARAMS[5]())
    assert len(inserted[18]) > 70000 and len(inserted[19]) > 70000  # the large format
    assert json.loads(inserted[26])["dc"] == pytest.approx(-1.2345678901234567e19)
    assert '"dc": -12345678901234567890.123456789012345678901234567890' in inserted[26]
    assert '"bl": "base64:type252:' in inserted[26] and "\\n" in inserted[26]


def _mysqlbinlog_docs(server):
    """The doc column (@2) of each row image mysqlbinlog -vv prints, in binlog order:
    [(op, before, after)], each its text with mysqlbinlog's quoting undone, or None."""
    from mysqlbackup.sandbox.mysql import mysql_tree
    changes, image, op = [], None, None
    for name in server.binlog_files():
        out = subprocess.run(
            ["chroot", mysql_tree(), "/usr/bin/mysqlbinlog", "-vv",
             "--base64-output=DECODE-ROWS", f"{server.inner}/data/{name}"],
            capture_output=True, check=True).stdout.decode("utf-8", "surrogateescape")
        for line in out.split("\n"):  # (not splitlines: U+2028 is not a line end here)
            statement = re.match(r"### (INSERT INTO|UPDATE|DELETE FROM) `j`\.`docs`$", line)
            if statement:
                op = statement.group(1).split()[0].lower()
                changes.append([op, None, None])
            elif line in ("### SET", "### WHERE") and op:
                image = 2 if line == "### SET" else 1
            elif line.startswith("###   @2=") and op:
                value = line[len("###   @2="):].rsplit(" /* JSON meta=", 1)[0]
                changes[-1][image] = None if value == "NULL" else _unquote(value)
            elif not line.startswith("###"):
                op = None
    return [tuple(c) for c in changes]


_SQL_ESCAPES = {"\\": "\\", "'": "'", "n": "\n", "r": "\r", "t": "\t", "b": "\b",
                "f": "\f", "0": "\0"}


def _unquote(value):
    assert value[0] == value[-1] == "'", value
    return re.sub(r"\\(x[0-9a-f]{2}|.)", lambda m: chr(int(m.group(1)[1:], 16))
                  if len(m.group(1)) == 3 else _SQL_ESCAPES[m.group(1)], value[1:-1])


def _as_mysqlbinlog_prints(text):
    """mysqlbinlog prints a top-level string (and a date, time or opaque value) unquoted."""
    if text is None or not text.startswith('"'):
        return text
    return json.loads(text)


@pytest.mark.server
def test_mysqlbinlog_prints_the_same_values(live):
    ours = [(r["op"], _as_mysqlbinlog_prints(_doc(r["before"])),
             _as_mysqlbinlog_prints(_doc(r["after"]))) for r in live.rows]
    theirs = _mysqlbinlog_docs(live.server)
    assert len(theirs) == len(ours) == len(DOCS) + len(FROM_SOURCE) + 1 + 4 + 1 + 1 + 3
    for mine, printed in zip(ours, theirs):
        assert mine == printed


# -- partial JSON updates (binlog_row_value_options=PARTIAL_JSON) -----------------------

def test_a_partial_json_update_is_refused_naming_file_and_offset(make_mysql, tmp_path):
    server = make_mysql(semi_sync=False, extra_args=["--binlog-row-value-options=PARTIAL_JSON"])
    server.execute("CREATE DATABASE j",
                   "CREATE TABLE j.t (id INT PRIMARY KEY, doc JSON)",
                   "INSERT INTO j.t VALUES (1, '{\"a\": 1, \"b\": [1, 2, 3]}')",
                   "UPDATE j.t SET doc = JSON_SET(doc, '$.a', 2) WHERE id = 1")
    name = server.binlog_files()[-1]
    data = read(server.binlog_path(name))
    events = list(iter_events(data, 4, True))
    [at] = [off for off, e in events if e[4] == 39]
    # the change table refuses the event (replay.job.decoding.changes), in the task
    url = archive_of(server, tmp_path)
    out = tmp_path / "changes"
    result = run_cli("replay", "--archive", url, "--parquet", f"file://{out}", timeout=300)
    assert result.returncode != 0, result.stdout + result.stderr
    # (the active file's archived segment: its object key names the file)
    assert re.search(rf"error: {re.escape(name)}:{at}: PARTIAL_UPDATE_ROWS event",
                     result.stderr), result.stderr
    assert not (out / "_SUCCESS").exists()
    # and the change table's decoder refuses it too, should it ever be handed one
    first = max(i for i, (off, e) in enumerate(events) if off < at and e[4] == ev.GTID)
    last = next(i for i, (off, e) in enumerate(events) if off > at and e[4] == ev.XID)
    trx = Transaction(file=name, start=events[first][0], end=at,
                      events=[bytes(e) for _, e in events[first:last + 1]])
    fde = ev.parse_format_description(events[0][1])
    with pytest.raises(ChangeDecodeError, match=rf"^{re.escape(name)}:{at}: "
                       r"PARTIAL_UPDATE_ROWS event .*binlog_row_value_options=PARTIAL_JSON"):
        list(iter_changes(trx, fde, True))


# -- MariaDB: JSON is a LONGTEXT, its text stays as written -----------------------------

def test_mariadb_json_stays_its_text(make_server, tmp_path):
    server = make_server(semi_sync=False)
    text = '{"s":"hello",  "n": 1.50, "z": [1e2]}'
    server.execute("CREATE DATABASE j", "CREATE TABLE j.t (id INT PRIMARY KEY, doc JSON)",
                   f"INSERT INTO j.t VALUES (1, '{text}')")
    url = archive_of(server, tmp_path)
    out = tmp_path / "changes"
    result = run_cli("replay", "--archive", url, "--parquet", f"file://{out}", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    [row] = [r for p in sorted(out.glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert json.loads(row["after"]) == {"id": 1, "doc": text}
    assert os.path.exists(out / "_SUCCESS")
