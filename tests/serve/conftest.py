"""Fixtures of the serve tests (one instance per module that asks): a primary writing
three binlog files (the last one active, archived as a partial file), its archive, and one
replica reset between tests."""

import shutil

import pytest

from mysqlbackup.archive.codec import PLAIN
from mysqlbackup.archive.importer import import_directory
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.sandbox import MariaDBSandbox
from tests.helpers import module_primary, tagged
from tests.serve.world import T0, gtid_executed


@pytest.fixture(scope="module")
def primary(tmp_path_factory):
    server = module_primary(tmp_path_factory, "serve-primary")
    gtids = []

    def run(*statements):
        server.execute(*statements)
        gtids.append(server.execute("SELECT @@gtid_binlog_pos")[0][0])
    run(f"SET timestamp={T0}", "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, "
        "v INT)", "CREATE TABLE d.m (id INT PRIMARY KEY) ENGINE=MyISAM")
    run(f"SET timestamp={T0}", *[f"INSERT INTO d.t VALUES ({i}, {i})" for i in (1, 2, 3)])
    server.execute("FLUSH BINARY LOGS")
    run(f"SET timestamp={T0 + 100}", "INSERT INTO d.t VALUES (4, 4)",
        "INSERT INTO d.m VALUES (1)", "UPDATE d.t SET v = v + 10 WHERE id < 3")
    server.execute("FLUSH BINARY LOGS")
    run(f"SET timestamp={T0 + 200}", "INSERT INTO d.t VALUES (5, 5)",
        "DELETE FROM d.t WHERE id = 1", "INSERT INTO d.t VALUES (6, 6)",
        "CREATE TABLE d.gone (id INT)", "INSERT INTO d.gone VALUES (7)", "DROP TABLE d.gone")
    yield server, gtids
    server.stop(remove=True)


@pytest.fixture(scope="module")
def binlog_dir(primary, tmp_path_factory):
    server, _ = primary
    keep = tmp_path_factory.mktemp("serve-files")
    for name in server.binlog_files():
        shutil.copyfile(server.binlog_path(name), keep / name)
    return keep


@pytest.fixture(scope="module")
def archive(binlog_dir, tmp_path_factory):
    url = f"file://{tmp_path_factory.mktemp('serve-archive')}"
    import_directory(ArchiveStore(url), str(binlog_dir), "db1", echo=lambda line: None,
                     codec=PLAIN)
    return url


@pytest.fixture(scope="module")
def replica_server(tmp_path_factory):
    # a small relay log space: what the replica receives stays a little ahead of what it
    # applies (a big stream is provably mid-way while it is received)
    server = MariaDBSandbox(str(tmp_path_factory.mktemp("serve-replica")), server_id=2,
                            log_bin=False, semi_sync=False, extra_args=[
                                "--relay-log-space-limit=65536", "--max-relay-log-size=16384",
                                "--innodb-flush-log-at-trx-commit=2"]).start()
    yield server
    server.stop(remove=True)


@pytest.fixture
def replica(replica_server):
    """The module's replica, empty and without a primary."""
    replica_server.execute("STOP SLAVE", "RESET SLAVE ALL", *[
        f"DROP DATABASE IF EXISTS {d}" for d in ("d", "big", "gate")],
        "SET GLOBAL gtid_slave_pos = ''")
    yield replica_server
    replica_server.execute("STOP SLAVE")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A MySQL source writing three binlog files (tagged GTIDs and a DDL among them), its
    files copied (the last one active) and archived; what the tests compare with."""
    from mysqlbackup.sandbox.mysql import MySQLSandbox, why_no_mysql
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    source = MySQLSandbox(server_id=1, semi_sync=False, gtid_mode="ON").start()
    try:
        source.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)",
                       *[f"INSERT INTO d.t VALUES ({i}, {i})" for i in range(5)],
                       "FLUSH BINARY LOGS")
        mid = gtid_executed(source)  # the GTIDs of the first file
        source.execute("INSERT INTO d.t VALUES (5, 5)", "UPDATE d.t SET v = v + 1")
        mid2 = gtid_executed(source)  # inside the second file
        tagged(source, "INSERT INTO d.t VALUES (6, 6)", "INSERT INTO d.t VALUES (7, 7)")
        source.execute("CREATE TABLE d.u (a INT PRIMARY KEY)", "INSERT INTO d.u VALUES (1)")
        position = source.execute("SHOW BINARY LOG STATUS")[0][:2]
        source.execute("DELETE FROM d.t WHERE id = 2", "FLUSH BINARY LOGS",
                       "INSERT INTO d.u VALUES (2)", "UPDATE d.t SET v = 0 WHERE id = 3")
        files = tmp_path_factory.mktemp("mysql-serve-files")
        for name in source.binlog_files():
            shutil.copyfile(source.binlog_path(name), files / name)
        url = f"file://{tmp_path_factory.mktemp('mysql-serve-archive')}"
        import_directory(ArchiveStore(url), str(files), "my1", echo=lambda line: None,
                         codec=PLAIN)
        yield {"source": source, "url": url, "files": files, "mid": mid, "mid2": mid2,
               "position": position, "end": gtid_executed(source)}
    finally:
        source.stop(remove=True)
