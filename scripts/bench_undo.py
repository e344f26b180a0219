"""Undo benchmark: ``mysqlbackup undo`` of one big bad transaction against the engine's
own way, ``mariadb-binlog --flashback | mariadb``, from the same state, in one run.

A throwaway MariaDB holds ``--rows`` rows (id, an integer, a 32-character string, a
DATETIME); one transaction sets the integer of every row to 0 (``--rows`` row updates in
one transaction), and the binlogs are imported into a file:// archive. Then, ``--runs``
times, interleaved:

1. the anchor: ``mariadb-binlog --flashback`` of that transaction's positions piped into
   ``mariadb`` (no check: it writes whatever the rows hold);
2. ``mysqlbackup undo --gtid G --target ...``: the rows locked and compared with what
   the transaction left, then reversed with BINLOG, one commit.

Between the two, the bad UPDATE runs again unlogged (sql_log_bin=0), so each starts from
the state the transaction left. Prints each way's best wall time, the ratio (anchor /
undo: >= 1.00x is as fast as the pipe) and the undo's peak RSS (bounded: it spools the
transaction to a file and keeps the expected rows in SQLite, not in memory).

Run: .venv/bin/python scripts/bench_undo.py [--rows 1000000] [--runs 2] [--keep DIR]
     [--profile]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mysqlbackup.sandbox import MariaDBSandbox, find_binary  # noqa: E402

BAD = "UPDATE b.t SET a = 0"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--keep", help="work directory kept afterwards")
    parser.add_argument("--profile", action="store_true", help="then one more undo in this "
                        "process under cProfile: its 25 costliest functions")
    args = parser.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="bench-undo-")
    os.makedirs(work, exist_ok=True)
    server = MariaDBSandbox(os.path.join(work, "server"), semi_sync=False,
                            extra_args=["--max-allowed-packet=256M",
                                        "--innodb-buffer-pool-size=512M"]).start()
    try:
        _run(server, work, args)
    finally:
        server.stop(remove=not args.keep)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _run(server, work, args):
    server.execute("CREATE DATABASE b", "CREATE TABLE b.t (id INT PRIMARY KEY, a INT, "
                   "s CHAR(32), d DATETIME) ENGINE=InnoDB",
                   f"INSERT INTO b.t SELECT seq, seq, MD5(seq), '2026-01-01' + INTERVAL seq "
                   f"SECOND FROM b.seq_1_to_{args.rows}")
    file, start = server.execute("SHOW MASTER STATUS")[0][:2]
    server.execute(BAD)
    end = server.execute("SHOW MASTER STATUS")[0][1]
    gtid = server.execute("SELECT @@gtid_binlog_pos")[0][0]
    server.execute("FLUSH BINARY LOGS")
    folder = os.path.join(work, "binlogs")
    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(server.binlog_path(file), os.path.join(folder, file))
    url = f"file://{os.path.join(work, 'archive')}"
    _cli("archive", "import", folder, "--archive", url, "--source-name", "db1")
    size = os.path.getsize(os.path.join(folder, file))
    print(f"{args.rows} row updates in one transaction ({gtid}), binlog {size / 1e6:.0f} MB")
    target = f"mysql://root@127.0.0.1:{server.port}"
    best = {"flashback | mariadb": None, "undo --target": None}
    peak = 0
    for _ in range(args.runs):
        took = _timed(lambda: _flashback(server, file, start, end))
        best["flashback | mariadb"] = _min(best["flashback | mariadb"], took)
        _check(server, "a = id", args.rows)
        server.execute("SET SESSION sql_log_bin = 0", BAD)
        took, rss = _timed_child(["undo", "--archive", url, "--gtid", gtid, "--target",
                                  target])
        best["undo --target"] = _min(best["undo --target"], took)
        peak = max(peak, rss)
        _check(server, "a = id", args.rows)
        server.execute("SET SESSION sql_log_bin = 0", BAD)
    anchor = best["flashback | mariadb"]
    for way, seconds in best.items():
        print(f"{way:24s} {seconds:7.2f} s  {args.rows / seconds / 1e3:8.0f} k rows/s  "
              f"{anchor / seconds:.2f}x")
    print(f"undo peak RSS {peak / 1024:.0f} MB")
    if args.profile:
        _profile(url, gtid, target)


def _profile(url, gtid, target):
    import cProfile
    import pstats
    from click.testing import CliRunner
    from mysqlbackup.cli import main as cli
    os.environ["MYSQLBACKUP_TARGET_PASSWORD"] = ""
    profile = cProfile.Profile()
    profile.enable()
    result = CliRunner().invoke(cli, ["undo", "--archive", url, "--gtid", gtid, "--target",
                                      target])
    profile.disable()
    print(result.output.strip())
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


def _flashback(server, file, start, end):
    dump = subprocess.Popen([find_binary("mariadb-binlog"), "--flashback",
                             f"--start-position={start}", f"--stop-position={end}",
                             server.binlog_path(file)], stdout=subprocess.PIPE)
    client = subprocess.run([find_binary("mariadb"), "--no-defaults", "-uroot",
                             "-h127.0.0.1", f"-P{server.port}"], stdin=dump.stdout,
                            capture_output=True)
    dump.wait()
    if client.returncode or dump.returncode:
        raise SystemExit(f"flashback pipe failed: {client.stderr.decode()[-500:]}")


def _check(server, condition, rows):
    have = server.execute(f"SELECT COUNT(*) FROM b.t WHERE {condition}")[0][0]
    if have != rows:
        raise SystemExit(f"{have} of {rows} rows are back, not all")


def _cli(*args):
    done = subprocess.run([sys.executable, "-m", "mysqlbackup", *args], capture_output=True,
                          text=True, env=dict(os.environ, MYSQLBACKUP_TARGET_PASSWORD=""))
    if done.returncode:
        raise SystemExit(f"mysqlbackup {args[0]} failed: {done.stderr}")
    return done


def _timed(run):
    started = time.monotonic()
    run()
    return time.monotonic() - started


_PEAK = ("import resource, runpy, sys\n"
         "sys.argv = ['mysqlbackup'] + sys.argv[1:]\n"
         "try:\n    runpy.run_module('mysqlbackup', run_name='__main__')\n"
         "finally:\n"
         "    print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
         "file=sys.stderr)\n")


def _timed_child(args):
    """(seconds, peak RSS in KiB) of ``mysqlbackup ARGS`` in a child of its own."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _PEAK, *args], capture_output=True,
                          text=True, env=dict(os.environ, MYSQLBACKUP_TARGET_PASSWORD=""))
    took = time.monotonic() - started
    if done.returncode:
        raise SystemExit(f"mysqlbackup {args[0]} failed: {done.stderr}")
    return took, int(done.stderr.rsplit("peak ", 1)[1].split()[0])


def _min(a, b):
    return b if a is None else min(a, b)


if __name__ == "__main__":
    main()
