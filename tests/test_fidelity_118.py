"""Restore fidelity on MariaDB 11.8 LTS (Debian trixie's, in ``.mariadb/tree``, with its
stock defaults: TLS on, ``binlog_legacy_event_pos`` OFF, name resolution on, the
accounts of a new install): the workload and ways of ``tests/test_fidelity.py``, the
source streamed by the daemon under semi-sync, compared with ``mariadb-binlog |
mariadb`` of 11.8 from the same base."""

import pytest

from tests.fidelity import Tools, fingerprint, float_columns, masked_columns
from tests.fidelity_parquet import check_change_table
from tests.fidelity_run import Source

pytestmark = pytest.mark.server

FLAVOR = "mariadb"


def tree_server(**kwargs):
    from mysqlbackup.sandbox_tree import MariaDBTreeSandbox
    return MariaDBTreeSandbox(**kwargs).start()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    from mysqlbackup.sandbox_mysql import client_wrappers
    from mysqlbackup.sandbox_tree import TOOLS, mariadb_tree, why_no_tree
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
        source.load_base(target)
        prints, previous = [], None
        for checkpoint in source.checkpoints:
            source.pipe_to(target, previous, checkpoint)
            prints.append(fingerprint(target, FLAVOR))
            previous = checkpoint
        yield prints
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
    for checkpoint, got in zip(source.checkpoints, pipe):
        want = checkpoint.print
        assert got.differences(want, float_columns(want), ignore_auto_increment=True,
                               masked=masked_columns(FLAVOR)) == [], checkpoint.name


WAYS = {
    "native": dict(server=dict(), args=()),
    "statements-local-binlog": dict(server=dict(), args=("--apply", "statements",
                                                         "--engine", "local")),
    "statements-spark-nobinlog": dict(server=dict(log_bin=False),
                                      args=("--apply", "statements", "--engine", "spark")),
}


@pytest.mark.parametrize("way", WAYS)
def test_each_way_restores_every_checkpoint_as_the_pipe(way, source, pipe, target):
    server = target(**WAYS[way]["server"])
    for checkpoint, want in zip(source.checkpoints, pipe):
        done = source.restore(server, checkpoint, *WAYS[way]["args"])
        assert done.returncode == 0, done.stdout + done.stderr
        got = fingerprint(server, FLAVOR)
        assert got.differences(want) == [], (checkpoint.name, done.stdout + done.stderr)


def test_replay_sql_loads_with_the_client_as_the_pipe(source, pipe, target):
    server = target(log_bin=False)
    source.load_base(server)
    previous = None
    for i, (checkpoint, want) in enumerate(zip(source.checkpoints, pipe)):
        source.replay_sql(server, previous, checkpoint, f"replay-{i}.sql")
        assert fingerprint(server, FLAVOR).differences(want) == [], checkpoint.name
        previous = checkpoint


def test_the_change_table_holds_the_sources_values(source, tmp_path):
    check_change_table(source, tmp_path)
