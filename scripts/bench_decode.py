"""Decode benchmark: the replay job's reading of an archive against the engine's own
reader, over the same files, in one run.

The archive: a throwaway MariaDB writes ``--mb`` megabytes of OLTP-ish row changes in
``--files`` binlog files (four tables; transactions of 100-row INSERTs, 100-row UPDATEs
and 100-row DELETEs), imported with ``archive import``. Then, interleaved ``--runs``
times:

1. ``mariadb-binlog -v --base64-output=decode-rows FILES > /dev/null`` (the anchor, one
   core), and for reference ``mariadb-binlog -v FILES > FILE`` fsynced (the whole text,
   BINLOG statements too, into a durable file: the work ``replay --sql FILE`` does),
2. ``mysqlbackup replay --sql OUT`` with the default engine (``auto``: this process under
   256 MB to read, else Spark), then ``--engine spark`` (Spark local[*]: every core) and
   ``--engine local`` (this process: one core, no JVM),
3. ``mysqlbackup replay --parquet DIR``, and with ``--typed``, on each engine,
4. ``mysqlbackup archive find --table b.t0 --type ddl`` and ``inspect FILES`` (reading
   every event, no row decoding).

Prints each way's best wall time (start-up included), raw binlog MB/s and its ratio
against the anchor (>= 1.00x: as fast as mariadb-binlog on one core). ``--small N``
adds the many-small-files case: N files of a few transactions each against N/10 of
them, ``replay --sql``, ``archive ls`` and ``verify`` on both (the cost should follow
the bytes, not the file count).

``--decoders`` adds the row decoders alone, in this process, one core, over the same
files: the change table's rows (``changes.iter_changes``) and ``--sql``'s ``###`` lines
(``rowtext.RowText``), with the reference decoder (mysql-replication), the pure Python
row loop (``rowloop``) and the compiled one (``_rowloop``), against the anchor.

``--engine mysql``: the archive written by MySQL 9.7 (``.mysql/tree``) and the anchor
``mysqlbinlog -v --base64-output=decode-rows`` (the tree's, through chroot); the
decoders and the small files stay MariaDB's.

Run: .venv/bin/python scripts/bench_decode.py [--mb 200] [--files 5] [--runs 2]
     [--small 300] [--decoders] [--keep DIR] [--engine mariadb|mysql]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from mysqlbackup.sandbox import MariaDBSandbox  # noqa: E402

TABLES = [f"b.t{i}" for i in range(4)]
SCHEMA = ["CREATE DATABASE b"] + [
    f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, "
    f"pad CHAR(60) NOT NULL, amount DECIMAL(12,2), at DATETIME(6))" for t in TABLES]
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")


def write(server, mb, files):
    """Row changes until the binlogs hold ``mb`` MB, rotated into about ``files`` files."""
    server.execute(*SCHEMA)
    conn = server.root(autocommit=False)
    per_file, next_id, written = (mb << 20) // files, [0] * len(TABLES), 0
    start = sum(os.path.getsize(server.binlog_path(n)) for n in server.binlog_files())
    with conn.cursor() as cur:
        while written < (mb << 20):
            for i, table in enumerate(TABLES):
                first = next_id[i]
                rows = [(first + r, r, "c" * 120, "p" * 60, r * 1.25,
                         "2026-11-28 01:02:03.456789") for r in range(100)]
                cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s)", rows)
                conn.commit()
                cur.execute(f"UPDATE {table} SET k = k + 1, amount = amount * 2 WHERE id "
                            f"BETWEEN {first} AND {first + 99}")
                conn.commit()
                if first % 300 == 0:
                    cur.execute(f"DELETE FROM {table} WHERE id BETWEEN {first} AND "
                                f"{first + 99}")
                    conn.commit()
                next_id[i] += 100
            size = sum(os.path.getsize(server.binlog_path(n)) for n in server.binlog_files())
            written = size - start
            current = os.path.getsize(server.binlog_path(server.binlog_files()[-1]))
            if current >= per_file:
                cur.execute("FLUSH BINARY LOGS")
    conn.close()


def small_files(server, count):
    """``count`` files of a few transactions each."""
    server.execute(*SCHEMA)
    for i in range(count):
        server.execute(*[f"INSERT INTO b.t0 VALUES ({i * 10 + j}, {j}, 'c', 'p', 1.5, NULL)"
                         for j in range(3)], "FLUSH BINARY LOGS")


def archive(server, where, name):
    """Copy the server's sealed files into ``where``/files and import them into a file://
    archive at ``where``/archive; (files, archive URL)."""
    files = os.path.join(where, "files")
    os.makedirs(files, exist_ok=True)
    server.execute("FLUSH BINARY LOGS")
    names = server.binlog_files()[:-1]  # the sealed ones
    for n in names:
        shutil.copyfile(server.binlog_path(n), os.path.join(files, n))
    url = f"file://{where}/archive"
    subprocess.run([PYTHON, "-m", "mysqlbackup", "archive", "import", files, "--archive",
                    url, "--source-name", name, "--compress", "none"], check=True,
                   stdout=subprocess.DEVNULL)
    return [os.path.join(files, n) for n in names], url


def timed(argv, **kwargs):
    """Wall seconds of ``argv``, run from the system's temporary folder as a user runs
    it (never from the checkout, whose folder on sys.path hides what an installed
    package's Spark workers import)."""
    kwargs.setdefault("cwd", tempfile.gettempdir())
    started = time.monotonic()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])}... failed: {done.stderr.decode()[-2000:]}")
    return elapsed


ANCHOR = "anchor: the engine's reader -v (1 core)"


FILE_ANCHOR = "the reader -v > FILE, fsynced (1 core)"


def anchor_command(engine, files, out=None):
    """The engine's own reader of ``files``, its output thrown away (a shell line); with
    ``out``, its whole text (the BINLOG statements too, as ``replay --sql`` writes them)
    into the file ``out``, fsynced: what ``replay --sql FILE`` does, for reference."""
    if engine == "mysql":  # the tree's mysqlbinlog sees the files in its shared folder
        from mysqlbackup.sandbox.mysql import mysql_tree
        reader = f"chroot {mysql_tree()} /usr/bin/mysqlbinlog"
    else:
        reader = shutil.which("mariadb-binlog") or "mariadb-binlog"
    if out is not None:
        return f"{reader} -v {' '.join(files)} > {out} && sync {out} && rm {out}"
    return f"{reader} -v --base64-output=decode-rows {' '.join(files)} > /dev/null"


def replay_way(url, out, how, *engine):
    """One ``replay`` run of ``how`` (sql, parquet, typed) with ``engine``'s option."""
    argv = [PYTHON, "-m", "mysqlbackup", "replay", "--archive", url, "--source-name", "db1",
            *engine]
    if how == "sql":
        return lambda: timed([*argv, "--sql", os.path.join(out, "out.sql")])
    folder = os.path.join(out, how)
    extra = ["--typed"] if how == "typed" else []
    return lambda: (shutil.rmtree(folder, True),
                    timed([*argv, "--parquet", f"file://{folder}", *extra]))[1]


def ways(files, url, out, engine="mariadb"):
    mb = PYTHON, "-m", "mysqlbackup"
    replays = {"replay --sql (default engine)": replay_way(url, out, "sql")}
    for how, name in (("sql", "--sql"), ("parquet", "--parquet"),
                      ("typed", "--parquet --typed")):
        for where in ("spark", "local"):
            replays[f"replay {name} --engine {where}"] = replay_way(
                url, out, how, "--engine", where)
    return {
        ANCHOR: lambda: timed(["sh", "-c", anchor_command(engine, files)]),
        FILE_ANCHOR: lambda: timed(["sh", "-c", anchor_command(
            engine, files, os.path.join(out, "anchor.sql"))]),
        **replays,
        "archive find --type ddl": lambda: timed(
            [*mb, "archive", "find", "--archive", url, "--source-name", "db1", "--table",
             "b.t0", "--type", "ddl"]),
        "inspect FILES": lambda: timed([*mb, "inspect", *files]),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--files", type=int, default=5)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--small", type=int, default=0)
    parser.add_argument("--decoders", action="store_true")
    parser.add_argument("--keep", help="make (or reuse) the archive here")
    parser.add_argument("--engine", choices=["mariadb", "mysql"], default="mariadb")
    args = parser.parse_args()
    where = args.keep or tempfile.mkdtemp(prefix="bench-decode-")
    os.makedirs(where, exist_ok=True)
    files, url = big_archive(where, args)
    raw = sum(os.path.getsize(f) for f in files)
    print(f"archive ({args.engine}): {len(files)} files, {raw / 1e6:.0f} MB; "
          f"{os.cpu_count()} cores")
    best = {}
    for _ in range(args.runs):  # interleaved: a loaded moment hits every way alike
        for name, run in ways(files, url, where, args.engine).items():
            best[name] = min(best.get(name, float("inf")), run())
    anchor = best[ANCHOR]
    print(f"{'way':<38} {'time':>8} {'MB/s':>8} {'vs anchor':>10}")
    for name, seconds in best.items():
        print(f"{name:<38} {seconds:>7.2f}s {raw / 1e6 / seconds:>8.1f} "
              f"{anchor / seconds:>9.2f}x")
    if args.decoders:
        decoders(files, args.runs, anchor, raw)
    if args.small:
        small(where, args.small, args.runs)
    if not args.keep:
        shutil.rmtree(where, ignore_errors=True)
        if args.engine == "mysql":  # its files are in the tree's shared folder
            shutil.rmtree(os.path.dirname(os.path.dirname(files[0])), ignore_errors=True)


def big_archive(where, args):
    """(the archive's files, its URL): made by the engine's server once, kept in
    ``where`` (MySQL's files inside the tree's shared folder: its mysqlbinlog reads them)."""
    if args.engine == "mysql":
        from mysqlbackup.sandbox.mysql import MySQLSandbox, shared_dir, why_no_mysql
        if why_no_mysql():
            raise SystemExit(f"--engine mysql: {why_no_mysql()}")
        big = os.path.join(shared_dir(), "bench-decode-big")
        if not os.path.isdir(os.path.join(big, "archive")):
            with MySQLSandbox(server_id=1, semi_sync=False, gtid_mode="ON",
                              extra_args=["--max-binlog-size=1073741824"]) as server:
                write(server, args.mb, args.files)
                archive(server, big, "db1")
    else:
        big = os.path.join(where, "big")
        if not os.path.isdir(os.path.join(big, "archive")):
            with MariaDBSandbox(os.path.join(where, "server"), semi_sync=False,
                                extra_args=["--max-binlog-size=1073741824"]) as server:
                write(server, args.mb, args.files)
                archive(server, big, "db1")
    files = sorted(os.path.join(big, "files", n) for n in os.listdir(os.path.join(big, "files")))
    return files, f"file://{big}/archive"


def decoders(files, runs, anchor, raw):
    """The row decoders alone, one core (see the module), against ``anchor`` seconds."""
    code = (
        "import sys, time\n"
        "from mysqlbackup.binlog import events as ev\n"
        "from replay.job.decoding import changes, rowdecode, rowloop\n"
        "from replay.job.decoding.assemble import assemble\n"
        "from replay.job.decoding.rowtext import RowText\n"
        "way, what = sys.argv[1], sys.argv[2]\n"
        "changes.REFERENCE_ONLY = way == 'reference'\n"
        "rowdecode.loop = rowloop if way == 'pure' else rowdecode.loop\n"
        "assert way != 'compiled' or rowdecode.compiled, rowdecode.describe()\n"
        "for path in sys.argv[3:]:\n"
        "    with open(path, 'rb') as f:\n"
        "        trxs, _, fde_event = assemble(f.read(), path, newest=True)\n"
        "    fde = ev.parse_format_description(fde_event)\n"
        "    crc = fde.checksum_alg == ev.CHECKSUM_CRC32\n"
        "    tables = {}\n"
        "    for t in trxs:\n"
        "        if what == 'changes':\n"
        "            for c in changes.iter_changes(t, fde, crc, [], tables): pass\n"
        "        else:\n"
        "            for line in RowText(t, fde, crc, tables).lines(t.events): pass\n")
    best = {}
    for _ in range(runs):
        for way in ("reference", "pure", "compiled"):
            for what in ("changes", "rowtext"):
                seconds = timed([PYTHON, "-c", code, way, what, *files], cwd=ROOT)
                best[(way, what)] = min(best.get((way, what), float("inf")), seconds)
    print(f"{'decoder (one core, this process)':<38} {'time':>8} {'MB/s':>8} "
          f"{'vs anchor':>10}")
    for (way, what), seconds in best.items():
        name = f"{what} ({'change table' if what == 'changes' else '### lines'}), {way}"
        print(f"{name:<38} {seconds:>7.2f}s {raw / 1e6 / seconds:>8.1f} "
              f"{anchor / seconds:>9.2f}x")


SMALL_WAYS = {  # what must cost less than the file count grows (the 10x goal)
    "replay --sql": lambda url, place: ["replay", "--archive", url, "--source-name", "db1",
                                        "--sql", os.path.join(place, "out.sql")],
    "archive ls": lambda url, place: ["archive", "ls", "--archive", url],
    "verify": lambda url, place: ["verify", "--archive", url, "--source-name", "db1"],
}  # (restore --dry-run needs a base backup, which these archives have none of)


def small(where, count, runs):
    """Each of ``SMALL_WAYS`` over ``count`` small files against ``count // 10`` of them."""
    urls = {}
    for n in (count // 10, count):
        place = os.path.join(where, f"small-{n}")
        if not os.path.isdir(os.path.join(place, "archive")):
            with MariaDBSandbox(os.path.join(place, "server"), semi_sync=False) as server:
                small_files(server, n)
                archive(server, place, "db1")
        urls[n] = (f"file://{place}/archive", place)
    for name, argv in SMALL_WAYS.items():
        few, many = (min(timed([PYTHON, "-m", "mysqlbackup", *argv(*urls[n])])
                         for _ in range(runs)) for n in (count // 10, count))
        print(f"small files: {name} of {count // 10} files {few:.2f}s, of {count} files "
              f"{many:.2f}s: {many / few:.1f}x for 10x the files (goal: <= 10x)")


if __name__ == "__main__":
    main()
