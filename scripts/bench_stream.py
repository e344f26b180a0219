#!/usr/bin/env python3
"""Benchmark ``mysqlbackup stream`` against MariaDB's own tools on throwaway servers.

Part A, streaming, per workload (each on its own sandbox primary, >= --mb MB of ROW
binlog in 64 MB files, all closed by FLUSH BINARY LOGS):
  small   single-row transactions of one INT (57-byte row events: the per-event cost)
  mixed   4 MB INSERT..SELECT transactions plus ~10% single-row ones (~1 KB rows)
  large   one 200 KB row per transaction (the server writes ~40 KB row events: the per-byte cost)
Each run copies every file into an empty directory with ``mariadb-binlog
--read-from-remote-server --raw --to-last-log`` (the anchor) and ``mysqlbackup stream
--no-semi-sync`` from the same server, interleaved (anchor, ours, anchor, ours...), and
compares the copies byte for byte. A daemon run ends when its checkpoint (what ``status
--json`` shows) has the durable position at the end of the last file; its start-up (to
its "streaming from" log line) is measured too. Printed: the median and the spread
(min-max) of each, and the ratio anchor/ours end to end and without our start-up, and
against the anchor followed by one fsync of each of its copies (durable, as ours). A
semi-sync connection streaming closed binlogs gets no ACK request (the primary asks
only for live commits), so it is measured only with --stream-semi-sync; part B is the
semi-sync measurement.

Part B, commit rate: on a fresh primary (semi-sync timeout 10 s), --threads client
processes run single-row autocommit INSERTs for --seconds, with exactly one semi-sync
replica connected: our daemon, or a real MariaDB replica (a second sandbox), as it comes
and with sync_relay_log=1 (its I/O thread writes each event to the relay log, then ACKs:
with that setting each ACK waits for an fsync, as ours). An async line (semi-sync off, no
replica) is a reference. A run whose Rpl_semi_sync_master_no_tx grew fell back to
async: it is marked INVALID. Figures are medians over --runs. The daemon's
ACK latency (received -> ACK sent) comes from its Prometheus histogram (bucket bounds), beside
this disk's fdatasync p50/p99: the floor of an ACK that waits for an fsync.

Run:    PYTHONPATH=/work/main python3 scripts/bench_stream.py          (2 GB a workload)
Quick:  PYTHONPATH=/work/main python3 scripts/bench_stream.py --mb 100 --runs 3 --seconds 5
"""

import argparse
import collections
import mmap
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pymysql  # noqa: E402

from mysqlbackup.binlog.events import MARIA_BINLOG_CHECKPOINT  # noqa: E402
from mysqlbackup.sandbox import (REPL_PASSWORD, REPL_USER, MariaDBSandbox,  # noqa: E402
                                 find_binary, free_port)
from mysqlbackup.binlog.scan import iter_events  # noqa: E402
from mysqlbackup.durable import fsync_dir  # noqa: E402
from bench_daemon import (DAEMONS, REPO, SERVERS, daemon_complaints,  # noqa: E402
                          durable_at, start_daemon, stop_daemon, wait_daemon, wait_for)

MB = 1 << 20
# Semi-sync is switched on only once the setup is done (a commit with no semi-sync replica
# would wait this long); 10 s so that it never falls back to async silently under load.
SEMI_SYNC_TIMEOUT = "--rpl-semi-sync-master-timeout=10000"


# -- part A: streaming ----------------------------------------------------------------

SETUP = [
    "SET GLOBAL innodb_flush_log_at_trx_commit = 2",
    "CREATE DATABASE gen",
    "CREATE TABLE gen.seed (id INT PRIMARY KEY, p VARCHAR(1024))",
    "INSERT INTO gen.seed SELECT seq, REPEAT(MD5(seq), 31) FROM gen.seq_1_to_4000",
    "CREATE TABLE gen.big (id INT AUTO_INCREMENT PRIMARY KEY, p VARCHAR(1024))",
    "CREATE TABLE gen.small (id INT AUTO_INCREMENT PRIMARY KEY, p VARCHAR(1024))",
    "CREATE TABLE gen.tiny (v INT)",
    "CREATE TABLE gen.large (id INT AUTO_INCREMENT PRIMARY KEY, p LONGBLOB)",
    "CREATE PROCEDURE gen.small_tx(n INT) BEGIN DECLARE i INT DEFAULT 0; "
    "WHILE i < n DO INSERT INTO gen.small (p) VALUES (REPEAT(MD5(i), 31)); "
    "SET i = i + 1; END WHILE; END",
    "CREATE PROCEDURE gen.tiny_tx(n INT) BEGIN DECLARE i INT DEFAULT 0; "
    "WHILE i < n DO INSERT INTO gen.tiny VALUES (i); SET i = i + 1; END WHILE; END",
    "CREATE PROCEDURE gen.large_tx(n INT) BEGIN DECLARE i INT DEFAULT 0; "
    "WHILE i < n DO INSERT INTO gen.large (p) VALUES (REPEAT(MD5(i), 6400)); "
    "SET i = i + 1; END WHILE; END",
]
# one round of each workload (rounds run until the binlog is big enough)
WORKLOADS = {
    "small": ["CALL gen.tiny_tx(20000)", "TRUNCATE gen.tiny"],
    "mixed": ["INSERT INTO gen.big (p) SELECT p FROM gen.seed",  # one 4 MB transaction
              "CALL gen.small_tx(300)"],                        # 300 single-row ones
    "large": ["CALL gen.large_tx(100)", "TRUNCATE gen.large"],
}


def generate_binlog(server, mb, workload):
    """Write >= ``mb`` MB of ``workload`` binlog, then FLUSH BINARY LOGS (all closed)."""
    server.execute(*SETUP)
    conn = server.root()
    try:
        with conn.cursor() as cur:
            for i in range(10 ** 6):
                cur.execute("SHOW BINARY LOGS")
                if sum(row[1] for row in cur.fetchall()) >= mb * MB:
                    break
                for sql in WORKLOADS[workload]:
                    cur.execute(sql)
                if workload == "mixed" and i % 8 == 7:
                    cur.execute("TRUNCATE gen.big")
            cur.execute("FLUSH BINARY LOGS")
    finally:
        conn.close()
    server.execute("SET GLOBAL innodb_flush_log_at_trx_commit = 1",
                   "SET GLOBAL rpl_semi_sync_master_enabled = 1")


def server_files(server, timeout=30):
    """[(name, path, size)] of the server's binlogs once the last one is complete: the
    server writes its final BINLOG_CHECKPOINT (naming that file itself) asynchronously."""
    def settled():
        name = server.binlog_files()[-1]
        with open(server.binlog_path(name), "rb") as f:
            events = [bytes(e) for _, e in iter_events(f.read(), 4, checksum=False)]
        return events[-1][4] == MARIA_BINLOG_CHECKPOINT and events[-1][-4 - len(name):-4] == \
            name.encode()
    wait_for(settled, timeout, "the server's last binlog checkpoint", 0.1)
    return [(n, server.binlog_path(n), os.path.getsize(server.binlog_path(n)))
            for n in server.binlog_files()]


def count_events(files):
    """Number of events in the files (header walk, log_pos checked, no CRC)."""
    total = 0
    for _, path, _ in files:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            total += sum(1 for _ in iter_events(buf, 4, checksum=False, check_log_pos=True))
    return total


def fsync_all(directory):
    """Seconds to fsync every file of ``directory``, then the directory (what the anchor
    leaves unsynced; the daemon fsyncs its directory when it creates a file)."""
    start = time.perf_counter()
    for name in sorted(os.listdir(directory)):
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(directory)
    return time.perf_counter() - start


def copy_mariadb_binlog(server, files, outdir, log_path, timeout):
    """(written, durable, start-up, synced) seconds of ``mariadb-binlog --raw
    --to-last-log`` copying every file; it never fsyncs, so written == durable, start-up
    counts as 0, and synced adds one fsync of each copy once it has finished."""
    os.makedirs(outdir)
    cmd = [find_binary("mariadb-binlog"), "--no-defaults", "--read-from-remote-server",
           "--raw", "--to-last-log", "--host=127.0.0.1", f"--port={server.port}",
           f"--user={REPL_USER}", f"--password={REPL_PASSWORD}",
           f"--result-file={outdir}/", files[0][0]]
    with open(log_path, "ab") as log:
        start = time.perf_counter()
        subprocess.run(cmd, stdout=log, stderr=log, check=True, timeout=timeout)
    elapsed = time.perf_counter() - start
    return elapsed, elapsed, 0.0, elapsed + fsync_all(outdir)


def copy_daemon(server, files, outdir, log_path, semi_sync, timeout, repo=REPO):
    """(written, durable, start-up, durable) seconds for a new ``mysqlbackup stream`` to
    copy all (durable twice: it is also the synced time)."""
    last_name, _, last_size = files[-1]

    def written():
        return all(os.path.exists(os.path.join(outdir, n))
                   and os.path.getsize(os.path.join(outdir, n)) == size for n, _, size in files)

    start, wall = time.perf_counter(), time.time()
    proc = start_daemon(server, outdir, log_path, semi_sync, repo)
    try:
        wait_daemon(proc, log_path, written, timeout, "the copy", 0.01)
        t_written = time.perf_counter() - start
        wait_daemon(proc, log_path, lambda: durable_at(outdir, last_name, last_size), timeout,
                    "the durable position")
        durable = time.perf_counter() - start
        return t_written, durable, streaming_since(log_path) - wall, durable
    finally:
        stop_daemon(proc)


def streaming_since(log_path):
    """Wall-clock time of the daemon's last "streaming from" log line (ms resolution)."""
    with open(log_path, errors="replace") as f:
        lines = [line for line in f if "streaming from" in line]
    return datetime.strptime(lines[-1][:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def same_bytes(files, outdir):
    """'' when the copy equals the server's files, else the first that differs. The
    active (last) file may differ at offset 21, the format description's in-use flag."""
    for name, path, _ in files:
        if not os.path.exists(os.path.join(outdir, name)):
            return f"{name} missing"
        with open(path, "rb") as f, open(os.path.join(outdir, name), "rb") as g:
            a, b = f.read(), g.read()
        if a != b and (name != files[-1][0] or a[:21] + a[22:] != b[:21] + b[22:]):
            return f"{name} differs"
    return ""


def bench_streaming(args, tmp, workload):
    """Part A for one workload: ({label: [(written, durable, start-up, synced)] per run},
    data)."""
    server = MariaDBSandbox(os.path.join(tmp, f"stream-{workload}"), semi_sync=False,
                            extra_args=["--max-binlog-size=64M", SEMI_SYNC_TIMEOUT,
                                        "--max-allowed-packet=64M"])
    SERVERS.append(server)
    server.start()
    try:
        return _stream_runs(args, tmp, workload, server)
    finally:
        server.stop()
        SERVERS.remove(server)


def _stream_runs(args, tmp, workload, server):
    start = time.perf_counter()
    generate_binlog(server, args.mb, workload)
    files = server_files(server)
    data = {"mb": sum(f[2] for f in files) / MB, "events": count_events(files)}
    print(f"{workload}: generated {data['mb']:.1f} MB, {data['events']} events "
          f"({data['mb'] * MB / data['events']:.0f} B/event) in {len(files)} files "
          f"in {time.perf_counter() - start:.1f} s")
    timeout = 120 + data["mb"]
    tools = {"mariadb-binlog": lambda d, log: copy_mariadb_binlog(server, files, d, log, timeout),
             "mysqlbackup (async)": lambda d, log: copy_daemon(server, files, d, log, False,
                                                               timeout)}
    for repo in args.compare or []:  # e.g. an older checkout: before/after on the same data
        tools[f"mysqlbackup @{repo}"] = lambda d, log, repo=repo: copy_daemon(
            server, files, d, log, False, timeout, os.path.abspath(repo))
    if args.stream_semi_sync:
        tools["mysqlbackup (semi-sync conn.)"] = lambda d, log: copy_daemon(
            server, files, d, log, True, timeout)
    times, data["verdicts"] = {label: [] for label in tools}, {label: "" for label in tools}
    for run in range(args.runs):
        order = list(tools) if run % 2 == 0 else list(tools)[::-1]  # alternate who goes first
        for label in order:
            i = list(tools).index(label)
            outdir = os.path.join(tmp, f"copy-{workload}-{run}-{i}")
            os.sync()  # no write-back of earlier copies during the timing
            times[label].append(tools[label](outdir, os.path.join(tmp, f"log-{workload}-{i}.txt")))
            diff = same_bytes(files, outdir)
            data["verdicts"][label] = data["verdicts"][label] or diff
            written, durable, startup, synced = times[label][-1]
            print(f"  run {run + 1} {label:24s} written {written:6.2f} s  durable {durable:6.2f}"
                  f" s  start-up {startup:4.2f} s  {data['mb'] / durable:6.1f} MB/s  "
                  f"{'COPY DIFFERS: ' + diff if diff else 'copy identical'}"
                  f"{f'  (synced {synced:.2f} s)' if synced != durable else ''}")
            if not args.keep:
                shutil.rmtree(outdir)
    return times, data


# -- part B: commit rate --------------------------------------------------------------

def commit_worker(port, start_at, seconds, results):
    """One client: single-row autocommit INSERTs from ``start_at`` for ``seconds``."""
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", database="bench",
                           autocommit=True, connect_timeout=10, read_timeout=60)
    latencies = []
    with conn.cursor() as cur:
        time.sleep(max(0.0, start_at - time.time()))
        while time.time() < start_at + seconds:
            began = time.perf_counter()
            cur.execute("INSERT INTO c (v) VALUES (%s)", (len(latencies),))
            latencies.append(time.perf_counter() - began)
    conn.close()
    results.put(latencies)


def commit_load(primary, threads, seconds):
    """{tps, yes, no, p50, p99 (commit latency, seconds)} for ``threads`` client
    processes running for ``seconds``."""
    def counters():
        return [int(primary.status(f"Rpl_semi_sync_master_{k}_tx")) for k in ("yes", "no")]
    ctx = multiprocessing.get_context("fork")
    results, before, start_at = ctx.Queue(), counters(), time.time() + 1.0
    procs = [ctx.Process(target=commit_worker, args=(primary.port, start_at, seconds, results))
             for _ in range(threads)]
    for p in procs:
        p.start()
    try:
        latencies = sorted(t for _ in procs for t in results.get(timeout=seconds + 90))
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    after = counters()
    return {"tps": len(latencies) / seconds, "yes": after[0] - before[0],
            "no": after[1] - before[1], "p50": latencies[len(latencies) // 2],
            "p99": latencies[len(latencies) * 99 // 100]}


def wait_semi_sync_clients(primary, clients, timeout=60):
    """Wait until exactly ``clients`` semi-sync replicas are connected (and status ON)."""
    def ready():
        return (primary.status("Rpl_semi_sync_master_clients") == str(clients)
                and (clients == 0 or primary.status("Rpl_semi_sync_master_status") == "ON"))
    wait_for(ready, timeout, f"Rpl_semi_sync_master_clients={clients}", 0.1)


def load_with_daemon(primary, args, tmp, repo=REPO):
    """Load with our daemon (the code in ``repo``) as the only semi-sync replica (caught
    up before the load)."""
    tag = str(abs(hash(repo)))
    directory = os.path.join(tmp, f"commit-daemon-{tag}")
    log_path = os.path.join(tmp, f"log-commit-{tag}.txt")
    port = free_port()
    proc = start_daemon(primary, directory, log_path, semi_sync=True, repo=repo,
                        extra=["--metrics-address", f"127.0.0.1:{port}"])
    try:
        wait_semi_sync_clients(primary, 1)
        file, pos = primary.execute("SHOW MASTER STATUS")[0][:2]
        wait_daemon(proc, log_path, lambda: durable_at(directory, file, pos), 60,
                    "the daemon to catch up", 0.1)
        before = ack_histogram(port)
        result = commit_load(primary, args.threads, args.seconds)
        after = ack_histogram(port)
        result["ack"] = {le: after[le] - before.get(le, 0) for le in after}
        return result
    finally:
        stop_daemon(proc)
        wait_semi_sync_clients(primary, 0)


def ack_histogram(port):
    """{bucket upper bound (s): ACKs at or under it} of the daemon's ACK latency (from
    the received bytes to the ACK sent: read, write, fdatasync, send)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    buckets = {}
    for line in text.splitlines():
        if line.startswith("mysqlbackup_ack_latency_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float(le)] = float(line.rsplit(" ", 1)[1])
    return buckets


def ack_quantile(buckets, q):
    """The smallest bucket bound with at least ``q`` of the ACKs at or under it."""
    total = buckets.get(float("inf"), 0)
    return next((le for le in sorted(buckets) if total and buckets[le] >= q * total), None)


def load_with_replica(primary, replica, args, sync_relay_log=None):
    """Load with the real replica as the only semi-sync replica (caught up before);
    ``sync_relay_log=1``: it fsyncs its relay log after each event, and its I/O thread
    queues an event before it sends that event's ACK, so its ACKs wait for an fsync as ours
    do (one per event where ours has one per batch)."""
    default = replica.execute("SELECT @@global.sync_relay_log")[0][0]
    if sync_relay_log is not None:
        replica.execute(f"SET GLOBAL sync_relay_log = {int(sync_relay_log)}")
    replica.execute("START SLAVE")
    try:
        wait_semi_sync_clients(primary, 1)
        target = primary.execute("SELECT @@gtid_binlog_pos")
        wait_for(lambda: replica.execute("SELECT @@gtid_slave_pos") == target, 120,
                 "the replica to catch up", 0.1)
        return commit_load(primary, args.threads, args.seconds)
    finally:
        replica.execute("STOP SLAVE")
        replica.execute(f"SET GLOBAL sync_relay_log = {int(default)}")
        wait_semi_sync_clients(primary, 0)


def load_async(primary, args):
    primary.execute("SET GLOBAL rpl_semi_sync_master_enabled = 0")
    try:
        return commit_load(primary, args.threads, args.seconds)
    finally:
        primary.execute("SET GLOBAL rpl_semi_sync_master_enabled = 1")


def start_commit_servers(tmp):
    primary = MariaDBSandbox(os.path.join(tmp, "commit-primary"), semi_sync=False,
                             extra_args=[SEMI_SYNC_TIMEOUT])
    replica = MariaDBSandbox(os.path.join(tmp, "commit-replica"), server_id=2, log_bin=False,
                             semi_sync=False, extra_args=["--rpl-semi-sync-slave-enabled=1"])
    SERVERS.extend([primary, replica])
    primary.start()
    replica.start()
    primary.execute("CREATE DATABASE bench", "CREATE TABLE bench.c (id BIGINT AUTO_INCREMENT "
                    "PRIMARY KEY, v INT, ts TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6))",
                    "SET GLOBAL rpl_semi_sync_master_enabled = 1")
    replica.execute(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
                    f"MASTER_USER='{REPL_USER}', MASTER_PASSWORD='{REPL_PASSWORD}', "
                    f"MASTER_USE_GTID=slave_pos")
    return primary, replica


def fdatasync_times(directory, count=500, record=300):
    """(p50, p99) seconds of one small append + fdatasync in ``directory``: the floor of
    an ACK that waits for an fsync (ours; a real replica ACKs before syncing)."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    times = []
    try:
        for _ in range(count):
            t = time.perf_counter()
            os.write(fd, b"x" * record)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99)]


SYNCED_REPLICA = "real replica, sync_relay_log=1"


def bench_commits(args, tmp):
    """Part B; returns {label: {tps (median), yes, no (sums)}, "fsync": seconds}."""
    primary, replica = start_commit_servers(tmp)
    loads = {"async (no replica)": lambda: load_async(primary, args),
             "mysqlbackup": lambda: load_with_daemon(primary, args, tmp),
             "real replica": lambda: load_with_replica(primary, replica, args),
             SYNCED_REPLICA: lambda: load_with_replica(primary, replica, args, 1)}
    for repo in args.compare or []:
        loads[f"mysqlbackup @{repo}"] = lambda repo=repo: load_with_daemon(
            primary, args, tmp, os.path.abspath(repo))
    runs = {label: [] for label in loads}
    for run in range(args.runs):
        order = list(loads)
        if run % 2:
            order[1:] = order[:0:-1]  # alternate the replicas' order to spread drift
        for label in order:
            os.sync()  # no write-back of part A's files (or an earlier load) under this one
            r = loads[label]()
            runs[label].append(r)
            flag = "" if label.startswith("async") or r["no"] == 0 else "  INVALID: fell back"
            print(f"  run {run + 1} {label:30s} {r['tps']:8.0f} tx/s  commit p50 "
                  f"{r['p50'] * 1e6:5.0f} us p99 {r['p99'] * 1e6:6.0f} us  semi-sync yes_tx "
                  f"+{r['yes']} no_tx +{r['no']}{flag}")
    acks = {label: collections.Counter() for label in runs}  # ACK histograms, all runs
    for label, rs in runs.items():
        for r in rs:
            acks[label].update(r.get("ack", {}))
    result = {label: {"tps": statistics.median(r["tps"] for r in rs),
                      "p50": statistics.median(r["p50"] for r in rs),
                      "p99": statistics.median(r["p99"] for r in rs),
                      "yes": sum(r["yes"] for r in rs), "no": sum(r["no"] for r in rs),
                      "ack": acks[label]}
              for label, rs in runs.items()}
    result["fsync"], result["fsync_p99"] = fdatasync_times(tmp)
    return result


# -- output and main ------------------------------------------------------------------

def spread(values):
    """'median (min-max)' of seconds."""
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def print_stream_summary(workload, times, data):
    """Medians and spreads of one workload, and the ratios anchor/ours (above 1: faster)."""
    print(f"streaming {workload}: {data['mb']:.0f} MB, {data['events']} events, "
          f"{len(times['mariadb-binlog'])} interleaved run(s)")
    for label, runs in times.items():
        ok = "MISMATCH " + data["verdicts"][label] if data["verdicts"][label] else "identical"
        durable = statistics.median(r[1] for r in runs)
        print(f"  {label:30s} durable {spread([r[1] for r in runs])}  start-up "
              f"{spread([r[2] for r in runs])}  {data['mb'] / durable:.1f} MB/s "
              f"{data['events'] / durable:.0f} ev/s [{ok}]")
    anchor = statistics.median(r[1] for r in times["mariadb-binlog"])
    synced = statistics.median(r[3] for r in times["mariadb-binlog"])
    anchor_synced = spread([r[3] for r in times["mariadb-binlog"]])
    print(f"  {'mariadb-binlog + fsync':30s} synced  {anchor_synced}  (one fsync of each "
          f"copy once it has finished)")
    for label, runs in times.items():
        if label == "mariadb-binlog":
            continue
        durable = statistics.median(r[1] for r in runs)
        net = statistics.median(r[1] - r[2] for r in runs)
        print(f"  ratio anchor/ours, {label}: {anchor / durable:.2f} end to end (durable in "
              f"the checkpoint), {anchor / net:.2f} without our start-up; "
              f"{synced / durable:.2f} against the anchor's copies made durable too")


def print_summary(stream, commits, args):
    print("\n=== summary (medians) ===")
    for workload, (times, data) in (stream or {}).items():
        print_stream_summary(workload, times, data)
    if commits:
        real, ours = commits["real replica"], commits["mysqlbackup"]
        bad = "" if real["no"] == 0 == ours["no"] else "  [INVALID: semi-sync fell back]"
        print(f"commit rate  real replica: {real['tps']:.0f} tx/s | mysqlbackup: {ours['tps']:.0f}"
              f" tx/s | ratio: {ours['tps'] / real['tps']:.2f}{bad}   (async, no replica: "
              f"{commits['async (no replica)']['tps']:.0f} tx/s)")
        print(f"  commit latency p50/p99: real replica {real['p50'] * 1e6:.0f}/"
              f"{real['p99'] * 1e6:.0f} us | mysqlbackup {ours['p50'] * 1e6:.0f}/"
              f"{ours['p99'] * 1e6:.0f} us (the ACK wait is part of each commit)")
        synced = commits[SYNCED_REPLICA]
        print(f"  a real replica that fsyncs before its ACK (sync_relay_log=1): "
              f"{synced['tps']:.0f} tx/s, commit p50/p99 {synced['p50'] * 1e6:.0f}/"
              f"{synced['p99'] * 1e6:.0f} us; mysqlbackup against it: "
              f"{ours['tps'] / synced['tps']:.2f}")
        for label in (k for k in commits if k.startswith("mysqlbackup @")):
            other = commits[label]
            print(f"  {label}: {other['tps']:.0f} tx/s, ratio {other['tps'] / real['tps']:.2f},"
                  f" commit p50/p99 {other['p50'] * 1e6:.0f}/{other['p99'] * 1e6:.0f} us")
        if ours["ack"]:
            total, under = ours["ack"][float("inf")], ours["ack"].get(0.001, 0)
            print(f"  mysqlbackup ACK latency (bytes received -> ACK sent, its histogram): "
                  f"p50 <= {ack_quantile(ours['ack'], 0.5) * 1e3:g} ms, p99 <= "
                  f"{ack_quantile(ours['ack'], 0.99) * 1e3:g} ms; {under / total:.1%} of "
                  f"{total:.0f} ACKs under 1 ms")
        # Little's law: each client's commit takes threads / tps with the real replica;
        # ours adds at least one fdatasync (begun after the bytes were written) per ACK
        latency = args.threads / real["tps"]
        print(f"  fdatasync here p50 {commits['fsync'] * 1e6:.0f} us p99 "
              f"{commits['fsync_p99'] * 1e6:.0f} us (an ACK after an fdatasync has at least "
              f"this p99); real replica commit latency {latency * 1e6:.0f} us; ceiling for "
              f"any replica that fsyncs before its ACK: "
              f"{latency / (latency + commits['fsync']):.2f}")
    complaints = daemon_complaints()
    print(f"daemon warnings/errors: {len(complaints) or 'none'}")
    for line in complaints[:20]:
        print(f"  {line}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=2048,
                        help="MB of binlog to stream, per workload (2048)")
    parser.add_argument("--workload", action="append", choices=list(WORKLOADS),
                        help="streaming workload (repeatable; default: all three)")
    parser.add_argument("--compare", action="append", metavar="DIR",
                        help="also stream with the mysqlbackup code in DIR (e.g. an older "
                             "checkout), interleaved on the same data (repeatable)")
    parser.add_argument("--stream-semi-sync", action="store_true",
                        help="part A also streams over a semi-sync connection (no ACKs asked)")
    parser.add_argument("--runs", type=int, default=3, help="repeats of each measurement (3)")
    parser.add_argument("--seconds", type=float, default=10, help="commit load duration (10)")
    parser.add_argument("--threads", type=int, default=4, help="commit load clients (4)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--skip", choices=["stream", "commit"], help="leave one part out")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-stream-")
    print(f"temporary directory: {tmp}")
    stream = commits = None
    try:
        if args.skip != "stream":
            stream = {}
            for workload in args.workload or list(WORKLOADS):
                print(f"== part A: streaming {args.mb} MB of {workload}, {args.runs} run(s) ==")
                stream[workload] = bench_streaming(args, tmp, workload)
        if args.skip != "commit":
            print(f"== part B: commit rate, {args.threads} clients x {args.seconds:g} s, "
                  f"{args.runs} run(s) ==")
            commits = bench_commits(args, tmp)
        print_summary(stream, commits, args)
    finally:
        for proc in DAEMONS:
            stop_daemon(proc)
        for server in SERVERS:
            server.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
