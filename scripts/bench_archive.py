"""Archive benchmark: upload throughput and commit-to-archive lag, against anchors.

1. Throughput: the same real binlog files (from a throwaway MariaDB) uploaded to
   the same moto S3 endpoint on loopback by boto3's own ``upload_file`` (the
   anchor) and by ``Archiver.run_once`` (upload + read-back sha256 verification +
   index). Prints MB/s of both and the ratio ours/anchor.
2. Lag: ``mysqlbackup stream --archive s3://...`` beside a writer committing
   single-row transactions at a steady rate; a poller watches the archive's
   indexes and records when each committed GTID is in the archive. Prints p50/p99
   of commit -> archived, for each ``--archive-interval`` asked for.

Run: .venv/bin/python scripts/bench_archive.py [--mb 200] [--rate 50] [--seconds 20]
"""

import argparse
import os
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
from mysqlbackup.archive.archiver import Archiver  # noqa: E402
from mysqlbackup.sandbox import REPL_PASSWORD, MariaDBSandbox  # noqa: E402
from mysqlbackup.stream.state import State, save_state  # noqa: E402
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


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200, help="binlog MB for throughput")
    parser.add_argument("--rate", type=int, default=50, help="commits per second for lag")
    parser.add_argument("--seconds", type=int, default=20, help="length of the lag run")
    parser.add_argument("--intervals", default="2,0.5", help="archive intervals to measure")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-archive-")
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        ratio = throughput(make_binlogs(workdir, args.mb), endpoint)
        lags = [lag(workdir, endpoint, float(i), args.rate, args.seconds)
                for i in args.intervals.split(",")]
        print("\nsummary")
        print(f"  upload throughput ratio ours/boto3: {ratio:.2f}")
        for interval, (p50, p99) in zip(args.intervals.split(","), lags):
            print(f"  commit->archive lag at --archive-interval {interval}: p50 {p50:.2f} s, "
                  f"p99 {p99:.2f} s")
    finally:
        moto.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
