"""archive find (a bad DELETE or DROP found by table, kind, time and rows) and replay
--sql's row comments: pure formatting, real binlogs of the corpus, a live MariaDB streamed
into an archive (one server for the module) and a live MySQL."""

import datetime
import decimal
import json
import os
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from pymysqlreplication.constants import NONE_SOURCE

from mysqlbackup.archive.index import build_index
from mysqlbackup.binlog import compressed as cz
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.cli import main
from mysqlbackup.errors import CorruptBinlog, UsageError
from mysqlbackup.sandbox import MariaDBSandbox
from replay.job.decoding.assemble import assemble
from replay.job.decoding.rowtext import ROW_CAP, VALUE_CAP, literal, query_lines, row_line
from replay.job.decoding.sqltext import statement_kind, statement_tables
from replay.job.decoding.summary import Change, clip, format_changes
from replay.find.criteria import Criteria
from replay.find.scan import FileScan
from replay.job.sinks.sqlfile import SqlFileSink
from tests.conftest import SHARED_BINLOGS
from tests.helpers import Daemon, read, run_cli, wait_for

DAY = "2026-01-01"


def invoke(*args):
    """(exit code, what a terminal shows) of ``mysqlbackup archive find ARGS``."""
    result = CliRunner().invoke(main, ["archive", "find", *args])
    return result.exit_code, result.output


def find_out(*args):
    """(exit code, stdout) of ``mysqlbackup archive find ARGS``."""
    result = CliRunner().invoke(main, ["archive", "find", *args])
    return result.exit_code, result.stdout


def column(ctype, **kw):
    return SimpleNamespace(type=ctype, set_values=None, **kw)


# -- pure: values, rows, statements, criteria --------------------------------------------

@pytest.mark.parametrize("value, ctype, source, text", [
    (None, 3, NONE_SOURCE.NULL, "NULL"),
    (None, 10, NONE_SOURCE.OUT_OF_DATE_RANGE, "'0000-00-00'"),
    (None, 248, NONE_SOURCE.EMPTY_SET, "''"),
    (42, 3, None, "42"),
    (decimal.Decimal("-12.30"), 246, None, "-12.30"),
    (decimal.Decimal("0.00000001"), 246, None, "0.00000001"),
    (0.1, 5, None, "0.1"),
    (0.10000000149011612, 4, None, "0.1"),  # a FLOAT: the shortest text of its 4 bytes
    ("it's\n\t\\", 15, None, "'it\\'s\\n\\t\\\\'"),
    ("\x1b[31m", 15, None, "X'1B5B33316D'"),  # a control character: never raw
    (b"caf\xc3\xa9", 252, None, "'café'"),
    (b"\x00\xffA", 252, None, "X'00FF41'"),
    (datetime.datetime(2026, 1, 1, 10, 0, 0, 123000), 18, None,
     "'2026-01-01 10:00:00.123000'"),
    (datetime.datetime(2026, 1, 1, 10, 0, 0), 17, None, "'2026-01-01 10:00:00+00:00'"),
    (datetime.date(2026, 2, 28), 10, None, "'2026-02-28'"),
    (datetime.timedelta(hours=-12, minutes=-30), 19, None, "'-12:30:00'"),
    ("10101", 16, None, "b'10101'"),
    ('{"a": 1}', 245, None, "'{\"a\": 1}'"),
])
def test_values_are_sql_literals(value, ctype, source, text):
    assert literal(value, column(ctype), source) == text


def test_integers_of_unknown_signedness_show_both_readings_as_mysqlbinlog_does():
    assert literal(-1, column(8), None, unsigned_unknown=True) == "-1 (18446744073709551615)"
    assert literal(-2, column(1), None, unsigned_unknown=True) == "-2 (254)"
    assert literal(5, column(1), None, unsigned_unknown=True) == "5"


def test_a_set_and_its_members_in_column_order():
    assert literal({"z", "x"}, SimpleNamespace(type=248, set_values=["x", "y", "z"])) == "'x,z'"


def test_big_values_and_rows_are_cut_and_say_how_big_they_were():
    blob = b"a" * (20 << 20)  # a 20 MB row value: a short line
    assert literal(blob, column(252)) == "'" + "a" * VALUE_CAP + "'... (20971520 bytes)"
    assert literal(b"\x00" * 1000, column(252)) == "X'" + "00" * (VALUE_CAP // 2) + \
        "'... (1000 bytes)"
    assert literal("é" * 300, column(15)) == "'" + "é" * VALUE_CAP + "'... (300 characters)"
    values = {f"c{i}": "x" * 200 for i in range(100)}
    line = row_line([("### INSERT INTO `d`.`t` SET", values, {})], {}, {}, set())
    assert len(line) <= ROW_CAP + 40 and line.endswith(" more values)")
    assert line.startswith("### INSERT INTO `d`.`t` SET c0='" + "x" * 200 + "' c1=")


def test_row_lines_leave_out_columns_missing_from_the_image():
    parts = [("### UPDATE `d`.`t` WHERE", {"@1": 1, "@2": None, "@3": 3},
              {"@2": NONE_SOURCE.COLS_BITMAP}), ("SET", {"@1": 1, "@2": None, "@3": 4},
                                                 {"@2": NONE_SOURCE.NULL})]
    assert row_line(parts, {}, {}, set()) == \
        "### UPDATE `d`.`t` WHERE @1=1 @3=3 SET @1=1 @2=NULL @3=4"


def test_annotated_queries_keep_their_lines_and_escape_the_rest():
    assert query_lines("DELETE FROM t\r\nWHERE a = '\x1b'") == [
        "#Q> DELETE FROM t", "#Q> WHERE a = '\\x1b'"]
    assert clip("DROP  TABLE\n t \x07", 12) == "DROP TABL..."
    assert clip("a\x07b") == "a\\x07b"


def test_changes_as_text():
    changes = [Change("shop.orders", "delete", 3), Change("shop.t", "update", 1),
               Change("shop.t", "insert", None, counted=False), Change("shop.x", "ddl"),
               Change("shop.s", "delete", None), Change("", "ddl")]
    assert format_changes(changes) == ("shop.orders delete 3 rows, shop.t update 1 row, "
                                       "shop.t insert, shop.x ddl, shop.s delete ? rows, ddl")
    assert format_changes([]) == "no changes"


@pytest.mark.parametrize("sql, kind, tables", [
    ("DROP TABLE `shop`.`orders` /* generated by server */", "ddl", ["shop.orders"]),
    ("drop table if exists a, b.c", "ddl", ["db.a", "b.c"]),
    ("RENAME TABLE a TO b, shop.c TO shop.d", "ddl", ["db.a", "db.b", "shop.c", "shop.d"]),
    ("TRUNCATE orders", "ddl", ["db.orders"]),
    ("DROP SCHEMA IF EXISTS `shop`", "ddl", ["shop.*"]),
    ("CREATE UNIQUE INDEX i ON shop.t (a)", "ddl", ["shop.t"]),
    ("# a comment\n/* another */ ALTER ONLINE TABLE t ENGINE=InnoDB", "ddl", ["db.t"]),
    ("DELETE FROM orders WHERE id IN (SELECT id FROM x)", "delete", ["db.orders"]),
    ("delete t1 FROM t1 JOIN t2", "delete", ["db.t1"]),
    ("UPDATE LOW_PRIORITY shop.orders SET a=1", "update", ["shop.orders"]),
    ("REPLACE INTO x.y SELECT 1", "insert", ["x.y"]),
    ("LOAD DATA INFILE 'f' INTO TABLE t", "insert", ["db.t"]),
    ("GRANT ALL ON *.* TO x", "ddl", []),
    ("BEGIN", "begin", []),
    ("XA START 'x'", "begin", []),
    ("COMMIT", "commit", []),
    ("XA COMMIT 'x'", "commit", []),
    ("SAVEPOINT a", "savepoint", []),
    ("ROLLBACK TO SAVEPOINT a", "savepoint", []),
])
def test_statements_are_told_by_their_words(sql, kind, tables):
    assert statement_kind(sql) == kind
    if kind not in ("begin", "commit", "savepoint"):
        assert statement_tables(sql, "db") == tables


def test_criteria():
    c = Criteria.parse(["shop.ord*"], ["delete", "ddl"], "2026-01-01 10:00:00",
                       "2026-01-01T11:00:00+00:00", 10)
    ten, eleven = c.since, c.until
    rows = [Change("shop.orders", "delete", 12), Change("shop.customers", "update", 1)]
    assert c.keep(ten, rows) and c.keep(eleven, rows)  # both ends inclusive
    assert not c.keep(ten - 1, rows) and not c.keep(eleven + 1, rows)
    assert not c.keep(ten, [Change("shop.orders", "delete", 9)])  # --min-rows
    assert c.keep(ten, [Change("shop.orders", "delete", None)])   # rows unknown: kept
    assert c.keep(ten, [Change("shop.*", "ddl")])  # DROP DATABASE shop
    assert not c.keep(ten, [Change("shop.customers", "delete", 50)])
    assert c.hits(rows) == rows[:1]
    assert c.outside({"first_commit": "2026-01-01T11:00:01Z", "last_commit": None})
    assert c.outside({"first_commit": None, "last_commit": "2026-01-01T09:59:59Z"})
    assert not c.outside({"first_commit": "2026-01-01T09:00:00Z",
                          "last_commit": "2026-01-01T10:00:00Z"})
    assert Criteria().keep(0, [])  # no options: everything
    for args, message in [((["orders"],), "bad --table 'orders': expected DB.TABLE"),
                          (((), ["drop"]), "bad --type 'drop'"),
                          (((), (), "yesterday"), "bad --since 'yesterday': use ISO 8601"),
                          (((), (), "2026-01-02", "2026-01-01"), "is after --until")]:
        with pytest.raises(UsageError, match=re.escape(message)):
            Criteria.parse(*args)


def test_bad_options_exact_output():
    assert invoke("--archive", "file:///nowhere", "--type", "drop") == (2, (
        "Usage: main archive find [OPTIONS]\nTry 'main archive find --help' for help.\n\n"
        "Error: Invalid value for '--type': 'drop' is not one of 'insert', 'update', "
        "'delete', 'ddl'.\n"))
    assert invoke("--archive", "file:///nowhere", "--since", "yesterday") == (2, (
        "mysqlbackup: error: bad --since 'yesterday': use ISO 8601, e.g. 2026-11-21T09:30:00Z "
        "or 2026-11-21 10:30:00+01:00 (UTC unless a zone is named)\n"))
    assert invoke("--archive", "file:///nowhere", "--table", "orders") == (2, (
        "mysqlbackup: error: bad --table 'orders': expected DB.TABLE (shell wildcards "
        "allowed: shop.*)\n"))
    assert invoke("--table", "shop.orders") == (2, (
        "Usage: main archive find [OPTIONS]\nTry 'main archive find --help' for help.\n\n"
        "Error: --archive URL is required\n"))


# -- the corpus of real binlogs ------------------------------------------------------------

def corpus():
    if not os.path.isdir(SHARED_BINLOGS):
        pytest.skip(f"needs the real-binlog corpus {SHARED_BINLOGS} (../shared/binlogs beside "
                    "the checkout; not part of a clone of the repository)")
    found = []
    for root, _, names in sorted(os.walk(SHARED_BINLOGS)):
        found += [os.path.join(root, n) for n in sorted(names)
                  if read(os.path.join(root, n))[:4] == ev.MAGIC]
    return found


def scan_bytes(data, name, chunk=997, **kw):
    found = []
    scan = FileScan(name, found.append, **kw)
    for at in range(0, len(data), chunk):
        scan.feed(data[at:at + chunk])
    scan.finish()
    return scan, found


def test_every_corpus_binlog_is_searched_or_refused_as_the_archive_refuses_it():
    """A file the archive's indexer takes (so one an archive can hold) is searched whole,
    its transactions those of its index; one it refuses, find refuses with an offset."""
    searched = 0
    for path in corpus():
        data, name = read(path), os.path.basename(path)
        try:
            index = build_index(data, name)
        except CorruptBinlog:
            with pytest.raises(CorruptBinlog) as refused:
                scan_bytes(data, name)
            assert refused.value.offset is not None, name
            continue
        scan, found = scan_bytes(data, name)
        assert scan.transactions == len(found) == index["transactions"], name
        searched += 1
    assert searched >= 30


def transactions_of(sql):
    """[(its '-- at' line, its '### ' lines)] of each transaction of a --sql file."""
    found, lines = [], sql.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^-- (\S*) \S+:\d+-\d+$", line):  # no GTID: empty
            found.append((lines[i + 1], []))
        elif line.startswith("### ") and found:
            found[-1][1].append(line)
    return found


def test_corpus_rows_are_counted_as_the_decoder_decodes_them(tmp_path):
    """The header's row counts (rowcount: sizes only) equal the ### lines (the decoder's
    rows), transaction by transaction, wherever the decoder reads the rows."""
    checked = 0
    for path in corpus():
        try:
            transactions, _, fde_event = assemble(read(path), os.path.basename(path),
                                                  newest=True)
        except CorruptBinlog:
            continue  # replay refuses it too (tested elsewhere)
        if fde_event is None:
            continue
        fde = ev.parse_format_description(fde_event)
        out = tmp_path / "review.sql"
        sink = SqlFileSink(str(out)).open("corpus")
        sink.apply_many([t for t in transactions if not t.incident], fde_event,
                        fde.checksum_alg == ev.CHECKSUM_CRC32, fde)
        sink.close()
        sink.finish()
        for head, rows in transactions_of(out.read_text(errors="replace")):
            if any("rows not shown" in line for line in rows) or "? rows" in head:
                continue
            counted = sum(int(n) for n in re.findall(r" (\d+) rows?\b", head))
            assert counted == len(rows), (path, head, rows)
            checked += len(rows)
    assert checked > 50


def test_compressed_mysql_transactions_are_searched(shared_binlog):
    data = read(shared_binlog("mysql-binlog-connector-rust/mysql-bin.000057"))
    _, found = scan_bytes(data, "mysql-bin.000057", keep=Criteria.parse(kinds=["update"]).keep)
    assert [(t.gtid, t.commit_time, t.start, t.end, format_changes(t.changes))
            for t in found] == [("76f3e7be-6720-11ed-9cad-0242ac110002:13",
                                 "2022-11-20T13:53:33Z", 651, 1283,
                                 "a.test_table_3 update 1 row, a.test_table_3 insert 1 row")]
    assert found[0].changes[0].statement.startswith("update test_table_3 set enum_field=")


def test_archive_find_over_an_imported_corpus_file(tmp_path, copy_binlog):
    """MySQL 5.6 without GTIDs: '-' for the GTID, no annotated query."""
    directory = tmp_path / "files"
    directory.mkdir()
    shutil.copyfile(copy_binlog("gh-ost/mysql-bin.000066"), directory / "mysql-bin.000066")
    url = f"file://{tmp_path / 'archive'}"
    imported = CliRunner().invoke(main, ["archive", "import", str(directory), "--archive", url,
                                         "--source-name", "ghost"])
    assert imported.exit_code == 0, imported.output
    code, out = find_out("--archive", url, "--table", "test.samplet", "--type", "delete")
    assert (code, out) == (0, (
        "- 2016-03-30T13:31:07Z mysql-bin.000066:1537-1799 test.samplet delete 1 row, "
        "test.samplet update\n"
        "- 2016-03-30T13:31:07Z mysql-bin.000066:2347-2551 test.samplet delete 2 rows\n"
        "- 2016-03-30T13:31:07Z mysql-bin.000066:2756-3411 test.samplet update, "
        "test.samplet delete 1 row, test.samplet insert\n"))


# -- a live MariaDB, streamed into an archive (one server for the module) -----------------

TIMELINE = [  # (commit time, statements): SET TIMESTAMP gives each its binlog time
    ("09:00:00", ["CREATE DATABASE shop",
                  "CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(40), qty INT)",
                  "CREATE TABLE shop.customers (id INT PRIMARY KEY, visits INT NOT NULL)",
                  "CREATE TABLE shop.tmp (a INT)"]),
    ("09:30:00", ["INSERT INTO shop.orders VALUES " + ", ".join(
        f"({i}, 'item{i}', {i % 7})" for i in range(1, 51)),
        "INSERT INTO shop.customers VALUES (1, 1), (2, 0), (3, 0), (4, 0), (5, 0)",
        "FLUSH BINARY LOGS"]),
    ("10:00:00", ["DELETE FROM shop.orders WHERE id = 7",
                  "UPDATE shop.customers SET visits = visits + 1"]),
    ("11:00:00", ["BEGIN", "UPDATE shop.customers SET visits = 0 WHERE id = 1",
                  "DELETE FROM shop.orders", "COMMIT"]),
    ("11:30:00", ["DROP TABLE shop.tmp"]),
]


def epoch(clock):
    return int(datetime.datetime.fromisoformat(f"{DAY}T{clock}+00:00").timestamp())


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """A MariaDB primary that ran TIMELINE (10 transactions, GTIDs 0-1-1 .. 0-1-10, two
    binlog files; its events compressed: log_bin_compress), streamed by the daemon into a
    file:// archive; its binlog files."""
    work = tmp_path_factory.mktemp("find")
    server = MariaDBSandbox(str(work / "primary"), semi_sync_timeout_ms=1000, extra_args=[
        "--log-bin-compress=ON", "--log-bin-compress-min-len=10"]).start()
    url = f"file://{work / 'archive'}"
    daemon = Daemon(server, work / "dir", "--archive", url, "--archive-interval", "0.2",
                    "--source-name", "db1").start()
    try:
        for clock, statements in TIMELINE:
            server.execute(f"SET TIMESTAMP = {epoch(clock)}", *statements)
        last = server.execute("SELECT @@gtid_binlog_pos")[0][0]
        assert last == "0-1-10"
        wait_for(lambda: archived_last(url) == last, timeout=60, what="the archive")
        files = work / "files"
        files.mkdir()
        for name in server.binlog_files():
            shutil.copyfile(server.binlog_path(name), files / name)
        yield SimpleNamespace(server=server, url=url, files=sorted(files.iterdir()))
    finally:
        assert daemon.stop() == 0, daemon.output()
        server.stop(remove=True)


def archived_last(url):
    out = run_cli("archive", "ls", "--archive", url, "--json")
    files = json.loads(out.stdout)["files"] if out.returncode == 0 else []
    return files[-1]["last_gtid"] if files else None


def positions(files):
    """{GTID: 'FILE:START-END'} of the transactions of binlog files (replay's assembler)."""
    found = {}
    for path in files:
        for trx in assemble(read(path), path.name, newest=True)[0]:
            found[trx.gtid] = f"{trx.file}:{trx.start}-{trx.end}"
    return found


@pytest.mark.server
def test_a_bad_delete_is_found_by_table_and_kind(shop):
    at = positions(shop.files)
    code, out = find_out("--archive", shop.url, "--table", "shop.orders", "--type", "delete")
    assert (code, out) == (0, (
        f"0-1-7 {DAY}T10:00:00Z {at['0-1-7']} shop.orders delete 1 row -- DELETE FROM "
        "shop.orders WHERE id = 7\n"
        f"0-1-9 {DAY}T11:00:00Z {at['0-1-9']} shop.customers update, shop.orders delete "
        "49 rows -- DELETE FROM shop.orders\n"))
    assert at["0-1-9"].startswith("binlog.000002:")
    code, out = find_out("--archive", shop.url, "--source-name", "db1", "--table", "shop.*",
                         "--type", "delete", "--min-rows", "10")
    assert (code, out.split(" ")[0]) == (0, "0-1-9")
    assert run_cli("archive", "find", "--archive", shop.url, "--table", "shop.orders",
                   "--type", "delete", "--min-rows", "10").stdout.split(" ")[0] == "0-1-9"


@pytest.mark.server
def test_the_time_range_both_ends_inclusive_and_files_outside_it_not_read(shop):
    def gtids(*args):
        code, out = find_out("--archive", shop.url, "--json", *args)
        document = json.loads(out)
        return code, [m["gtid"] for m in document["matches"]], document["scanned"]
    code, found, scanned = gtids("--since", f"{DAY}T10:00:00Z", "--until", f"{DAY} 11:00:00")
    assert (code, found) == (0, ["0-1-7", "0-1-8", "0-1-9"])
    assert scanned["files_skipped"] == 1 and scanned["transactions"] == 4  # file 1 unread
    assert gtids("--until", f"{DAY}T10:30:00+01:00")[1] == ["0-1-1", "0-1-2", "0-1-3",
                                                            "0-1-4", "0-1-5", "0-1-6"]
    assert gtids("--since", f"{DAY}T11:00:01Z")[1] == ["0-1-10"]
    code, found, scanned = gtids("--since", f"{DAY}T12:00:00Z")
    assert (code, found, scanned["files"]) == (1, [], 0)


@pytest.mark.server
def test_ddl_and_json(shop):
    code, out = find_out("--archive", shop.url, "--type", "ddl", "--table", "shop.tmp")
    assert code == 0
    assert [line.split(" ", 1)[0] for line in out.splitlines()] == ["0-1-1", "0-1-4", "0-1-10"]
    assert out.splitlines()[-1].endswith(
        "shop.tmp ddl -- DROP TABLE `shop`.`tmp` /* generated by server */")
    code, out = find_out("--archive", shop.url, "--json", "--table", "shop.orders",
                         "--type", "delete", "--min-rows", "2")
    document = json.loads(out)
    assert document["source"] == "db1" and document["scanned"]["matches"] == 1
    match = document["matches"][0]
    assert {k: match[k] for k in ("gtid", "commit_time", "epoch", "rows", "matched",
                                  "statement", "statement_from")} == {
        "gtid": "0-1-9", "commit_time": f"{DAY}T11:00:00Z", "epoch": 1, "rows": 49,
        "matched": [1], "statement": "DELETE FROM shop.orders", "statement_from": "annotate"}
    assert match["changes"] == [
        {"table": "shop.customers", "kind": "update", "rows": None,
         "statement": "UPDATE shop.customers SET visits = 0 WHERE id = 1",
         "statement_from": "annotate"},
        {"table": "shop.orders", "kind": "delete", "rows": 49,
         "statement": "DELETE FROM shop.orders", "statement_from": "annotate"}]
    result = CliRunner().invoke(main, ["archive", "find", "--archive", shop.url, "--table",
                                       "other.orders"])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith("find: 0 matching of 10 transactions in 2 files")


@pytest.mark.server
def test_replay_sql_heads_each_transaction_and_shows_its_rows(shop, tmp_path, make_server):
    """The --sql file of the primary's binlogs: the header lines, the rows as ###
    comments; and it still applies with the mariadb client, comments and all."""
    kinds = {e[4] for path in shop.files for _, e in iter_events(read(path), 4, None)}
    assert kinds >= {cz.MARIA_QUERY_COMPRESSED, 166, 167, 168}  # compressed, all of them
    out = tmp_path / "review.sql"
    sink = SqlFileSink(str(out)).open("db1")
    for path in shop.files:
        transactions, _, fde_event = assemble(read(path), path.name, newest=True)
        fde = ev.parse_format_description(fde_event)
        sink.apply_many(transactions, fde_event, True, fde)
    sink.close()
    sink.finish()
    text = out.read_text()
    heads = [(head, len(rows)) for head, rows in transactions_of(text)]
    assert heads[4:] == [
        (f"-- at {DAY}T09:30:00Z: shop.orders insert 50 rows", 50),
        (f"-- at {DAY}T09:30:00Z: shop.customers insert 5 rows", 5),
        (f"-- at {DAY}T10:00:00Z: shop.orders delete 1 row", 1),
        (f"-- at {DAY}T10:00:00Z: shop.customers update 5 rows", 5),
        (f"-- at {DAY}T11:00:00Z: shop.customers update 1 row, shop.orders delete 49 rows", 50),
        (f"-- at {DAY}T11:30:00Z: shop.tmp ddl", 0)]
    assert "#Q> DELETE FROM shop.orders WHERE id = 7\n" \
           "### DELETE FROM `shop`.`orders` WHERE `id`=7 `item`='item7' `qty`=0\n" in text
    assert "#Q> UPDATE shop.customers SET visits = 0 WHERE id = 1\n" \
           "### UPDATE `shop`.`customers` WHERE `id`=1 `visits`=2 SET `id`=1 `visits`=0\n" \
           "#Q> DELETE FROM shop.orders\n" \
           "### DELETE FROM `shop`.`orders` WHERE `id`=1 `item`='item1' `qty`=1\n" in text
    target = make_server(server_id=2, semi_sync=False)
    with open(out, "rb") as f:
        loaded = subprocess.run(["mariadb", "-h127.0.0.1", f"-P{target.port}", "-uroot"],
                                stdin=f, capture_output=True, timeout=60)
    assert loaded.returncode == 0, loaded.stderr
    assert target.execute("SELECT id, visits FROM shop.customers ORDER BY id") == \
        shop.server.execute("SELECT id, visits FROM shop.customers ORDER BY id")
    assert target.execute("SELECT @@gtid_binlog_pos")[0][0] == "0-1-10"


# -- a live MySQL --------------------------------------------------------------------------

def test_mysql_a_bad_delete_found_with_its_rows_query(make_mysql, tmp_path):
    server = make_mysql(extra_args=["--binlog-rows-query-log-events=ON"])
    server.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v JSON)",
                   *[f"INSERT INTO d.t VALUES ({i}, '{{\"n\": {i}}}')" for i in range(1, 21)],
                   "DELETE FROM d.t WHERE id > 5")
    uuid = server.execute("SELECT @@server_uuid")[0][0]
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(server, tmp_path / "dir", "--start-file", server.binlog_files()[0],
                    "--archive", url, "--archive-interval", "0.2", "--source-name",
                    "my1").start()
    try:
        wait_for(lambda: archived_last(url) == f"{uuid}:23", timeout=60, what="the archive")
    finally:
        assert daemon.stop() == 0, daemon.output()
    code, out = find_out("--archive", url, "--table", "d.t", "--type", "delete")
    assert code == 0 and len(out.splitlines()) == 1
    assert re.fullmatch(rf"{uuid}:23 \S+Z binlog\.\d+:\d+-\d+ d\.t delete 15 rows -- DELETE "
                        r"FROM d\.t WHERE id > 5\n", out), out
