"""``--apply native`` (replay.restore.native): a target's own replication applier applies
the binlogs. Against a real MariaDB primary as the server the target replicates from:
the target reaches the primary's CHECKSUM TABLE, its parallel settings come back, a
run stopped before the end then run again applies each transaction once, a target that
already replicates or has the source's server_id is refused."""

import pytest

from mysqlbackup.binlog.gtid import MariaGtidPos
from mysqlbackup.errors import UsageError
from mysqlbackup.sandbox import REPL_PASSWORD, REPL_USER
from mysqlbackup.source.spec import SourceSpec
from replay.restore.native import CONNECTION, End, apply_native
from tests.helpers import module_primary

TABLES = "n.items, n.log"


@pytest.fixture(scope="module")
def primary(tmp_path_factory):
    server = module_primary(
        tmp_path_factory, "native-primary", "CREATE DATABASE n",
        "CREATE TABLE n.items (id INT PRIMARY KEY, v VARCHAR(40))",
        "CREATE TABLE n.log (at INT, note VARCHAR(40))")  # no key: a twice would show
    conn = server.root()
    with conn.cursor() as cur:
        for i in range(150):
            cur.execute("INSERT INTO n.items VALUES (%s, 'one')", (i,))
            cur.execute("INSERT INTO n.log VALUES (%s, 'first')", (i,))
        cur.execute("SELECT @@gtid_binlog_pos")
        server.middle = cur.fetchone()[0]
        server.middle_sums = dict(server.execute(f"CHECKSUM TABLE {TABLES}"))
        for i in range(150):
            cur.execute("UPDATE n.items SET v = 'two' WHERE id = %s", (i,))
            cur.execute("INSERT INTO n.log VALUES (%s, 'second')", (i,))
    conn.close()
    server.end = server.execute("SELECT @@gtid_binlog_pos")[0][0]
    server.sums = dict(server.execute(f"CHECKSUM TABLE {TABLES}"))
    yield server
    server.stop(remove=True)


def spec_of(server):
    return SourceSpec("127.0.0.1", server.port, "root", "")


def native(target, primary, end, fresh=True, start=""):
    lines = []
    summary = apply_native(spec_of(target), ("127.0.0.1", primary.port), REPL_USER,
                           REPL_PASSWORD, MariaGtidPos.parse(start),
                           End(MariaGtidPos.parse(end), end), fresh=fresh, threads=4,
                           progress=lines.append, timeout=30)
    return summary, lines


def test_applies_to_the_end_and_puts_the_parallel_settings_back(primary, make_server):
    target = make_server(server_id=2, log_bin=False, semi_sync=False)
    target.execute("SET GLOBAL slave_parallel_mode = 'minimal'")
    summary, lines = native(target, primary, primary.end)
    assert dict(target.execute(f"CHECKSUM TABLE {TABLES}")) == primary.sums
    assert summary["applied"] == int(primary.end.split("-")[2])
    assert summary["gtid_pos"] == primary.end
    assert target.execute("SELECT @@gtid_slave_pos")[0][0] == primary.end
    assert target.execute("SELECT @@slave_parallel_threads, @@slave_parallel_mode") == \
        ((0, "minimal"),)
    assert target.execute("SHOW ALL SLAVES STATUS") == ()
    assert lines == [f"native: the target replicates from 127.0.0.1:{primary.port} (4 parallel "
                     f"threads) from GTID (none) to {primary.end}"]


def test_a_run_stopped_midway_then_run_again_applies_each_transaction_once(primary,
                                                                             make_server):
    target = make_server(server_id=2, log_bin=False, semi_sync=False)
    first, _ = native(target, primary, primary.middle)
    assert dict(target.execute(f"CHECKSUM TABLE {TABLES}")) == primary.middle_sums
    # run again from the same base (not loaded again): it resumes where the target is
    second, lines = native(target, primary, primary.end, fresh=False)
    assert dict(target.execute(f"CHECKSUM TABLE {TABLES}")) == primary.sums
    assert target.execute("SELECT COUNT(*) FROM n.log") == ((300,),)
    assert first["applied"] + second["applied"] == int(primary.end.split("-")[2])
    assert lines[0] == (f"native: the target is at GTID {primary.middle}, past the base's (none): "
                        "resuming from there")
    again, lines = native(target, primary, primary.end, fresh=False)
    assert again["applied"] == 0
    assert lines[-1] == f"native: the target is already at GTID {primary.end}: nothing to apply"


def test_refuses_a_target_that_replicates_or_has_the_sources_server_id(primary, make_server):
    target = make_server(server_id=2, log_bin=False, semi_sync=False)
    target.execute("CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = 1")
    with pytest.raises(UsageError, match=r"already replicates \(connection \(default\)\)"):
        native(target, primary, primary.end)
    target.execute("RESET SLAVE ALL")
    same = make_server(server_id=1, log_bin=False, semi_sync=False)
    with pytest.raises(UsageError, match="has server_id 1, the source's"):
        native(same, primary, primary.end)
    assert same.execute("SHOW ALL SLAVES STATUS") == ()
    # a connection of ours left by a killed run goes, and the run goes on
    target.execute(f"CHANGE MASTER '{CONNECTION}' TO MASTER_HOST = '127.0.0.1', "
                   "MASTER_PORT = 1")
    summary, lines = native(target, primary, primary.end)
    assert lines[0] == (f"native: removing the replication connection {CONNECTION} left by "
                        "an earlier run")
    assert dict(target.execute(f"CHECKSUM TABLE {TABLES}")) == primary.sums
