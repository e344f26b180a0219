"""Restore fidelity on MySQL 9.7 (the ``.mysql/tree`` server): every way of the tool
restores every checkpoint of the workload (``tests/workload.py``: MINIMAL images,
PARTIAL_JSON, compressed transactions, STATEMENT and MIXED sessions, XA) exactly as
``mysqlbinlog | mysql`` does from the same base, and that pipe gives the source's own
state at each checkpoint (``tests.fidelity.PIPE_LIMITS``)."""


import pytest

from tests.fidelity import Tools
from tests.fidelity_parquet import check_change_table
from tests.fidelity_run import (WAYS, Source, check_pipe_gives_the_source, check_replay_sql,
                                 check_replay_target, check_way, pipe_prints)

pytestmark = pytest.mark.mysql

FLAVOR = "mysql"
# LOAD DATA LOCAL INFILE: MySQL's server refuses it unless asked (the engine's pipe too)
LOCAL_INFILE = "SET GLOBAL local_infile = 1"


def mysql_server(**kwargs):
    from mysqlbackup.sandbox.mysql import MySQLSandbox
    kwargs.setdefault("gtid_mode", "ON")  # the GTIDs each way keeps
    server = MySQLSandbox(**kwargs).start()
    server.execute(LOCAL_INFILE)
    return server


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    from mysqlbackup.sandbox.mysql import client_wrappers, why_no_mysql
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    root = tmp_path_factory.mktemp("fidelity-mysql")
    server = mysql_server(server_id=1, semi_sync_timeout_ms=1000)
    try:
        yield Source(server, FLAVOR, root, Tools.of(FLAVOR, client_wrappers(root / "bin"))).run()
    finally:
        server.stop(remove=True)


@pytest.fixture(scope="module")
def pipe(source):
    """The engine's own pipe's Fingerprint at each checkpoint (one server, the pipe run
    from each checkpoint to the next)."""
    target = mysql_server(server_id=9, log_bin=False, semi_sync=False)
    try:
        yield pipe_prints(source, target)
    finally:
        target.stop(remove=True)


def test_the_pipe_gives_the_source_at_every_checkpoint(source, pipe):
    check_pipe_gives_the_source(source, pipe)


@pytest.fixture
def target():
    servers = []

    def make(**kwargs):
        servers.append(mysql_server(server_id=2, semi_sync=False, **kwargs))
        return servers[-1]
    yield make
    for server in servers:
        server.stop(remove=True)


@pytest.mark.parametrize("way", WAYS)
def test_each_way_restores_every_checkpoint_as_the_pipe(way, source, pipe, target):
    check_way(source, pipe, target(**WAYS[way]["server"]), way)


def test_replay_target_into_a_binlog_target_as_the_pipe(source, pipe, target):
    check_replay_target(source, pipe, target())


def test_replay_sql_loads_with_the_client_as_the_pipe(source, pipe, target):
    check_replay_sql(source, pipe, target(log_bin=False))


def test_the_change_table_holds_the_sources_values(source, tmp_path):
    check_change_table(source, tmp_path)
