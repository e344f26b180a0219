"""Fixtures: real throwaway MariaDB servers (never a server the tests did not start)."""

import os
import shutil

import pytest

from mysqlbackup.sandbox import MariaDBSandbox, find_binary

SHARED_BINLOGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "shared", "binlogs")


def _require_mariadbd():
    if find_binary("mariadbd") is None:
        pytest.fail("mariadbd not found: run scripts/test.sh, which installs mariadb-server")


@pytest.fixture(scope="session")
def primary(tmp_path_factory):
    """One MariaDB primary for the whole session (binlog ROW/CRC32/GTID, semi-sync on)."""
    _require_mariadbd()
    server = MariaDBSandbox(str(tmp_path_factory.mktemp("primary")), semi_sync_timeout_ms=1000)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def make_server(tmp_path_factory):
    """Factory for extra throwaway servers (destructive tests); all stopped afterwards."""
    _require_mariadbd()
    servers = []

    def make(**kwargs):
        kwargs.setdefault("semi_sync_timeout_ms", 1000)
        server = MariaDBSandbox(str(tmp_path_factory.mktemp("server")), **kwargs)
        servers.append(server)
        return server.start()

    yield make
    for server in servers:
        server.stop(remove=True)


@pytest.fixture
def shared_binlog():
    """Path of a real binlog file from ../shared/binlogs (fails if the folder is missing)."""
    def path(relative):
        full = os.path.join(SHARED_BINLOGS, relative)
        assert os.path.exists(full), f"missing test input {full}"
        return full
    return path


@pytest.fixture
def copy_binlog(tmp_path, shared_binlog):
    def copy(relative, name=None):
        dest = tmp_path / (name or os.path.basename(relative))
        shutil.copyfile(shared_binlog(relative), dest)
        return dest
    return copy
