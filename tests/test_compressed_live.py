"""Compressed binlogs on live servers: a MySQL 9.7 with binlog_transaction_compression=ON
and a MariaDB with log_bin_compress=ON, streamed (files byte-identical) and archived,
then inspected, replayed into fresh servers (the tables equal the source's), as SQL and
as a change table. The decoding itself is tested in test_compressed.py."""

import json
import os

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.inspect import inspect_bytes
from tests.helpers import (
    Daemon,
    caught_up,
    change_table_rows,
    current_binlog,
    read,
    run_cli,
    same_except_in_use_flag,
    wait_for,
)
from tests.test_compressed import file_events

# -- live: a compressed MySQL 9.7 --------------------------------------------------------

def gtid_executed(server):
    return server.execute("SELECT @@gtid_executed")[0][0].replace("\n", "")


def checksums(server, tables):
    return {t: server.execute(f"CHECKSUM TABLE {t}")[0][1] for t in tables}


def one_transaction(server, *statements):
    conn = server.root(autocommit=False)
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
        conn.commit()
    finally:
        conn.close()


def archived_to_the_end(url, source):
    """True when the archive's newest file ends where the source's newest file ends."""
    out = run_cli("archive", "ls", "--archive", url, "--json")
    files = json.loads(out.stdout)["files"] if out.returncode == 0 else []
    name = current_binlog(source)
    return bool(files) and files[-1]["file"] == name and \
        files[-1]["size"] == os.path.getsize(source.binlog_path(name))


def payload_offsets(paths):
    """{(file name, offset)} of every TRANSACTION_PAYLOAD event of the files."""
    return {(os.path.basename(p), off) for p in paths for off, e in file_events(read(p))
            if e[4] == ev.TRANSACTION_PAYLOAD}


MYSQL_TABLES = ["c.t", "c.u"]


def mysql_workload(server):
    server.execute("CREATE DATABASE c",
                   "CREATE TABLE c.t (id INT PRIMARY KEY AUTO_INCREMENT, v INT, "
                   "s VARCHAR(300), j JSON, d DATETIME(3), b BLOB)",
                   "CREATE TABLE c.u (k VARCHAR(20) PRIMARY KEY, n BIGINT)")
    for i in range(30):
        server.execute(f"INSERT INTO c.t (v, s, j, d, b) VALUES ({i}, REPEAT('s{i}', 40), "
                       f"JSON_OBJECT('i', {i}, 'tag', 'x{i}'), '2024-01-02 03:04:05.{i:03d}', "
                       f"REPEAT(x'00ff', {i}))")
    one_transaction(server, *[f"INSERT INTO c.u VALUES ('k{i}', {i * i})" for i in range(50)],
                    "UPDATE c.t SET v = v * 10, s = CONCAT(s, '!') WHERE id % 3 = 0",
                    "DELETE FROM c.t WHERE id > 25")
    server.execute("FLUSH BINARY LOGS", "ALTER TABLE c.u ADD COLUMN w INT DEFAULT 7")
    one_transaction(server, "INSERT INTO c.t (v, s) SELECT v + 1000, s FROM c.t",
                    *[f"UPDATE c.u SET n = n + 1, w = {i} WHERE k = 'k{i}'" for i in range(20)])
    server.execute("DELETE FROM c.u WHERE n > 1000",
                   "UPDATE c.t SET j = JSON_ARRAY(v) WHERE v > 1000")


def test_a_compressed_mysql_streamed_archived_and_replayed(make_mysql, tmp_path):
    source = make_mysql(extra_args=["--binlog-transaction-compression=ON"])
    assert source.execute("SELECT @@binlog_transaction_compression") == ((1,),)
    url, directory = f"file://{tmp_path / 'archive'}", tmp_path / "dir"
    daemon = Daemon(source, directory, "--start-file", source.binlog_files()[0], "--archive",
                    url, "--archive-interval", "0.2", "--source-name", "my1").start()
    try:
        wait_for(lambda: source.status("Rpl_semi_sync_source_clients") == "1", 30,
                 what="the daemon as a semi-sync replica")
        mysql_workload(source)
        wait_for(lambda: caught_up(source, directory), what="catch-up")
        wait_for(lambda: archived_to_the_end(url, source), what="the archive at the end")
    finally:
        assert daemon.stop() == 0, daemon.output()
    names = source.binlog_files()
    local = [os.path.join(directory, n) for n in names]
    for name, path in zip(names, local):  # stored as the server wrote them
        same = same_except_in_use_flag if name == current_binlog(source) else \
            (lambda a, b: read(a) == read(b))
        assert same(path, source.binlog_path(name)), name
    payloads = payload_offsets(local)
    assert len(payloads) == 30 + 1 + 1 + 2
    gtids = gtid_executed(source)
    uuid, last = gtids.rsplit(":", 1)[0], int(gtids.rsplit("-", 1)[1])
    assert gtids == f"{uuid}:1-{last}"
    reports = [inspect_bytes(read(p), p) for p in local]
    assert all(r["error"] is None for r in reports), reports
    assert sum(r["event_types"].get("TRANSACTION_PAYLOAD", 0) for r in reports) == len(payloads)
    assert sum(r["transactions"] for r in reports) == last
    assert reports[-1]["last_gtid"] == f"{uuid}:{last}"
    assert sum(r["compressed"]["events"] for r in reports if r["compressed"]) == len(payloads)

    sql = tmp_path / "all.sql"
    done = run_cli("replay", "--archive", url, "--sql", str(sql), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    text = sql.read_text(errors="replace")
    assert text.count("\nBINLOG '") > len(payloads) and "does not decode" not in text

    target = make_mysql(server_id=9, semi_sync=False)
    spec = f"mysql://root@127.0.0.1:{target.port}"
    applied = run_cli("replay", "--archive", url, "--target", spec, password="", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert checksums(target, MYSQL_TABLES) == checksums(source, MYSQL_TABLES)
    assert gtid_executed(target) == gtids

    out = tmp_path / "changes"
    changed = run_cli("replay", "--archive", url, "--parquet", f"file://{out}", timeout=300)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    rows = change_table_rows(out)
    ops = [(r["op"], r["table"]) for r in rows]
    # 30 + 25 copied (ids 26..30 deleted before); 10 (id % 3 = 0) + 24 (v > 1000: all
    # copies but that of v = 0); 20 one by one; 5; n = i * i > 1000 for i = 32..49
    assert ops.count(("insert", "t")) == 30 + 25 and ops.count(("insert", "u")) == 50
    assert ops.count(("update", "t")) == 10 + 24 and ops.count(("update", "u")) == 20
    assert ops.count(("delete", "t")) == 5 and ops.count(("delete", "u")) == 18
    assert len(rows) == 55 + 50 + 34 + 20 + 5 + 18
    assert {(r["file"], r["position"]) for r in rows} <= payloads  # each where its payload is
    assert len({(r["file"], r["position"], r["row_index"]) for r in rows}) == len(rows)
    first = rows[0]
    assert json.loads(first["after"])["s"] == "s0" * 40 and first["gtid"] == f"{uuid}:4"


# -- live: a compressed MariaDB ----------------------------------------------------------

MARIA_TABLES = ["c.t", "c.m", "c.u"]


def maria_workload(server):
    """Row and statement events, DDL, a non-transactional table, two files; returns the
    GTID position half way."""
    server.execute("CREATE DATABASE c",
                   "CREATE TABLE c.t (id INT PRIMARY KEY AUTO_INCREMENT, v INT, "
                   "s VARCHAR(300), d DATETIME(3), b BLOB) ENGINE=InnoDB",
                   "CREATE TABLE c.m (id INT PRIMARY KEY, note VARCHAR(200)) ENGINE=MyISAM",
                   "CREATE TABLE c.u (k VARCHAR(20), n BIGINT) ENGINE=InnoDB")  # no key
    for i in range(30):
        server.execute(f"INSERT INTO c.t (v, s, d, b) VALUES ({i}, REPEAT('s{i}', 40), "
                       f"'2024-01-02 03:04:05.{i:03d}', REPEAT(x'00ff', {i}))")
    server.execute("INSERT INTO c.m VALUES (1, REPEAT('not transactional ', 5)), (2, 'x')",
                   "UPDATE c.m SET note = CONCAT(note, note) WHERE id = 1")
    middle = server.execute("SELECT @@gtid_binlog_pos")[0][0]
    one_transaction(server, *[f"INSERT INTO c.u VALUES ('k{i}', {i * i})" for i in range(50)],
                    "UPDATE c.t SET v = v * 10, s = CONCAT(s, '!') WHERE id % 3 = 0",
                    "DELETE FROM c.t WHERE id > 25")
    server.execute("FLUSH BINARY LOGS", "ALTER TABLE c.u ADD COLUMN w INT DEFAULT 7")
    conn = server.root()
    try:
        with conn.cursor() as cur:  # statement-based DML: compressed QUERY events
            cur.execute("SET SESSION binlog_format = 'STATEMENT'")
            cur.execute("UPDATE c.u SET n = n + 1000000, w = 8 WHERE n % 2 = 0")
            cur.execute("INSERT INTO c.m VALUES (3, 'a statement long enough to be compressed')")
    finally:
        conn.close()
    one_transaction(server, "INSERT INTO c.t (v, s) SELECT v + 1000, s FROM c.t",
                    "DELETE FROM c.u WHERE n > 1000000")
    return middle


def test_a_compressed_mariadb_streamed_archived_and_replayed(make_server, tmp_path):
    source = make_server(extra_args=["--log-bin-compress=ON",
                                     "--log-bin-compress-min-len=10"])
    url, directory = f"file://{tmp_path / 'archive'}", tmp_path / "dir"
    daemon = Daemon(source, directory, "--archive", url, "--archive-interval", "0.2",
                    "--source-name", "ma1").start()
    try:
        middle = maria_workload(source)
        wait_for(lambda: caught_up(source, directory), what="catch-up")
        wait_for(lambda: archived_to_the_end(url, source), what="the archive at the end")
    finally:
        assert daemon.stop() == 0, daemon.output()
    names = source.binlog_files()
    local = [os.path.join(directory, n) for n in names]
    for name, path in zip(names, local):
        same = same_except_in_use_flag if name == current_binlog(source) else \
            (lambda a, b: read(a) == read(b))
        assert same(path, source.binlog_path(name)), name
    reports = [inspect_bytes(read(p), p) for p in local]
    assert all(r["error"] is None for r in reports), reports
    packed = [r["compressed"] for r in reports if r["compressed"]]
    kinds = {k for r in reports for k in r["event_types"] if "COMPRESSED" in k}
    assert {"MARIA_QUERY_COMPRESSED", "MARIA_WRITE_ROWS_COMPRESSED_V1",
            "MARIA_UPDATE_ROWS_COMPRESSED_V1", "MARIA_DELETE_ROWS_COMPRESSED_V1"} <= kinds
    assert sum(p["events"] for p in packed) > 30
    seq = int(source.execute("SELECT @@gtid_binlog_pos")[0][0].rsplit("-", 1)[1])
    assert sum(r["transactions"] for r in reports) == seq  # every DDL its own transaction

    target = make_server(server_id=2, log_bin=False, semi_sync=False)
    spec = f"mysql://root@127.0.0.1:{target.port}"
    applied = run_cli("replay", "--archive", url, "--target", spec, password="", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert f"{seq} applied" in applied.stdout
    assert checksums(target, MARIA_TABLES) == checksums(source, MARIA_TABLES)

    # the target's own applier, fed by serve: the compressed events go as they are stored
    native = make_server(server_id=3, log_bin=False, semi_sync=False)
    spec = f"mysql://root@127.0.0.1:{native.port}"
    first = run_cli("replay", "--archive", url, "--target", spec, "--stop-before-gtid",
                    "0-1-{}".format(int(middle.rsplit("-", 1)[1]) + 1), password="",
                    timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    rest = run_cli("replay", "--archive", url, "--target", spec, "--apply", "native",
                   "--start-gtid", middle, password="", timeout=300)
    assert rest.returncode == 0, rest.stdout + rest.stderr
    assert checksums(native, MARIA_TABLES) == checksums(source, MARIA_TABLES)

    out = tmp_path / "changes"
    changed = run_cli("replay", "--archive", url, "--parquet", f"file://{out}",
                      "--stop-before-gtid", f"0-1-{seq - 2}", timeout=300)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    rows = change_table_rows(out)
    compressed_rows = {(os.path.basename(p), off) for p in local
                       for off, e in file_events(read(p)) if e[4] in (166, 167, 168)}
    places = {(r["file"], r["position"]) for r in rows}
    assert places & compressed_rows and places <= compressed_rows | {
        (os.path.basename(p), off) for p in local for off, e in file_events(read(p))
        if e[4] in ev.PLAIN_ROWS_EVENTS}
    assert [(r["op"], r["table"]) for r in rows].count(("insert", "t")) == 30
    assert json.loads(rows[0]["after"])["s"] == "s0" * 40
