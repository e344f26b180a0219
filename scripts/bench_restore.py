"""Restore benchmark: one database brought back two ways, from the same snapshot.

1. the manual procedure a DBA runs today: ``mariadb < dump.sql`` (the base's own dump,
   decompressed: the identical snapshot), then ``mariadb-binlog --start-position=POS
   FILES | mariadb`` from the dump's binlog file:pos to the end;
2. ``mysqlbackup restore`` from a file:// archive: the binlogs brought in with
   ``mysqlbackup archive import``, the base made by ``mysqlbackup base``.

The source (durable: sync_binlog=1, innodb_flush_log_at_trx_commit=1) is loaded with
``--base-mb`` MB of data (unlogged), then ``--clients`` connections run an OLTP-ish
mix (new orders with their lines and stock updates, payments, customer edits, deletes
of old orders and audit rows, batch inserts; multi-row transactions whose concurrent
commits share binlog group commits); ``mysqlbackup base`` runs while they write, and
they go on until ``--binlog-mb`` MB of binlog follow the base's position. Each way
restores into its own fresh server with the same settings; CHECKSUM TABLE of every
table must be the same on both and equal to the source's at the end. Prints the
times per phase (load, binlogs) and the ratio manual / ours; exit 1 when a checksum
differs. Timing is printed, never asserted.

Run: .venv/bin/python scripts/bench_restore.py [--base-mb 300] [--binlog-mb 1000]
     quick: --base-mb 50 --binlog-mb 100; --keep, then --reuse DIR to restore again.
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import zstandard

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mysqlbackup.archive.listing import ArchiveListing  # noqa: E402
from mysqlbackup.archive.names import BASE_MEMBERS, base_key, format_key  # noqa: E402
from mysqlbackup.archive.store import ArchiveStore  # noqa: E402
from mysqlbackup.sandbox import MariaDBSandbox  # noqa: E402

SOURCE = "bench"
SERVER_ARGS = ["--innodb-buffer-pool-size=1G", "--innodb-log-file-size=512M",
               "--max-allowed-packet=256M"]
SCHEMA = [
    "CREATE DATABASE shop",
    "CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(60), email VARCHAR(80), "
    "city VARCHAR(40), balance DECIMAL(12,2), created DATETIME, notes VARCHAR(600), "
    "KEY (city), KEY (email))",
    "CREATE TABLE shop.products (id INT PRIMARY KEY, sku CHAR(12), name VARCHAR(80), "
    "price DECIMAL(10,2), stock INT, descr VARCHAR(1000), KEY (sku))",
    "CREATE TABLE shop.orders (id BIGINT PRIMARY KEY AUTO_INCREMENT, customer_id INT, "
    "status VARCHAR(12), total DECIMAL(12,2), created DATETIME(6), note VARCHAR(200), "
    "KEY (customer_id), KEY (status, created))",
    "CREATE TABLE shop.order_lines (order_id BIGINT, line_no SMALLINT, product_id INT, "
    "qty INT, price DECIMAL(10,2), PRIMARY KEY (order_id, line_no), KEY (product_id))",
    "CREATE TABLE shop.audit_log (id BIGINT PRIMARY KEY AUTO_INCREMENT, at DATETIME(6), "
    "actor INT, what VARCHAR(40), payload TEXT, KEY (actor, at))",
]
TABLES = ["shop.customers", "shop.products", "shop.orders", "shop.order_lines",
          "shop.audit_log"]
# rows per MB of base (about 1 MB of dump per unit, measured)
PER_MB = {"customers": 650, "products": 170, "orders": 1700, "audit_log": 330}
CITIES = "'Lyon','Oslo','Porto','Turku','Graz','Cork','Brno','Gent'"


# -- the source ---------------------------------------------------------------------

def load_base_data(source, mb):
    """``mb`` MB of rows, unlogged (the base holds them, no binlog needs to)."""
    n = {name: per * mb for name, per in PER_MB.items()}
    fill = {
        "customers": "SELECT seq, CONCAT('customer ', seq), CONCAT('c', seq, '@example.com'), "
                     f"ELT(1 + seq % 8, {CITIES}), seq % 1000 + 0.5, "
                     "'2026-01-01' + INTERVAL seq MINUTE, REPEAT(MD5(seq), 1 + seq % 12)",
        "products": "SELECT seq, LPAD(seq, 12, '0'), CONCAT('product ', seq), seq % 97 + 0.99, "
                    "1000000, REPEAT(MD5(seq), 30)",
        "orders": f"SELECT seq, 1 + seq * 7919 % {n['customers']}, "
                  "ELT(1 + seq % 3, 'new', 'paid', 'shipped'), seq % 500 + 0.25, "
                  "'2026-01-01' + INTERVAL seq SECOND, REPEAT('n', seq % 150)",
        "order_lines": f"SELECT 1 + (seq - 1) DIV 3, 1 + (seq - 1) % 3, "
                       f"1 + seq * 104729 % {n['products']}, 1 + seq % 4, seq % 97 + 0.99",
        "audit_log": "SELECT seq, '2026-01-01' + INTERVAL seq SECOND, seq % 100, 'import', "
                     "REPEAT(MD5(seq), 40)",
    }
    n["order_lines"] = 3 * n["orders"]
    conn = source.root()
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for table, select in fill.items():
            for lo in range(1, n[table] + 1, 50_000):
                hi = min(n[table], lo + 49_999)
                cur.execute(f"INSERT INTO shop.{table} {select} FROM shop.seq_{lo}_to_{hi}")
    conn.close()
    return n


class Writers:
    """``clients`` connections running the OLTP mix until stopped."""

    def __init__(self, source, clients, counts):
        self.source, self.counts, self.stop = source, counts, threading.Event()
        self.done, self.retries = [0] * clients, [0] * clients
        self.threads = [threading.Thread(target=self._run, args=(c,), daemon=True)
                        for c in range(clients)]
        self.errors = []

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()
        if self.errors:
            raise RuntimeError(f"a writer failed: {self.errors[0]}")
        return sum(self.done)

    def _run(self, c):
        try:
            conn = self.source.root(autocommit=False)
            mix = Mix(c, len(self.threads), self.counts)
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    self._one(conn, cur, mix, c)
            conn.close()
        except Exception as e:  # reported by finish()
            self.errors.append(repr(e))

    def _one(self, conn, cur, mix, c):
        try:
            mix.transaction(cur)
            conn.commit()
            self.done[c] += 1
        except Exception as e:
            if getattr(e, "args", (None,))[0] not in (1205, 1213):  # lock wait, deadlock
                raise
            conn.rollback()
            self.retries[c] += 1


class Mix:
    """One client's transactions; the rows it deletes are its own stripe of old ids."""

    def __init__(self, client, clients, counts):
        self.rng, self.c, self.clients, self.n = random.Random(client), client, clients, counts
        self.old_order = client + 1       # next base order of this client's stripe to delete
        self.old_audit = client * 50 + 1  # next base audit rows of this stripe
        self.orders = []                  # ids of this client's new orders

    def transaction(self, cur):
        kind = self.rng.random()
        if kind < 0.45:
            self.new_order(cur)
        elif kind < 0.65:
            self.payment(cur)
        elif kind < 0.80:
            self.customer_edits(cur)
        elif kind < 0.90:
            self.cleanup(cur)
        else:
            cur.execute(f"INSERT INTO shop.audit_log (at, actor, what, payload) SELECT NOW(6), "
                        f"{self.c}, 'batch', REPEAT(MD5(RAND()), 32) FROM shop.seq_1_to_40")

    def new_order(self, cur):
        rng, n = self.rng, self.n
        cur.execute("INSERT INTO shop.orders (customer_id, status, total, created, note) "
                    "VALUES (%s, 'new', 0, NOW(6), %s)",
                    (rng.randint(1, n["customers"]), "x" * rng.randint(0, 150)))
        order = cur.lastrowid
        products = sorted(rng.sample(range(1, n["products"] + 1), rng.randint(3, 8)))
        cur.executemany("INSERT INTO shop.order_lines VALUES (%s, %s, %s, %s, 9.99)",
                        [(order, i, p, rng.randint(1, 4)) for i, p in enumerate(products, 1)])
        cur.execute("UPDATE shop.products SET stock = stock - 1 WHERE id IN (%s)"
                    % ",".join(map(str, products)))
        cur.execute("UPDATE shop.orders SET total = (SELECT SUM(qty * price) FROM "
                    "shop.order_lines WHERE order_id = %s) WHERE id = %s", (order, order))
        cur.execute("INSERT INTO shop.audit_log (at, actor, what, payload) VALUES "
                    "(NOW(6), %s, 'order', REPEAT(MD5(RAND()), 32))", (self.c,))
        self.orders = (self.orders + [order])[-200:]

    def payment(self, cur):
        if self.orders:
            paid = self.rng.sample(self.orders, min(len(self.orders), 5))
            cur.execute("UPDATE shop.orders SET status = 'paid' WHERE id IN (%s)"
                        % ",".join(map(str, sorted(paid))))
        cur.execute("UPDATE shop.customers SET balance = balance - 10 WHERE id = %s",
                    (self.rng.randint(1, self.n["customers"]),))

    def customer_edits(self, cur):
        ids = sorted(self.rng.sample(range(1, self.n["customers"] + 1), 5))
        cur.execute(f"UPDATE shop.customers SET city = ELT(1 + FLOOR(RAND() * 8), {CITIES}), "
                    f"notes = REPEAT(MD5(RAND()), 1 + FLOOR(RAND() * 12)) WHERE id IN (%s)"
                    % ",".join(map(str, ids)))

    def cleanup(self, cur):
        """Ten old orders of this client's stripe with their lines; 50 old audit rows."""
        ids = [self.old_order + i * self.clients for i in range(10)]
        self.old_order += 10 * self.clients
        listed = ",".join(map(str, ids))
        cur.execute(f"DELETE FROM shop.order_lines WHERE order_id IN ({listed})")
        cur.execute(f"DELETE FROM shop.orders WHERE id IN ({listed})")
        cur.execute("DELETE FROM shop.audit_log WHERE id BETWEEN %s AND %s",
                    (self.old_audit, self.old_audit + 49))
        self.old_audit += 50 * self.clients


def binlog_after(source, position):
    """Bytes of binlog the source wrote after ``position`` (file, pos)."""
    file, pos = position
    sizes = [(name, os.path.getsize(source.binlog_path(name))) for name in source.binlog_files()]
    return sum(size for name, size in sizes if name >= file) - pos


def take_base(source, url):
    """`mysqlbackup base` of the source (writers running); its manifest."""
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "mysqlbackup", "--log-level", "warning",
                             "base", "--source", f"mysql://root@127.0.0.1:{source.port}",
                             "--archive", url, "--source-name", SOURCE],
                            env=dict(os.environ, MYSQLBACKUP_PASSWORD=""),
                            capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"mysqlbackup base failed: {result.stderr.strip()[-2000:]}")
    listing = ArchiveListing(ArchiveStore(url))
    [base_id] = listing.base_ids(SOURCE)
    manifest = listing.base_manifest(SOURCE, base_id)
    print(f"base: {result.stdout.strip()} ({time.monotonic() - started:.0f} s while the "
          f"writers ran)")
    return manifest


def write_traffic(source, args, counts, url):
    """The writers, the base taken while they run, until ``--binlog-mb`` MB follow it."""
    writers = Writers(source, args.clients, counts).start()
    t = time.monotonic()
    try:
        time.sleep(3)  # the base is taken under load
        manifest = take_base(source, url)
        position = (manifest["binlog_file"], manifest["binlog_pos"])
        while binlog_after(source, position) < args.binlog_mb * 1e6:
            if writers.errors:
                break
            time.sleep(0.5)
    finally:
        transactions = writers.finish()
    mb = binlog_after(source, position) / 1e6
    print(f"traffic: {transactions} transactions from {args.clients} clients "
          f"({sum(writers.retries)} deadlock retries), {mb:.0f} MB of binlog after the "
          f"base's {position[0]}:{position[1]}, {time.monotonic() - t:.0f} s")
    return manifest, mb


def checksums(server, tables):
    return {t: c for t, c in server.execute(f"CHECKSUM TABLE {', '.join(tables)}")}


# -- the restores' inputs --------------------------------------------------------------

def prepare(workdir, args, servers):
    """Source, traffic, base, archive import, dump.sql; what later runs need goes to
    bench.json (the source itself is removed: its binlogs are linked into binlogs/)."""
    url = f"file://{workdir}/archive"
    source = MariaDBSandbox(os.path.join(workdir, "source"), semi_sync=False, extra_args=[
        *SERVER_ARGS, "--max-binlog-size=256M", "--sync-binlog=1",
        "--innodb-flush-log-at-trx-commit=1"])
    servers.append(source)
    source.start()
    source.execute(*SCHEMA)
    t = time.monotonic()
    counts = load_base_data(source, args.base_mb)
    print(f"source: base data {counts} in {time.monotonic() - t:.0f} s")
    manifest, mb = write_traffic(source, args, counts, url)
    source.execute("FLUSH BINARY LOGS")
    expected = checksums(source, TABLES)
    binlogs = link_binlogs(source, os.path.join(workdir, "binlogs"))
    source.stop(remove=True)
    servers.remove(source)
    bench = {"url": url, "manifest": manifest, "binlog_mb": mb, "expected": expected,
             "files": [os.path.join(workdir, "binlogs", name) for name in binlogs],
             "dump": os.path.join(workdir, "dump.sql")}
    import_binlogs(workdir, url)
    write_dump(workdir, manifest, bench["dump"])
    with open(os.path.join(workdir, "bench.json"), "w") as f:
        json.dump(bench, f)
    return bench


def link_binlogs(source, directory):
    """Hard links to the source's binlog files (it is stopped and removed afterwards)."""
    os.makedirs(directory)
    names = source.binlog_files()
    for name in names:
        os.link(source.binlog_path(name), os.path.join(directory, name))
    return names


def import_binlogs(workdir, url):
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "mysqlbackup", "--log-level", "warning", "archive",
                    "import", os.path.join(workdir, "binlogs"), "--archive", url,
                    "--source-name", SOURCE], check=True, stdout=subprocess.DEVNULL)
    print(f"archive: binlogs imported in {time.monotonic() - t:.0f} s")


def write_dump(workdir, manifest, path):
    """The base's own dump, decompressed: the manual way's dump.sql (same snapshot)."""
    key = format_key(base_key(SOURCE, manifest["id"], BASE_MEMBERS["dump"]))
    with open(os.path.join(workdir, "archive", key), "rb") as src, open(path, "wb") as dst:
        zstandard.ZstdDecompressor().copy_stream(src, dst)
    print(f"dump.sql: {os.path.getsize(path) / 1e6:.0f} MB (the base's dump, decompressed)")


# -- the two ways ------------------------------------------------------------------------

def new_target(workdir, name, servers, binlog):
    """A fresh target, the same settings for both ways; always stopped at the end."""
    target = MariaDBSandbox(os.path.join(workdir, name), server_id=7, log_bin=binlog,
                            semi_sync=False, extra_args=SERVER_ARGS)
    servers.append(target)
    return target.start()


def run_manual(workdir, bench, servers, binlog):
    """``mariadb < dump.sql``, then ``mariadb-binlog --start-position | mariadb``;
    (phase seconds, target)."""
    target = new_target(workdir, "manual", servers, binlog)
    client = ["mariadb", "--no-defaults", f"--socket={target.socket}", "-uroot",
              "--max-allowed-packet=1G"]
    m = bench["manifest"]
    files = [f for f in bench["files"] if os.path.basename(f) >= m["binlog_file"]]
    start = time.monotonic()
    with open(bench["dump"], "rb") as dump:
        subprocess.run(client + ["--init-command=SET SESSION sql_log_bin=0"], stdin=dump,
                       check=True)
    loaded = time.monotonic()
    binlog = subprocess.Popen(["mariadb-binlog", "--no-defaults",
                               f"--start-position={m['binlog_pos']}", *files],
                              stdout=subprocess.PIPE)
    subprocess.run(client, stdin=binlog.stdout, check=True)
    if binlog.wait():
        raise RuntimeError(f"mariadb-binlog exited {binlog.returncode}")
    end = time.monotonic()
    return {"load": loaded - start, "binlogs": end - loaded, "total": end - start}, target


def run_ours(workdir, bench, servers, args):
    """``mysqlbackup restore``; (phase seconds from its report, target)."""
    target = new_target(workdir, "ours", servers, args.target_binlog)
    argv = [sys.executable, "-m", "mysqlbackup", "--log-level", "warning", "restore",
            "--archive", bench["url"], "--target", f"mysql://root@127.0.0.1:{target.port}",
            "--workers", str(args.workers), "--merge", str(args.merge)]
    start = time.monotonic()
    result = subprocess.run(argv, env=dict(os.environ, MYSQLBACKUP_TARGET_PASSWORD=""),
                            capture_output=True, text=True)
    wall = time.monotonic() - start
    if result.returncode:
        raise RuntimeError(f"mysqlbackup restore failed: {result.stderr.strip()[-2000:]}")
    print("  " + result.stdout.strip().replace("\n", "\n  "))
    phases = dict(re.findall(r"(\w+) ([\d.]+)s", result.stdout.splitlines()[-1]))
    return {"load": float(phases["load"]), "binlogs": float(phases["replay"]),
            "total": wall}, target


def measure(label, run, servers, expected):
    """(phases, checksums) of one way; its target is stopped and removed at once, so
    that its background flushing does not slow the next way down."""
    print(f"\n{label} ...", flush=True)
    phases, target = run()
    got = checksums(target, list(expected))
    target.stop(remove=True)
    servers.remove(target)
    print(f"  load {phases['load']:.1f} s, binlogs {phases['binlogs']:.1f} s, total "
          f"{phases['total']:.1f} s")
    return phases, got


def report(bench, results):
    """The summary table; True when every checksum equals the source's."""
    expected = bench["expected"]
    m = bench["manifest"]
    print(f"\nsummary: base {m['raw_size'] / 1e6:.0f} MB dump, {bench['binlog_mb']:.0f} MB "
          f"of binlog after it")
    print(f"  {'':28s} {'load':>9s} {'binlogs':>9s} {'total':>9s}")
    for label, (phases, _) in results.items():
        print(f"  {label:28s} " + " ".join(f"{phases[k]:7.1f} s" for k in
                                           ("load", "binlogs", "total")))
    if len(results) == 2:
        (manual, _), (ours, _) = results.values()
        print(f"  {'ratio manual / ours':28s} " + " ".join(
            f"{manual[k] / ours[k]:7.2f} x" for k in ("load", "binlogs", "total"))
            + "   (goal: total >= 1.3 x)")
    ok = True
    for label, (_, got) in results.items():
        differ = [t for t in expected if got.get(t) != expected[t]]
        ok = ok and not differ
        print(f"  {label}: CHECKSUM TABLE of {len(expected)} tables "
              + (f"DIFFER from the source's: {', '.join(differ)}" if differ
                 else "identical to the source's"))
    if len(results) == 2:
        (_, first), (_, second) = results.values()
        ok = ok and first == second
        print(f"  the two restored servers: CHECKSUM TABLE "
              f"{'identical' if first == second else 'DIFFER'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-mb", type=int, default=300, help="MB of data in the base (300)")
    parser.add_argument("--binlog-mb", type=int, default=1000,
                        help="MB of binlog after the base (1000)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent writers (4)")
    parser.add_argument("--workers", type=int, default=4, help="restore --workers (4)")
    parser.add_argument("--merge", type=int, default=100, help="restore --merge (100)")
    parser.add_argument("--target-binlog", action="store_true",
                        help="targets with a binlog (ours then commits every transaction, "
                        "--workers side by side); default: without, as a restore server")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (--reuse it to restore again)")
    parser.add_argument("--reuse", metavar="DIR", help="a kept work directory: restore its "
                        "archive and dump again, no writing")
    parser.add_argument("--only", choices=["manual", "ours"], action="append",
                        help="run only this way (repeatable)")
    args = parser.parse_args()
    workdir = args.reuse or tempfile.mkdtemp(prefix="bench-restore-")
    only = args.only or ["manual", "ours"]
    servers = []
    try:
        if args.reuse:
            with open(os.path.join(workdir, "bench.json")) as f:
                bench = json.load(f)
            for name in ("manual", "ours"):
                shutil.rmtree(os.path.join(workdir, name), ignore_errors=True)
        else:
            bench = prepare(workdir, args, servers)
        ways = {"manual": ("manual: mariadb, binlog pipe",
                           lambda: run_manual(workdir, bench, servers, args.target_binlog)),
                "ours": ("mysqlbackup restore", lambda: run_ours(workdir, bench, servers, args))}
        results = {}
        for way in only:
            label, run = ways[way]
            results[label] = measure(label, run, servers, bench["expected"])
        return 0 if report(bench, results) else 1
    finally:
        for server in servers:
            server.stop(remove=True)
        if not (args.keep or args.reuse):
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
