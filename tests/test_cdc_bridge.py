"""The CDC bridge (docs/cdc.md): a python-mysql-replication consumer whose GTID position
the primary has purged reads the missing transactions from ``serve``, then goes back to
the primary at the GTID where the archive ended; every row once, none missing (a live
MariaDB 10.11 primary, the daemon archiving it)."""

import pymysql
import pytest

from mysqlbackup.archive.store import ArchiveStore
from replay.planning.options import build_selection
from replay.serve.server import ServeOptions, start_server
from tests.helpers import Daemon, module_primary, wait_archived_to_the_end
from tests.serve.clients import Endpoint

PASSWORD = "bridge-secret"


def consume(at, position):
    """What a CDC consumer does: read by GTID from ``position`` until it has everything
    (blocking=False), keeping each transaction's inserted ids and, once it commits, its
    GTID as the position to resume from. (ids, position)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent, XidEvent
    from pymysqlreplication.row_event import WriteRowsEvent
    stream = BinLogStreamReader(
        connection_settings=dict(host=at.host, port=at.port, user=at.user,
                                 password=at.password, connect_timeout=10),
        server_id=4343, blocking=False, is_mariadb=True, auto_position=position,
        only_events=[MariadbGtidEvent, WriteRowsEvent, XidEvent])
    ids, pending, open_ids = [], None, []
    try:
        for event in stream:
            if isinstance(event, MariadbGtidEvent):
                pending, open_ids = event.gtid, []
            elif isinstance(event, WriteRowsEvent):
                open_ids += [row["values"]["id"] for row in event.rows]
            else:  # the commit: the transaction is the consumer's now
                ids += open_ids
                position = pending
    finally:
        stream.close()
    return ids, position


def insert(server, ids):
    for i in ids:
        server.execute(f"INSERT INTO cdc.t VALUES ({i}, {i * 10})")


@pytest.mark.server
def test_a_consumer_whose_binlogs_were_purged_reads_them_from_serve(tmp_path_factory,
                                                                    tmp_path):
    server = module_primary(tmp_path_factory, "cdc-primary", "CREATE DATABASE cdc",
                            "CREATE TABLE cdc.t (id INT PRIMARY KEY, v INT)")
    try:
        bridge(server, tmp_path)
    finally:
        server.stop(remove=True)


def bridge(server, tmp_path):
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(server, tmp_path / "backup", "--archive", url, "--source-name", "db1",
                    "--archive-interval", "0.2").start().wait_streaming()
    live = Endpoint.of_server(server)
    try:
        start = server.execute("SELECT @@gtid_binlog_pos")[0][0]
        insert(server, range(1, 6))
        seen, position = consume(live, start)  # the consumer keeps up, then stops
        assert seen == [1, 2, 3, 4, 5]
        for first in (6, 11, 16):  # it falls behind: the primary rotates and purges
            insert(server, range(first, first + 5))
            server.execute("FLUSH BINARY LOGS")
        wait_archived_to_the_end(server, ArchiveStore(url))
        newest = server.binlog_files()[-1]
        server.execute(f"PURGE BINARY LOGS TO '{newest}'")
        with pytest.raises(pymysql.err.OperationalError) as purged:
            consume(live, position)
        assert purged.value.args[0] == 1236
        # the archive as its primary: the missing transactions, up to the archive's end
        with start_server(ServeOptions(url, "db1", ("127.0.0.1", 0), "cdc", PASSWORD,
                                       build_selection(), poll_interval=0)) as handle:
            missing, position = consume(Endpoint(handle.host, handle.port, "cdc", PASSWORD),
                                        position)
        assert missing == list(range(6, 21))
        insert(server, range(21, 26))
        rest, position = consume(live, position)  # back on the primary from there
        assert rest == list(range(21, 26))
        assert position == server.execute("SELECT @@gtid_binlog_pos")[0][0]
        assert seen + missing + rest == list(range(1, 26))  # each row once, none missing
    finally:
        assert daemon.stop() == 0, daemon.output()


@pytest.mark.server
def test_without_full_row_metadata_the_names_come_from_the_dump_base(tmp_path_factory,
                                                                     tmp_path, caplog):
    """A source with binlog_row_metadata=MINIMAL: TABLE_MAPs name no column, and a
    consumer that asks INFORMATION_SCHEMA.COLUMNS (python-mysql-replication's
    use_column_name_cache) gets from serve the names the newest dump base's CREATE
    TABLE gives, as the primary gives its own; a table the base lacks gets no rows, and
    serve's log says which query."""
    from pymysqlreplication import row_event

    from tests.helpers import run_cli
    from tests.serve.clients import pmr_rows
    server = module_primary(tmp_path_factory, "cdc-minimal",
                            "SET GLOBAL binlog_row_metadata = 'MINIMAL'", "CREATE DATABASE cdc",
                            "CREATE TABLE cdc.t (id INT PRIMARY KEY, v INT)")
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(server, tmp_path / "backup", "--archive", url, "--source-name", "db1",
                    "--archive-interval", "0.2").start().wait_streaming()
    try:
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{server.port}",
                       "--archive", url, "--source-name", "db1", password="", timeout=120)
        assert base.returncode == 0, base.stderr
        insert(server, range(1, 4))
        server.execute("CREATE TABLE cdc.later (k INT)", "INSERT INTO cdc.later VALUES (7)")
        wait_archived_to_the_end(server, ArchiveStore(url))

        def read(at):
            row_event._COLUMN_NAME_CACHE.clear()  # the library's own, process-wide
            return pmr_rows(at, True, log_file="binlog.000001", log_pos=4,
                            use_column_name_cache=True)
        with start_server(ServeOptions(url, "db1", ("127.0.0.1", 0), "cdc", PASSWORD,
                                       build_selection(), poll_interval=0)) as handle:
            served = read(Endpoint(handle.host, handle.port, "cdc", PASSWORD))
        live = read(Endpoint.of_server(server))
    finally:
        assert daemon.stop() == 0, daemon.output()
        server.stop(remove=True)
    assert [r for r in served if r[2] == "t"] == [r for r in live if r[2] == "t"] == [
        ("insert", "cdc", "t", {"id": i, "v": i * 10}) for i in range(1, 4)]
    assert [r for r in served if r[2] == "later"] == [
        ("insert", "cdc", "later", {"UNKNOWN_COL0": 7})]  # the base has no such table
    assert [r for r in live if r[2] == "later"] == [("insert", "cdc", "later", {"k": 7})]
    assert any("no TABLE_MAP naming the columns of cdc.later" in r.getMessage()
               for r in caplog.records)
