"""`mysqlbackup restore` end to end on real servers: a primary archived by the daemon,
a base taken while writers commit, traffic after it, and restores into new servers
to every kind of stop point, compared with CHECKSUM TABLE of the primary at that
point; a restore killed with kill -9 and run again; the hole refusal; the target
check; the dry run's plan; a target user without PROXY (--users)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.names import binlog_key, format_key
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.errors import UsageError
from mysqlbackup.sandbox import MariaDBSandbox, find_binary
from mysqlbackup.source.spec import SourceSpec
from replay.restore.run import RestoreOptions, run_restore
from replay.restore.target import TargetNotEmpty
from tests.helpers import (Daemon, REPO, caught_up, cli_env, current_binlog, run_cli, selection_of,
                           wait_archived_to_the_end, wait_for)

TABLES = ["shop.items", "shop.orders", "shop.writes", "shop.log"]
WRITERS = 3
SMALL = 300  # small transactions at the end: a replay with --merge 1 slow enough to kill


class Writer(threading.Thread):
    """Autocommit inserts of unique ids into shop.writes until stopped."""

    def __init__(self, server, n):
        super().__init__(daemon=True)
        self.server, self.n, self.stop, self.ids = server, n, threading.Event(), []

    def run(self):
        conn = self.server.root()
        with conn.cursor() as cur:
            i = 0
            while not self.stop.is_set():
                cur.execute("INSERT INTO shop.writes VALUES (%s, REPEAT('w', 100))",
                            (self.n * 1_000_000 + i,))
                self.ids.append(self.n * 1_000_000 + i)
                i += 1
        conn.close()


def checksums(server):
    return dict(server.execute(f"CHECKSUM TABLE {', '.join(TABLES)}"))


def last_gtid(server, *statements):
    """Run ``statements`` in one autocommit session; the GTID of the last."""
    conn = server.root()
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
        cur.execute("SELECT @@last_gtid")
        gtid = cur.fetchone()[0]
    conn.close()
    return gtid


def next_second():
    """Sleep past the next whole second; its epoch (binlog times are whole seconds)."""
    time.sleep(1.05 - time.time() % 1)
    return int(time.time())


def take_base_while_writing(primary, url):
    """`mysqlbackup base` while writers commit; (CompletedProcess, ids committed)."""
    writers = [Writer(primary, n) for n in range(WRITERS)]
    for w in writers:
        w.start()
    wait_for(lambda: all(len(w.ids) > 20 for w in writers), what="writers committing")
    try:
        result = run_cli("base", "--source", f"mysql://root@127.0.0.1:{primary.port}",
                         "--archive", url, "--source-name", "db1", password="", timeout=120,
                         process=True)  # base as a user runs it: a process of its own
        during = sum(len(w.ids) for w in writers)
        wait_for(lambda: sum(len(w.ids) for w in writers) > during + 20,
                 what="writers committing after the base")
    finally:
        for w in writers:
            w.stop.set()
        for w in writers:
            w.join(timeout=30)
    assert result.returncode == 0, result.stderr
    ids = sorted(i for w in writers for i in w.ids)
    assert len(ids) > during > 0
    return result, ids


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Primary + daemon archiving to file://; a base taken while writers commit;
    then traffic with the primary's checksums recorded at each stop point."""
    root = tmp_path_factory.mktemp("restore")
    if find_binary("mariadbd") is None:
        pytest.fail("mariadbd not found: run scripts/test.sh, which installs mariadb-server")
    primary = MariaDBSandbox(str(root / "primary"), semi_sync_timeout_ms=1000).start()
    url = f"file://{root / 'archive'}"
    daemon = Daemon(primary, root / "backup", "--archive", url, "--archive-interval", "0.3",
                    "--source-name", "db1").start()
    w = {"primary": primary, "url": url, "root": root}
    try:
        primary.execute(
            "CREATE DATABASE shop",
            "CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40), pad TEXT)",
            "CREATE TABLE shop.orders (id INT PRIMARY KEY AUTO_INCREMENT, item INT, qty INT)",
            "CREATE TABLE shop.writes (id BIGINT PRIMARY KEY, v TEXT)",
            "CREATE TABLE shop.log (at INT, note VARCHAR(40))")  # no key: a twice is seen
        primary.execute("INSERT INTO shop.items SELECT seq, CONCAT('item ', seq), "
                        "REPEAT('p', 2000) FROM shop.seq_0_to_2999")  # a dump that takes a moment
        primary.execute("SET SESSION sql_log_bin = 0",  # accounts of the base's users section
                        "CREATE USER 'app'@'10.0.0.%' IDENTIFIED BY 'app-password'",
                        "CREATE ROLE reader", "GRANT SELECT ON shop.* TO reader",
                        "GRANT reader TO 'app'@'10.0.0.%'")
        primary.execute("FLUSH BINARY LOGS")
        w["base_result"], w["writer_ids"] = take_base_while_writing(primary, url)
        primary.execute(*[f"INSERT INTO shop.orders (item, qty) VALUES ({i}, {i % 5})"
                          for i in range(100)], "FLUSH BINARY LOGS")
        w["hole_file"] = current_binlog(primary)  # a file between the base and every stop
        physical = run_cli("base", "--source", f"mysql://root@127.0.0.1:{primary.port}",
                           "--archive", f"file://{root / 'physical'}", "--source-name", "db1",
                           "--method", "physical", password="", timeout=120)
        assert physical.returncode == 0, physical.stderr  # kept apart; one test uses it
        primary.execute(*[f"UPDATE shop.orders SET qty = qty + 1 WHERE id = {i}"
                          for i in range(1, 60)], "FLUSH BINARY LOGS")
        w["at_datetime"] = checksums(primary)
        w["stop_datetime"] = next_second()
        primary.execute(*[f"INSERT INTO shop.log VALUES ({i}, 'after the datetime')"
                          for i in range(20)])
        w["at_gtid"] = checksums(primary)
        w["stop_gtid"] = last_gtid(primary, "DELETE FROM shop.items WHERE id < 500")
        primary.execute(*[f"INSERT INTO shop.log VALUES ({i}, 'after the delete')"
                          for i in range(20)])
        w["at_position"] = checksums(primary)
        w["stop_position"] = "{}:{}".format(*primary.execute("SHOW MASTER STATUS")[0][:2])
        primary.execute("UPDATE shop.items SET name = 'renamed' WHERE id % 7 = 0",
                        "FLUSH BINARY LOGS")
        w["logged_before_small"] = primary.execute("SELECT COUNT(*) FROM shop.log")[0][0]
        conn = primary.root()
        with conn.cursor() as cur:
            for i in range(SMALL):
                cur.execute("INSERT INTO shop.log VALUES (%s, 'small')", (i,))
        conn.close()
        w["final"] = checksums(primary)
        w["final_ids"] = [r[0] for r in primary.execute("SELECT id FROM shop.writes ORDER BY id")]
        wait_for(lambda: caught_up(primary, root / "backup"), what="the daemon caught up")
        store = ArchiveStore(url)
        wait_archived_to_the_end(primary, store)
    finally:
        assert daemon.stop() == 0, daemon.output()
    listing = ArchiveListing(ArchiveStore(url))
    [w["base_id"]] = listing.base_ids("db1")
    w["manifest"] = listing.base_manifest("db1", w["base_id"])
    yield w
    primary.stop(remove=True)


def new_target(make_server):
    return make_server(server_id=3, semi_sync=False)


def spec_of(server):
    return SourceSpec("127.0.0.1", server.port, "root", "")


def restore_in_process(world, target, spark, into_nonempty=False, **stop):
    lines = []
    opts = RestoreOptions(world["url"], spec_of(target), selection=selection_of(**stop),
                          into_nonempty=into_nonempty)
    report = run_restore(opts, echo=lines.append, spark=spark)
    return report, lines


def restore_cli(world, target, *extra, url=None, timeout=300, process=False):
    return run_cli("restore", "--archive", url or world["url"], "--target",
                   f"mysql://root@127.0.0.1:{target.port}", *extra, password="",
                   timeout=timeout, process=process)


def leases(url):
    return {k for k in ArchiveStore(url).list() if "/lease/" in k}


# -- every stop option ----------------------------------------------------------------------

def test_no_stop_restores_everything_and_the_base_boundary_is_exact(world, make_server, spark):
    target = new_target(make_server)
    report, lines = restore_in_process(world, target, spark)
    assert checksums(target) == world["final"]
    ids = [r[0] for r in target.execute("SELECT id FROM shop.writes ORDER BY id")]
    assert ids == world["final_ids"] == world["writer_ids"]  # none twice, none missing
    m = world["manifest"]
    assert lines[0] == f"restore of db1: base {m['id']} (dump, GTID {m['gtid']}) loaded"
    summary = report["summary"]
    assert lines[1] == (f"applied: {summary.applied} transactions, {summary.skipped} "
                        "skipped, 0 incomplete dropped; stopped: end of the archive")
    [(gtid_pos,)] = world["primary"].execute("SELECT @@gtid_binlog_pos")
    assert summary.last_gtid == gtid_pos
    assert re.fullmatch(rf"last applied: GTID {gtid_pos} committed \d{{4}}-\d\d-\d\dT"
                        r"\d\d:\d\d:\d\dZ", lines[2]), lines
    assert re.fullmatch(r"elapsed: plan \d+\.\ds, check \d+\.\ds, load \d+\.\ds, replay "
                        r"\d+\.\ds, total \d+\.\ds", lines[3]), lines
    assert target.execute("SELECT source, base_id, state FROM mysqlbackup_replay.restore") == \
        (("db1", m["id"], "loaded"),)
    assert leases(world["url"]) == set()  # removed at the end


def test_stop_datetime_into_nonempty_target(world, make_server, spark):
    target = new_target(make_server)
    target.execute("CREATE DATABASE other", "CREATE TABLE other.keep (id INT)")
    from datetime import datetime, timezone
    stop = datetime.fromtimestamp(world["stop_datetime"], timezone.utc).isoformat()
    with pytest.raises(TargetNotEmpty, match=r"already holds schemas \(other\)"):
        restore_in_process(world, target, spark, stop_datetime=stop)
    assert not target.execute("SHOW DATABASES LIKE 'mysqlbackup_replay'")
    report, _ = restore_in_process(world, target, spark, into_nonempty=True,
                                   stop_datetime=stop)
    assert report["summary"].stop_reason == "stop datetime reached"
    assert checksums(target) == world["at_datetime"]
    assert target.execute("SHOW TABLES FROM other") == (("keep",),)


def test_stop_before_gtid(world, make_server, spark):
    target = new_target(make_server)
    report, _ = restore_in_process(world, target, spark, stop_before_gtid=world["stop_gtid"])
    assert report["summary"].stop_reason == f"stop before GTID {world['stop_gtid']}"
    assert checksums(target) == world["at_gtid"]


def test_stop_position(world, make_server, spark):
    target = new_target(make_server)
    report, _ = restore_in_process(world, target, spark, stop_position=world["stop_position"])
    assert report["summary"].stop_reason == "stop position reached"
    assert checksums(target) == world["at_position"]


# -- interrupted and run again ---------------------------------------------------------------

def test_killed_restore_run_again_resumes_and_applies_nothing_twice(world, make_server):
    target = new_target(make_server)
    args = [sys.executable, "-m", "mysqlbackup", "restore", "--archive", world["url"],
            "--target", f"mysql://root@127.0.0.1:{target.port}", "--workers", "1",
            "--merge", "1", "--apply", "statements"]
    proc = subprocess.Popen(args, env=cli_env(password=""), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def applying():
        return target.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
            "'mysqlbackup_replay' AND table_name = 'checkpoint'")[0][0] and target.execute(
            "SELECT COUNT(*) FROM mysqlbackup_replay.checkpoint")[0][0]
    try:
        wait_for(applying, timeout=180, interval=0.01, what="the restore's replay to apply")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    logged = target.execute("SELECT COUNT(*) FROM shop.log")[0][0]
    assert logged < world["logged_before_small"] + SMALL, "the replay ended before the kill"
    rerun = subprocess.run(args, env=cli_env(password=""), cwd=REPO, capture_output=True,
                           text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    lines = rerun.stdout.splitlines()
    assert lines[0].endswith("already loaded (resumed)"), rerun.stdout
    assert "stopped: end of the archive" in lines[1]
    assert checksums(target) == world["final"]
    assert target.execute("SELECT COUNT(*) FROM shop.log")[0][0] == \
        world["primary"].execute("SELECT COUNT(*) FROM shop.log")[0][0]


# -- refusals ------------------------------------------------------------------------------

def archive_copy(world, name, remove):
    """A file:// copy of the archive without the sealed binlogs ``remove`` (and indexes)."""
    src = str(world["root"] / "archive")
    dst = str(world["root"] / name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    for file in remove:
        key = format_key(binlog_key("db1", file))
        os.remove(os.path.join(dst, key))
        os.remove(os.path.join(dst, key + ".json"))
    return f"file://{dst}"


def test_hole_between_base_and_stop_refused_before_the_target(world, make_server):
    target = new_target(make_server)
    url = archive_copy(world, "archive-hole", [world["hole_file"]])
    held = leases(url)  # a restore killed by an earlier test may have left one
    result = restore_cli(world, target, "--stop-before-gtid", world["stop_gtid"], url=url)
    assert result.returncode == 7, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("mysqlbackup: error: resync required: db1: the binlogs from base "
                           f"{world['base_id']} (GTID {world['manifest']['gtid']}) to the "
                           "stop point are not contiguous: ")
    hole = f"db1/binlog/{world['hole_file']} is missing: "
    assert hole in line and re.search(r"ends at GTID 0-1-\d+, the archive goes on with "
                                      r"binlog\.\d+ after GTID 0-1-\d+$", line), line
    assert not target.execute("SHOW DATABASES LIKE 'mysqlbackup_replay'")
    assert leases(url) == held


@pytest.mark.server
def test_dry_run_prints_the_plan_and_a_hole_before_the_base_is_no_obstacle(world):
    listing = ArchiveListing(ArchiveStore(world["url"]))
    names = listing.sealed_names("db1")
    m = world["manifest"]
    before = [n for n in names if binlog_sort_key(n) < binlog_sort_key(m["binlog_file"])]
    assert before, "the base should not sit in the first file"
    url = archive_copy(world, "archive-old-hole", before[:1])
    held = leases(url)
    result = run_cli("restore", "--archive", url, "--dry-run", password="")
    assert result.returncode == 0, result.stderr
    read = [n for n in names if binlog_sort_key(n) >= binlog_sort_key(m["binlog_file"])]
    partial = listing.partial_index("db1")
    sizes = sum(listing.index("db1", n)["size"] for n in read) + partial["size"]
    assert result.stdout.splitlines() == [
        "restore plan for db1",
        f"base: {m['id']} (dump), taken {m['start_time']} to {m['end_time']}, at GTID "
        f"{m['gtid']}, {m['binlog_file']}:{m['binlog_pos']}",
        f"binlog files: {len(read) + 1} ({read[0]} to {partial['name']}, the last one "
        "partial)",
        f"GTIDs: after {m['gtid']}, through {partial['last_gtid']}",
        f"bytes to read: {m['stored_size'] + sizes} (base {m['stored_size']} stored, "
        f"binlogs {sizes})",
        f"target at: {partial['last_commit']}, GTID {partial['last_gtid']} (the last commit "
        f"archived in {partial['name']})",
        f"users: apply (the base's accounts and grants: {m['details']['accounts']} accounts, "
        f"needing {', '.join(m['details']['needs'])}; the target user's privileges for them "
        "are checked before anything is loaded)",
        "apply: native (auto: the target's own applier, nothing decoded here; the target's "
        "replication applier, 4 parallel threads, fed by mysqlbackup serve on loopback)",
    ]
    assert m["details"]["needs"][:3] == ["CREATE USER", "GRANT OPTION", "PROXY"]
    assert leases(url) == held  # a dry run takes no lease


# -- the base's accounts and the target user ------------------------------------------------

class InstalledServer(MariaDBSandbox):
    """A server with the accounts mariadb-install-db made (root@localhost, @127.0.0.1,
    @::1, @<hostname>, mariadb.sys@localhost), skip_name_resolve on: the sandbox's own
    (root@<hostname> dropped, a replication user) are not made."""

    def _create_users(self):
        pass


def test_users_apply_refused_without_proxy_skip_loads_without_them(world, tmp_path_factory,
                                                                  spark):
    """A TCP admin with ALL ON *.* WITH GRANT OPTION but no PROXY: --users apply refused
    before the target is touched; --users skip restores the data and none of the
    accounts; with PROXY granted, apply creates them; a load stopped in the users
    section says where and what to do."""
    from replay.restore.load import LoadError, load_dump
    from mysqlbackup.base.userscan import UsersRefused
    target = InstalledServer(str(tmp_path_factory.mktemp("installed")), server_id=3,
                             semi_sync=False).start()
    try:
        target.execute("SET SESSION sql_log_bin = 0",
                       "CREATE USER 'admin'@'127.0.0.1' IDENTIFIED BY 'admin-password'",
                       "GRANT ALL ON *.* TO 'admin'@'127.0.0.1' WITH GRANT OPTION")
        accounts = "SELECT user, host FROM mysql.user ORDER BY 1, 2"
        stock = target.execute(accounts)
        assert {("root", "::1"), ("mariadb.sys", "localhost"), ("root", "127.0.0.1")} <= set(stock)
        databases = target.execute("SHOW DATABASES")
        admin = SourceSpec("127.0.0.1", target.port, "admin", "admin-password")

        refused = run_cli("restore", "--archive", world["url"], "--target",
                          f"mysql://admin@127.0.0.1:{target.port}", "--users", "apply",
                          password="admin-password", timeout=180)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.splitlines()[-1] == (
            "mysqlbackup: error: the target user 'admin'@'127.0.0.1' lacks PROXY, which the "
            "base's accounts need (GRANT PROXY ON ''@'%' TO 'admin'@'127.0.0.1' WITH GRANT "
            "OPTION): grant it, or restore with --users skip"), refused.stderr
        assert "reading base" not in refused.stderr  # the base's manifest says what they need
        # a base from before manifests recorded it: read once ahead, the same refusal
        manifest_key, manifest = world_manifest(world["url"])
        store = ArchiveStore(world["url"])
        old = {k: v for k, v in manifest.items() if k != "details"}
        old["details"] = {k: v for k, v in manifest["details"].items()
                          if k not in ("accounts", "needs")}
        store.put_bytes(manifest_key, json.dumps(old).encode())
        try:
            again = run_cli("restore", "--archive", world["url"], "--target",
                            f"mysql://admin@127.0.0.1:{target.port}", password="admin-password",
                            timeout=180)
        finally:
            store.put_bytes(manifest_key, json.dumps(manifest).encode())
        assert again.returncode == 2 and again.stderr.splitlines()[-1] == \
            refused.stderr.splitlines()[-1]
        assert "reading base" in again.stderr and " once ahead for what its accounts need" \
            in again.stderr
        assert target.execute("SHOW DATABASES") == databases  # untouched
        assert target.execute(accounts) == stock

        lines = []
        report = run_restore(RestoreOptions(world["url"], admin, users="skip"),
                             echo=lines.append, spark=spark)
        assert checksums(target) == world["final"]
        # the base's accounts: the primary's, but those it ignores (root@<hostname>)
        [(n,)] = world["primary"].execute(
            "SELECT COUNT(*) FROM mysql.user WHERE is_role = 'N' AND NOT (user = 'root' AND "
            "host NOT IN ('localhost', '127.0.0.1', '::1'))")
        assert lines[1] == f"users: {n} accounts and 1 role of the base left out (--users skip)"
        assert report["users_left_out"] == f"{n} accounts and 1 role"
        assert target.execute(accounts) == stock

        target.execute("SET SESSION sql_log_bin = 0", "DROP DATABASE shop",
                       "DROP DATABASE mysqlbackup_replay", "RESET MASTER",
                       "SET GLOBAL gtid_slave_pos = ''",  # an empty server again
                       "GRANT PROXY ON ''@'%' TO 'admin'@'127.0.0.1' WITH GRANT OPTION")
        report = run_restore(RestoreOptions(world["url"], admin), echo=lambda line: None,
                             spark=spark)
        assert report["users_left_out"] is None
        assert checksums(target) == world["final"]
        after = set(target.execute(accounts))
        assert set(stock) | {("app", "10.0.0.%"), ("reader", "")} <= after
        assert ("mariadb_dump_import_role", "") not in after
        assert target.execute("SHOW GRANTS FOR 'app'@'10.0.0.%'")[0][0] == \
            "GRANT `reader` TO `app`@`10.0.0.%`"

        target.execute("REVOKE PROXY ON ''@'%' FROM 'admin'@'127.0.0.1'")
        plan = report["plan"]
        with pytest.raises(LoadError) as failed:
            load_dump(ArchiveStore(world["url"]), plan.base_object, plan.manifest, admin)
        assert re.fullmatch(
            rf"the target refused the base {plan.manifest['id']} \(mariadb exited 1\): ERROR "
            r"1698 \(28000\) at line (\d+): Access denied for user 'admin'@'127.0.0.1'; the "
            r"load stopped at line \1 of the dump, in the users section, after every "
            r"database's data \([\d.]+ of [\d.]+ MB of the dump streamed\), and the target "
            r"holds what came before: run the same restore again \(or with --users skip, "
            r"to leave the accounts out; the dump's mariadb_dump_import_role may be left on "
            r"the target\) to load the base again from its start over it, or restore into a "
            r"new empty server", str(failed.value)), str(failed.value)
        assert issubclass(UsersRefused, UsageError)
    finally:
        target.stop(remove=True)


# -- one table into another schema ---------------------------------------------------------

def dump_of(server):
    """The bytes of a real `mariadb-dump` of ``server``, as `mysqlbackup base` runs it."""
    from mysqlbackup.base import server as source, users
    from mysqlbackup.base.client import options_file
    from mysqlbackup.base.dump import dump_argv
    spec = spec_of(server)
    conn = source.connect(spec)
    try:
        accounts = users.survey(conn)  # as installed: root@<hostname> is ignored
    finally:
        conn.close()
    with options_file(spec) as options:
        argv = dump_argv(find_binary("mariadb-dump"), options, spec, "mariadb",
                         users=not accounts.ignored)
        data = subprocess.run(argv, capture_output=True, check=True).stdout
    return data + (users.section(accounts) if accounts.ignored else b"")


def load(server, sql):
    subprocess.run([find_binary("mariadb"), "--no-defaults", f"--socket={server.socket}",
                    "-uroot", "--binary-mode"], input=sql, check=True, capture_output=True)


def test_dump_filter_keeps_one_table_into_another_schema(world, make_server):
    from replay.restore.dumpfilter import DumpFilter
    primary = world["primary"]
    primary.execute(
        "SET SESSION sql_log_bin = 0", "CREATE DATABASE src CHARACTER SET utf8mb4",
        "CREATE TABLE src.items (id INT PRIMARY KEY, name TEXT, b BLOB)",
        "CREATE TABLE src.audit (id INT AUTO_INCREMENT PRIMARY KEY, item INT)",
        "CREATE TRIGGER src.items_ai AFTER INSERT ON src.items FOR EACH ROW "
        "INSERT INTO src.audit (item) VALUES (NEW.id)",
        "CREATE VIEW src.v AS SELECT id FROM src.items",
        "CREATE PROCEDURE src.p() BEGIN\n-- Table structure for table `items`\nSELECT 1;\nEND",
        "INSERT INTO src.items VALUES (1, '-- Table structure for table `audit`', NULL), "
        "(2, 'a;\\nb', UNHEX('00FF3B0A')), (3, 'ítem ✓', '')")
    try:
        data = dump_of(primary)
        outputs = set()
        for size in (997, 4096, len(data)):
            only = DumpFilter({"src.items"}, {"src": "restored"})
            outputs.add(b"".join(only.feed(data[i:i + size]) for i in range(0, len(data), size))
                        + only.finish())
        [sql] = outputs  # the same whatever the chunking
        assert only.missing() == []
        target = new_target(make_server)
        target.execute("CREATE DATABASE src", "CREATE TABLE src.items (id INT)",
                       "INSERT INTO src.items VALUES (42)")
        users = target.execute("SELECT user, host FROM mysql.user ORDER BY 1, 2")
        load(target, sql)
        assert target.execute("SHOW FULL TABLES FROM restored") == (("items", "BASE TABLE"),)
        assert target.execute("SHOW TRIGGERS FROM restored") == ()
        assert target.execute("CHECKSUM TABLE restored.items")[0][1] == \
            primary.execute("CHECKSUM TABLE src.items")[0][1]
        assert target.execute("SELECT * FROM src.items") == ((42,),)  # untouched
        assert target.execute("SELECT user, host FROM mysql.user ORDER BY 1, 2") == users
    finally:
        primary.execute("SET SESSION sql_log_bin = 0", "DROP DATABASE src")


def test_table_restore_into_another_schema_of_a_live_server(world, make_server, spark):
    target = new_target(make_server)
    target.execute("CREATE DATABASE shop", "CREATE TABLE shop.items (id INT PRIMARY KEY)",
                   "INSERT INTO shop.items VALUES (7)")
    lines = []
    opts = RestoreOptions(world["url"], spec_of(target), selection=selection_of(
        stop_before_gtid=world["stop_gtid"], tables=["shop.items"], rewrites=["shop:restored"]))
    report = run_restore(opts, echo=lines.append, spark=spark)
    assert report["summary"].stop_reason == f"stop before GTID {world['stop_gtid']}"
    assert target.execute("SHOW TABLES FROM restored") == (("items",),)
    assert target.execute("CHECKSUM TABLE restored.items")[0][1] == world["at_gtid"]["shop.items"]
    assert target.execute("SELECT * FROM shop.items") == ((7,),)  # the live table untouched


# -- a physical base -------------------------------------------------------------------------

@pytest.mark.server
def test_physical_base_restored_into_a_new_datadir_then_replayed(world, tmp_path):
    """restore --datadir: the physical base (taken after the dump base) extracted and
    prepared, a server started on it at the target's port, then every binlog after it."""
    from mysqlbackup.sandbox import free_port
    from replay.restore.physical import RestoredServer, stop_server
    archive = tmp_path / "archive"
    shutil.copytree(world["root"] / "archive", archive)
    shutil.rmtree(archive / "db1" / "base")
    shutil.copytree(world["root"] / "physical" / "db1" / "base", archive / "db1" / "base")
    port, datadir = free_port(), tmp_path / "datadir"
    result = run_cli("restore", "--archive", f"file://{archive}", "--target",
                     f"mysql://root@127.0.0.1:{port}", "--datadir", str(datadir),
                     password="", timeout=300)
    started = re.search(r"^server: mariadbd pid (\d+) on ", result.stdout, re.M)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert re.search(r"^restore of db1: base \S+ \(physical, GTID \S+\) loaded$",
                         result.stdout, re.M), result.stdout
        import pymysql
        conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="")
        with conn.cursor() as cur:
            cur.execute(f"CHECKSUM TABLE {', '.join(TABLES)}")
            assert dict(cur.fetchall()) == world["final"]
        conn.close()
    finally:
        if started:
            stop_server(RestoredServer(None, int(started[1]), str(datadir), None))


def world_manifest(url):
    """(key, manifest) of the one base in the archive at ``url``."""
    store = ArchiveStore(url)
    [key] = [k for k in store.list() if "/base/" in k and k.endswith("/index.json")]
    return key, json.loads(store.read(key))
