"""Restore benchmark: one database brought back several ways, from the same snapshot.

1. manual: the procedure a DBA runs today: ``mariadb < dump.sql`` (the base's own
   dump, decompressed: the identical snapshot), then ``mariadb-binlog
   --start-position=POS FILES | mariadb`` from the dump's binlog file:pos to the end
   (MySQL: ``mysql`` and ``mysqlbinlog``; the dump sets the target's gtid_purged to
   the base's GTID set and mysqlbinlog's output keeps each transaction's GTID);
2. ``mysqlbackup restore --apply MODE`` from a file:// archive, once per ``--apply``
   mode (native, statements, auto; default: all three), each into its own fresh
   target: the binlogs brought in with ``mysqlbackup archive import``, the base made
   by ``mysqlbackup base``.

``--engine mariadb`` (default) or ``mysql``: the source and every target are MariaDB
servers (``mysqlbackup.sandbox``) or MySQL 9.7 servers (``mysqlbackup.sandbox.mysql``,
GTID mode on; ``scripts/mysql_tree.sh`` builds the tree, root runs it).

The source (durable: sync_binlog=1, innodb_flush_log_at_trx_commit=1) is loaded with
``--base-mb`` MB of data (unlogged), then ``--clients`` connections run an OLTP-ish
mix (new orders with their lines and stock updates, payments, customer edits, deletes
of old orders and audit rows, batch inserts; multi-row transactions whose concurrent
commits share binlog group commits); ``mysqlbackup base`` runs while they write, and
they go on until ``--binlog-mb`` MB of binlog follow the base's position. Each way
restores into its own fresh server with the same settings. Prints each way's times
per phase (load, binlogs, total), the ratio manual / that way for every restore mode,
and CHECKSUM TABLE of every table of every way compared with the source's and with
each other's. A way that fails (``--apply auto`` before the restore has it,
``--apply native`` on MySQL) is said in one line, its error's, and the others go on.
Exit 1 when a checksum differs, else 2 when a way failed, else 0. Timing is printed,
never asserted.

Run: .venv/bin/python scripts/bench_restore.py [--engine mariadb|mysql]
     default sizes: --base-mb 300 --binlog-mb 1000; quick: --base-mb 50 --binlog-mb 100;
     a smoke test: --base-mb 3 --binlog-mb 5. MySQL: --engine mysql (as root).
     --keep, then --reuse DIR to restore again (its engine is the kept one's);
     --apply statements --apply native, --only manual: some of the ways.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import zstandard

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mysqlbackup.archive.listing import ArchiveListing  # noqa: E402
from mysqlbackup.archive.names import BASE_MEMBERS, base_key, format_key  # noqa: E402
from mysqlbackup.archive.store import ArchiveStore  # noqa: E402

from bench_restore_engines import ENGINES  # noqa: E402
from bench_restore_load import SCHEMA, TABLES, Writers, binlog_after, load_base_data  # noqa: E402

SOURCE = "bench"
APPLY_MODES = ("native", "statements", "auto")
PHASES = ("load", "binlogs", "total")
WARMUP = 20      # transactions per client committed before the base is taken


def mysqlbackup(*args):
    return [sys.executable, "-m", "mysqlbackup", "--log-level", "warning", *args]


def last_line(*texts):
    """The last non-empty line of the first text that has one."""
    for text in texts:
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return "(no output)"


# -- the source ---------------------------------------------------------------------

def take_base(source, url, engine):
    """`mysqlbackup base` of the source (writers running); its manifest."""
    started = time.monotonic()
    result = subprocess.run(mysqlbackup("base", "--source", f"mysql://root@127.0.0.1:"
                                        f"{source.port}", "--archive", url, "--source-name",
                                        SOURCE),
                            env=engine.env(MYSQLBACKUP_PASSWORD=""), capture_output=True,
                            text=True)
    if result.returncode:
        raise RuntimeError(f"mysqlbackup base failed: {result.stderr.strip()[-2000:]}")
    listing = ArchiveListing(ArchiveStore(url))
    [base_id] = listing.base_ids(SOURCE)
    manifest = listing.base_manifest(SOURCE, base_id)
    print(f"base: {result.stdout.strip()} ({time.monotonic() - started:.0f} s while the "
          f"writers ran)")
    return manifest


def write_traffic(source, args, counts, url, engine):
    """The writers, the base taken while they run, until ``--binlog-mb`` MB follow it."""
    writers = Writers(source, args.clients, counts, engine).start()
    t = time.monotonic()
    try:
        writers.wait_for(WARMUP * args.clients)  # the base is taken under load
        manifest = take_base(source, url, engine)
        position = (manifest["binlog_file"], manifest["binlog_pos"])
        while binlog_after(source, position) < args.binlog_mb * 1e6 and not writers.errors:
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

def prepare(workdir, args, engine, servers):
    """Source, traffic, base, archive import, dump.sql; what later runs need goes to
    bench.json (the source itself is removed: its binlogs are linked into binlogs/)."""
    url = f"file://{workdir}/archive"
    source = engine.source()
    servers.append(source)
    source.start()
    source.execute(*SCHEMA)
    t = time.monotonic()
    counts = load_base_data(source, args.base_mb, engine)
    print(f"source ({engine.name}): base data {counts} in {time.monotonic() - t:.0f} s")
    manifest, mb = write_traffic(source, args, counts, url, engine)
    source.execute("FLUSH BINARY LOGS")
    expected = checksums(source, TABLES)
    binlogs = link_binlogs(source, os.path.join(workdir, "binlogs"))
    source.stop(remove=True)
    servers.remove(source)
    bench = {"engine": engine.name, "url": url, "manifest": manifest, "binlog_mb": mb,
             "expected": expected, "dump": os.path.join(workdir, "dump.sql"),
             "files": [os.path.join(workdir, "binlogs", name) for name in binlogs]}
    import_binlogs(workdir, url, engine)
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


def import_binlogs(workdir, url, engine):
    t = time.monotonic()
    subprocess.run(mysqlbackup("archive", "import", os.path.join(workdir, "binlogs"),
                               "--archive", url, "--source-name", SOURCE),
                   env=engine.env(), check=True, stdout=subprocess.DEVNULL)
    print(f"archive: binlogs imported in {time.monotonic() - t:.0f} s")


def write_dump(workdir, manifest, path):
    """The base's own dump, decompressed: the manual way's dump.sql (same snapshot)."""
    key = format_key(base_key(SOURCE, manifest["id"], BASE_MEMBERS["dump"]))
    with open(os.path.join(workdir, "archive", key), "rb") as src, open(path, "wb") as dst:
        zstandard.ZstdDecompressor().copy_stream(src, dst)
    print(f"dump.sql: {os.path.getsize(path) / 1e6:.0f} MB (the base's dump, decompressed)")


# -- the ways ------------------------------------------------------------------------

class WayFailed(Exception):
    """One way did not restore; its message is the one line the summary shows."""


@dataclass
class Result:
    label: str
    phases: dict = None     # seconds per phase (PHASES)
    checksums: dict = None  # {table: checksum}
    error: str = None       # the line of a failed way
    note: str = ""          # what auto chose


def new_target(engine, name, servers, binlog):
    """A fresh target, the same settings for every way; always stopped at the end."""
    target = engine.target(name, binlog)
    servers.append(target)
    return target.start()


def piped(argv, stdin, what):
    """Run ``argv`` reading ``stdin``; WayFailed with its last error line."""
    done = subprocess.run(argv, stdin=stdin, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise WayFailed(f"{what} exited {done.returncode}: {last_line(done.stderr)}")


def run_manual(engine, bench, target, args):
    """``mariadb < dump.sql``, then ``mariadb-binlog --start-position | mariadb`` (MySQL's
    tools for MySQL); phase seconds."""
    client = engine.client(target)
    m = bench["manifest"]
    files = [f for f in bench["files"] if os.path.basename(f) >= m["binlog_file"]]
    start = time.monotonic()
    with open(bench["dump"], "rb") as dump:
        piped(client + ["--init-command=SET SESSION sql_log_bin=0"], dump, "the dump's load")
    loaded = time.monotonic()
    with engine.binlog_tool(m["binlog_pos"], files) as argv:
        binlog = subprocess.Popen(argv, stdout=subprocess.PIPE, env=engine.env())
        try:
            piped(client, binlog.stdout, "the binlogs' client")
        finally:
            binlog.stdout.close()
            binlog.wait()
    if binlog.returncode:
        raise WayFailed(f"{os.path.basename(argv[0])} exited {binlog.returncode}")
    end = time.monotonic()
    return {"load": loaded - start, "binlogs": end - loaded, "total": end - start}


def run_restore(engine, bench, target, args, mode):
    """``mysqlbackup restore --apply MODE``; (phase seconds from its report, what it
    says it applied with)."""
    argv = mysqlbackup("restore", "--archive", bench["url"], "--target",
                       f"mysql://root@127.0.0.1:{target.port}", "--apply", mode,
                       "--workers", str(args.workers), "--merge", str(args.merge))
    start = time.monotonic()
    result = subprocess.run(argv, env=engine.env(MYSQLBACKUP_TARGET_PASSWORD=""),
                            capture_output=True, text=True)
    wall = time.monotonic() - start
    if result.returncode:
        raise WayFailed(f"restore --apply {mode} exited {result.returncode}: "
                        f"{last_line(result.stderr, result.stdout)}")
    said = [line for line in result.stderr.splitlines() if "apply: " in line]
    print("  " + "\n  ".join(said + result.stdout.strip().splitlines()))
    phases = dict(re.findall(r"(\w+) ([\d.]+)s", result.stdout.splitlines()[-1]))
    note = chosen_apply(result.stdout + result.stderr) if mode == "auto" else ""
    return {"load": float(phases["load"]), "binlogs": float(phases["replay"]),
            "total": wall}, note


def chosen_apply(output):
    """What ``--apply auto`` says it chose ('native', 'statements'; '' when it does not)."""
    found = re.findall(r"\bapply: (native|statements)\b", output)
    return found[-1] if found else ""


def measure(engine, way, label, run, servers, expected, binlog):
    """The Result of one way; its target is stopped and removed at once, so that its
    background flushing does not slow the next way down."""
    print(f"\n{label} ...", flush=True)
    target = None
    try:
        target = new_target(engine, way, servers, binlog)
        phases, note = run(target)
        got = checksums(target, list(expected))
    except Exception as e:  # a failed way: its line, and the others go on
        error = str(e) if isinstance(e, WayFailed) else f"{type(e).__name__}: {e}"
        print(f"  FAILED: {error}")
        return Result(label, error=error)
    finally:
        if target is not None:
            target.stop(remove=True)
            servers.remove(target)
    print(f"  load {phases['load']:.1f} s, binlogs {phases['binlogs']:.1f} s, total "
          f"{phases['total']:.1f} s" + (f" (auto chose {note})" if note else ""))
    return Result(label, phases, got, note=note)


def ways_of(engine, bench, args, modes):
    """{way: (label, run)} in the order they run: ``run(target)`` -> (phases, note)."""
    def manual(target):
        return run_manual(engine, bench, target, args), ""

    def restore(mode):
        return lambda target: run_restore(engine, bench, target, args, mode)
    ways = {"manual": (engine.manual_label, manual)}
    for mode in modes:
        ways[mode] = (f"restore --apply {mode}", restore(mode))
    return ways


# -- the summary ---------------------------------------------------------------------------

def report(bench, results):
    """The summary table; (checksums all equal, no way failed)."""
    m = bench["manifest"]
    print(f"\nsummary ({bench.get('engine', 'mariadb')}): base {m['raw_size'] / 1e6:.0f} MB "
          f"dump, {bench['binlog_mb']:.0f} MB of binlog after it")
    print(f"  {'':34s} " + " ".join(f"{k:>9s}" for k in PHASES))
    for way, r in results.items():
        label = r.label + (f" ({r.note})" if r.note else "")
        print(f"  {label:34s} " + (" ".join(f"{r.phases[k]:7.1f} s" for k in PHASES)
                                   if r.phases else f"FAILED: {r.error}"))
    manual = results.get("manual")
    for way, r in results.items():
        if way != "manual" and manual and manual.phases and r.phases:
            print(f"  {'ratio manual / ' + way:34s} " + " ".join(
                f"{manual.phases[k] / r.phases[k]:7.2f} x" if r.phases[k] else f"{'-':>9s}"
                for k in PHASES))
    return compare_checksums(bench["expected"], results), all(
        r.phases for r in results.values())


def compare_checksums(expected, results):
    """Each way's CHECKSUM TABLE against the source's and the others'; True when all
    are equal."""
    ok = True
    done = {way: r for way, r in results.items() if r.checksums is not None}
    for way, r in done.items():
        differ = [t for t in expected if r.checksums.get(t) != expected[t]]
        ok = ok and not differ
        print(f"  {way}: CHECKSUM TABLE of {len(expected)} tables "
              + (f"DIFFER from the source's: {', '.join(differ)}" if differ
                 else "identical to the source's"))
    if len(done) > 1:
        first, *others = done
        unlike = [w for w in others if done[w].checksums != done[first].checksums]
        ok = ok and not unlike
        print(f"  the {len(done)} restored servers ({', '.join(done)}): CHECKSUM TABLE "
              + (f"{', '.join(unlike)} DIFFER from {first}'s" if unlike else "identical"))
    return ok


# -- the command line -------------------------------------------------------------------

def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=sorted(ENGINES),
                        help="the source's and targets' server (default mariadb; with "
                        "--reuse: the kept one's)")
    parser.add_argument("--base-mb", type=int, default=300, help="MB of data in the base (300)")
    parser.add_argument("--binlog-mb", type=int, default=1000,
                        help="MB of binlog after the base (1000)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent writers (4)")
    parser.add_argument("--apply", choices=APPLY_MODES, action="append", dest="modes",
                        help="a restore --apply mode to run (repeatable; default: all three)")
    parser.add_argument("--workers", type=int, default=4, help="restore --workers (4)")
    parser.add_argument("--merge", type=int, default=100, help="restore --merge (100)")
    parser.add_argument("--target-binlog", action="store_true",
                        help="targets with a binlog (the statements apply then commits every "
                        "transaction, --workers side by side); default: without, as a "
                        "restore server")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (--reuse it to restore again)")
    parser.add_argument("--reuse", metavar="DIR", help="a kept work directory: restore its "
                        "archive and dump again, no writing")
    parser.add_argument("--only", choices=["manual", *APPLY_MODES], action="append",
                        help="run only this way (repeatable): manual or an --apply mode")
    args = parser.parse_args()
    modes = list(dict.fromkeys(args.modes or APPLY_MODES))
    missing = [w for w in args.only or () if w != "manual" and w not in modes]
    if missing:
        parser.error(f"--only {missing[0]}: not among the --apply modes {', '.join(modes)}")
    args.ways = [w for w in ["manual", *modes] if not args.only or w in args.only]
    return args


def load_bench(workdir, engine_name):
    """A kept run's bench.json; its engine must be the one asked for (if any)."""
    with open(os.path.join(workdir, "bench.json")) as f:
        bench = json.load(f)
    kept = bench.get("engine", "mariadb")
    if engine_name not in (None, kept):
        raise SystemExit(f"--reuse {workdir}: its run was --engine {kept}, not {engine_name}")
    return bench


def main():
    args = parse_args()
    workdir = os.path.abspath(args.reuse or tempfile.mkdtemp(prefix="bench-restore-"))
    servers = []
    try:
        bench = load_bench(workdir, args.engine) if args.reuse else None
        engine = ENGINES[bench["engine"] if bench else args.engine or "mariadb"](workdir)
        if bench:
            engine.clear(["manual", "ours", *APPLY_MODES])
        else:
            bench = prepare(workdir, args, engine, servers)
        ways = ways_of(engine, bench, args, [w for w in args.ways if w != "manual"])
        results = {way: measure(engine, way, *ways[way], servers, bench["expected"],
                                args.target_binlog) for way in args.ways}
        same, complete = report(bench, results)
        return 1 if not same else 0 if complete else 2
    finally:
        for server in servers:
            server.stop(remove=True)
        if args.keep or args.reuse:
            print(f"work directory kept: {workdir} (--reuse it)")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
