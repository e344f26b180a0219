"""docs/runbook.md, run verbatim: every `sh` block (and the command of every `cron` line)
in order, against throwaway servers, with the accidents the runbook is about made
between its sections. The runbook cannot drift from the tool."""

import os
import re
import signal
import subprocess
import sys

import pytest

from mysqlbackup.archive.codec import keygen
from mysqlbackup.sandbox import MariaDBSandbox, free_port
from tests.helpers import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNBOOK = os.path.join(ROOT, "docs", "runbook.md")
BACKUP_PASSWORD = "backup-secret"
RESTORE_PASSWORD = "restore-secret"
_FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)


def runbook_sections():
    """{section heading: [(language, code), ...]} in the runbook's order."""
    text = open(RUNBOOK, encoding="utf-8").read()
    sections = {}
    for chunk in re.split(r"^## ", text, flags=re.M)[1:]:
        title = chunk.splitlines()[0].strip()
        sections[title] = [(m[1], m[2]) for m in _FENCE.finditer(chunk)]
    return sections


def cron_command(line):
    """The command of a crontab line (after its five time fields)."""
    return line.split(None, 5)[5]


def test_every_block_is_sh_or_cron_and_every_section_has_commands():
    sections = runbook_sections()
    blocks = [b for s in sections.values() for b in s]
    assert {lang for lang, _ in blocks} == {"sh", "cron"}
    assert [t for t, b in sections.items() if not b] == []


class Runbook:
    """Runs the runbook's blocks with one environment; background jobs killed at the end."""

    def __init__(self, env):
        self.env, self.groups = env, []

    def run_section(self, title):
        """Run every block of one section; their output, joined."""
        out = []
        for lang, code in runbook_sections()[title]:
            lines = [cron_command(line) for line in code.splitlines() if line.strip()] \
                if lang == "cron" else [code]
            out += [self.run(script) for script in lines]
        return "".join(out)

    def run(self, script):
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=self.env["WORK_DIR"])
        self.groups.append(proc.pid)
        out = proc.communicate(timeout=600)[0].decode(errors="replace")
        print(f"$ {script}\n{out}")
        assert proc.returncode == 0, f"runbook block failed ({proc.returncode}):\n{script}\n{out}"
        return out

    def kill_background(self):
        for pgid in self.groups:
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def checksums(server, schema):
    tables = [r[0] for r in server.execute(f"SHOW TABLES FROM {schema}")]
    return {t: server.execute(f"CHECKSUM TABLE {schema}.{t}")[0][1] for t in sorted(tables)}


def add_user(server, name, password):
    server.execute("SET SESSION sql_log_bin = 0",
                   f"CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY '{password}'",
                   f"GRANT ALL ON *.* TO '{name}'@'127.0.0.1' WITH GRANT OPTION",
                   f"GRANT PROXY ON ''@'%' TO '{name}'@'127.0.0.1' WITH GRANT OPTION")


def traffic(server, first, count):
    server.execute(*[f"INSERT INTO shop.orders (id, item, qty) VALUES ({i}, 'item{i}', {i % 7})"
                     for i in range(first, first + count)],
                   *[f"UPDATE shop.customers SET visits = visits + 1 WHERE id = {i % 20}"
                     for i in range(first, first + count)])


def archived_up_to(env, gtid):
    """True when the archive's newest file ends at ``gtid`` (last_gtid of the last row)."""
    import json
    out = subprocess.run([sys.executable, "-m", "mysqlbackup", "archive", "ls", "--archive",
                          env["ARCHIVE_URL"], "--source-name", env["SOURCE_NAME"], "--json"],
                         env=env, capture_output=True, text=True)
    if out.returncode:
        return False
    files = json.loads(out.stdout)["files"]
    return bool(files) and files[-1]["last_gtid"] == gtid


def healthy_after_traffic(book, server, first):
    """Once the daemon is ``server``'s semi-sync replica: traffic on it, archived to its
    last GTID, then the runbook's health section, whose first line must say OK; its
    lines."""
    log = book.env["BACKUP_DIR"] + ".log"  # the daemon's output (the runbook's nohup)
    try:
        wait_for(lambda: server.status("Rpl_semi_sync_master_clients") == "1", timeout=30,
                 what="the daemon as a semi-sync replica")
    except AssertionError as e:  # say why: the daemon may have exited at once
        tail = open(log).read()[-500:] if os.path.exists(log) else "(no log)"
        raise AssertionError(f"{e}; the daemon's log {log} ends: {tail!r}") from None
    traffic(server, first, 50)
    gtid = server.execute("SELECT @@gtid_binlog_pos")[0][0]
    wait_for(lambda: archived_up_to(book.env, gtid), timeout=60, what="the archive")
    health = book.run_section("2. Check health").splitlines()
    assert health[0].startswith(f"CHECK OK - source {book.env['SOURCE_NAME']}: restorable "
                                "to "), health[0]
    assert health[1].startswith(f"OK {book.env['BACKUP_DIR']}: daemon pid "), health[1]
    return health


@pytest.mark.server
def test_runbook_end_to_end(tmp_path):
    primary = MariaDBSandbox(str(tmp_path / "primary")).start()
    target = MariaDBSandbox(str(tmp_path / "target"), server_id=2).start()
    fresh = MariaDBSandbox(str(tmp_path / "new-primary"), server_id=3).start()
    replica = MariaDBSandbox(str(tmp_path / "replica"), server_id=4, semi_sync=False).start()
    standby = MariaDBSandbox(str(tmp_path / "standby"), server_id=5,
                             extra_args=["--log-slave-updates"]).start()
    after = MariaDBSandbox(str(tmp_path / "after-failover"), server_id=6).start()
    for server in (primary, target, fresh, replica, standby, after):
        add_user(server, "restore", RESTORE_PASSWORD)
    standby.replicate_from(primary)
    env = dict(os.environ, SOURCE_NAME="db1", PRIMARY_HOST="127.0.0.1",
               PRIMARY_PORT=str(primary.port),
               SOURCE_URL=f"mysql://mysqlbackup@127.0.0.1:{primary.port}",
               MYSQLBACKUP_PASSWORD=BACKUP_PASSWORD, BACKUP_DIR=str(tmp_path / "backup" / "db1"),
               ARCHIVE_URL=f"file://{tmp_path / 'archive'}",
               TARGET_URL=f"mysql://restore@127.0.0.1:{target.port}",
               PRIMARY_ROOT_URL=f"mysql://restore@127.0.0.1:{primary.port}",
               NEW_PRIMARY_URL=f"mysql://restore@127.0.0.1:{fresh.port}",
               MYSQLBACKUP_TARGET_PASSWORD=RESTORE_PASSWORD, WORK_DIR=str(tmp_path / "work"),
               METRICS_ADDRESS=f"127.0.0.1:{free_port()}",
               NEW_PRIMARY_HOST="127.0.0.1", NEW_PRIMARY_PORT=str(fresh.port),
               REPLICA_URL=f"mysql://restore@127.0.0.1:{replica.port}",
               REPLICA_HOST="127.0.0.1", REPLICA_PORT=str(replica.port),
               REPL_USER="restore", REPL_PASSWORD=RESTORE_PASSWORD,
               STANDBY_HOST="127.0.0.1", STANDBY_PORT=str(standby.port),
               STANDBY_SOURCE_URL=f"mysql://mysqlbackup@127.0.0.1:{standby.port}",
               RECIPIENT_FILE=str(tmp_path / "keys" / "archive.pub"),
               MYSQLBACKUP_IDENTITY=str(tmp_path / "keys" / "archive.key"),
               NEW_RECIPIENT_FILE=str(tmp_path / "keys" / "archive-2.pub"),
               NEW_IDENTITY=str(tmp_path / "keys" / "archive-2.key"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    os.makedirs(env["WORK_DIR"])
    os.makedirs(tmp_path / "keys")
    keygen(env["MYSQLBACKUP_IDENTITY"], env["RECIPIENT_FILE"])
    book = Runbook(env)
    try:
        primary.execute("CREATE DATABASE shop",
                        "CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(40), qty INT)",
                        "CREATE TABLE shop.customers (id INT PRIMARY KEY, visits INT)",
                        *[f"INSERT INTO shop.customers VALUES ({i}, 0)" for i in range(20)])
        traffic(primary, 1, 50)
        book.run_section("1. Set up")
        health = healthy_after_traffic(book, primary, 100)
        assert health[2].startswith("mysqlbackup_seconds_behind_source "), health[2]
        assert any(line.startswith("db1  restorable from ") for line in health)

        traffic(primary, 200, 50)
        before_drop = checksums(primary, "shop")
        primary.execute("DROP TABLE shop.orders")
        primary.execute(*[f"UPDATE shop.customers SET visits = visits + 10 WHERE id = {i}"
                          for i in range(5)])
        gtid = primary.execute("SELECT @@gtid_binlog_pos")[0][0]
        wait_for(lambda: archived_up_to(env, gtid), timeout=60, what="the archive")
        book.run_section("3. Restore to just before a bad statement")
        assert checksums(target, "shop") == before_drop

        book.run_section("4. Restore one table into the live primary")
        assert checksums(primary, "shop")["orders"] == before_drop["orders"]

        # section 3's other accident, a DELETE without WHERE: its first block names it
        primary.execute("DELETE FROM shop.orders")
        gtid = primary.execute("SELECT @@gtid_binlog_pos")[0][0]
        wait_for(lambda: archived_up_to(env, gtid), timeout=60, what="the archive")
        find = runbook_sections()["3. Restore to just before a bad statement"][0]
        assert book.run(find[1]).splitlines()[-1] == gtid
        book.run_section("4b. Undo one bad UPDATE or DELETE in place")  # rows put back
        assert checksums(primary, "shop")["orders"] == before_drop["orders"]

        primary.execute(*[f"UPDATE shop.customers SET visits = visits + 100 WHERE id = {i}"
                          for i in range(20)])
        latest = checksums(primary, "shop")
        gtid = primary.execute("SELECT @@gtid_binlog_pos")[0][0]
        wait_for(lambda: archived_up_to(env, gtid), timeout=60, what="the archive")
        wait_for(lambda: standby.execute("SELECT @@gtid_slave_pos")[0][0] == gtid,
                 timeout=60, what="the standby to catch up")
        primary.proc.send_signal(signal.SIGKILL)  # the primary is lost
        primary.proc.wait()
        book.run_section("5. The primary is lost: restore the latest state")
        assert checksums(fresh, "shop") == latest

        kept = book.run_section("6. Retention").splitlines()  # every base is younger than 14d
        assert kept.count("nothing to delete") == 2, kept
        drill = book.run_section("7. Monthly restore drill").splitlines()
        assert "drill passed" in drill and any(line.startswith("RTO: ") for line in drill)
        with open(os.path.join(env["WORK_DIR"], "drill.prom")) as f:
            assert f.read().splitlines()[-1] == ('mysqlbackup_restore_progress_ratio'
                                                 '{command="drill",source="db1"} 1.000000')

        book.run_section("8. A new replica from the archive")
        assert checksums(replica, "shop") == latest
        fresh.execute(*[f"UPDATE shop.customers SET visits = visits + 1000 WHERE id = {i}"
                        for i in range(3)])  # the new primary's own writes reach it
        wait_for(lambda: checksums(replica, "shop") == checksums(fresh, "shop"), timeout=30,
                 what="the replica to follow the new primary")

        book.run_section("9. The primary failed over to a replica")
        health = healthy_after_traffic(book, standby, 300)  # the promoted standby's
        assert [line for line in health if line.startswith("db1  failover at ")
                and "server_id 5" in line], health
        assert len([line for line in health if line.startswith("db1  restorable from ")]) == 1
        book.env["NEW_PRIMARY_URL"] = f"mysql://restore@127.0.0.1:{after.port}"
        book.run_section("5. The primary is lost: restore the latest state")
        assert checksums(after, "shop") == checksums(standby, "shop")

        rotated = book.run_section("10. Rotate the archive's encryption key").splitlines()
        assert rotated[-1].endswith(", 0 problems"), rotated[-1]
        assert any(line.startswith("db1: ") and " objects rekeyed (" in line
                   and not line.startswith("db1: 0 objects") for line in rotated), rotated
        old = book.run('mysqlbackup verify --archive "$ARCHIVE_URL" --deep || echo exit $?')
        assert old.splitlines()[-1] == "exit 1" and "encrypted objects do not open with the " \
            f"identity {env['MYSQLBACKUP_IDENTITY']}" in old, old
    finally:
        book.kill_background()
        for server in (primary, target, fresh, replica, standby, after):
            server.stop(remove=False)


@pytest.mark.parametrize("line", ["15 3 * * * mysqlbackup base --source x"])
def test_cron_command(line):
    assert cron_command(line) == "mysqlbackup base --source x"
