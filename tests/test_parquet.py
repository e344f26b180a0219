"""replay --parquet: the change table, from real binlog files and real MariaDB servers."""

import datetime
import decimal
import json
import re
import time
from types import SimpleNamespace

import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.errors import UsageError
from replay.job.decoding.assemble import assemble
from replay.job.decoding.changejson import ChangeDecodeError, encode_value
from replay.job.decoding.changes import iter_changes
from replay.job.run import RunSummary
from replay.job.sinks.parquet import (NOT_IN_TABLE, SCHEMA, ParquetSink, PartWriter,
                                      options_for, part_name)
from tests.helpers import backup_dir, change_table_rows, read, run_cli

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


def test_statement_based_dml_is_left_out_and_named(shared_binlog):
    # MySQL 5.6, MIXED: INSERTs logged as statements (and later TABLE_MAPs without column
    # names, which the table refuses)
    name = "binlog_56_gtid_reserved_word.000001"
    transactions, _, fde_event = assemble(read(shared_binlog(f"rust_mysql_common/{name}")),
                                          name)
    fde = ev.parse_format_description(fde_event)
    left_out = []
    for trx in [t for t in transactions if t.end <= 901]:
        assert list(iter_changes(trx, fde, True, left_out)) == []
    assert left_out[0] == {"gtid": left_out[0]["gtid"], "file": name, "position": 585,
                           "statement": "INSERT"}


def test_storage_options_follow_the_archive_protocol_only():
    opts = {"endpoint_url": "http://127.0.0.1:9000"}
    assert options_for("s3://b/changes", "s3://b/archive", opts) == opts
    assert options_for("file:///tmp/changes", "s3://b/archive", opts) == {}


def test_an_empty_selection_still_gives_a_readable_table(tmp_path):
    sink = ParquetSink(f"file://{tmp_path / 'changes'}").open(None)
    sink.close()
    sink.finish(RunSummary())
    assert sorted(p.name for p in (tmp_path / "changes").iterdir()) == [
        "_SUCCESS", "part-000000-0000.parquet"]
    table = pq.read_table(tmp_path / "changes" / "part-000000-0000.parquet")
    assert table.num_rows == 0 and table.schema == SCHEMA
    assert json.loads((tmp_path / "changes" / "_SUCCESS").read_text()) == {
        "rows": 0, "parts": ["part-000000-0000.parquet"], "transactions": 0,
        "stop_reason": "end of the archive",
        "not_in_table": {"statements": 0, "first_statements": [], "why": NOT_IN_TABLE}}


def test_the_driver_keeps_only_the_parts_it_adopted(tmp_path):
    # parts of a file past the stop point (or decoded after an error) are removed;
    # a task that wrote other transactions than the driver applies is refused
    out = tmp_path / "changes"
    sink = ParquetSink(f"file://{out}").open(None)
    spec = sink.task_spec()
    for seq in (0, 1):
        PartWriter(spec.at(seq)).dest.write_table(part_name(seq, 0), [])
    sink.adopt({"parts": [(part_name(0, 0), 0)], "rows": 0, "transactions": 0}, [])
    with pytest.raises(RuntimeError, match="a task wrote 1 transactions of a file, the "
                                           "replay applies 0"):
        sink.adopt({"parts": [], "rows": 0, "transactions": 1}, [])
    sink.finish()
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", part_name(0, 0)]
    assert json.loads((out / "_SUCCESS").read_text())["parts"] == [part_name(0, 0)]


# -- live: a real MariaDB, its archive, `mysqlbackup replay --parquet` -------------------



def commit(server, *statements):
    """Run statements in one transaction; return its GTID."""
    conn = server.root(autocommit=False)
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
            conn.commit()
            cur.execute("SELECT @@last_gtid")
            return cur.fetchone()[0]
    finally:
        conn.close()


def workload(server):
    """Row changes over a table with a primary key and varied types, and one without."""
    server.execute(
        "CREATE DATABASE shop",
        "CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40) CHARACTER SET utf8mb4, "
        "price DECIMAL(10,2), made DATETIME(3), photo BLOB, qty INT UNSIGNED)",
        "CREATE TABLE shop.log (msg VARCHAR(20), n INT)")
    g1 = commit(server, "INSERT INTO shop.items VALUES (1, 'café ☕', 12.30, "
                "'2024-01-02 03:04:05.678', x'00ff10', 4000000000), "
                "(2, NULL, NULL, NULL, NULL, NULL)",
                "INSERT INTO shop.log VALUES ('a', 1), ('a', 1)")
    g2 = commit(server, "UPDATE shop.items SET price = 99.99, photo = NULL WHERE id = 1")
    g3 = commit(server, "DELETE FROM shop.items WHERE id = 2", "DELETE FROM shop.log WHERE n = 1")
    server.execute("FLUSH BINARY LOGS",
                   "ALTER TABLE shop.items ADD COLUMN tag VARCHAR(5) DEFAULT 'n'")
    g4 = commit(server, "INSERT INTO shop.items (id, name, price, made, photo, qty) VALUES "
                "(3, 'zażółć', -0.05, '1999-12-31 23:59:59', '', 0)")
    one = {"id": 1, "name": "café ☕", "price": "12.30", "made": "2024-01-02T03:04:05.678000",
           "photo": "AP8Q", "qty": 4000000000}
    two = {"id": 2, "name": None, "price": None, "made": None, "photo": None, "qty": None}
    one_after = dict(one, price="99.99", photo=None)
    three = {"id": 3, "name": "zażółć", "price": "-0.05", "made": "1999-12-31T23:59:59",
             "photo": "", "qty": 0, "tag": "n"}
    log = {"msg": "a", "n": 1}
    items, nopk = ("shop", "items"), ("shop", "log")
    return [  # op, (db, table), pk, before, after, gtid, row index in its event
        ("insert", items, {"id": 1}, None, one, g1, 0),
        ("insert", items, {"id": 2}, None, two, g1, 1),
        ("insert", nopk, None, None, log, g1, 0),
        ("insert", nopk, None, None, log, g1, 1),
        ("update", items, {"id": 1}, one, one_after, g2, 0),
        ("delete", items, {"id": 2}, two, None, g3, 0),
        ("delete", nopk, None, log, None, g3, 0),
        ("delete", nopk, None, log, None, g3, 1),
        ("insert", items, {"id": 3}, None, three, g4, 0)]


def archive_of(server, base):
    """file:// archive of the server's binlogs, as the daemon's archiver leaves it."""
    from mysqlbackup.stream.archiver import Archiver
    from mysqlbackup.archive.store import ArchiveStore
    local = backup_dir([server.binlog_path(n) for n in server.binlog_files()], base / "local",
                       "src1")
    url = f"file://{base / 'archive'}"
    Archiver(str(local), ArchiveStore(url)).run_once()
    return url


def rows_events(server):
    """(file, offset) of every rows event in the server's binlogs, in order."""
    return [(name, off) for name in server.binlog_files()
            for off, e in iter_events(read(server.binlog_path(name)), 4, True) if e[4] in ev.PLAIN_ROWS_EVENTS]


def decoded(row):
    return (row["op"], (row["db"], row["table"]), row["pk"] and json.loads(row["pk"]),
            row["before"] and json.loads(row["before"]),
            row["after"] and json.loads(row["after"]), row["gtid"], row["row_index"])


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    from mysqlbackup.sandbox import MariaDBSandbox
    base = tmp_path_factory.mktemp("parquet")
    server = MariaDBSandbox(str(base / "server"), semi_sync=False).start()
    try:
        started = time.time()
        expected = workload(server)
        window = (started - 1, time.time() + 1)
        yield SimpleNamespace(server=server, base=base, expected=expected, window=window,
                              url=archive_of(server, base), events=rows_events(server))
    finally:
        server.stop(remove=True)


@pytest.fixture(scope="module")
def replayed(source):
    """`mysqlbackup replay --parquet --typed` of the whole archive: (CompletedProcess, out
    dir); the typed tables beside the change table leave it as it is without them."""
    out = source.base / "changes"
    result = run_cli("replay", "--archive", source.url, "--parquet", f"file://{out}",
                     "--typed", timeout=300)
    return result, out


@pytest.mark.server
def test_replay_writes_the_exact_change_table(source, replayed):
    result, out = replayed
    assert result.returncode == 0, result.stdout + result.stderr
    assert "parquet: 9 row changes in 2 parts at file://" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("replay of src1: 8 applied")
    # each file's task wrote its own part (2 files): read in _SUCCESS's order
    assert sorted(p.name for p in out.iterdir()) == [
        "_SUCCESS", "_tables", "part-000000-0000.parquet", "part-000001-0000.parquet"]
    assert all(pq.read_schema(p) == SCHEMA for p in out.glob("part-*"))
    rows = change_table_rows(out)
    assert [decoded(r) for r in rows] == source.expected
    # each rows event of the binlogs, in binlog order, at its own start offset
    places = [(r["file"], r["position"]) for r in rows]
    assert sorted(set(places), key=places.index) == source.events
    assert places == sorted(places)
    assert rows[0]["file"] == "binlog.000001" and rows[-1]["file"] == "binlog.000002"
    low, high = source.window
    assert all(low <= r["commit_time"].timestamp() <= high for r in rows)
    assert all(r["commit_time"].tzinfo is not None for r in rows)
    assert json.loads((out / "_SUCCESS").read_text())["rows"] == 9
    # the dataset as readers see it (parts only; _SUCCESS skipped)
    assert pads.dataset(str(out), format="parquet").to_table().num_rows == 9


@pytest.mark.server
def test_typed_tables_one_dataset_per_table_a_version_per_schema(source, replayed):
    result, out = replayed
    assert result.returncode == 0, result.stdout + result.stderr
    assert (f"parquet: 2 typed tables in 3 parts at file://{out}/_tables"
            in result.stdout.splitlines())
    manifest = json.loads((out / "_tables" / "_manifest.json").read_text())
    items, log = manifest["tables"]["shop.items"], manifest["tables"]["shop.log"]
    assert len(log["versions"]) == 1 and len(items["versions"]) == 2  # the ALTER
    (g1, g3), g4 = (source.expected[0][5], source.expected[6][5]), source.expected[8][5]
    assert [(h["rows"], h["first"]["gtid"], h["last"]["gtid"], h["first"]["file"])
            for h in items["history"]] == [(4, g1, g3, "binlog.000001"),
                                            (1, g4, g4, "binlog.000002")]
    first, second = (items["versions"][h["version"]] for h in items["history"])
    assert [c["name"] for c in second["columns"]] == [c["name"] for c in first["columns"]
                                                      ] + ["tag"]
    dataset = pads.dataset(str(out / "_tables" / first["dir"]), format="parquet",
                           partitioning="hive")
    image = dataset.schema.field("after").type
    assert {f.name: str(f.type) for f in image} == {
        "id": "int32", "name": "string", "price": "decimal128(10, 2)",
        "made": "timestamp[us]", "photo": "binary", "qty": "uint32"}
    rows = sorted(dataset.to_table().to_pylist(), key=lambda r: (r["position"],
                                                                 r["row_index"]))
    assert [(r["op"], r["gtid"]) for r in rows] == [
        ("insert", g1), ("insert", g1), ("update", source.expected[4][5]), ("delete", g3)]
    assert rows[0]["after"] == {"id": 1, "name": "café ☕", "price": decimal.Decimal("12.30"),
                                "made": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000),
                                "photo": b"\x00\xff\x10", "qty": 4000000000}
    assert rows[2]["before"] == rows[0]["after"] and rows[0]["before"] is None
    assert rows[2]["after"]["price"] == decimal.Decimal("99.99")
    assert rows[3]["after"] is None and rows[3]["before"]["id"] == 2
    assert rows[0]["commit_date"] == rows[0]["commit_time"].date().isoformat()


@pytest.mark.server
def test_a_destination_with_a_change_table_is_refused(source, replayed):
    _, out = replayed
    with pytest.raises(UsageError, match="already holds a change table"):
        ParquetSink(f"file://{out}").open(None)
    again = run_cli("replay", "--archive", source.url, "--parquet", f"file://{out}")
    assert again.returncode == 2  # before Spark starts
    assert "already holds a change table (_SUCCESS ...)" in again.stderr


@pytest.mark.server
def test_parts_rotate_and_hold_the_same_rows(source, replayed, archive):
    # a task's writer alone on the server's own files, two rows a part, file:// and S3
    from mysqlbackup.archive.options import parse_options
    url, option_list = archive
    sink = ParquetSink(url + "/changes", parse_options(option_list), rows_per_part=2).open("x")
    writer = PartWriter(sink.task_spec().at(7))
    for name in source.server.binlog_files():
        transactions, _, fde_event = assemble(read(source.server.binlog_path(name)), name,
                                              newest=True)
        fde = ev.parse_format_description(fde_event)
        for trx in transactions:
            writer.apply(trx, fde, True)
    written = writer.close()
    parts = [part_name(7, i) for i in range(5)]
    assert written == {"parts": list(zip(parts, [2, 2, 2, 2, 1])), "rows": 9,
                       "transactions": written["transactions"], "left_out": []}
    sink.adopt(written, [None] * written["transactions"])
    sink.finish()
    assert sink.parts == parts
    listed = sorted(p.rsplit("/", 1)[-1] for p in sink.fs.ls(sink.root, detail=False))
    assert listed == ["_SUCCESS"] + parts  # no temporary names left behind
    rows = [r for part in parts
            for r in pq.read_table(f"{sink.root}/{part}", filesystem=sink.fs).to_pylist()]
    assert rows == change_table_rows(replayed[1])


@pytest.mark.server
def test_a_stop_point_keeps_no_part_of_a_later_file(source, tmp_path):
    # the stop (before g2) is in the first file; the second file's task has written
    # its part (one window of two files): the driver removes it, _SUCCESS lists one part
    from replay.planning.plan import ReplayOptions
    from mysqlbackup.archive.stop import parse_stop
    from replay.planning.options import build_selection
    from replay.job.run import run_replay
    g2 = source.expected[4][5]
    selection = build_selection(stop=parse_stop(stop_before_gtid=g2))
    out = tmp_path / "changes"
    sink = ParquetSink(f"file://{out}", typed_tables=True).open(None)
    seen = []
    summary = run_replay(ReplayOptions(source.url, {}, "src1", selection, window=2,
                                       engine="local"), sink, progress=seen.append)
    assert summary.stop_reason == f"stop before GTID {g2}"
    assert summary.applied == 4  # three DDL statements and g1
    assert summary.tasks == 2  # one window: the second file was decoded (and written)
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "_tables", part_name(0, 0)]
    assert [decoded(r) for r in change_table_rows(out)] == source.expected[:4]
    # the typed tables too: the second file's parts (shop.items after its ALTER) removed
    typed_parts = sorted(str(p.relative_to(out)) for p in out.rglob("part-*")
                         if p.parent != out)
    assert sink.typed_parts == typed_parts and len(typed_parts) == 2
    assert all("/commit_date=" in p and part_name(0, 0) in p for p in typed_parts)


def test_minimal_row_metadata_fails_clearly(make_server, tmp_path):
    server = make_server(semi_sync=False, extra_args=["--binlog-row-metadata=MINIMAL"])
    assert server.execute("SELECT @@binlog_row_metadata")[0][0] == "MINIMAL"
    server.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)",
                   "CREATE TABLE d.u (id INT)")
    stop = server.execute("SELECT @@gtid_binlog_pos")[0][0]  # the CREATE of d.u
    server.execute("FLUSH BINARY LOGS", "INSERT INTO d.t VALUES (1, 2)")
    url = archive_of(server, tmp_path)
    out = tmp_path / "changes"
    result = run_cli("replay", "--archive", url, "--parquet", f"file://{out}", timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    error = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(error) == 1 and re.fullmatch(
        r"mysqlbackup: error: binlog\.000002:\d+: TABLE_MAP of d\.t carries no column names: "
        r"the source needs binlog_row_metadata=FULL for --parquet", error[0]), result.stderr
    assert not (out / "_SUCCESS").exists()
    assert not list(out.glob("part-*"))
    # the second file's task fails the same way, but the replay stops in the first one
    # before it: what the stop point leaves out cannot fail the replay
    stopped = run_cli("replay", "--archive", url, "--parquet", f"file://{tmp_path / 'early'}",
                      "--stop-before-gtid", stop, timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "parquet: 0 row changes in 1 parts" in stopped.stdout
    assert f"stopped: stop before GTID {stop}" in stopped.stdout
