"""Restore fidelity on MariaDB: every way of the tool restores every checkpoint of a broad
workload (``tests/workload.py``) exactly as ``mariadb-binlog | mariadb`` does from the
same base, and that pipe gives the source's own state at each checkpoint (its known
limits: ``tests.fidelity.PIPE_LIMITS``)."""

import pytest

from tests.fidelity_parquet import check_change_table
from tests.fidelity_run import (WAYS, Source, check_pipe_gives_the_source, check_replay_sql,
                                 check_replay_target, check_way, pipe_prints)
from tests.helpers import module_primary

FLAVOR = "mariadb"
pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    from tests.fidelity import Tools
    server = module_primary(tmp_path_factory, "fidelity-source")
    try:
        yield Source(server, FLAVOR, tmp_path_factory.mktemp("fidelity"),
                     Tools.of(FLAVOR)).run()
    finally:
        server.stop(remove=True)


@pytest.fixture(scope="module")
def pipe(source, tmp_path_factory):
    """The engine's own pipe's Fingerprint at each checkpoint (one server, the pipe run
    from each checkpoint to the next)."""
    from mysqlbackup.sandbox import MariaDBSandbox
    target = MariaDBSandbox(str(tmp_path_factory.mktemp("pipe")), server_id=9,
                            log_bin=False, semi_sync=False).start()
    try:
        yield pipe_prints(source, target)
    finally:
        target.stop(remove=True)


def test_the_pipe_gives_the_source_at_every_checkpoint(source, pipe):
    check_pipe_gives_the_source(source, pipe)


@pytest.mark.parametrize("way", WAYS)
def test_each_way_restores_every_checkpoint_as_the_pipe(way, source, pipe, make_server):
    check_way(source, pipe, make_server(server_id=2, semi_sync=False, **WAYS[way]["server"]), way)


def test_replay_target_into_a_binlog_target_as_the_pipe(source, pipe, make_server):
    check_replay_target(source, pipe, make_server(server_id=2, semi_sync=False))


def test_replay_sql_loads_with_the_client_as_the_pipe(source, pipe, make_server):
    check_replay_sql(source, pipe, make_server(server_id=2, semi_sync=False, log_bin=False))


def test_the_change_table_holds_the_sources_values(source, tmp_path):
    check_change_table(source, tmp_path)
