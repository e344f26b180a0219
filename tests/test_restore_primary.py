"""A restore into a server that becomes the new primary (MariaDB 10.11): a target with
its binary log on and ``gtid_strict_mode``, the source's GTIDs kept. The case the
issue reproduced in a few lines: a base, then transactions whose ``NEXT VALUE FOR`` of
a ``CACHE 5`` sequence logs the sequence's row inside them, restored by statements
(``--engine local``) and by the target's own applier: the rows and the sequence are the
source's, each source GTID is logged once in the target's binlog (none twice, none of
the target's own), and ``gtid_current_pos`` is the source's."""

import pytest

from mysqlbackup.archive.store import ArchiveStore
from tests.fidelity import logged_gtids
from tests.helpers import (Daemon, caught_up, module_primary, run_cli,
                           wait_archived_to_the_end, wait_for)

pytestmark = pytest.mark.server

SOURCE = "db1"


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    """The source archived: a base after the schema, then 40 rows taking values of the
    sequence: 30 autocommit transactions (6 log the sequence's row with theirs), then 10
    in one BEGIN .. COMMIT (the source logs the sequence's row twice as a group of its
    own before that transaction)."""
    source = module_primary(tmp_path_factory, "seq-source")
    root = tmp_path_factory.mktemp("seq")
    url = f"file://{root / 'archive'}"
    daemon = Daemon(source, root / "dir", "--start-file", source.binlog_files()[0],
                    "--archive", url, "--archive-interval", "0.2", "--source-name",
                    SOURCE).start()
    try:
        daemon.wait_streaming()
        source.execute("CREATE DATABASE q", "CREATE SEQUENCE q.s CACHE 5",
                       "CREATE TABLE q.t (id BIGINT PRIMARY KEY, v INT)")
        user, password = source.admin
        base = run_cli("base", "--source", f"mysql://{user}@127.0.0.1:{source.port}",
                       "--archive", url, "--source-name", SOURCE, password=password,
                       timeout=120)
        assert base.returncode == 0, base.stdout + base.stderr
        source.execute(*[f"INSERT INTO q.t VALUES (NEXT VALUE FOR q.s, {i})"
                         for i in range(30)])
        source.execute("BEGIN", *[f"INSERT INTO q.t VALUES (NEXT VALUE FOR q.s, {i})"
                                  for i in range(30, 40)], "COMMIT")
        wait_for(lambda: caught_up(source, root / "dir"), what="caught up")
        wait_archived_to_the_end(source, ArchiveStore(url), SOURCE)
    finally:
        assert daemon.stop() == 0, daemon.output()[-3000:]
    yield source, url
    source.stop(remove=True)


@pytest.mark.parametrize("apply", ["statements", "native"])
def test_a_restored_primary_holds_the_sources_rows_sequence_and_gtids(archived, make_server,
                                                                      apply):
    source, url = archived
    target = make_server(server_id=2, semi_sync=False)  # log_bin, gtid_strict_mode
    user, password = target.admin
    done = run_cli("restore", "--archive", url, "--source-name", SOURCE, "--target",
                   f"mysql://{user}@127.0.0.1:{target.port}", "--apply", apply,
                   "--engine", "local", password=password, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    table = "SELECT COUNT(*), SUM(id), SUM(v) FROM q.t"
    assert target.execute(table) == source.execute(table) == ((40, 820, 780),)
    state = "SELECT next_not_cached_value, cache_size FROM q.s"
    assert target.execute(state) == source.execute(state)
    want = source.execute("SELECT @@gtid_binlog_pos")[0][0]
    assert target.execute("SELECT @@gtid_current_pos")[0][0] == want
    if apply == "statements":  # its binlog: each source GTID after the base's 0-1-3, once
        assert ("the SEQUENCE rows of 6 transactions were applied unlogged, just before "
                "each") in done.stderr
        last = int(want.split("-")[2])
        assert logged_gtids(target) == [f"0-1-{n}" for n in range(4, last + 1)]
        assert target.execute("SELECT @@gtid_binlog_pos")[0][0] == want
