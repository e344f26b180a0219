"""The servers this project starts (test sandboxes, drill's scratch server, a restored
datadir's server) keep their temporary files to themselves: at start-up mariadbd and
mysqld delete every ``#sql*`` file in their tmpdir, so a server left at the shared /tmp
takes the temporary tables of every other server there (seen in the suite under load: a
bootstrap's own table gone, "Unknown table 'mysql.tmp_user_sys'")."""

import os
import tempfile
import uuid

import pytest

from mysqlbackup.sandbox import MariaDBSandbox


@pytest.fixture
def foreign_temp_table():
    """A file named as another server's temporary table in /tmp (TMPDIR)."""
    path = os.path.join(tempfile.gettempdir(), f"#sql-mysqlbackup-probe-{uuid.uuid4().hex}.MAI")
    with open(path, "wb") as f:
        f.write(b"another server's")
    yield path
    if os.path.exists(path):
        os.unlink(path)


@pytest.mark.server
def test_install_db_and_a_sandbox_leave_other_servers_temporary_tables(foreign_temp_table,
                                                                         tmp_path):
    datadir = tmp_path / "initialised"
    MariaDBSandbox._install_db(str(datadir))
    assert (datadir / "mysql").is_dir()
    assert not (tmp_path / "initialised.tmp").exists()   # its tmpdir goes with it
    with MariaDBSandbox(str(tmp_path / "server"), semi_sync=False) as server:
        assert server.execute("SELECT @@tmpdir")[0][0] == str(tmp_path / "server" / "tmp")
    assert os.path.exists(foreign_temp_table)


@pytest.mark.mysql
def test_a_mysql_sandbox_leaves_other_servers_temporary_tables(make_mysql):
    from mysqlbackup.sandbox.mysql import mysql_tree
    probe = os.path.join(mysql_tree(), "tmp", f"#sql-mysqlbackup-probe-{uuid.uuid4().hex}")
    with open(probe, "wb") as f:
        f.write(b"another server's")
    try:
        server = make_mysql(semi_sync=False, log_bin=False)
        assert server.execute("SELECT @@tmpdir")[0][0] == server.inside("tmp")
        assert os.path.exists(probe)
    finally:
        if os.path.exists(probe):
            os.unlink(probe)


def test_free_ports_lie_below_the_ephemeral_range():
    # outgoing connections take their local ports from the kernel's ephemeral range: a
    # port drawn there could be taken by one before its server binds it (a daemon's
    # --metrics-address "address already in use" in a loaded test run)
    import socket

    from mysqlbackup import scratch
    low = scratch._ephemeral_low()
    ports = {scratch.free_port() for _ in range(20)}
    assert all(scratch.PORTS_FROM <= p < low for p in ports) and len(ports) > 10
    for port in list(ports)[:3]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
