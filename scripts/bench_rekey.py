"""Rekey benchmark: ``mysqlbackup archive rekey`` of an encrypted archive against the bare
re-encryption of its objects, in one run.

The archive: a throwaway MariaDB writes ``--mb`` megabytes of sysbench-like row changes
(``bench_archive.oltp_binlogs``: random digits as sysbench writes them, 16 MB files,
about 3x smaller in zstd:1), imported with ``archive import --compress zstd:1
--encrypt-to`` a first key.
Then, ``--runs`` times, interleaved (each run moves the archive to the other key, so
every run rewrites every object):

1. the anchor: each stored object decrypted and encrypted to the other key by pyrage
   (the age library the tool uses) file to file, in this process: the cryptography alone,
   with no check, no index, no read back;
2. ``mysqlbackup archive rekey --identity OLD --recipient NEW`` (a new process): each
   object decrypted, inflated and hashed against its index, re-encrypted, written
   durably, read back and hashed, swapped in place under its index.

Prints each way's best wall time, raw binlog MB/s, the rekey's MB per CPU second (user +
sys of the process: the per-core rate, the goal: >= 100), its peak RSS, and the ratio
anchor / rekey.

Run: .venv/bin/python scripts/bench_rekey.py [--mb 1024] [--runs 2] [--keep DIR]
"""

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from bench_archive import oltp_binlogs  # noqa: E402
from mysqlbackup.archive.codec import keygen, read_identities, read_recipients  # noqa: E402
from mysqlbackup.binlog.names import is_binlog_name  # noqa: E402

PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
GOAL = 100.0  # raw MB per CPU second


def make_archive(where, mb):
    """(archive root, raw MB, key pairs {name: (identity, recipient)}) made once in
    ``where`` (kept for the next run)."""
    keys = {n: (os.path.join(where, f"{n}.key"), os.path.join(where, f"{n}.pub"))
            for n in ("a", "b")}
    root = os.path.join(where, "archive")
    if not os.path.isdir(root):
        for ident, recip in keys.values():
            keygen(ident, recip)
        made, folder = oltp_binlogs(where, mb), os.path.join(where, "files")
        os.makedirs(folder)
        for name in sorted(n for n in os.listdir(made) if is_binlog_name(n))[:-1]:
            shutil.move(os.path.join(made, name), os.path.join(folder, name))
        shutil.rmtree(made)
        subprocess.run([PYTHON, "-m", "mysqlbackup", "archive", "import", folder,
                        "--archive", f"file://{root}", "--source-name", "db1",
                        "--compress", "zstd:1", "--encrypt-to", keys["a"][1]], check=True,
                       stdout=subprocess.DEVNULL)
    raw = sum(os.path.getsize(os.path.join(where, "files", n))
              for n in os.listdir(os.path.join(where, "files")))
    return root, raw / 1e6, keys


def stored_objects(root):
    folder = os.path.join(root, "db1", "binlog")
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder))
            if not n.endswith(".json")]


def anchor(root, identity, recipient, scratch):
    """Wall seconds of pyrage re-encrypting every stored object file to file."""
    import pyrage
    from pyrage import x25519
    ids = read_identities(identity).identities()
    to = [x25519.Recipient.from_str(r) for r in read_recipients(recipient)]
    started = time.monotonic()
    for path in stored_objects(root):
        middle, out = os.path.join(scratch, "middle"), os.path.join(scratch, "out")
        with open(path, "rb") as src, open(middle, "wb") as dst:
            pyrage.decrypt_io(src, dst, ids)
        with open(middle, "rb") as src, open(out, "wb") as dst:
            pyrage.encrypt_io(src, dst, to)
    return time.monotonic() - started


def rekey(root, identity, recipient):
    """(wall seconds, CPU seconds, peak RSS MB) of one ``archive rekey`` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", PYTHON, "-m", "mysqlbackup",
                           "archive", "rekey", "--archive", f"file://{root}", "--identity",
                           identity, "--recipient", recipient], capture_output=True,
                          text=True, cwd=tempfile.gettempdir())
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"archive rekey failed: {done.stdout[-1000:]} {done.stderr[-1000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, int(done.stderr.strip().splitlines()[-1]) / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--keep", help="keep the archive here (reused when present)")
    args = parser.parse_args()
    where = args.keep or tempfile.mkdtemp(prefix="bench-rekey-")
    os.makedirs(where, exist_ok=True)
    try:
        root, raw_mb, keys = make_archive(where, args.mb)
        stored_mb = sum(os.path.getsize(p) for p in stored_objects(root)) / 1e6
        print(f"archive: {raw_mb:.0f} MB of binlogs, {stored_mb:.0f} MB stored (zstd:1+age), "
              f"{len(stored_objects(root))} objects")
        current = "a"
        best_anchor, best = None, None
        for _ in range(args.runs):
            other = "b" if current == "a" else "a"
            took = anchor(root, keys[current][0], keys[other][1], where)
            best_anchor = took if best_anchor is None else min(best_anchor, took)
            wall, cpu, rss = rekey(root, keys[current][0], keys[other][1])
            if best is None or wall < best[0]:
                best = (wall, cpu, rss)
            current = other
        wall, cpu, rss = best
        print(f"anchor (pyrage decrypt + encrypt, file to file): {best_anchor:.2f} s, "
              f"{raw_mb / best_anchor:.0f} MB/s raw")
        print(f"archive rekey: {wall:.2f} s wall, {cpu:.2f} s CPU, {raw_mb / wall:.0f} MB/s "
              f"raw, {raw_mb / cpu:.0f} MB per CPU second (goal >= {GOAL:.0f}), peak RSS "
              f"{rss:.0f} MB, ratio anchor/rekey {best_anchor / wall:.2f}x")
    finally:
        if not args.keep:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
