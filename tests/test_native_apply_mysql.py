"""``--apply native`` on MySQL targets (replay.restore.native): the target's own applier
fed by serve speaking as a MySQL primary, SOURCE_AUTO_POSITION=1 on a channel of its
own, to a GTID and then on to the end, each transaction once by the target's own
gtid_executed, replica_parallel_workers put back, the channel removed; a run killed
with kill -9 while the target replicates, run again, goes on; a restore of a base +
archive of a MySQL source to a GTID."""

import os
import signal
import subprocess
import sys

import pytest

from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog.gtid import MysqlGtidSet
from mysqlbackup.source.spec import SourceSpec
from replay.planning.plan import ReplayOptions
from replay.restore.native import CONNECTION, run_native
from tests.helpers import Daemon, REPO, run_cli, selection_of, wait_archived_to_the_end

pytestmark = pytest.mark.mysql

TABLES = "n.items, n.log"


def gtid_executed(server):
    return server.execute("SELECT @@gtid_executed")[0][0].replace("\n", "")


def sums(server):
    return dict(server.execute(f"CHECKSUM TABLE {TABLES}"))


def write(server, first, count, *statements):
    conn = server.root()
    with conn.cursor() as cur:
        for i in range(first, first + count):
            for sql in statements:
                cur.execute(sql, (i,))
    conn.close()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A MySQL source archived by the daemon, a base (mysqldump) taken half way; the
    GTIDs and checksums of the base, of a stop point and of the end kept on it."""
    from mysqlbackup.sandbox.mysql import MySQLSandbox, client_wrappers, why_no_mysql
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    root = tmp_path_factory.mktemp("native-mysql")
    server = MySQLSandbox(server_id=1, semi_sync=False, gtid_mode="ON").start()
    server.path = str(client_wrappers(root / "bin")) + os.pathsep + os.environ["PATH"]
    server.url_archive = f"file://{root / 'archive'}"
    daemon = Daemon(server, root / "backup", "--start-file", server.binlog_files()[0],
                    "--archive", server.url_archive, "--archive-interval", "0.3",
                    "--source-name", "my1").start()
    try:
        server.execute("CREATE DATABASE n", "CREATE TABLE n.items (id INT PRIMARY KEY, "
                       "v VARCHAR(40))", "CREATE TABLE n.log (at INT, note VARCHAR(40))")
        write(server, 0, 60, "INSERT INTO n.items VALUES (%s, 'one')",
              "INSERT INTO n.log VALUES (%s, 'first')")  # n.log has no key: twice shows
        server.base_gtids, server.base_sums = gtid_executed(server), sums(server)
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{server.port}",
                       "--archive", server.url_archive, "--source-name", "my1", password="",
                       timeout=120, path=server.path)
        assert base.returncode == 0, base.stdout + base.stderr
        server.execute("FLUSH BINARY LOGS")
        write(server, 0, 60, "UPDATE n.items SET v = 'two' WHERE id = %s",
              "INSERT INTO n.log VALUES (%s, 'second')")
        server.stop_sums, server.stop_gtids = sums(server), gtid_executed(server)
        uuid = server.execute("SELECT @@server_uuid")[0][0]
        server.stop_gtid = f"{uuid}:{MysqlGtidSet.parse(server.stop_gtids).sids[uuid][-1][1]}"
        write(server, 60, 90, "INSERT INTO n.items VALUES (%s, 'late')",
              "INSERT INTO n.log VALUES (%s, 'third')")
        server.end_gtids, server.end_sums = gtid_executed(server), sums(server)
        wait_archived_to_the_end(server, ArchiveStore(server.url_archive), "my1")
    finally:
        assert daemon.stop() == 0, daemon.output()
    yield server
    server.stop(remove=True)


def spec_of(server):
    return SourceSpec("127.0.0.1", server.port, "root", "")


def options(source, **stop):
    return ReplayOptions(source.url_archive, source_name="my1",
                         selection=selection_of(**stop))


def target_of(make_mysql, server_id=2):
    target = make_mysql(server_id=server_id, semi_sync=False)
    target.execute("SET GLOBAL replica_parallel_workers = 1")
    return target


def test_to_a_gtid_then_on_to_the_end_each_transaction_once(source, make_mysql):
    """An empty target, the whole archive to just before a GTID: the source's checksums
    and gtid_executed then; run again to the end: the rest, once; the parallel workers
    put back and the channel gone after each run."""
    target = target_of(make_mysql)
    lines = []
    summary = run_native(options(source, stop_before_gtid=source.stop_gtid),
                         spec_of(target), threads=4, progress=lines.append, timeout=120)
    assert (sums(target), gtid_executed(target)) == (source.stop_sums, source.stop_gtids)
    assert summary.stop_reason == f"stop before GTID {source.stop_gtid}"
    assert summary.applied == sum(hi - lo for ivs in MysqlGtidSet.parse(
        source.stop_gtids).sids.values() for lo, hi in ivs)
    assert any(line.startswith("native: the target replicates from 127.0.0.1:") and
               "(4 parallel threads)" in line for line in lines), lines
    assert target.execute("SELECT @@replica_parallel_workers") == ((1,),)
    assert target.execute("SHOW REPLICA STATUS") == ()
    again = run_native(options(source), spec_of(target), threads=2, timeout=120)
    assert (sums(target), gtid_executed(target)) == (source.end_sums, source.end_gtids)
    assert again.applied == 180
    assert target.execute("SELECT COUNT(*) FROM n.log") == ((210,),)
    assert target.execute("SELECT @@replica_parallel_workers") == ((1,),)
    assert run_native(options(source), spec_of(target)).applied == 0  # nothing more


KILLED = """
import sys
from replay.planning.plan import ReplayOptions
from replay.restore.native import run_native
from mysqlbackup.source.spec import SourceSpec
run_native(ReplayOptions(sys.argv[1], source_name="my1"),
           SourceSpec("127.0.0.1", int(sys.argv[2]), "root", ""), threads=3,
           progress=lambda line: print(line, file=sys.stderr, flush=True))
"""


def test_killed_while_the_target_replicates_then_run_again(source, make_mysql):
    """kill -9 once the target replicates from serve: the channel and the workers stay
    as the run left them; run again, the channel left is removed, the rest applied once,
    the workers put back."""
    target = target_of(make_mysql, server_id=3)
    proc = subprocess.Popen([sys.executable, "-c", KILLED, source.url_archive,
                             str(target.port)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=REPO))
    try:
        for line in proc.stderr:
            if line.startswith("native: the target replicates from"):
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    rows = target.execute("SHOW REPLICA STATUS")
    assert len(rows) == 1 and CONNECTION in rows[0]
    assert target.execute("SELECT @@replica_parallel_workers") == ((3,),)
    lines = []
    rerun = run_native(options(source), spec_of(target), threads=2, progress=lines.append,
                       timeout=120)
    assert f"native: removing the replication channel {CONNECTION} left by an earlier run" \
        in lines
    assert (sums(target), gtid_executed(target)) == (source.end_sums, source.end_gtids)
    assert target.execute("SELECT COUNT(*) FROM n.log") == ((210,),)
    assert rerun.stop_reason == "end of the archive"
    assert target.execute("SELECT @@replica_parallel_workers") == ((1,),)
    assert target.execute("SHOW REPLICA STATUS") == ()


def test_restore_base_and_binlogs_to_a_gtid(source, make_mysql):
    """``restore --apply native`` of a MySQL source: the base (mysqldump) loaded, then
    the target's own applier to just before a GTID: CHECKSUM TABLE and gtid_executed
    the source's at that point."""
    target = target_of(make_mysql, server_id=4)
    done = run_cli("restore", "--archive", source.url_archive, "--source-name", "my1",
                   "--target", f"mysql://root@127.0.0.1:{target.port}", "--apply", "native",
                   "--stop-before-gtid", source.stop_gtid, "--workers", "3", password="",
                   timeout=300, path=source.path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (sums(target), gtid_executed(target)) == (source.stop_sums, source.stop_gtids)
    assert target.execute("SELECT @@replica_parallel_workers") == ((1,),)
    assert target.execute("SHOW REPLICA STATUS") == ()


def test_restore_killed_while_the_target_replicates_then_run_again(source, make_mysql):
    """``restore --apply native`` killed with kill -9 once the target replicates from
    serve; run again: the base is not loaded again, the channel left is removed, the
    rest applied once (the target's gtid_executed), the workers put back."""
    from tests.helpers import cli_env
    target = target_of(make_mysql, server_id=6)
    args = [sys.executable, "-m", "mysqlbackup", "restore", "--archive", source.url_archive,
            "--source-name", "my1", "--target", f"mysql://root@127.0.0.1:{target.port}",
            "--apply", "native", "--workers", "3"]
    env = dict(cli_env(password=""), MYSQLBACKUP_TARGET_PASSWORD="", PATH=source.path)
    proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # kill -9 once the target is a replica of serve
            if line.startswith("native: the target replicates from"):
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert target.execute("SELECT @@replica_parallel_workers") == ((3,),)
    rerun = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"native: removing the replication channel {CONNECTION} left by an earlier " \
           "run" in rerun.stderr.splitlines()
    assert rerun.stdout.splitlines()[0].endswith("already loaded (resumed)"), rerun.stdout
    assert (sums(target), gtid_executed(target)) == (source.end_sums, source.end_gtids)
    assert target.execute("SELECT COUNT(*) FROM n.log") == ((210,),)
    assert target.execute("SELECT @@replica_parallel_workers") == ((1,),)
    assert target.execute("SHOW REPLICA STATUS") == ()
