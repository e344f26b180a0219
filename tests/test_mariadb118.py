"""MariaDB 11.8 LTS live (``.mariadb/tree``, its stock defaults), with
``binlog_legacy_event_pos`` OFF (the default: events inside a transaction carry no end
position) and ON: the daemon streams it as a semi-sync replica (every transaction
acknowledged after its fsync, the files the server's own), goes on after kill -9 and
a rotation, and verify passes; a stock 11.8 replica, given no TLS option, follows
``serve`` over TLS with the certificate verified (the proof in serve's OK), and one
whose proof does not match is refused."""

import os
import signal

import pytest

from mysqlbackup.archive.store import ArchiveStore
from tests.helpers import (Daemon, caught_up, current_binlog, run_cli, same_except_in_use_flag,
                           wait_archived_to_the_end, wait_for, wait_semi_sync_client)
from tests.serve.world import PASSWORD, serve, status

pytestmark = pytest.mark.server


def tree_server(**kwargs):
    from mysqlbackup.sandbox.tree import MariaDBTreeSandbox, why_no_tree
    problem = why_no_tree()
    if problem:
        pytest.skip(problem)
    return MariaDBTreeSandbox(**kwargs).start()


def commit(server, count, first):
    """``count`` transactions: autocommitted inserts, and one in five of three
    statements."""
    conn = server.root()
    with conn.cursor() as cur:
        for i in range(first, first + count):
            if i % 5:
                cur.execute(f"INSERT INTO d.t VALUES ({i}, REPEAT('v', {i % 300}))")
            else:
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO d.t VALUES ({i}, 'three')")
                cur.execute(f"UPDATE d.t SET v = 'x' WHERE id = {i - 1}")
                cur.execute(f"DELETE FROM d.t WHERE id = {i - 2}")
                cur.execute("COMMIT")
    conn.close()


def acked(server):
    return int(server.status("Rpl_semi_sync_master_yes_tx"))


@pytest.fixture(scope="module", params=[False, True], ids=["positions-off", "legacy-on"])
def primary(request, tmp_path_factory):
    """An 11.8 primary streamed by the daemon into a local directory and an archive, 60
    transactions across a rotation, each acknowledged; the ACK counts kept."""
    server = tree_server(semi_sync_timeout_ms=5000, legacy_event_pos=request.param)
    root = tmp_path_factory.mktemp("mariadb118")
    server.url_archive = f"file://{root / 'archive'}"
    server.backup = root / "backup"
    server.daemon = Daemon(server, server.backup, "--start-file", server.binlog_files()[0],
                           "--archive", server.url_archive, "--archive-interval", "0.2",
                           "--source-name", "db1").start().wait_streaming()
    try:
        server.execute("CREATE DATABASE d",
                       "CREATE TABLE d.t (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB",
                       "CREATE TABLE d.m (id INT PRIMARY KEY) ENGINE=InnoDB")
        wait_semi_sync_client(server)
        before = acked(server)
        commit(server, 30, 1)
        server.execute("FLUSH BINARY LOGS")
        commit(server, 30, 31)
        server.acks = (before, acked(server))
        wait_for(lambda: caught_up(server, server.backup), what="the daemon caught up")
        yield server
    finally:
        if server.daemon.proc.poll() is None:
            server.daemon.stop()
        server.stop(remove=True)


def test_every_transaction_is_acknowledged_and_the_files_are_the_servers(primary):
    before, after = primary.acks
    assert after - before == 60
    assert primary.status("Rpl_semi_sync_master_no_tx") == "0"
    assert primary.execute("SELECT @@binlog_legacy_event_pos")[0][0] == int(
        primary.legacy_event_pos)
    for name in primary.binlog_files():
        assert same_except_in_use_flag(primary.backup / name, primary.binlog_path(name)), name


def test_killed_it_goes_on_and_the_archive_verifies(primary):
    primary.daemon.proc.send_signal(signal.SIGKILL)
    primary.daemon.proc.wait(timeout=10)
    commit(primary, 20, 61)
    primary.daemon = Daemon(primary, primary.backup, "--archive", primary.url_archive,
                            "--archive-interval", "0.2", "--source-name", "db1")
    primary.daemon.start().wait_streaming()
    commit(primary, 10, 81)
    wait_for(lambda: caught_up(primary, primary.backup), what="the daemon caught up again")
    name = current_binlog(primary)
    assert same_except_in_use_flag(primary.backup / name, primary.binlog_path(name))
    wait_archived_to_the_end(primary, ArchiveStore(primary.url_archive))
    done = run_cli("verify", "--archive", primary.url_archive, "--source-name", "db1")
    assert done.returncode == 0, done.stdout + done.stderr


# the client library takes 127.0.0.1 and ::1 for this host and checks no certificate
# there (MDEV-37143): serve listens on another loopback address, where it checks
ELSEWHERE = ("127.0.0.2", 0)


def attach(replica, handle):
    """CHANGE MASTER as a new 11.8 replica takes it: no TLS option given."""
    replica.execute(f"CHANGE MASTER TO MASTER_HOST='{handle.host}', MASTER_PORT={handle.port}, "
                    f"MASTER_USER='mysqlbackup_serve', MASTER_PASSWORD='{PASSWORD}', "
                    "MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=slave_pos", "START SLAVE")


def test_a_stock_replica_follows_serve_over_tls_its_certificate_verified(primary):
    wait_archived_to_the_end(primary, ArchiveStore(primary.url_archive))
    replica = tree_server(server_id=5, semi_sync=False, log_bin=False)
    try:
        with serve(primary.url_archive, listen=ELSEWHERE) as handle:
            attach(replica, handle)
            end = primary.execute("SELECT @@gtid_binlog_pos")[0][0]
            wait_for(lambda: replica.execute("SELECT @@gtid_slave_pos")[0][0] == end,
                     timeout=30, what=f"the replica at {end} ({status(replica)})")
            row = status(replica)
            assert (row["Master_SSL_Allowed"], row["Master_SSL_Verify_Server_Cert"]) == \
                ("Yes", "Yes")
            assert handle.dump_tls[0].startswith("TLSv1.")
        tables = "CHECKSUM TABLE d.t, d.m"
        assert replica.execute(tables) == primary.execute(tables)
    finally:
        replica.stop(remove=True)


def test_a_replica_refuses_a_certificate_proof_that_does_not_match(primary, monkeypatch):
    from replay.serve import connection
    monkeypatch.setattr(connection.certs, "cert_proof", lambda *a: b"\x01" + b"0" * 64)
    replica = tree_server(server_id=6, semi_sync=False, log_bin=False)
    try:
        with serve(primary.url_archive, listen=ELSEWHERE) as handle:
            attach(replica, handle)
            wait_for(lambda: status(replica)["Last_IO_Errno"], timeout=30,
                     what="the replica's I/O error")
            row = status(replica)
            assert row["Last_IO_Errno"] == 2026, row  # CR_SSL_CONNECTION_ERROR
            assert handle.dumps == 0
    finally:
        replica.stop(remove=True)


def test_base_archive_ls_find_and_check_on_an_118_primary(primary, tmp_path):
    """A dump base by 11.8's own mariadb-dump; the archive of a primary whose events
    inside transactions carry no end position listed, searched (the rows of each
    transaction counted) and planned like any."""
    from mysqlbackup.sandbox.mysql import client_wrappers
    from mysqlbackup.sandbox.tree import TOOLS
    path = client_wrappers(tmp_path / "bin", primary.tree, TOOLS) + os.pathsep + \
        os.environ["PATH"]
    user, password = primary.admin
    base = run_cli("base", "--source", f"mysql://{user}@127.0.0.1:{primary.port}",
                   "--archive", primary.url_archive, "--source-name", "db1",
                   password=password, timeout=120, path=path)
    assert base.returncode == 0, base.stdout + base.stderr
    wait_archived_to_the_end(primary, ArchiveStore(primary.url_archive))
    listed = run_cli("archive", "ls", "--archive", primary.url_archive, "--source-name", "db1")
    assert listed.returncode == 0 and "binlog.000002" in listed.stdout, listed.stderr
    found = run_cli("archive", "find", "--archive", primary.url_archive, "--source-name",
                    "db1", "--table", "d.t", "--type", "delete")
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert lines and all("d.t delete 1 row" in line for line in lines), lines[:3]
    done = run_cli("check", "--archive", primary.url_archive, "--source-name", "db1")
    assert done.returncode == 0 and done.stdout.startswith("CHECK OK"), done.stdout


def test_binlog_clients_read_from_serve_what_the_primary_gives(primary, tmp_path):
    """11.8's own mariadb-binlog (--raw: the files, the active one's in-use flag clear as
    a dump sends it; -v decoded) and python-mysql-replication get from serve what they
    get from the primary, events inside transactions without an end position and all."""
    import uuid

    from mysqlbackup.sandbox.mysql import client_wrappers, shared_dir
    from mysqlbackup.sandbox.tree import TOOLS
    from tests.serve.clients import (Endpoint, pmr_rows, read_decoded, read_raw,
                                     without_in_use)
    reader = os.path.join(client_wrappers(tmp_path / "bin", primary.tree, TOOLS),
                          "mariadb-binlog")
    shared = os.path.join(shared_dir(primary.tree), f"clients-{uuid.uuid4().hex[:8]}")
    wait_archived_to_the_end(primary, ArchiveStore(primary.url_archive))
    live, first = Endpoint.of_server(primary), primary.binlog_files()[0]
    try:
        with serve(primary.url_archive) as handle:
            ends = Endpoint.of_serve(handle, "mysqlbackup_serve", PASSWORD)
            served = read_raw(reader, ends, first, os.path.join(shared, "s"))
            decoded = read_decoded(reader, ends, first, os.path.join(shared, "s-load"))
            rows = pmr_rows(ends, True, log_file=first, log_pos=4)
        assert served == read_raw(reader, live, first, os.path.join(shared, "p"))
        assert decoded == read_decoded(reader, live, first, os.path.join(shared, "p-load"))
        assert rows == pmr_rows(live, True, log_file=first, log_pos=4)
    finally:
        import shutil
        shutil.rmtree(shared, ignore_errors=True)
    newest = primary.binlog_files()[-1]
    with open(primary.binlog_path(newest), "rb") as f:
        assert served[newest] == without_in_use(f.read())
    assert ("insert", "d", "t", {"id": 1, "v": "v"}) in rows
