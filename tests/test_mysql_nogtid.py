"""The whole chain on MySQL 9.7 as MySQL installs it: ``gtid_mode`` OFF (its default),
every transaction anonymous. The daemon streams it, ``base`` records the binlog
position alone, ``archive ls`` and ``check`` show the window, ``restore --dry-run``
says which stop points such an archive offers, a restore by position, by datetime and
to the end gives the source's rows then, ``--apply native`` and a GTID stop are
refused in one line, and ``drill`` restores into a scratch mysqld of its own and
counts every transaction applied once."""

import json
import os

import pytest

from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.store import ArchiveStore
from tests.helpers import Daemon, caught_up, run_cli, wait_archived_to_the_end, wait_for
from tests.test_mysql_live import checksum, inserts, next_second

pytestmark = pytest.mark.mysql

SOURCE = "my1"


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    """A gtid_mode=OFF source streamed into an archive with a base, then traffic; the
    source's rows at a position, at a moment and at the end; the source stays up."""
    from mysqlbackup.sandbox.mysql import (MySQLSandbox, client_wrappers, server_wrapper,
                                           why_no_mysql)
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    root = tmp_path_factory.mktemp("nogtid")
    bin_dir = client_wrappers(root / "bin")
    server_wrapper(bin_dir)  # drill's scratch server: MySQL's own mysqld
    path = str(bin_dir) + os.pathsep + os.environ["PATH"]
    source = MySQLSandbox(semi_sync_timeout_ms=1000, gtid_mode="OFF").start()
    url = f"file://{root / 'archive'}"
    daemon = Daemon(source, root / "dir", "--start-file", source.binlog_files()[0],
                    "--archive", url, "--archive-interval", "0.2", "--source-name",
                    SOURCE).start()
    try:
        wait_for(lambda: source.status("Rpl_semi_sync_source_clients") == "1", 30,
                 what="the daemon as a semi-sync replica")
        source.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY "
                       "AUTO_INCREMENT, v INT, s VARCHAR(20))", *inserts(0, 10))
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{source.port}",
                       "--archive", url, "--source-name", SOURCE, password="", timeout=120,
                       path=path)
        source.execute(*inserts(10, 10), "FLUSH BINARY LOGS", "UPDATE d.t SET s = 'x'")
        file, pos = source.execute("SHOW BINARY LOG STATUS")[0][:2]
        at_position = checksum(source)
        source.execute(*inserts(20, 5))
        moment = next_second(source)  # what follows commits at or after it
        at_moment = checksum(source)
        source.execute("DELETE FROM d.t WHERE v > 10", *inserts(30, 3))
        wait_for(lambda: caught_up(source, root / "dir"), what="caught up")
        wait_archived_to_the_end(source, ArchiveStore(url), SOURCE)
    finally:
        assert daemon.stop() == 0, daemon.output()[-3000:]
    yield dict(source=source, url=url, path=path, base=base, position=f"{file}:{pos}",
               at_position=at_position, moment=moment, at_moment=at_moment,
               at_end=checksum(source), root=root)
    source.stop(remove=True)


def test_base_records_the_position_alone(archived):
    base = archived["base"]
    assert base.returncode == 0, base.stdout + base.stderr
    assert ", gtid (none: the source keeps no GTIDs), binlog binlog.0" in base.stdout
    [manifest] = ArchiveListing(ArchiveStore(archived["url"])).sound_manifests(SOURCE)
    assert manifest["gtid"] is None and manifest["gtid_flavor"] == "mysql"
    assert "--set-gtid-purged=OFF" in manifest["details"]["arguments"]


def test_archive_ls_and_check_show_the_window(archived):
    out = run_cli("archive", "ls", "--archive", archived["url"])
    assert out.returncode == 0, out.stderr
    [window] = [line for line in out.stdout.splitlines() if "restorable from" in line]
    assert window.startswith(f"{SOURCE}  restorable from ") and "up to GTID (none)" in window
    files = json.loads(run_cli("archive", "ls", "--archive", archived["url"],
                               "--json").stdout)["files"]
    assert sum(f["transactions"] for f in files) >= 30
    assert {f["first_gtid"] for f in files} == {None}
    check = run_cli("check", "--archive", archived["url"], "--source-name", SOURCE)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith(f"CHECK OK - source {SOURCE}: restorable to ")


def restore(archived, make_mysql, *args):
    target = make_mysql(server_id=2, semi_sync=False, gtid_mode="OFF")
    done = run_cli("restore", "--archive", archived["url"], "--source-name", SOURCE,
                   "--target", f"mysql://root@127.0.0.1:{target.port}", *args, password="",
                   timeout=300, path=archived["path"])
    return target, done


def test_dry_run_says_which_stop_points_the_archive_offers(archived, make_mysql):
    target, done = restore(archived, make_mysql, "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("GTIDs: none (the source keeps no GTIDs: a restore starts at the base's binlog "
            "position and stops with --stop-datetime or --stop-position; --apply native "
            "needs GTIDs)") in done.stdout.splitlines()
    assert "apply: statements (auto: not native, --apply native needs a source with GTIDs" \
        in done.stdout
    assert target.execute("SHOW DATABASES LIKE 'd'") == ()  # nothing touched


@pytest.mark.parametrize("stop", ["position", "moment", "end"])
def test_a_restore_gives_the_source_at_its_stop(archived, make_mysql, stop):
    args = {"position": ("--stop-position", archived["position"]),
            "moment": ("--stop-datetime", archived["moment"]), "end": ()}[stop]
    target, done = restore(archived, make_mysql, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert checksum(target) == archived[f"at_{stop}"], done.stdout
    assert target.execute("SELECT @@GLOBAL.gtid_executed") == (("",),)


def test_native_and_a_gtid_stop_are_refused_in_one_line(archived, make_mysql):
    [manifest] = ArchiveListing(ArchiveStore(archived["url"])).sound_manifests(SOURCE)
    target, native = restore(archived, make_mysql, "--apply", "native")
    assert (native.returncode, native.stderr) == (2, (
        f"mysqlbackup: error: --apply native needs a source with GTIDs; base {manifest['id']} "
        "has no GTID position: use --apply statements\n")), native.stdout
    target, by_gtid = restore(archived, make_mysql, "--stop-before-gtid",
                              "3e11fa47-71ca-11e1-9e33-c80aa9429562:5")
    assert (by_gtid.returncode, by_gtid.stderr) == (2, (
        f"mysqlbackup: error: {SOURCE}: the archived binlogs hold no GTIDs (a source that "
        "keeps none: MySQL's gtid_mode OFF): stop with --stop-datetime or --stop-position "
        "instead of before GTID 3e11fa47-71ca-11e1-9e33-c80aa9429562:5\n")), by_gtid.stdout
    assert target.execute("SHOW DATABASES LIKE 'd'") == ()


def test_drill_restores_into_a_scratch_mysqld_and_counts_each_transaction(archived):
    from mysqlbackup.sandbox.mysql import private_shared_dir
    with private_shared_dir() as work:  # mysqld in the chroot sees it by the same path
        done = run_cli("drill", "--archive", archived["url"], "--source-name", SOURCE,
                       "--stop-datetime", archived["moment"], "--workdir", work,
                       timeout=300, path=archived["path"])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("scratch server: mysqld 9.")
    [counted] = [line for line in lines if line.startswith("transactions: ")]
    assert counted.endswith("the source keeps no GTIDs: counted against the indexes)")
    assert lines[-1] == "drill passed"
    assert "Progress(" not in done.stderr
