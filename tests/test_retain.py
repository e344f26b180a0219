"""`mysqlbackup retain` on a real archive: three dump bases (A, B, C) of a real primary
and its binlogs, the window's oldest promised moment T inside the file after base B.
The dry run lists what would go and why; a real run deletes base A and the file before
B's, and a restore to T still works afterwards (while a retain that wants B's files
runs beside it: the restore's lease keeps them); a run cut between an index and its
object leaves an archive that verify accepts, and the next run finishes."""

import json
import os
import shutil
import threading
import time
from datetime import datetime, timezone

import pytest

from mysqlbackup.guard.lease import Lease
from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.retention.prune import retain, retainer
from mysqlbackup.source.spec import SourceSpec
from replay.restore.run import RestoreOptions, run_restore
from tests.helpers import current_binlog, module_primary, run_cli, selection_of, wait_for

pytestmark = pytest.mark.server

SCHEMA = ("CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY, v INT)")


def inserts(first, last):
    return [f"INSERT INTO shop.t VALUES ({i}, {i * 7})" for i in range(first, last)]


def take_base(primary, url):
    out = run_cli("base", "--source", f"mysql://root@127.0.0.1:{primary.port}", "--archive",
                  url, "--source-name", "db1", password="", timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[1]  # "base ID of db1: ..."


def sleep_past(moment):
    time.sleep(max(0.0, moment - time.time()))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Bases A (file 1), B (file 2, at its start), C (file 3); T: a whole second inside
    file 2, after B ended, with transactions on both sides; the binlogs imported."""
    root = tmp_path_factory.mktemp("retain")
    primary = module_primary(tmp_path_factory, "retain-primary", *SCHEMA, *inserts(0, 10))
    url = f"file://{root / 'archive'}"
    w = {"root": root, "url": url, "primary": primary}
    try:
        w["A"] = take_base(primary, url)
        primary.execute(*inserts(10, 20), "FLUSH BINARY LOGS")
        w["F"] = current_binlog(primary)
        w["B"] = take_base(primary, url)
        primary.execute(*inserts(20, 30))
        w["T"] = int(time.time()) + 1
        sleep_past(w["T"])
        w["at_T"] = primary.execute("CHECKSUM TABLE shop.t")
        primary.execute(*inserts(30, 40))
        sleep_past(w["T"] + 3)  # C ends well after T (the CLI's clock runs on)
        primary.execute("FLUSH BINARY LOGS")
        w["C"] = take_base(primary, url)
        primary.execute(*inserts(40, 50), "FLUSH BINARY LOGS")
        copy = root / "binlogs"
        copy.mkdir()
        for name in primary.binlog_files():
            shutil.copyfile(primary.binlog_path(name), copy / name)
        w["files"] = primary.binlog_files()
        out = run_cli("archive", "import", str(copy), "--archive", url, "--source-name", "db1")
        assert out.returncode == 0, out.stderr
        w["final"] = primary.execute("CHECKSUM TABLE shop.t")
    finally:
        primary.stop(remove=True)
    listing = ArchiveListing(ArchiveStore(url))
    w["manifests"] = {b: listing.base_manifest("db1", b) for b in listing.base_ids("db1")}
    assert sorted(w["manifests"]) == [w["A"], w["B"], w["C"]]
    assert w["manifests"][w["B"]]["binlog_file"] == w["F"]
    yield w


def copy_archive(world, name):
    dest = world["root"] / name
    shutil.copytree(world["root"] / "archive", dest)
    return f"file://{dest}"


def objects(url):
    return set(ArchiveStore(url).list())


def iso_z(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def window_line(label, w, base_id):
    m = w["manifests"][base_id]
    last = json.loads(run_cli("archive", "ls", "--archive", w["url"], "--json").stdout)
    files = [f for f in last["files"] if f["kind"] == "sealed" or "partial" in f["kind"]]
    end = [f for f in files if f["last_commit"]][-1]
    first = files[[f["file"] for f in files].index(m["binlog_file"])]["file"]
    return (f"{label}: restorable from {m['end_time']} to {end['last_commit']} (base "
            f"{base_id}, up to GTID {end['last_gtid']}, {first} .. {files[-1]['file']})")


def test_dry_run_lists_what_would_go_and_why_and_deletes_nothing(world):
    url = copy_archive(world, "dry")
    before = objects(url)
    window = int(time.time() - world["T"])  # the CLI's promise: T or a second or two after
    out = run_cli("retain", "--archive", url, "--window", f"{window}s", "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    a, b, c, first = world["A"], world["B"], world["C"], world["files"][0]
    assert lines[1] == window_line("window before", world, a)
    assert lines[2:] == [
        f"base {b}: kept: the newest base ended before {lines[0].split()[5]}: the window "
        "starts from it",
        f"base {c}: kept: newer than base {b} (in the window)",
        f"would delete binlog {first}: before {world['F']}, the first file a restore from base "
        f"{b} reads",
        f"would delete base {a}: older than base {b}, where the window starts, and beyond "
        "--keep-base 0",
        window_line("window after", world, b)]
    assert objects(url) == before


def test_a_base_whose_object_is_gone_anchors_nothing_and_starts_no_restore(world):
    """B's manifest is there, its dump is not: the window starts from A, which stays,
    and a restore to T starts from A too (not from B, to fail at its load)."""
    url = copy_archive(world, "lost-object")
    store = ArchiveStore(url)
    a, b = world["A"], world["B"]
    [dump] = [k for k in store.list(f"db1/base/{b}") if not k.endswith(".json")]
    store.remove(dump)
    window = int(time.time() - world["T"])
    out = run_cli("retain", "--archive", url, "--window", f"{window}s", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert f"base {a}: kept: the newest base ended before" in out.stdout, out.stdout
    assert f"delete base {a}" not in out.stdout and f"base {b}:" not in out.stdout
    plan = run_cli("restore", "--archive", url, "--dry-run", "--stop-datetime",
                   iso_z(world["T"]), "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["base"]["id"] == a, plan.stdout
    asked = run_cli("restore", "--archive", url, "--dry-run", "--base", b)
    assert asked.returncode == 6, asked.stderr
    assert f"base {b} is damaged: its object" in asked.stderr, asked.stderr


def test_a_cut_run_leaves_an_archive_verify_accepts_and_the_next_run_finishes(world):
    url = copy_archive(world, "cut")
    store = ArchiveStore(url)
    first = world["files"][0]
    removed, real_remove = [], store.remove

    def crash_after_the_first_index(key):
        if removed:
            raise KeyboardInterrupt(f"killed before removing {key}")
        real_remove(key)
        removed.append(key)
    store.remove = crash_after_the_first_index
    with pytest.raises(KeyboardInterrupt):
        retain(store, time.time() - world["T"], echo=lambda line: None)
    assert removed == [f"db1/binlog/{first}.json"]
    out = run_cli("verify", "--archive", url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (f"NOTE db1/binlog/{first}: no index, older than every indexed file: left by a "
            "retain run cut short, not archived (mysqlbackup retain removes it)") in out.stdout
    again = run_cli("retain", "--archive", url, "--window", f"{int(time.time() - world['T'])}s",
                    "--yes")
    assert again.returncode == 0, again.stderr
    assert (f"deleted orphan binlog {first}: no index (a deletion cut short, or never "
            f"verified), before {world['F']}") in again.stdout.splitlines()
    assert f"deleted base {world['A']}: older than base {world['B']}, where the window " \
        "starts, and beyond --keep-base 0" in again.stdout.splitlines()
    left = [k for k in objects(url) if first in k or world["A"] in k]
    assert left == [f"db1/retired/{first}.json"]  # the mark stays: never uploaded again
    out = run_cli("verify", "--archive", url)
    assert out.returncode == 0 and "NOTE" not in out.stdout, out.stdout


def test_a_lease_that_appears_after_the_plan_stops_the_deletions(world):
    from mysqlbackup.retention.policy import plan_retention
    from mysqlbackup.retention.prune import execute, read_facts
    url = copy_archive(world, "late-lease")
    store, now = ArchiveStore(url), time.time()
    listing = ArchiveListing(store)
    plan = plan_retention(read_facts(listing, "db1", now), now, now - world["T"])
    assert len(plan.deletions) == 2
    before, lines = objects(url), []
    with Lease(store, "db1", base=world["A"]) as lease:
        done, stopped_by = execute(listing, plan, lines.append)
        assert (done, stopped_by) == ([], lease.id)
        assert lines == [f"stopped: a restore started (lease {lease.id}); nothing more is "
                         "deleted (run retain again)"]
        assert objects(url) - {lease.key} == before


def test_real_run_then_restore_to_the_oldest_promised_moment_beside_a_greedy_retain(
        world, make_server):
    url, w = copy_archive(world, "real"), world
    out = run_cli("retain", "--archive", url, "--window", f"{int(time.time() - w['T'])}s",
                  "--keep-base", "0", "--yes")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line for line in lines if line.startswith("deleted")] == [
        f"deleted binlog {w['files'][0]}: before {w['F']}, the first file a restore from base "
        f"{w['B']} reads",
        f"deleted base {w['A']}: older than base {w['B']}, where the window starts, and beyond "
        "--keep-base 0"]
    after = [line for line in lines if line.startswith("window after")]
    assert after == [window_line("window after", w, w["B"])]
    start = w["manifests"][w["B"]]["end_time"]
    assert f"restorable from {start} " in after[0]
    # restore accepts the window from its start on (T, and the second after the start),
    # and nothing before its start
    from mysqlbackup.utc import epoch
    for moment in (w["T"], int(epoch(start)) + 1):
        ok = run_cli("restore", "--archive", url, "--dry-run", "--stop-datetime",
                     iso_z(moment))
        assert ok.returncode == 0 and f"base: {w['B']} (dump)" in ok.stdout, ok.stderr
    early = run_cli("restore", "--archive", url, "--dry-run", "--stop-datetime",
                    iso_z(int(epoch(start))))
    assert early.returncode == 7, early.stdout + early.stderr
    assert f"no base backup can start a restore before {iso_z(int(epoch(start)))}" in early.stderr
    target = make_server(server_id=3, semi_sync=False)
    store, result, greedy = ArchiveStore(url), {}, []

    def restore():
        opts = RestoreOptions(url, SourceSpec("127.0.0.1", target.port, "root", ""),
                              selection=selection_of(stop_datetime=iso_z(w["T"])))
        result["report"] = run_restore(opts, echo=lambda line: None)
    # the restore waits on the target's global read lock until retain has run (a restore
    # of a few seconds would otherwise end, its lease gone, before retain starts)
    blocker = target.root()
    blocker.cursor().execute("FLUSH TABLES WITH READ LOCK")
    thread = threading.Thread(target=restore)
    thread.start()
    try:
        wait_for(lambda: store.list("db1/lease"), timeout=60, what="the restore's lease")
        kept = objects(url)
        sleep_past(epoch(w["manifests"][w["C"]]["end_time"]) + 2)  # C ended before the window
        assert thread.is_alive(), result
        retain(store, 1, echo=greedy.append)  # the window starts now: base C would anchor
    finally:
        blocker.close()
    thread.join(timeout=300)
    assert f"base {w['B']}: kept: a restore holds lease " in "\n".join(greedy)
    assert not [line for line in greedy if line.startswith("deleted")], greedy
    assert {k for k in kept if "/lease/" not in k} <= objects(url)
    assert result["report"]["plan"].manifest["id"] == w["B"]
    assert target.execute("CHECKSUM TABLE shop.t") == w["at_T"]
    assert not os.path.exists(url[len("file://"):] + "/db1/lease") or not store.list("db1/lease")


def test_the_daemons_archiver_retains_and_never_uploads_again_what_retain_deleted(world):
    """The archiver with --retain-window: retain runs at its start; the file it deleted
    is still local, yet never uploaded again (its retired mark matches it) and local
    retention removes it; a local file that is not the retired one is uploaded."""
    from mysqlbackup.stream.archiver import Archiver, Retention
    url, w = copy_archive(world, "daemon"), world
    store = ArchiveStore(url)
    local = w["root"] / "daemon-local"
    shutil.copytree(w["root"] / "binlogs", local)
    first, second = w["files"][0], w["files"][1]
    archiver = Archiver(str(local), store, "db1", retain=retainer(time.time() - w["T"], 0))
    archiver.run_once()
    assert f"db1/binlog/{first}" not in objects(url)
    mark = json.loads(store.read(f"db1/retired/{first}.json"))
    assert (mark["name"], mark["size"]) == (first, os.path.getsize(local / first))
    # the store loses the second file, and a mark of another file of that name appears
    for key in (f"db1/binlog/{second}.json", f"db1/binlog/{second}"):
        store.remove(key)
    store.put_json(f"db1/retired/{second}.json", dict(mark, name=second, sha256="0" * 64))
    archiver.retention = Retention(count=1)
    archiver.run_once()
    assert f"db1/binlog/{first}" not in objects(url), "uploaded again after retain"
    assert {f"db1/binlog/{second}", f"db1/binlog/{second}.json"} <= objects(url)
    assert archiver.report["retired"] == [first]
    assert not (local / first).exists()
    assert first in archiver.report["removed_local"]
    out = run_cli("verify", "--archive", url)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_restore_plans_again_under_its_lease_and_stops_if_its_base_went(world):
    """What a retain deletes between a restore's first plan and its lease is seen by the
    plan made again under the lease: another base would be used, so the restore stops."""
    from mysqlbackup.errors import MysqlBackupError
    from replay.restore.run import plan_restore, replan
    url, w = copy_archive(world, "replan"), world
    store = ArchiveStore(url)
    opts = RestoreOptions(url, SourceSpec("127.0.0.1", 1, "root", ""),
                          selection=selection_of(stop_datetime=iso_z(w["T"])))
    plan, _ = plan_restore(store, opts)
    assert plan.manifest["id"] == w["B"]
    assert replan(store, opts, plan)[0].manifest["id"] == w["B"]
    store.remove(f"db1/base/{w['B']}/index.json")
    with pytest.raises(MysqlBackupError, match=f"the archive changed while the restore was "
                       f"planned \\(base {w['B']}, planned first, is no longer the one to use"):
        replan(store, opts, plan)
