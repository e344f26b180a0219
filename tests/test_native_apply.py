"""``--apply native`` (replay.restore.native): a target's own replication applier applies
the binlogs. Against a real MariaDB primary as the server the target replicates from:
the target reaches the primary's CHECKSUM TABLE, its parallel settings come back (a
killed run's too), a run stopped before the end then run again applies each transaction
once, a target that already replicates or has the source's server_id is refused;
``restore --apply native`` through serve to a GTID, not resumed as statements,
``replay --apply native`` further, ``restore`` again to the end; a restore killed with
kill -9 while the target replicates, run again; the CLI's refusals."""

import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone

import pytest

import replay.restore.native as native_module
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog.gtid import MariaGtidPos
from mysqlbackup.errors import UsageError
from mysqlbackup.sandbox import REPL_PASSWORD, REPL_USER
from mysqlbackup.source.spec import SourceSpec
from replay.restore.native import CONNECTION, NativeApply, NativeApplyError, apply_native
from replay.restore.nativeend import End, expected_end
from replay.restore.run import RestoreOptions, run_restore
from replay.serve.feed import EndInfo
from tests.helpers import (Daemon, REPO, caught_up, cli_env, module_primary, run_cli, selection_of,
                           wait_archived_to_the_end, wait_for)

TABLES = "n.items, n.log"


@pytest.fixture(scope="module")
def primary(tmp_path_factory):
    """A primary archived by the daemon to file://, a base taken half way; the GTIDs and
    checksums of the middle (the base), of a stop point and of the end recorded."""
    root = tmp_path_factory.mktemp("native")
    server = module_primary(tmp_path_factory, "native-primary")
    server.url_archive = f"file://{root / 'archive'}"
    daemon = Daemon(server, root / "backup", "--archive", server.url_archive,
                    "--archive-interval", "0.3", "--source-name", "db1").start()
    try:
        server.execute("CREATE DATABASE n",
                       "CREATE TABLE n.items (id INT PRIMARY KEY, v VARCHAR(40))",
                       "CREATE TABLE n.log (at INT, note VARCHAR(40))")  # no key: twice shows
        write(server, "INSERT INTO n.items VALUES (%s, 'one')", "INSERT INTO n.log VALUES "
              "(%s, 'first')")
        server.middle = gtid_pos(server)
        server.middle_sums = sums(server)
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{server.port}",
                       "--archive", server.url_archive, "--source-name", "db1", password="",
                       timeout=120)
        assert base.returncode == 0, base.stderr
        write(server, "UPDATE n.items SET v = 'two' WHERE id = %s", "INSERT INTO n.log VALUES "
              "(%s, 'second')", stop_at=100)
        server.end, server.sums = gtid_pos(server), sums(server)
        wait_for(lambda: caught_up(server, root / "backup"), what="the daemon caught up")
        wait_archived_to_the_end(server, ArchiveStore(server.url_archive))
    finally:
        assert daemon.stop() == 0, daemon.output()
    yield server
    server.stop(remove=True)


def write(server, *statements, stop_at=None):
    """150 rounds of ``statements`` (each one autocommit transaction); the GTID of the
    round ``stop_at`` begins with and the checksums before it are kept on ``server``."""
    conn = server.root()
    with conn.cursor() as cur:
        for i in range(150):
            if i == stop_at:  # the same stop point as a GTID, a position and a datetime
                server.stop_sums, pos = sums(server), gtid_pos(server)
                d, s, n = map(int, pos.split("-"))
                server.stop_gtid = f"{d}-{s}-{n + 1}"
                server.stop_position = "{}:{}".format(*server.execute(
                    "SHOW MASTER STATUS")[0][:2])
                time.sleep(1.02 - time.time() % 1)  # binlog times are whole seconds
                server.stop_datetime = datetime.fromtimestamp(
                    int(time.time()), timezone.utc).isoformat()
            for sql in statements:
                cur.execute(sql, (i,))
    conn.close()


def gtid_pos(server):
    return server.execute("SELECT @@gtid_binlog_pos")[0][0]


def sums(server):
    return dict(server.execute(f"CHECKSUM TABLE {TABLES}"))


def spec_of(server):
    return SourceSpec("127.0.0.1", server.port, "root", "")


def seq(gtid):
    return int(gtid.split("-")[2])


def native(target, primary, end, fresh=True, start="", ended=None):
    lines = []
    summary = apply_native(spec_of(target), ("127.0.0.1", primary.port), REPL_USER,
                           REPL_PASSWORD, MariaGtidPos.parse(start),
                           End(MariaGtidPos.parse(end), end), fresh=fresh, threads=4,
                           progress=lines.append, timeout=30, ended=ended)
    return summary, lines


def test_applies_to_the_end_and_puts_the_parallel_settings_back(primary, make_server):
    target = make_server(server_id=2, log_bin=False, semi_sync=False)
    target.execute("SET GLOBAL slave_parallel_mode = 'minimal'")
    summary, lines = native(target, primary, primary.end)
    assert dict(target.execute(f"CHECKSUM TABLE {TABLES}")) == primary.sums
    assert summary.applied == seq(primary.end)
    assert summary.gtid_pos == primary.end
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
    assert first.applied + second.applied == seq(primary.end)
    assert lines[0] == (f"native: the target is at GTID {primary.middle}, past the base's (none): "
                        "resuming from there")
    again, lines = native(target, primary, primary.end, fresh=False)
    assert again.applied == 0
    assert lines[-1] == f"native: the target is already at GTID {primary.end}: nothing to apply"
    with pytest.raises(UsageError, match=rf"^the target is at GTID {primary.end}, past the "
                       rf"stop point \(the end is {primary.middle}\): a restore cannot go back"):
        native(target, primary, primary.middle, fresh=False)


def test_refuses_a_target_that_replicates_or_has_the_sources_server_id(primary, make_server,
                                                                      monkeypatch):
    target = make_server(server_id=2, log_bin=False, semi_sync=False)
    target.execute("CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = 1")
    with pytest.raises(UsageError, match=r"already replicates \(connection \(default\)\)"):
        native(target, primary, primary.end)
    target.execute("RESET SLAVE ALL")
    same = make_server(server_id=1, log_bin=False, semi_sync=False)
    with pytest.raises(UsageError, match="has server_id 1, the source's"):
        native(same, primary, primary.end)
    assert same.execute("SHOW ALL SLAVES STATUS") == ()
    with pytest.raises(UsageError, match="has server_id 1, the source's"):
        restore(primary, same)  # before the base is loaded
    assert same.execute("SHOW DATABASES LIKE 'n'") == ()
    # a killed run's connection goes and its slave_parallel_threads comes back
    killed = NativeApply(spec_of(target))
    killed.parallel(6)
    killed.start("127.0.0.1", 1, "x", "y", MariaGtidPos.parse(primary.end))
    killed.close()
    assert target.execute("SELECT @@slave_parallel_threads") == ((6,),)
    summary, lines = native(target, primary, primary.end)
    assert lines[0] == (f"native: removing the replication connection {CONNECTION} left by "
                        "an earlier run")
    assert dict(target.execute(f"CHECKSUM TABLE {TABLES}")) == primary.sums
    assert target.execute("SELECT @@slave_parallel_threads") == ((0,),)
    assert target.execute("SELECT * FROM mysqlbackup_replay.native_settings") == ()
    assert target.execute("SHOW ALL SLAVES STATUS") == ()
    # the server sent all it will and the target applied it, short of the end: an error
    monkeypatch.setattr(native_module, "IDLE_FOR", 0.5)
    beyond = f"0-1-{seq(primary.end) + 5}"
    sent = EndInfo("binlog.000009", 4, primary.end, "end of the archive")
    with pytest.raises(NativeApplyError, match=rf"^the server sent its last transaction \(GTID "
                       rf"{primary.end}: end of the archive\) and the target applied all it "
                       rf"got, at GTID {primary.end}, short of the end expected from the "
                       rf"archive's indexes, {beyond}$"):
        native(target, primary, beyond, fresh=False, ended=lambda: sent)
    assert target.execute("SHOW ALL SLAVES STATUS") == ()


def test_expected_end_of_each_kind_of_stop_point(primary):
    from replay.planning.plan import ReplayOptions, units_to_read
    before_stop = f"0-1-{seq(primary.stop_gtid) - 1}"
    for stop, reason, pos in [
            ({"stop_before_gtid": primary.stop_gtid}, f"stop before GTID {primary.stop_gtid}",
             before_stop),
            ({"stop_position": primary.stop_position}, "stop position reached", before_stop),
            ({"stop_datetime": primary.stop_datetime}, "stop datetime reached", before_stop),
            ({}, "end of the archive", primary.end)]:
        selection = replace(selection_of(**stop), start_gtids=MariaGtidPos.parse(
            primary.middle))
        _, units, _ = units_to_read(ReplayOptions(primary.url_archive, selection=selection))
        end = expected_end(units, selection, selection.start_gtids, primary.url_archive, {})
        assert (str(end.gtid_pos), end.last_gtid, end.stop_reason) == (pos, pos, reason), stop


def test_idle_is_the_same_idle_state_for_idle_for_seconds():
    idle = native_module.Idle()
    waiting = {"Slave_IO_State": "Waiting for master to send event", "Master_Log_File": "b.1",
               "Read_Master_Log_Pos": 9, "Slave_SQL_Running_State": "Slave has read all relay "
               "log; waiting for more updates"}
    busy = dict(waiting, Slave_IO_State="Queueing master event to the relay log")
    pos, later = MariaGtidPos.parse("0-1-5"), MariaGtidPos.parse("0-1-6")
    limit = native_module.IDLE_FOR
    assert [idle.seen(*seen) for seen in [
        (busy, pos, 0), (waiting, pos, 1), (waiting, pos, 1 + limit - 0.1),
        (waiting, later, 1 + limit), (waiting, later, 1 + 2 * limit - 0.1),
        (busy, later, 1 + 2 * limit), (waiting, later, 2 + 2 * limit),
        (waiting, later, 2 + 3 * limit)]] == [False] * 7 + [True]


# -- restore --apply native: the target replicates from replay.serve (the archive) ----------

def restore(primary, target, **stop):
    lines = []
    opts = RestoreOptions(primary.url_archive, spec_of(target), selection=selection_of(**stop),
                          apply="native")  # from serve
    report = run_restore(opts, echo=lines.append, progress=lines.append)
    return report, [line for line in lines if isinstance(line, str)]


def test_restore_to_a_gtid_then_replay_then_restore_again_to_the_end(primary, make_server):
    target = make_server(server_id=2, log_bin=False, semi_sync=False)
    report, lines = restore(primary, target, stop_before_gtid=primary.stop_gtid)
    m = report["plan"].manifest
    assert m["gtid"] == primary.middle
    assert sums(target) == primary.stop_sums
    before_stop = seq(primary.stop_gtid) - 1
    [served] = [line for line in lines if line.startswith("native: the target replicates")]
    port = int(re.match(r"native: the target replicates from 127\.0\.0\.1:(\d+) ", served)[1])
    assert port != primary.port and served.endswith(
        f" (4 parallel threads) from GTID {primary.middle} to 0-1-{before_stop}")
    lines = lines[lines.index(served) + 1:]
    assert lines[:2] == [
        f"restore of db1: base {m['id']} (dump, GTID {primary.middle}) loaded",
        f"applied: {before_stop - seq(primary.middle)} transactions, 0 skipped, 0 incomplete "
        f"dropped; stopped: stop before GTID {primary.stop_gtid}"]
    assert lines[2].startswith(f"last applied: GTID 0-1-{before_stop} committed 20"), lines
    # resumed with the other apply: refused (its exactly-once record is not the native one)
    with pytest.raises(UsageError, match=r"^this restore was begun with --apply native \(the "
                       r"target holds its progress\): run it again with --apply native$"):
        run_restore(RestoreOptions(primary.url_archive, spec_of(target), apply="statements"),
                    echo=lines.append)
    # replay --apply native from the base's GTID on: the target resumes from where it is
    from click.testing import CliRunner

    from replay.cli import replay
    later = before_stop + 50
    result = CliRunner().invoke(replay, [
        "--archive", primary.url_archive, "--target", f"mysql://root@127.0.0.1:{target.port}",
        "--apply", "native", "--start-gtid", primary.middle, "--stop-before-gtid",
        f"0-1-{later + 1}"], env={"MYSQLBACKUP_TARGET_PASSWORD": ""})
    assert result.exit_code == 0, result.output
    assert re.fullmatch(rf"replay of db1: 50 applied by the target's replication applier "
                        rf"\(native\), \d+ files; stopped: stop before GTID 0-1-{later + 1}\n"
                        rf"target: at GTID 0-1-{later}\n", result.stdout), result.stdout
    assert target.execute("SELECT COUNT(*) FROM n.log WHERE note = 'second'") == ((125,),)
    # restore again without the stop: the base stays, the target goes on from where it is
    report, lines = restore(primary, target)
    assert f"native: the target is at GTID 0-1-{later}, past the base's " \
           f"{primary.middle}: resuming from there" in lines
    lines = lines[-4:]
    assert sums(target) == primary.sums
    assert target.execute("SELECT COUNT(*) FROM n.log") == ((300,),)
    assert lines[:2] == [
        f"restore of db1: base {m['id']} (dump, GTID {primary.middle}) already loaded "
        "(resumed)",
        f"applied: {seq(primary.end) - later} transactions, 0 skipped, 0 incomplete "
        "dropped; stopped: end of the archive"]
    assert lines[2].startswith(f"last applied: GTID {primary.end} committed 20"), lines
    assert target.execute("SELECT @@slave_parallel_threads, @@gtid_slave_pos") == \
        ((0, primary.end),)


def test_replay_native_of_the_whole_archive_starts_where_its_first_file_does(primary,
                                                                            make_server):
    """No --start-gtid: the GTID state before the archive's first file, from its index."""
    from click.testing import CliRunner

    from replay.cli import replay
    from replay.planning.plan import ReplayOptions, units_to_read
    first = units_to_read(ReplayOptions(primary.url_archive))[1][0].index["gtid_before"]
    target = make_server(server_id=3, log_bin=False, semi_sync=False)
    result = CliRunner().invoke(replay, [
        "--archive", primary.url_archive, "--target", f"mysql://root@127.0.0.1:{target.port}",
        "--apply", "native"], env={"MYSQLBACKUP_TARGET_PASSWORD": ""})
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith(f"stopped: end of the archive\ntarget: at GTID "
                                  f"{primary.end}\n"), result.stdout
    assert sums(target) == primary.sums
    assert first is not None and target.execute("SELECT @@gtid_slave_pos") == ((primary.end,),)


def test_cli_dry_run_names_the_apply_and_what_native_refuses(primary):
    from click.testing import CliRunner

    from replay.cli import replay
    from replay.restore.cli import restore

    def invoke(command, *args):
        result = CliRunner().invoke(command, list(args), env={"MYSQLBACKUP_PASSWORD": "x"})
        return result.exit_code, result.output

    url, target = primary.url_archive, "mysql://root@127.0.0.1:1"
    code, output = invoke(restore, "--archive", url, "--dry-run", "--apply", "native",
                          "--workers", "8")
    assert code == 0
    assert output.splitlines()[-1] == ("apply: native (asked for; the target's replication "
                                       "applier, 8 parallel threads, fed by mysqlbackup serve "
                                       "on loopback)")
    assert invoke(restore, "--archive", url, "--target", target, "--apply", "native",
                  "--table", "n.items") == (2, "Usage: restore [OPTIONS]\nTry 'restore --help' "
                                               "for help.\n\nError: --apply native applies "
                                               "whole binlogs: --table needs --apply "
                                               "statements\n")
    assert invoke(replay, "--archive", url, "--apply", "native", "--sql", "x.sql") == (
        2, "Usage: replay [OPTIONS]\nTry 'replay --help' for help.\n\nError: --apply native "
           "applies to a server: give --target\n")
    assert invoke(replay, "--archive", url, "--apply", "native", "--target",
                  "mysql://root@192.0.2.1:3306", "--start-gtid", "0-1-5") == (
        2, "mysqlbackup: error: --apply native needs the target on this machine (it "
           "replicates from serve on loopback); 192.0.2.1:3306 is not: use --apply "
           "statements\n")
    assert invoke(replay, "--archive", url, "--apply", "native", "--target", target,
                  "--start-gtid", "0-1-5", "--database", "n", "--start-position",
                  "binlog.000001:4") == (
        2, "mysqlbackup: error: --apply native applies whole binlogs from a GTID position: "
           "not with --database, --start-position (use --apply statements)\n")


def test_restore_to_a_datetime_and_to_a_position(primary, make_server):
    before_stop = f"0-1-{seq(primary.stop_gtid) - 1}"
    for stop, reason in [({"stop_datetime": primary.stop_datetime}, "stop datetime reached"),
                         ({"stop_position": primary.stop_position}, "stop position reached")]:
        target = make_server(server_id=2, log_bin=False, semi_sync=False)
        report, lines = restore(primary, target, **stop)
        assert sums(target) == primary.stop_sums, stop
        assert target.execute("SELECT @@gtid_slave_pos") == ((before_stop,),)
        assert report["summary"].stop_reason == reason


def test_restore_killed_while_the_target_replicates_then_run_again(primary, make_server):
    target = make_server(server_id=2, log_bin=False, semi_sync=False)
    args = [sys.executable, "-m", "mysqlbackup", "restore", "--archive", primary.url_archive,
            "--target", f"mysql://root@127.0.0.1:{target.port}", "--apply", "native",
            "--workers", "3"]
    env = dict(cli_env(password=""), MYSQLBACKUP_TARGET_PASSWORD="")
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
    assert [row[0] for row in target.execute("SHOW ALL SLAVES STATUS")] == [CONNECTION]
    assert target.execute("SELECT @@slave_parallel_threads") == ((3,),)
    rerun = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert f"native: removing the replication connection {CONNECTION} left by an earlier " \
           "run" in rerun.stderr.splitlines()
    lines = rerun.stdout.splitlines()
    assert lines[0].endswith("already loaded (resumed)") and lines[1].endswith(
        "stopped: end of the archive"), rerun.stdout
    assert sums(target) == primary.sums
    assert target.execute("SELECT COUNT(*) FROM n.log") == ((300,),)
    assert target.execute("SELECT @@slave_parallel_threads, @@gtid_slave_pos") == \
        ((0, primary.end),)
    assert target.execute("SHOW ALL SLAVES STATUS") == ()
