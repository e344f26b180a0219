"""The demo behind scripts/demo.sh (run that instead: it sets up the machine first).

The whole drill on the embedded default: a throwaway primary, the daemon as its
semi-sync replica into a local directory and a file:// archive, a base backup,
traffic, an accidental DROP TABLE, the DROP's GTID found in `mysqlbackup replay --sql`
output, `mysqlbackup restore --stop-before-gtid` (planned with --dry-run first) into a
second throwaway server, and CHECKSUM TABLE of the primary just before the drop
against the restored server. Exits non-zero when anything differs.

MariaDB by default (Debian's mariadbd); --mysql runs the same drill on MySQL servers
from the tree scripts/mysql_tree.sh builds (.mysql/tree, run through chroot), with
MySQL's own mysqldump and mysql for `base` and `restore`.
"""

import argparse
import functools
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mysqlbackup.archive.names import binlog_key, format_key  # noqa: E402
from mysqlbackup.archive.store import ArchiveStore  # noqa: E402
from mysqlbackup.binlog.events import LOG_EVENT_BINLOG_IN_USE_F  # noqa: E402
from mysqlbackup.sandbox import REPL_PASSWORD, MariaDBSandbox  # noqa: E402
from mysqlbackup.sandbox.mysql import MySQLSandbox, client_wrappers, why_no_mysql  # noqa: E402

SOURCE = "db1"
TABLES = ["shop.customers", "shop.items", "shop.orders"]
SCHEMA = [
    "CREATE DATABASE shop",
    "CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(40), city VARCHAR(40), "
    "KEY (city))",
    "CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(8,2), "
    "stock INT)",
    "CREATE TABLE shop.orders (id INT PRIMARY KEY AUTO_INCREMENT, customer INT, item INT, "
    "qty INT, at DATETIME, KEY (customer))",
    # generated rows: MySQL has no seq_1_to_N tables (nor a recursive CTE this deep by
    # default), and one statement each serves both flavours
    "INSERT INTO shop.customers VALUES " + ", ".join(
        f"({i}, 'customer {i}', '{('Lyon', 'Oslo', 'Porto', 'Turku')[i % 4]}')"
        for i in range(1, 2001)),
    "INSERT INTO shop.items VALUES " + ", ".join(
        f"({i}, 'item {i}', {i % 97 + 0.99}, 100)" for i in range(1, 501)),
]

# What differs between the flavours; the drill itself is one.
FLAVOURS = {
    "mariadb": dict(name="MariaDB", server=MariaDBSandbox, dump="mariadb-dump",
                    semi_sync="Rpl_semi_sync_master", gtids="SELECT @@gtid_binlog_pos"),
    # GTID mode on (MySQL's default is off): the drill stops before the DROP's GTID
    "mysql": dict(name="MySQL", server=functools.partial(MySQLSandbox, gtid_mode="ON"),
                  dump="MySQL's mysqldump",
                  semi_sync="Rpl_semi_sync_source", gtids="SELECT @@gtid_executed"),
}


def step(title):
    print(f"\n== {title}", flush=True)


def say(text):
    print(f"   {text}", flush=True)


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise SystemExit(f"demo: timed out waiting for {what}")


def cli(*args, password="", show=True):
    """Run `mysqlbackup ARGS` (printed as typed), print its output; its stdout."""
    env = dict(os.environ, MYSQLBACKUP_PASSWORD=password, MYSQLBACKUP_TARGET_PASSWORD="")
    if show:
        print("   $ mysqlbackup " + " ".join(args), flush=True)
    result = subprocess.run([sys.executable, "-m", "mysqlbackup", "--log-level", "warning",
                             *args], env=env, capture_output=True, text=True)
    for line in (result.stderr + result.stdout).splitlines():
        if show and _worth_showing(line):
            say("  " + line)
    if result.returncode:
        print(result.stderr, file=sys.stderr)
        raise SystemExit(f"demo: mysqlbackup {args[0]} exited {result.returncode}")
    return result.stdout


def _worth_showing(line):
    """Our own lines, not Spark's or the JVM's start-up chatter."""
    return line.strip() and not re.match(r"(\d\d/\d\d/\d\d |WARNING|Setting default log|"
                                         r"To adjust logging|\s|Using Spark)", line)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="work directory: backup dir and archive (default: a "
                        "new temp dir, removed at the end unless --keep)")
    parser.add_argument("--transactions", type=int, default=1000)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--mysql", action="store_true", help="the drill on MySQL (the "
                        "tree scripts/mysql_tree.sh builds) instead of MariaDB")
    args = parser.parse_args()
    flavour = FLAVOURS["mysql" if args.mysql else "mariadb"]
    if args.mysql and why_no_mysql():
        why = why_no_mysql()
        if "mysql_tree.sh" not in why:
            why += " (scripts/mysql_tree.sh builds the MySQL tree)"
        raise SystemExit(f"demo: --mysql cannot run here: {why}")
    workdir = args.dir or tempfile.mkdtemp(prefix="mysqlbackup-demo-")
    if args.mysql:  # MySQL's client tools, in the tree, for `base` and `restore`
        bin_dir = client_wrappers(os.path.join(workdir, "bin"))
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
    started = time.monotonic()
    try:
        ok = drill(workdir, args.transactions, flavour)
    finally:
        if not (args.keep or args.dir):
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"\ndemo: {'OK' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


def drill(workdir, transactions, flavour):
    backup, archive = os.path.join(workdir, "backup"), f"file://{workdir}/archive"
    server, semi_sync = flavour["server"], flavour["semi_sync"]
    with server(semi_sync_timeout_ms=1000) as primary:
        step(f"1. A throwaway {flavour['name']} primary")
        primary.execute(*SCHEMA)
        say(f"127.0.0.1:{primary.port}, schema shop: {', '.join(TABLES)}")
        daemon = start_daemon(primary, backup, archive, semi_sync)
        try:
            step(f"3. A base backup into the archive ({flavour['dump']} "
                 "--single-transaction)")
            cli("base", "--source", f"mysql://root@127.0.0.1:{primary.port}", "--archive",
                archive, "--source-name", SOURCE)
            step(f"4. Traffic: {transactions} transactions")
            traffic(primary, transactions, semi_sync, flavour["gtids"])
            before, drop_file = accident(primary)
            step("6. The backup: mysqlbackup status, then the files against the server's")
            wait_for(lambda: caught_up(primary, backup), "the daemon to catch up")
            wait_for(lambda: ArchiveStore(archive).exists(
                format_key(binlog_key(SOURCE, drop_file, index=True))),
                f"{drop_file} in the archive")
            cli("status", "--dir", backup)
        finally:
            daemon.terminate()
            daemon.wait(30)
        same_files = compare_files(primary, backup)
    gtid = find_drop(workdir, archive)
    with server(server_id=2, log_bin=False, semi_sync=False) as target:
        restore(archive, gtid, target)
        same_tables = compare_tables(before, target)
    return same_files and same_tables


def start_daemon(primary, backup, archive, semi_sync):
    step("2. The daemon: semi-sync replica into a local directory and a file:// archive")
    args = ["stream", "--source", primary.url, "--server-id", "100", "--dir", backup,
            "--archive", archive, "--archive-interval", "0.5", "--source-name", SOURCE]
    print("   $ mysqlbackup " + " ".join(args))
    env = dict(os.environ, MYSQLBACKUP_PASSWORD=REPL_PASSWORD)
    daemon = subprocess.Popen([sys.executable, "-m", "mysqlbackup", "--log-level", "warning",
                               *args], env=env)
    wait_for(lambda: primary.status(f"{semi_sync}_clients") == "1",
             "the daemon to connect as a semi-sync replica")
    say(f"connected as a semi-sync replica ({semi_sync}_clients = 1)")
    return daemon


def traffic(primary, count, semi_sync, gtids):
    """New orders, stock and city updates, cancelled orders; one commit each."""
    rng = random.Random(12)
    yes0, seq0 = int(primary.status(f"{semi_sync}_yes_tx")), last_seq(primary, gtids)
    conn = primary.root(autocommit=False)
    start = time.monotonic()
    with conn.cursor() as cur:
        for i in range(count):
            kind = i % 10
            if kind < 6:
                rows = [(rng.randint(1, 2000), rng.randint(1, 500), rng.randint(1, 5))
                        for _ in range(rng.randint(1, 4))]
                cur.executemany("INSERT INTO shop.orders (customer, item, qty, at) "
                                "VALUES (%s, %s, %s, NOW())", rows)
                cur.execute("UPDATE shop.items SET stock = stock - 1 WHERE id = %s",
                            (rows[0][1],))
            elif kind < 8:
                cur.execute("UPDATE shop.customers SET city = %s WHERE id = %s",
                            (rng.choice(["Lyon", "Oslo", "Porto", "Turku", "Graz"]),
                             rng.randint(1, 2000)))
            else:
                cur.execute("DELETE FROM shop.orders WHERE customer = %s",
                            (rng.randint(1, 2000),))
            conn.commit()
    elapsed = time.monotonic() - start
    conn.close()
    yes = int(primary.status(f"{semi_sync}_yes_tx")) - yes0
    logged = last_seq(primary, gtids) - seq0
    say(f"{count} transactions in {elapsed:.1f} s; {logged} changed rows and were binlogged "
        f"(the rest matched nothing), {yes} acknowledged by the daemon after fsync "
        f"(semi-sync yes_tx)")


def last_seq(server, gtids):
    """Sequence number of the server's last binlogged GTID (one domain or UUID here:
    MariaDB's D-S-N, MySQL's UUID:1-N)."""
    return int(re.search(r"(\d+)\s*$", server.execute(gtids)[0][0]).group(1))


def accident(primary):
    """The checksums just before the DROP, and the binlog file holding it; the
    application goes on writing afterwards."""
    before = checksums(primary, TABLES)
    step("5. The accident: DROP TABLE shop.orders (and the application goes on)")
    drop_file = primary.binlog_files()[-1]  # the one the server writes now
    primary.execute("DROP TABLE shop.orders")
    primary.execute(*[f"UPDATE shop.items SET stock = stock + 10 WHERE id = {i}"
                      for i in range(1, 21)])
    say("shop.orders is gone; 20 more transactions committed after it")
    primary.execute("FLUSH BINARY LOGS")
    return before, drop_file


def caught_up(server, directory):
    name = server.binlog_files()[-1]
    local = os.path.join(directory, name)
    return os.path.exists(local) and os.path.getsize(local) == os.path.getsize(
        server.binlog_path(name))


def compare_files(primary, backup):
    """Every sealed file byte for byte; the active one as far as the daemon had it when
    it stopped (the server goes on writing it: a binlog checkpoint event may follow the
    catch-up), but for its in-use flag (the server's says in use, the copy may not)."""
    files = primary.binlog_files()
    same = [f for f in files if same_bytes(os.path.join(backup, f), primary.binlog_path(f),
                                           active=f == files[-1])]
    active = os.path.join(backup, files[-1])
    held = os.path.getsize(active) if os.path.exists(active) else 0
    say(f"{len(same)}/{len(files)} binlog files in {backup} byte-identical to the server's "
        f"(the active {files[-1]}: its first {held} of "
        f"{os.path.getsize(primary.binlog_path(files[-1]))} bytes, all but its in-use flag)")
    return len(same) == len(files)


def same_bytes(local, remote, active):
    if not os.path.exists(local):
        return False
    with open(local, "rb") as a, open(remote, "rb") as b:
        mine, theirs = bytearray(a.read()), bytearray(b.read())
    if active and 21 < len(mine) <= len(theirs):  # the format description's flags
        theirs = theirs[:len(mine)]
        mine[21] &= ~LOG_EVENT_BINLOG_IN_USE_F
        theirs[21] &= ~LOG_EVENT_BINLOG_IN_USE_F
    return mine == theirs


def find_drop(workdir, archive):
    """The DROP's GTID, from the SQL a replay of the archive would run."""
    step("7. Find the DROP: the archive as SQL, one '-- GTID FILE:START-END' line per "
         "transaction")
    sql = os.path.join(workdir, "review.sql")
    cli("replay", "--archive", archive, "--sql", sql)
    header, found = None, None
    with open(sql, "rb") as f:
        for line in f:
            text = line.decode("utf-8", "replace").rstrip("\n")
            if re.match(r"-- \S+ \S+:\d+-\d+$", text):  # D-S-N, UUID:N, UUID:TAG:N
                header = text
            elif re.search(r"DROP TABLE\b.*\borders\b", text, re.I):
                found = header
                say(f"{os.path.basename(sql)}, the transaction that drops shop.orders:")
                say(f"  {header}")
                say("  ...")
                say(f"  {text[:100]}")
    if found is None:
        raise SystemExit("demo: no DROP TABLE in the replay's SQL")
    gtid = found.split()[1]
    say(f"the DROP is GTID {gtid}")
    return gtid


def restore(archive, gtid, target):
    step("8. Plan the restore (--dry-run touches nothing)")
    url = f"mysql://root@127.0.0.1:{target.port}"
    cli("restore", "--archive", archive, "--stop-before-gtid", gtid, "--dry-run")
    step(f"9. Restore into a second throwaway server (127.0.0.1:{target.port})")
    cli("restore", "--archive", archive, "--target", url, "--stop-before-gtid", gtid)


def checksums(server, tables):
    return {table: checksum for table, checksum in
            server.execute(f"CHECKSUM TABLE {', '.join(tables)}")}


def compare_tables(before, target):
    step("10. CHECKSUM TABLE: the primary just before the DROP vs the restored server")
    after = checksums(target, TABLES)
    say(f"{'table':18s} {'primary':>12s} {'restored':>12s}")
    for table in TABLES:
        mark = "" if before[table] == after[table] else "   DIFFERS"
        say(f"{table:18s} {before[table]!s:>12s} {after[table]!s:>12s}{mark}")
    return before == after


if __name__ == "__main__":
    sys.exit(main())
