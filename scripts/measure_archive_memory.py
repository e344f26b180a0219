"""Peak memory of the daemon's archiver, ``archive import`` and ``verify`` on a big binlog.

Grows a binlog of ``--mb`` megabytes (default 1024) of ``--trx-mb`` megabyte
transactions (default 64) from a real MariaDB file's events (tests/bigbinlog.py: the
seed's header, then its largest transaction's statements repeated, log_pos and CRC32
written anew, a ROTATE at the end), then, each in a fresh Python process that
reports its peak RSS (VmHWM of /proc/self/status):

- archiver: ``Archiver.run_once`` over a backup directory holding the big file
  (sealed) and a small active file, into a file:// archive;
- import: ``import_directory`` of a directory holding the big file alone;
- verify: ``verify_archive`` of the archive the import wrote (with the identity when
  encrypted: every object decoded and checked).

It prints the file size beside each peak, for each ``--compress`` asked for (default
zstd:1 and none; ``--encrypt`` adds zstd:1 + age). The seed is a small binlog written
by a throwaway MariaDB (rows events of ~8 KB, as a big INSERT writes them), or
``--seed FILE``.

Run: .venv/bin/python scripts/measure_archive_memory.py [--mb 1024] [--trx-mb 64]
     [--compress zstd:1 --compress none] [--encrypt] [--seed FILE] [--keep DIR]
     [--code-root DIR]  (the code to measure, e.g. an export of an older commit)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.environ.get("MEASURE_CODE_ROOT", ROOT))

NAME, NEXT = "binlog.000001", "binlog.000002"


def vm_hwm():
    """Peak resident set of this process in bytes (VmHWM of /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def make_seed(workdir):
    """A small real binlog: one transaction of ~8 KB rows events (64 rows of 1 KB)."""
    from mysqlbackup.sandbox import MariaDBSandbox
    server = MariaDBSandbox(os.path.join(workdir, "seed-server"), semi_sync=False).start()
    try:
        server.execute("CREATE DATABASE m", "CREATE TABLE m.t (id BIGINT PRIMARY KEY, "
                       "v VARCHAR(2000)) ENGINE=InnoDB",
                       "INSERT INTO m.t SELECT seq, CONCAT(REPEAT(MD5(seq), 16), "
                       "LPAD(HEX(seq * 7919), 512, 'x')) FROM m.seq_1_to_64",
                       "FLUSH BINARY LOGS")
        seed = os.path.join(workdir, "seed.bin")
        shutil.copyfile(server.binlog_path(server.binlog_files()[0]), seed)
        return seed
    finally:
        server.stop(remove=True)


def make_files(workdir, seed, mb, trx_mb):
    """(backup directory: the big file sealed and a small active one; a directory
    holding the big file alone), made once per work directory."""
    from mysqlbackup.binlog.scan import iter_events
    from mysqlbackup.localdir.state import State, save_state
    from tests.bigbinlog import grow_binlog
    local, alone = os.path.join(workdir, "local"), os.path.join(workdir, "import")
    big = os.path.join(alone, NAME)
    if not os.path.exists(big):
        os.makedirs(alone, exist_ok=True)
        grow_binlog(seed, big, mb << 20, trx_mb << 20, NEXT)
    if not os.path.isdir(local):
        os.makedirs(local)
        os.link(big, os.path.join(local, NAME))
        with open(seed, "rb") as f:
            data = f.read()
        header = next(off for off, e in iter_events(data, 4, None) if e[4] == 162)  # GTID
        with open(os.path.join(local, NEXT), "wb") as f:
            f.write(data[:header])  # the active file: its header events, no transaction
        save_state(local, State(file=NEXT, pos=header, source_identity="m"))
    return local, alone


def child(mode, directory, url, compress, recipients):
    """In a fresh process: one archiver pass, import or verify; prints a JSON report."""
    from mysqlbackup.stream.archiver import Archiver
    from mysqlbackup.archive.codec import make_codec
    from mysqlbackup.archive.importer import import_directory
    from mysqlbackup.archive.store import ArchiveStore
    from mysqlbackup.archive.codec import read_identities
    from mysqlbackup.guard.verify import verify_archive
    store = ArchiveStore(url)
    keyring = recipients and read_identities(os.path.join(os.path.dirname(recipients),
                                                          "key.txt"))
    codec = make_codec(compress, [recipients] if recipients else [])
    before, wall, cpu = vm_hwm(), time.monotonic(), time.process_time()
    problems = []
    if mode == "archiver":
        Archiver(directory, store, source_name="m", codec=codec).run_once()
    elif mode == "import":
        import_directory(store, directory, "m", echo=lambda line: None, codec=codec)
    else:
        problems = verify_archive(store, "m", keyring=keyring or None)[1]
    print(json.dumps({"hwm_before": before, "hwm": vm_hwm(), "problems": problems,
                      "seconds": round(time.monotonic() - wall, 2),
                      "cpu": round(time.process_time() - cpu, 2)}))


def run_child(mode, directory, url, compress, recipients, code_root):
    out = subprocess.run([sys.executable, __file__, "--child", mode, directory, url, compress,
                          recipients or ""], env=dict(os.environ, MEASURE_CODE_ROOT=code_root),
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(workdir, local, alone, compress, recipients, code_root):
    """One line per mode for one codec: the file size and the peak RSS."""
    tag = compress.replace(":", "") + ("-age" if recipients else "")
    size = os.path.getsize(os.path.join(alone, NAME))
    for mode, directory, archive in (("archiver", local, "daemon"), ("import", alone, "import"),
                                     ("verify", None, "import")):
        url = f"file://{os.path.join(workdir, f'archive-{tag}-{archive}')}"
        r = run_child(mode, directory or "-", url, compress, recipients, code_root)
        mb = 1 << 20
        print(f"{mode:8s} {compress}{' +age' if recipients else '':5s}  file {size / mb:7.1f} MB"
              f"  peak RSS {r['hwm'] / mb:6.1f} MB (at start {r['hwm_before'] / mb:5.1f} MB)"
              f"  {r['seconds']:6.1f} s wall  {r['cpu']:6.1f} s CPU"
              + (f"  PROBLEMS {r['problems']}" if r["problems"] else ""), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=1024, help="size of the big file (MiB)")
    parser.add_argument("--trx-mb", type=int, default=64, help="size of a transaction (MiB)")
    parser.add_argument("--compress", action="append", help="codecs (default zstd:1, none)")
    parser.add_argument("--encrypt", action="store_true", help="also zstd:1 + age")
    parser.add_argument("--seed", help="the real binlog to grow from (default: made by a "
                        "throwaway MariaDB)")
    parser.add_argument("--code-root", default=ROOT)
    parser.add_argument("--keep", help="reuse/keep the files there")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    workdir = args.keep or tempfile.mkdtemp(prefix="archive-memory-")
    os.makedirs(workdir, exist_ok=True)
    try:
        seed = args.seed or (os.path.join(workdir, "seed.bin")
                             if os.path.exists(os.path.join(workdir, "seed.bin"))
                             else make_seed(workdir))
        local, alone = make_files(workdir, seed, args.mb, args.trx_mb)
        print(f"code {args.code_root}; {NAME}: {os.path.getsize(os.path.join(alone, NAME))} "
              f"bytes, {args.trx_mb} MiB transactions", flush=True)
        runs = [(c, None) for c in args.compress or ["zstd:1", "none"]]
        if args.encrypt:
            from mysqlbackup.archive.codec import keygen
            pub = os.path.join(workdir, "key.pub")
            if not os.path.exists(pub):
                keygen(os.path.join(workdir, "key.txt"), pub)
            runs.append(("zstd:1", pub))
        for compress, recipients in runs:
            for name in os.listdir(workdir):
                if name.startswith("archive-"):
                    shutil.rmtree(os.path.join(workdir, name))
            measure(workdir, local, alone, compress, recipients, args.code_root)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
