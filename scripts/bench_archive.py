"""Archive benchmark: upload throughput and commit-to-archive lag, against anchors.

1. Throughput: the same real binlog files (from a throwaway MariaDB) uploaded to
   the same moto S3 endpoint on loopback by boto3's own ``upload_file`` (the
   anchor) and by ``Archiver.run_once`` (upload + read-back sha256 verification +
   index). Prints MB/s of both and the ratio ours/anchor.
2. Lag: ``mysqlbackup stream --archive s3://...`` beside a writer committing
   single-row transactions at a steady rate; a poller watches the archive's
   indexes and records when each committed GTID is in the archive. Prints p50/p99
   of commit -> archived, for each ``--archive-interval`` asked for.

3. Codecs (issue 14), on real binlogs: the corpus in ../shared/binlogs (skipped, saying
   so, when it is missing) and a row-based OLTP binlog written by a throwaway MariaDB
   (sysbench-like rows from 4 writers; or bench_replay.py's files with --replay-dir
   DIR, a work directory kept by its --keep). For zstd levels 1, 3, 9, zstd:1+age and
   zstd:3+age:
   the ratio raw/stored and MB/s per core (raw MB per CPU second of this one thread).
4. The daemon's upload path with each codec (issue 26: one pass that reads, hashes,
   indexes, compresses, encrypts and uploads, then the read-back): ``Archiver.run_once``
   over the OLTP files into a file:// archive (sealed -> encoded, uploaded, read back,
   indexed), and the same per-file path (``put_object`` + ``index_if_whole``) over the
   corpus's binlogs (the broken ones left out); raw MB per second of wall time and per
   CPU second, and the ratio raw/stored, at zstd levels 1 and 3 (the default marked).
5. The ACK path: a semi-sync primary with ``mysqlbackup stream --archive file://`` as
   its only semi-sync replica, with --compress none, zstd:3 and zstd:3 --encrypt-to:
   commits/s of the same OLTP load (4 writers, 10-row transactions), and the spread of
   repeated runs of one codec as the noise. A run whose Rpl_semi_sync_master_no_tx
   grew is reported (it fell back to async).

Goals (issue 14): ratio >= 3x on row-based binlogs at level 3, upload path >= 200 MB/s
per core, commits/s unchanged within noise; (issue 26) the upload path >= 200 MB of raw
binlog per CPU second at the default codec. The script prints the figures and whether
each goal holds; it asserts nothing about timing.

Run: .venv/bin/python scripts/bench_archive.py [--part codecs --part upload --part ack]
     [--oltp-mb 64] [--ack-seconds 15] [--part s3 --part lag --mb 200 --rate 50 --seconds 20]
"""

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import boto3
from moto.server import ThreadedMotoServer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mysqlbackup.stream.archiver import Archiver  # noqa: E402
from mysqlbackup.archive.upload import (FileRange, index_if_whole, index_range,  # noqa: E402
                                        put_object)
from mysqlbackup.archive.codec import (DEFAULT_LEVEL, Codec, encode, keygen,  # noqa: E402
                                       read_recipients)
from mysqlbackup.archive.index import IndexBuilder  # noqa: E402
from mysqlbackup.archive.names import binlog_key, format_key  # noqa: E402
from mysqlbackup.errors import CorruptBinlog  # noqa: E402
from mysqlbackup.sandbox import REPL_PASSWORD, MariaDBSandbox  # noqa: E402
from mysqlbackup.localdir.state import State, save_state  # noqa: E402
from mysqlbackup.archive.store import ArchiveStore  # noqa: E402

os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                  AWS_DEFAULT_REGION="us-east-1")


def make_binlogs(workdir, mb):
    """Real binlog files of about ``mb`` MB in total (64 MB each), copied into a dir."""
    server = MariaDBSandbox(os.path.join(workdir, "gen"), semi_sync=False,
                            extra_args=["--max-binlog-size=64M"]).start()
    try:
        server.execute("CREATE DATABASE b", "CREATE TABLE b.t (id INT PRIMARY KEY "
                       "AUTO_INCREMENT, v LONGTEXT)")
        conn = server.root()
        with conn.cursor() as cur:
            row = "x" * 8000
            while sum(os.path.getsize(server.binlog_path(n)) for n in server.binlog_files()) \
                    < mb * 1e6:
                cur.execute("INSERT INTO b.t (v) VALUES " + ",".join(["(%s)"] * 100),
                            [row] * 100)
        conn.close()
        server.execute("FLUSH BINARY LOGS")
        local = os.path.join(workdir, "local")
        os.makedirs(local)
        for name in server.binlog_files():
            shutil.copyfile(server.binlog_path(name), os.path.join(local, name))
        last = server.binlog_files()[-1]
        save_state(local, State(file=last, pos=os.path.getsize(os.path.join(local, last)),
                                source_identity="bench"))
        return local
    finally:
        server.stop(remove=True)


def throughput(local, endpoint):
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="anchor")
    s3.create_bucket(Bucket="ours")
    names = sorted(n for n in os.listdir(local) if n.startswith("binlog."))
    sealed = names[:-1]
    total = sum(os.path.getsize(os.path.join(local, n)) for n in sealed)
    start = time.monotonic()
    for name in sealed:
        s3.upload_file(os.path.join(local, name), "anchor", f"bench/binlog/{name}")
    anchor = time.monotonic() - start
    store = ArchiveStore("s3://ours/prefix", {"endpoint_url": endpoint})
    start = time.monotonic()
    Archiver(local, store).run_once()
    ours = time.monotonic() - start
    mb = total / 1e6
    print(f"throughput  {len(sealed)} files, {mb:.0f} MB")
    print(f"  boto3 upload_file (anchor): {mb / anchor:8.1f} MB/s ({anchor:.2f} s)")
    print(f"  mysqlbackup archiver:       {mb / ours:8.1f} MB/s ({ours:.2f} s, incl. read-back "
          f"sha256 verification and index)")
    print(f"  ratio ours/anchor: {anchor / ours:.2f}")
    return anchor / ours


class Poller(threading.Thread):
    """Records when each GTID seq_no first shows up in the archive's indexes."""

    def __init__(self, store, source):
        super().__init__(daemon=True)
        self.store, self.source, self.seen, self.stop = store, source, {}, threading.Event()
        self.highest = 0
        self.arrivals = {}  # seq_no -> wall time first seen archived

    def run(self):
        while not self.stop.is_set():
            for key in self.store.list(self.source):
                if key.endswith(".json"):
                    self._note(key)
            time.sleep(0.05)

    def _note(self, key):
        if key in self.seen:
            return
        last = self.store.read_json(key).get("last_gtid")
        self.seen[key] = time.time()
        if last:
            seq = int(last.split("-")[-1])
            now = time.time()
            for s in range(self.highest + 1, seq + 1):
                self.arrivals[s] = now
            self.highest = max(self.highest, seq)


def lag(workdir, endpoint, interval, rate, seconds):
    server = MariaDBSandbox(os.path.join(workdir, f"lag-{interval}")).start()
    bucket = f"lag-{str(interval).replace('.', '-')}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
        Bucket=bucket)
    env = dict(os.environ, MYSQLBACKUP_PASSWORD=REPL_PASSWORD)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "mysqlbackup", "--log-level", "warning", "stream", "--source",
         server.url, "--server-id", "9", "--dir", os.path.join(workdir, f"d-{interval}"),
         "--archive", f"s3://{bucket}/p", f"--archive-option=endpoint_url={endpoint}",
         "--archive-interval", str(interval), "--source-name", "lag"], env=env)
    try:
        server.execute("CREATE DATABASE l", "CREATE TABLE l.t (id INT PRIMARY KEY "
                       "AUTO_INCREMENT, v INT)")
        time.sleep(2)
        poller = Poller(ArchiveStore(f"s3://{bucket}/p", {"endpoint_url": endpoint}), "lag")
        poller.start()
        commits = write_steadily(server, rate, seconds)
        time.sleep(interval + 3)
        poller.stop.set()
        poller.join(10)
    finally:
        daemon.terminate()
        daemon.wait(30)
        server.stop(remove=True)
    lags = sorted(poller.arrivals[s] - t for s, t in commits.items() if s in poller.arrivals)
    missing = len(commits) - len(lags)
    p50 = statistics.median(lags)
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(f"lag  --archive-interval {interval}: {len(commits)} commits at {rate}/s, "
          f"p50 {p50:.2f} s, p99 {p99:.2f} s, max {lags[-1]:.2f} s"
          + (f", {missing} never seen" if missing else ""))
    return p50, p99


def write_steadily(server, rate, seconds):
    """Single-row commits at ``rate``/s; returns {seq_no: commit wall time}."""
    conn = server.root()
    commits = {}
    with conn.cursor() as cur:
        start = time.monotonic()
        for i in range(int(rate * seconds)):
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
            cur.execute("INSERT INTO l.t (v) VALUES (%s)", (i,))
            done = time.time()
            cur.execute("SELECT @@last_gtid")
            commits[int(cur.fetchone()[0].split("-")[-1])] = done
    conn.close()
    return commits


# -- codecs, upload path, ACK path (issue 14) -----------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(os.path.dirname(REPO), "shared", "binlogs")
OLTP_TABLES = [f"o.sbtest{i}" for i in range(1, 5)]


def sb_text(rng, groups):
    """sysbench's c/pad values: groups of 11 random digits joined by '-'."""
    return "-".join("".join(rng.choices("0123456789", k=11)) for _ in range(groups))


def oltp_schema(server):
    server.execute("CREATE DATABASE o", *[
        f"CREATE TABLE {t} (id INT AUTO_INCREMENT PRIMARY KEY, k INT NOT NULL, "
        f"c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY (k))" for t in OLTP_TABLES])


def oltp_writer(server, table, stop, counts, slot, seed, rows=10):
    """sysbench-like read-write transactions (INSERT rows, UPDATE k, UPDATE c, DELETE)
    until ``stop``; counts[slot] commits."""
    rng, conn = random.Random(seed), server.root(autocommit=False)
    with conn.cursor() as cur:
        while not stop.is_set():
            values = [(rng.randint(1, 10**6), sb_text(rng, 10), sb_text(rng, 5))
                      for _ in range(rows)]
            cur.executemany(f"INSERT INTO {table} (k, c, pad) VALUES (%s, %s, %s)", values)
            top = cur.lastrowid or 1
            cur.execute(f"UPDATE {table} SET k = k + 1 WHERE id = %s", (rng.randint(1, top),))
            cur.execute(f"UPDATE {table} SET c = %s WHERE id = %s", (sb_text(rng, 10),
                                                                     rng.randint(1, top)))
            cur.execute(f"DELETE FROM {table} WHERE id = %s", (rng.randint(1, top),))
            conn.commit()
            counts[slot] += 1
    conn.close()


def run_writers(server, seconds=None, until=None, clients=4):
    """4 OLTP writers for ``seconds`` (or until ``until()``); returns commits."""
    stop, counts = threading.Event(), [0] * clients
    threads = [threading.Thread(target=oltp_writer, args=(server, OLTP_TABLES[c % 4], stop,
                                                          counts, c, c)) for c in range(clients)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + (seconds or 1e9)
    while time.monotonic() < deadline and not (until and until()):
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join()
    return sum(counts)


def oltp_binlogs(workdir, mb):
    """Row-based binlog files (about ``mb`` MB, 16 MB each) of the OLTP load, closed."""
    server = MariaDBSandbox(os.path.join(workdir, "oltp"), semi_sync=False,
                            extra_args=["--max-binlog-size=16M", "--binlog-format=ROW"])
    server.start()
    try:
        oltp_schema(server)
        run_writers(server, until=lambda: sum(os.path.getsize(server.binlog_path(n))
                                              for n in server.binlog_files()) >= mb * 1e6)
        server.execute("FLUSH BINARY LOGS")
        return copy_closed(server, os.path.join(workdir, "oltp-files"))
    finally:
        server.stop(remove=True)


def copy_closed(server, directory):
    os.makedirs(directory)
    names = server.binlog_files()
    for name in names:
        shutil.copyfile(server.binlog_path(name), os.path.join(directory, name))
    last = names[-1]
    save_state(directory, State(file=last, pos=os.path.getsize(os.path.join(directory, last)),
                                source_identity="bench"))
    return directory


def corpus_files():
    """The corpus's binlog files (magic checked), or None with the reason printed."""
    if not os.path.isdir(CORPUS):
        print(f"corpus: {CORPUS} is missing (a clone of the repository alone does not have "
              "it): skipped")
        return None
    found = []
    for root, _, names in os.walk(CORPUS):
        for name in sorted(names):
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                if f.read(4) == b"\xfebin":
                    found.append(path)
    return found


def replay_files(directory):
    """bench_replay.py's binlog files from a work directory it kept (bench.json)."""
    import json
    with open(os.path.join(directory, "bench.json")) as f:
        return json.load(f)["files"]


def bench_codecs(label, paths, codecs):
    """Ratio and MB/s per core of each codec over the files ``paths``; rows of results."""
    datas = []
    for path in paths:
        with open(path, "rb") as f:
            datas.append(f.read())
    raw = sum(map(len, datas))
    print(f"codecs  {label}: {len(paths)} files, {raw / 1e6:.1f} MB raw")
    rows = {}
    for name, codec in codecs.items():
        stored, cpu = 0, time.process_time()
        for data in datas:
            stored += encode_size(data, codec)
        cpu = time.process_time() - cpu
        rows[name] = (raw / max(stored, 1), raw / 1e6 / max(cpu, 1e-9))
        print(f"  {name:12s} ratio {rows[name][0]:6.2f}x   {rows[name][1]:8.1f} MB/s per core")
    return rows


def encode_size(data, codec):
    """Stored bytes of ``data`` encoded by ``codec`` (written nowhere, only counted)."""
    size, pos = [0], [0]

    def read(n):
        chunk = data[pos[0]:pos[0] + n]
        pos[0] += len(chunk)
        return chunk

    def write(chunk):
        size[0] += len(chunk)
    encode(read, write, codec)
    return size[0]


def make_codecs(workdir):
    """The codecs measured, and the recipient file of the age one."""
    ident, recip = os.path.join(workdir, "bench.key"), os.path.join(workdir, "bench.pub")
    keygen(ident, recip)
    age = read_recipients(recip)
    return {"zstd:1": Codec("zstd", 1), "zstd:3": Codec("zstd", 3), "zstd:9": Codec("zstd", 9),
            "zstd:1+age": Codec("zstd", 1, age), "zstd:3+age": Codec("zstd", 3, age)}, recip


def bench_upload(local, codecs, workdir):
    """The archiver's sealed -> indexed path into a file:// archive, per codec: rows of
    (MB/s wall, MB/s per CPU second, ratio raw/stored)."""
    names = sorted(n for n in os.listdir(local) if n.startswith("binlog.") and n[7:].isdigit())
    raw = sum(os.path.getsize(os.path.join(local, n)) for n in names[:-1])
    print(f"upload  OLTP: {len(names) - 1} sealed files, {raw / 1e6:.1f} MB raw, file:// "
          "archive (read, index, encode, upload, read back, sha256, index)")
    rows = {}
    for name, codec in {"none": Codec(), **codecs}.items():
        root = os.path.join(workdir, f"archive-{name.replace(':', '-').replace('+', '-')}")
        store = ArchiveStore(f"file://{root}")
        wall, cpu = time.monotonic(), time.process_time()
        Archiver(local, store, source_name="bench", codec=codec).run_once()
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        indexed = [k for k in store.list("bench/binlog") if k.endswith(".json")]
        assert len(indexed) == len(names) - 1, f"{name}: {len(indexed)} files indexed"
        stored = sum(store.read_json(k)["stored_size"] for k in indexed)
        rows[name] = (raw / 1e6 / wall, raw / 1e6 / max(cpu, 1e-9), raw / stored)
        print_upload_row(name, rows[name])
        shutil.rmtree(root, ignore_errors=True)
    return rows


def bench_upload_files(label, paths, codecs, workdir):
    """The same path per file (``put_object`` through an IndexBuilder, then
    ``index_if_whole``) over files that are no chain (the corpus); files the index
    refuses (broken on purpose) are left out. Rows as ``bench_upload``'s."""
    good = []
    for path in paths:
        try:
            upload_one(None, path, Codec())
            good.append(path)
        except CorruptBinlog:
            pass
    raw = sum(os.path.getsize(p) for p in good)
    print(f"upload  {label}: {len(good)} files ({len(paths) - len(good)} broken ones left out), "
          f"{raw / 1e6:.2f} MB raw, one object each")
    rows = {}
    for name, codec in {"none": Codec(), **codecs}.items():
        root = os.path.join(workdir, f"files-{name.replace(':', '-').replace('+', '-')}")
        store = ArchiveStore(f"file://{root}")
        wall, cpu = time.monotonic(), time.process_time()
        stored = sum(upload_one(store, path, codec, i) for i, path in enumerate(good))
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        rows[name] = (raw / 1e6 / wall, raw / 1e6 / max(cpu, 1e-9), raw / stored)
        print_upload_row(name, rows[name])
        shutil.rmtree(root, ignore_errors=True)
    return rows


def upload_one(store, path, codec, number=0):
    """One file through the daemon's per-object path; its stored size. Without a
    ``store`` only indexed (CorruptBinlog for a broken file)."""
    name, size = os.path.basename(path), os.path.getsize(path)
    builder = IndexBuilder(name, source="bench", end=size)
    if store is None:
        return index_range(path, builder, 0, size) and 0
    key = binlog_key("bench", f"{number:03d}-{name}")
    with FileRange(path, 0, size) as raw:
        index = put_object(store, format_key(key), raw.read, codec, builder)
    return index_if_whole(store, key, index, name)


def print_upload_row(name, row):
    default = "  (the default)" if name == f"zstd:{DEFAULT_LEVEL}" else ""
    print(f"  {name:12s} {row[0]:8.1f} MB/s wall   {row[1]:8.1f} MB/s per CPU second   "
          f"ratio {row[2]:5.2f}x{default}")


def ack_run(workdir, tag, codec_args, seconds):
    """commits/s of the OLTP load on a fresh semi-sync primary whose only semi-sync
    replica is the daemon (``codec_args``), archiving to file://; (tps, no_tx)."""
    import bench_stream as bs
    primary = MariaDBSandbox(os.path.join(workdir, f"ack-{tag}"), semi_sync=False,
                             extra_args=[bs.SEMI_SYNC_TIMEOUT, "--binlog-format=ROW",
                                         "--max-binlog-size=16M"])
    primary.start()
    directory, log_path = os.path.join(workdir, f"ack-{tag}-dir"), os.path.join(
        workdir, f"ack-{tag}.log")
    cmd = [sys.executable, "-m", "mysqlbackup", "--log-level", "warning", "stream", "--source",
           primary.url, "--server-id", "101", "--dir", directory, "--archive",
           f"file://{workdir}/ack-{tag}-archive", "--source-name", "bench", *codec_args]
    proc = None
    try:
        oltp_schema(primary)
        primary.execute("SET GLOBAL rpl_semi_sync_master_enabled = 1")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, env=bs.DAEMON_ENV, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        bs.wait_semi_sync_clients(primary, 1)
        no_before = int(primary.status("Rpl_semi_sync_master_no_tx"))
        commits = run_writers(primary, seconds=seconds)
        no_tx = int(primary.status("Rpl_semi_sync_master_no_tx")) - no_before
        return commits / seconds, no_tx
    finally:
        if proc is not None:
            bs.stop_daemon(proc)
        primary.stop(remove=True)


def bench_ack(workdir, recip, seconds, repeats):
    """commits/s per codec, ``repeats`` runs each (interleaved), with the spread."""
    variants = {"none": ["--compress", "none"], "zstd:3": ["--compress", "zstd:3"],
                "zstd:3+age": ["--compress", "zstd:3", "--encrypt-to", recip]}
    runs = {name: [] for name in variants}
    for i in range(repeats):
        for name, args in variants.items():
            tps, no_tx = ack_run(workdir, f"{name.replace(':', '').replace('+', '-')}-{i}",
                                 args, seconds)
            runs[name].append(tps)
            print(f"ack  --compress {name:10s} run {i + 1}: {tps:7.1f} commits/s"
                  + (f"  ({no_tx} commits fell back to async!)" if no_tx else ""))
    return runs


def report_goals(oltp, upload, ack):
    """The issues' goals against what this run measured."""
    default = f"zstd:{DEFAULT_LEVEL}"
    print("\ngoals (issues 14 and 26)")
    if oltp:
        ratio = oltp[default][0]
        print(f"  ratio on row-based binlogs at the default {default}: {ratio:.2f}x (goal >= "
              f"3x): {'met' if ratio >= 3 else 'NOT met'}")
    if upload:
        for name in (default, f"{default}+age"):
            rate = upload[name][1]
            print(f"  upload path {name}: {rate:.0f} MB of raw binlog per CPU second (goal "
                  f">= 200): {'met' if rate >= 200 else 'NOT met'}")
    if ack:
        base = ack["none"]
        noise = (max(base) - min(base)) / statistics.mean(base) if len(base) > 1 else None
        for name, runs in ack.items():
            change = statistics.mean(runs) / statistics.mean(base) - 1
            print(f"  commits/s {name}: {statistics.mean(runs):.1f} ({change:+.1%} vs none"
                  + (f"; none's own spread {noise:.1%})" if noise is not None else ")"))


def bench_issue14(args, workdir):
    codecs, recip = make_codecs(workdir)
    oltp = upload = ack = None
    if "codecs" in args.part or "upload" in args.part:
        local = oltp_binlogs(workdir, args.oltp_mb)
    if "codecs" in args.part:
        files = corpus_files()
        if files:
            bench_codecs(f"corpus {CORPUS} (real MySQL/MariaDB files, small)", files, codecs)
        if args.replay_dir:
            bench_codecs(f"bench_replay.py's files ({args.replay_dir})",
                         replay_files(args.replay_dir), codecs)
        oltp = bench_codecs("row-based OLTP (sysbench-like rows, 4 writers)",
                            [os.path.join(local, n) for n in sorted(os.listdir(local))
                             if n.startswith("binlog.") and n[7:].isdigit()][:-1], codecs)
    if "upload" in args.part:
        upload = bench_upload(local, codecs, workdir)
        files = corpus_files()
        if files:
            bench_upload_files(f"corpus {CORPUS}", files, codecs, workdir)
    if "ack" in args.part:
        ack = bench_ack(workdir, recip, args.ack_seconds, args.ack_repeats)
    report_goals(oltp, upload, ack)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200, help="binlog MB for throughput")
    parser.add_argument("--rate", type=int, default=50, help="commits per second for lag")
    parser.add_argument("--seconds", type=int, default=20, help="length of the lag run")
    parser.add_argument("--intervals", default="2,0.5", help="archive intervals to measure")
    parser.add_argument("--part", action="append", choices=["codecs", "upload", "ack", "s3",
                                                            "lag"],
                        help="what to run (repeatable; default codecs, upload, ack)")
    parser.add_argument("--oltp-mb", type=int, default=64, help="OLTP binlog MB for codecs")
    parser.add_argument("--replay-dir", metavar="DIR", help="also measure the codecs on the "
                        "files of a bench_replay.py work directory kept by its --keep")
    parser.add_argument("--ack-seconds", type=int, default=15, help="length of one ACK run")
    parser.add_argument("--ack-repeats", type=int, default=2, help="ACK runs per codec")
    args = parser.parse_args()
    args.part = set(args.part or ["codecs", "upload", "ack"])
    workdir = tempfile.mkdtemp(prefix="bench-archive-")
    if args.part & {"codecs", "upload", "ack"}:
        try:
            bench_issue14(args, workdir)
        finally:
            if not args.part & {"s3", "lag"}:
                shutil.rmtree(workdir, ignore_errors=True)
        if not args.part & {"s3", "lag"}:
            return
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        ratio = throughput(make_binlogs(workdir, args.mb), endpoint) \
            if "s3" in args.part else None
        lags = [lag(workdir, endpoint, float(i), args.rate, args.seconds)
                for i in args.intervals.split(",")] if "lag" in args.part else []
        print("\nsummary")
        if ratio is not None:
            print(f"  upload throughput ratio ours/boto3: {ratio:.2f}")
        for interval, (p50, p99) in zip(args.intervals.split(","), lags):
            print(f"  commit->archive lag at --archive-interval {interval}: p50 {p50:.2f} s, "
                  f"p99 {p99:.2f} s")
    finally:
        moto.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
