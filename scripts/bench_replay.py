"""Replay benchmark: the same archive and starting state applied four ways.

1. ``mariadb-binlog FILES | mariadb`` (the pipe: the anchor),
2. a real MariaDB replica's SQL thread fed the files as relay logs,
3. ``mysqlbackup replay`` (PySpark, local[*]) from a file:// archive of the files,
4. ``mysqlbackup replay --apply native``: the target's replication applier
   (``--workers`` parallel threads, optimistic) fed by ``mysqlbackup serve`` from
   the same archive.

The source writes the schema, then FLUSH BINARY LOGS (G0: the starting state is
the empty tables), then ``--rows`` row changes in multi-row transactions from
``--clients`` concurrent connections (its own group commits give the commit_id
groups a parallel apply may use). Each
target starts from the same schema; the final CHECKSUM TABLE of every table must
equal the source's. Prints wall times and ratios against the pipe and the SQL
thread.

Run: .venv/bin/python scripts/bench_replay.py [--mb 1000] [--rows 1000000]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mysqlbackup.stream.archiver import Archiver  # noqa: E402
from mysqlbackup.sandbox import MariaDBSandbox  # noqa: E402
from mysqlbackup.localdir.state import State, save_state  # noqa: E402
from mysqlbackup.archive.store import ArchiveStore  # noqa: E402

TABLES = [f"b.t{i}" for i in range(4)]
SCHEMA = ["CREATE DATABASE b"] + [
    f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, k INT, v VARCHAR(1000), n DECIMAL(12,2))"
    for t in TABLES]


def generate(source, mb, rows, clients):
    """Row changes after G0 from ``clients`` concurrent connections (one table each),
    until both ``rows`` changes and ``mb`` MB of binlog are written. Commits that meet
    in one binlog group commit share a commit_id: what a parallel apply may use."""
    counts, stop = [0] * clients, threading.Event()

    def work(c):
        conn = source.root(autocommit=False)
        table, batch, next_id = TABLES[c % len(TABLES)], 25, c * 10_000_000
        with conn.cursor() as cur:
            while not stop.is_set():
                values = [(next_id + i, i, "x" * 900, i * 1.5) for i in range(batch)]
                cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", values)
                if next_id % 500 == 0:
                    cur.execute(f"UPDATE {table} SET k = k + 1 WHERE id BETWEEN %s AND %s",
                                (next_id - 400, next_id - 380))
                    cur.execute(f"DELETE FROM {table} WHERE id BETWEEN %s AND %s",
                                (next_id - 300, next_id - 295))
                    counts[c] += 26
                conn.commit()
                next_id += batch
                counts[c] += batch
        conn.close()
    workers = [threading.Thread(target=work, args=(c,)) for c in range(clients)]
    for w in workers:
        w.start()
    while sum(counts) < rows or binlog_mb(source) < mb:
        time.sleep(0.2)
    stop.set()
    for w in workers:
        w.join()
    source.execute("FLUSH BINARY LOGS")
    return sum(counts)


def binlog_mb(server):
    return sum(os.path.getsize(server.binlog_path(n)) for n in server.binlog_files()) / 1e6


def checksums(server):
    return {t: server.execute(f"CHECKSUM TABLE {t}")[0][1] for t in TABLES}


def new_target(workdir, name, servers, extra=()):
    """A fresh target with the schema (G0); in ``servers`` so that it is always stopped."""
    target = MariaDBSandbox(os.path.join(workdir, name), server_id=7, log_bin=False,
                            semi_sync=False, extra_args=["--innodb-buffer-pool-size=1G",
                                                         *extra])
    servers.append(target)
    target.start()
    target.execute(*SCHEMA)
    return target


def run_pipe(workdir, files, servers):
    target = new_target(workdir, "pipe", servers)
    start = time.monotonic()
    binlog = subprocess.Popen(["mariadb-binlog", "--no-defaults", *files],
                              stdout=subprocess.PIPE)
    subprocess.run(["mariadb", "--no-defaults", f"--socket={target.socket}", "-uroot"],
                   stdin=binlog.stdout, check=True)
    binlog.wait()
    return time.monotonic() - start, target


def run_sql_thread(workdir, files, servers):
    target = new_target(workdir, "sqlthread", servers,
                        ["--relay-log=relay-bin", "--skip-slave-start"])
    names = []
    for i, path in enumerate(files, 1):
        name = f"relay-bin.{i:06d}"
        shutil.copyfile(path, os.path.join(target.datadir, name))  # copy: relay logs get purged
        names.append(f"./{name}")
    with open(os.path.join(target.datadir, "relay-bin.index"), "w") as f:
        f.write("\n".join(names) + "\n")
    first = os.path.basename(files[0])
    target.execute("RESET SLAVE ALL", f"CHANGE MASTER TO MASTER_HOST='dummy', "
                   f"RELAY_LOG_FILE='relay-bin.000001', RELAY_LOG_POS=4, "
                   f"MASTER_LOG_FILE='{first}', MASTER_LOG_POS=4, MASTER_USE_GTID=no")
    start = time.monotonic()
    target.execute("START SLAVE SQL_THREAD")
    while True:
        status = slave_status(target)
        if status["Slave_SQL_Running"] == "No":
            raise RuntimeError(f"SQL thread stopped: {status['Last_SQL_Error']}")
        # past the copied relay logs (it opens one of its own) and idle: all applied
        if status["Relay_Log_File"] > f"relay-bin.{len(files):06d}" and \
                status["Slave_SQL_Running_State"].startswith("Slave has read all relay log"):
            break
        time.sleep(0.05)
    return time.monotonic() - start, target


def slave_status(server):
    """SHOW SLAVE STATUS as a dict."""
    conn = server.root()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SLAVE STATUS")
            row = cur.fetchone()
            return dict(zip([d[0] for d in cur.description], row))
    finally:
        conn.close()


def run_ours(workdir, servers, archive_url, start_gtid, workers, merge):
    target = new_target(workdir, "ours", servers)
    env = dict(os.environ, MYSQLBACKUP_TARGET_PASSWORD="")
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "mysqlbackup", "--log-level", "warning", "replay", "--archive",
         archive_url, "--target", f"mysql://root@127.0.0.1:{target.port}", "--start-gtid",
         start_gtid, "--workers", str(workers), "--merge", str(merge)],
        env=env, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(result.stderr[-2000:])
    print("  " + result.stdout.strip())
    return time.monotonic() - start, target


def run_native(workdir, servers, archive_url, start_gtid, workers):
    target = new_target(workdir, "native", servers)
    env = dict(os.environ, MYSQLBACKUP_TARGET_PASSWORD="")
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "mysqlbackup", "--log-level", "warning", "replay", "--archive",
         archive_url, "--target", f"mysql://root@127.0.0.1:{target.port}", "--start-gtid",
         start_gtid, "--apply", "native", "--workers", str(workers)],
        env=env, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(result.stderr[-2000:])
    print("  " + result.stdout.strip().replace("\n", "\n  "))
    return time.monotonic() - start, target


def measure(run, servers, expected):
    """(seconds, checksums equal) of one way; its target is stopped and removed at once,
    so that its background flushing does not slow the next way down."""
    secs, target = run()
    same = checksums(target) == expected
    target.stop(remove=True)
    servers.remove(target)
    return secs, same


def archive(workdir, source, files):
    local = os.path.join(workdir, "local")
    os.makedirs(local)
    for name in source.binlog_files():
        shutil.copyfile(source.binlog_path(name), os.path.join(local, name))
    last = source.binlog_files()[-1]
    save_state(local, State(file=last, pos=os.path.getsize(os.path.join(local, last)),
                            source_identity="bench"))
    url = f"file://{workdir}/archive"
    Archiver(local, ArchiveStore(url)).run_once()
    return url


def prepare(workdir, args, servers):
    """Write the source and its archive once; what later runs need goes to bench.json."""
    source = MariaDBSandbox(os.path.join(workdir, "source"), semi_sync=False,
                            extra_args=["--max-binlog-size=128M",
                                        "--innodb-buffer-pool-size=1G",
                                        # a durable primary, as in production: its
                                        # fsyncs are what group concurrent commits
                                        "--sync-binlog=1",
                                        "--innodb-flush-log-at-trx-commit=1"]).start()
    servers.append(source)
    source.execute(*SCHEMA, "FLUSH BINARY LOGS")
    g0 = source.execute("SELECT @@gtid_binlog_pos")[0][0]
    first_data = source.binlog_files()[-1]
    t = time.monotonic()
    changes = generate(source, args.mb, args.rows, args.clients)
    names = source.binlog_files()
    files = [source.binlog_path(n) for n in names[names.index(first_data):]]
    size = sum(map(os.path.getsize, files)) / 1e6
    print(f"source: {changes} row changes, {size:.0f} MB in {len(files)} files after G0 "
          f"{g0} ({time.monotonic() - t:.0f} s to write)")
    bench = {"g0": g0, "files": files, "changes": changes, "size": size,
             "expected": checksums(source), "url": archive(workdir, source, files)}
    source.stop(remove=False)
    servers.remove(source)
    with open(os.path.join(workdir, "bench.json"), "w") as f:
        json.dump(bench, f)
    return bench


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=1000, help="binlog MB after G0")
    parser.add_argument("--rows", type=int, default=1_000_000, help="row changes after G0")
    parser.add_argument("--clients", type=int, default=4, help="concurrent writers (4)")
    parser.add_argument("--workers", type=int, default=4, help="replay --workers (4)")
    parser.add_argument("--merge", type=int, default=100,
                        help="replay --merge (100; 1: a commit per source transaction)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (its archive can be --reuse'd)")
    parser.add_argument("--reuse", metavar="DIR",
                        help="a kept work directory: replay its archive again, no writing")
    parser.add_argument("--only", choices=["pipe", "sql", "ours", "native"], action="append",
                        help="run only these (repeatable; the pipe is the ratios' anchor)")
    args = parser.parse_args()
    workdir = args.reuse or tempfile.mkdtemp(prefix="bench-replay-")
    only = set(args.only or ["pipe", "sql", "ours", "native"])
    servers = []
    try:
        if args.reuse:
            with open(os.path.join(workdir, "bench.json")) as f:
                bench = json.load(f)
            for name in ("pipe", "sqlthread", "ours", "native"):
                shutil.rmtree(os.path.join(workdir, name), ignore_errors=True)
        else:
            bench = prepare(workdir, args, servers)
        files, size, expected = bench["files"], bench["size"], bench["expected"]
        results = {}
        if "pipe" in only:
            results["mariadb-binlog | mariadb"] = measure(
                lambda: run_pipe(workdir, files, servers), servers, expected)
        if "sql" in only:
            results["replica SQL thread"] = measure(
                lambda: run_sql_thread(workdir, files, servers), servers, expected)
        if "ours" in only:
            results["mysqlbackup replay"] = measure(
                lambda: run_ours(workdir, servers, bench["url"], bench["g0"], args.workers,
                                 args.merge), servers, expected)
        if "native" in only:
            results["replay --apply native"] = measure(
                lambda: run_native(workdir, servers, bench["url"], bench["g0"], args.workers),
                servers, expected)
        print(f"\nsummary ({size:.0f} MB, {bench['changes']} row changes)")
        anchor = results.get("mariadb-binlog | mariadb", (None,))[0]
        sql = results.get("replica SQL thread", (None,))[0]
        for label, (secs, same) in results.items():
            ratio = f"  speed vs pipe {anchor / secs:.2f}x" if anchor else ""
            ratio += f", vs SQL thread {sql / secs:.2f}x" if sql else ""
            print(f"  {label:28s} {secs:7.1f} s  {size / secs:6.1f} MB/s  checksums "
                  f"{'identical' if same else 'DIFFER'}{ratio}")
    finally:
        for server in servers:
            server.stop(remove=not (args.keep or args.reuse))
        if not (args.keep or args.reuse):
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
