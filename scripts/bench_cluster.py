"""Replay on a Spark standalone cluster: the archive's bytes the driver reads, and the
time on 1 and on 2 workers (docs/cluster.md).

A MariaDB sandbox writes ``--mb`` MB of row changes (files of 100 MB), archived to a
file:// archive; a master and workers (1 core, 1 GB each) start on loopback with
pyspark's ``spark-class``. Each run is ``mysqlbackup replay --sql`` in a process of its
own with a filter that matches no table: every file is read, checked and decoded, and
nothing is applied, so the time is the tasks'. In that process the objects' bytes read
through ``mysqlbackup.archive.objects.read_object`` (the driver's: the tasks run in
the executors' Python) are counted. ``--mode before`` makes the tasks hand back no event
bytes, as before the driver stopped reading objects (it then reads every file again:
``run.attach_unit``); ``after`` is the replay as it is; ``parquet`` writes the change
table of everything (no filter: the executors decode the row changes and write the
parts to the shared file:// folder). Prints one line a run and a JSON summary.

Run: .venv/bin/python scripts/bench_cluster.py [--mb 1000] [--reuse DIR] [--runs N]
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def prepare(workdir, mb):
    """A file:// archive of ``mb`` MB of binlogs at ``workdir``/archive."""
    from bench_replay import SCHEMA, generate

    from mysqlbackup.archive.store import ArchiveStore
    from mysqlbackup.localdir.state import State, save_state
    from mysqlbackup.sandbox import MariaDBSandbox
    from mysqlbackup.stream.archiver import Archiver
    source = MariaDBSandbox(os.path.join(workdir, "source"), semi_sync=False,
                            extra_args=("--max-binlog-size=100M",
                                        "--binlog-row-metadata=FULL")).start()
    try:
        source.execute(*SCHEMA)
        generate(source, mb, 0, 4)
        names = source.binlog_files()
        local = os.path.join(workdir, "local")
        os.makedirs(local)
        for name in names:
            shutil.copyfile(source.binlog_path(name), os.path.join(local, name))
    finally:
        source.stop(remove=True)
    last = os.path.join(local, names[-1])
    save_state(local, State(file=names[-1], pos=os.path.getsize(last), source_identity="db1"))
    url = f"file://{os.path.join(workdir, 'archive')}"
    Archiver(local, ArchiveStore(url)).run_once()
    shutil.rmtree(local)
    return url


def start_cluster(workdir, workers):
    """A master and ``workers`` workers on loopback; returns (URL, processes)."""
    import pyspark
    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"spark://127.0.0.1:{port}"
    log = open(os.path.join(workdir, f"cluster-{workers}.log"), "ab")
    procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host",
                               "127.0.0.1", "--port", str(port), "--webui-port", "0"],
                              env=env, stdout=log, stderr=log, start_new_session=True)]
    for i in range(workers):
        work = os.path.join(workdir, f"worker-{workers}-{i}")
        os.makedirs(work, exist_ok=True)
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
             "--cores", "1", "--memory", "1g", "--work-dir", work, "--webui-port", "0", url],
            env=env, stdout=log, stderr=log, start_new_session=True))
    return url, procs


def stop_cluster(procs):
    """End the cluster's processes (each its own group: the executors go with them)."""
    import signal
    for proc in reversed(procs):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def one_run(url, master, mode, out):
    """In this process: the replay, counting the bytes the driver reads of objects."""
    import mysqlbackup.archive.objects as objects
    from mysqlbackup.cli import main
    read = {"bytes": 0, "objects": 0}
    real = objects.read_object

    def counted(*args, **kwargs):
        digests = real(*args, **kwargs)
        read["bytes"] += digests.raw_size
        read["objects"] += 1
        return digests
    objects.read_object = counted
    if mode == "before":
        import replay.job.engines as engines
        engines.keep_spec = lambda *args: None
    sink = (["--parquet", f"file://{out}.parquet"] if mode == "parquet"
            else ["--table", "nomatch.t", "--sql", out])
    started = time.monotonic()
    try:
        main(["replay", "--archive", url, "--master", master,
              "--conf", "spark.executor.memory=512m", *sink], standalone_mode=False)
    finally:
        seconds = time.monotonic() - started
        print(json.dumps({"seconds": round(seconds, 1), "driver_bytes": read["bytes"],
                          "driver_objects": read["objects"]}))


def measure(url, master, mode, workdir):
    """One replay in a child process; its JSON line."""
    shutil.rmtree(os.path.join(workdir, "out.sql.parquet"), ignore_errors=True)
    done = subprocess.run([sys.executable, __file__, "--one", url, master, mode,
                           os.path.join(workdir, "out.sql")], capture_output=True, text=True,
                          env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        sys.exit(f"replay failed: {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1000, help="binlog MB (1000)")
    parser.add_argument("--reuse", metavar="DIR", help="an earlier run's folder (kept)")
    parser.add_argument("--runs", type=int, default=1, help="runs of each set-up (1)")
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one_run(*args.one)
    workdir = args.reuse or tempfile.mkdtemp(prefix="bench-cluster-")
    url = f"file://{os.path.join(workdir, 'archive')}"
    if not os.path.isdir(os.path.join(workdir, "archive")):
        started = time.monotonic()
        url = prepare(workdir, args.mb)
        print(f"archive of {args.mb} MB written in {time.monotonic() - started:.0f}s: {workdir}")
    results = {}
    for workers, mode in ((1, "after"), (2, "after"), (2, "before"), (1, "parquet"),
                          (2, "parquet")):
        for run in range(args.runs):
            master, procs = start_cluster(workdir, workers)
            try:
                got = measure(url, master, mode, workdir)
            finally:
                stop_cluster(procs)
            results.setdefault(f"{workers} worker(s), {mode}", []).append(got)
            print(f"{workers} worker(s), {mode}: {got['seconds']}s, the driver read "
                  f"{got['driver_bytes'] / 1e6:.1f} MB in {got['driver_objects']} objects",
                  flush=True)
    print(json.dumps(results, indent=1))
    if not args.reuse:
        print(f"(kept for --reuse: {workdir})")


if __name__ == "__main__":
    main()
