"""Restore fidelity on MariaDB 11.8 LTS (Debian trixie's, in ``.mariadb/tree``, with its
stock defaults: TLS on, ``binlog_legacy_event_pos`` OFF, name resolution on, the
accounts of a new install): the workload and ways of ``tests/test_fidelity.py``, the
source streamed by the daemon under semi-sync, compared with ``mariadb-binlog |
mariadb`` of 11.8 from the same base."""

import pytest

from tests.fidelity import Tools
from tests.fidelity_parquet import check_change_table
from tests.fidelity_run import (WAYS, Source, check_pipe_gives_the_source, check_replay_sql,
                                 check_replay_target, check_way, pipe_prints)

pytestmark = pytest.mark.server

FLAVOR = "mariadb"


def tree_server(**kwargs):
    from mysqlbackup.sandbox.tree import MariaDBTreeSandbox
    return MariaDBTreeSandbox(**kwargs).start()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    from mysqlbackup.sandbox.mysql import client_wrappers
    from mysqlbackup.sandbox.tree import TOOLS, mariadb_tree, why_no_tree
    problem = why_no_tree()
    if problem:
        pytest.skip(problem)
    root = tmp_path_factory.mktemp("fidelity-118")
    server = tree_server(server_id=1, semi_sync_timeout_ms=1000)
    try:
        tools = Tools.of(FLAVOR, client_wrappers(root / "bin", mariadb_tree(), TOOLS))
        yield Source(server, FLAVOR, root, tools).run()
    finally:
        server.stop(remove=True)


@pytest.fixture(scope="module")
def pipe(source):
    """The engine's own pipe's Fingerprint at each checkpoint."""
    target = tree_server(server_id=9, log_bin=False, semi_sync=False)
    try:
        yield pipe_prints(source, target)
    finally:
        target.stop(remove=True)


@pytest.fixture
def target():
    servers = []

    def make(**kwargs):
        servers.append(tree_server(server_id=2, semi_sync=False, **kwargs))
        return servers[-1]
    yield make
    for server in servers:
        server.stop(remove=True)


def test_the_pipe_gives_the_source_at_every_checkpoint(source, pipe):
    check_pipe_gives_the_source(source, pipe)


@pytest.mark.parametrize("way", WAYS)
def test_each_way_restores_every_checkpoint_as_the_pipe(way, source, pipe, target):
    check_way(source, pipe, target(**WAYS[way]["server"]), way)


def test_replay_target_into_a_binlog_target_as_the_pipe(source, pipe, target):
    check_replay_target(source, pipe, target())


def test_replay_sql_loads_with_the_client_as_the_pipe(source, pipe, target):
    check_replay_sql(source, pipe, target(log_bin=False))


def test_the_change_table_holds_the_sources_values(source, tmp_path):
    check_change_table(source, tmp_path)
