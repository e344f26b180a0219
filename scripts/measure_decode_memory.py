"""Peak memory of one replay decode task (``replay.job.tasks.decode_unit``) on a big binlog.

Makes a binlog of ``--mb`` megabytes on a throwaway MariaDB (row format, multi-row
INSERT ... SELECT of ~1 KB rows, rows events cut at ``--event-mb``: the event size
limit), seals it, imports it into two file:// archives (plain, and zstd+age with a
fresh key pair), plans the replay and runs ``decode_unit`` on the big file's unit in
a fresh Python process per archive, which reports its peak RSS (VmHWM of
/proc/self/status) before and after the decode, the wall time and what it decoded.

``--write sql|parquet|typed``: the task also writes what it decoded, as the replay's
tasks do for ``replay --sql`` (its text, into ``FILE.parts/`` as on local[*]),
``--parquet`` and ``--parquet --typed``; ``--trx-mb``: the size of each transaction
(one INSERT ... SELECT; default 16).

Run: .venv/bin/python scripts/measure_decode_memory.py [--mb 1024] [--event-mb 2]
     [--trx-mb 16] [--write sql|parquet|typed]
     [--code-root DIR]  (the replay code to measure, e.g. an export of an older commit)
     [--keep DIR]       (reuse/keep the binlog and archives there)
     MEASURE_ATTACH=1 in the environment: the child then also runs the driver's
     ``attach_unit`` on the result (the events cut out of a second read) and reports
     its peak RSS.
"""

import argparse
import dataclasses
import hashlib
import importlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.environ.get("MEASURE_CODE_ROOT", ROOT))

ROW_BYTES = 1024


def _fields(result):
    """A task's result as a dict: a TaskResult (its error too), or the dict older code
    (``--code-root``) returns."""
    if isinstance(result, dict):
        return result
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}  # shallow
    if fields["error"] is not None:
        fields["error"] = dataclasses.asdict(fields["error"])
    return fields


def vm_hwm():
    """Peak resident set of this process (kB -> bytes), from /proc/self/status."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def make_binlog(workdir, mb, event_mb, trx_mb=16):
    """A directory holding one sealed binlog file of about ``mb`` MB and the next one."""
    from mysqlbackup.sandbox import MariaDBSandbox
    out = os.path.join(workdir, "binlogs")
    if os.path.isdir(out):
        return out
    server = MariaDBSandbox(os.path.join(workdir, "server"), semi_sync=False, extra_args=[
        "--max-binlog-size=1073741824", f"--binlog-row-event-max-size={event_mb << 20}",
        "--max-allowed-packet=256M"]).start()
    try:
        server.execute("CREATE DATABASE m", "CREATE TABLE m.t (id BIGINT PRIMARY KEY, "
                       "v VARCHAR(2000)) ENGINE=InnoDB")
        per_insert, next_id = trx_mb << 20, 0
        rows = per_insert // ROW_BYTES
        path = server.binlog_path(server.binlog_files()[-1])
        while os.path.getsize(path) < (mb << 20) - per_insert:
            server.execute(f"INSERT INTO m.t SELECT seq + {next_id}, "
                           f"CONCAT(REPEAT(MD5(seq), {ROW_BYTES // 64}), "
                           f"LPAD(HEX(seq * 7919), {ROW_BYTES // 2}, 'x')) "
                           f"FROM m.seq_1_to_{rows}")
            next_id += rows
        server.execute("FLUSH BINARY LOGS")
        os.makedirs(out)
        for name in server.binlog_files():
            shutil.copy(server.binlog_path(name), out)
    finally:
        server.stop(remove=True)
    return out


def make_archive(workdir, binlogs, encoded):
    """A file:// archive of ``binlogs`` (plain, or zstd+age); (url, identity path)."""
    from mysqlbackup.archive.codec import PLAIN, keygen, make_codec
    from mysqlbackup.archive.importer import import_directory
    from mysqlbackup.archive.store import ArchiveStore
    kind = "zstd+age" if encoded else "plain"
    root = os.path.join(workdir, f"archive-{kind}")
    identity = os.path.join(workdir, "key.txt") if encoded else None
    if encoded and not os.path.exists(identity):
        keygen(identity, identity + ".pub")
    url = f"file://{root}"
    if not os.path.isdir(root):
        os.makedirs(root)
        codec = make_codec("zstd", [identity + ".pub"]) if encoded else PLAIN
        import_directory(ArchiveStore(url), binlogs, "m", echo=lambda line: None, codec=codec)
    return url, identity


def measure(workdir, url, identity, code_root, write=None):
    """Run decode_unit on the biggest unit in a fresh process; its report (a dict)."""
    from mysqlbackup.archive.codec import keyring_from
    from replay.planning.plan import ReplayOptions, units_to_read
    _, units, _ = units_to_read(ReplayOptions(archive_url=url, keyring=keyring_from(identity)))
    unit = max(units, key=lambda u: sum(o.index["size"] for o in u.objects))
    job = os.path.join(workdir, "unit.pickle")
    with open(job, "wb") as f:
        pickle.dump((unit, url, identity, write, workdir), f)
    out = subprocess.run([sys.executable, __file__, "--child", job],
                         env=dict(os.environ, MEASURE_CODE_ROOT=code_root), check=True,
                         capture_output=True, text=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["raw_bytes"] = sum(o.index["size"] for o in unit.objects)
    report["stored_bytes"] = sum(o.index.get("stored_size") or o.index["size"]
                                 for o in unit.objects)
    return report


def child(job, out=None):
    """In a fresh process: decode one unit, print peak RSS before/after as JSON (and
    pickle the decode's result to ``out`` when given)."""
    with open(job, "rb") as f:
        unit, url, identity, *rest = pickle.load(f)
    write, workdir = rest or (None, None)  # (unit, url, identity): decode only
    from mysqlbackup.archive.codec import keyring_from
    from replay.job.tasks import decode_unit
    keyring = keyring_from(identity)
    importlib.import_module("mysqlbackup.archive.store")  # imported before the baseline
    keep = writer_keep(unit, write, workdir) if write else None
    before, started = vm_hwm(), time.monotonic()
    result = decode_unit(unit, url, {}, keyring, keep)
    elapsed = time.monotonic() - started
    if out:
        with open(out, "wb") as f:
            pickle.dump(result, f)
    got = _fields(result)
    same = {k: got[k] for k in ("transactions", "incomplete", "fde", "facts", "digests",
                                "fingerprint", "error")}
    report = {"result_sha256": hashlib.sha256(pickle.dumps(same)).hexdigest(),
              "error": same["error"], "transactions": len(got["transactions"]),
              "digests": got["digests"], "fingerprint": got["fingerprint"],
              "facts": got["facts"], "hwm_before": before, "hwm_after": vm_hwm(),
              "seconds": round(elapsed, 2)}
    if os.environ.get("MEASURE_ATTACH") and not same["error"]:
        report.update(attach(result, unit, url, keyring))
    print(json.dumps(report))


def writer_keep(unit, write, workdir):
    """What the replay's driver hands a task that writes (``tasks.keep_spec``)."""
    from replay.planning.options import build_selection
    from replay.job.tasks import keep_spec
    out = os.path.join(workdir, f"out-{write}-{os.getpid()}")
    if write == "sql":
        from replay.job.sinks.sqlfile import SqlFileSink
        spec = SqlFileSink(out + ".sql").task_spec()
    else:
        from replay.job.sinks.parquet import ParquetSink
        spec = ParquetSink(f"file://{out}", typed_tables=write == "typed").task_spec()
    selection = build_selection()
    return keep_spec(selection, unit, spec)


def attach(result, unit, url, keyring):
    """The driver's ``attach_unit`` on a decode result, its own peak RSS (the peak is
    reset first: /proc/self/clear_refs) and the bytes of the events it attached."""
    import gc

    from replay.job.run import attach_unit
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = vm_hwm()
    attach_unit(result, unit, url, {}, keyring)
    return {"hwm_attach_before": before, "hwm_attach": vm_hwm(),
            "attached_bytes": sum(len(e) for t in _fields(result)["transactions"]
                                  for e in t.events)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--event-mb", type=int, default=2)
    parser.add_argument("--trx-mb", type=int, default=16)
    parser.add_argument("--write", choices=["sql", "parquet", "typed"])
    parser.add_argument("--code-root", default=ROOT)
    parser.add_argument("--keep")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.out)
    workdir = args.keep or tempfile.mkdtemp(prefix="decode-memory-")
    os.makedirs(workdir, exist_ok=True)
    try:
        binlogs = make_binlog(workdir, args.mb, args.event_mb, args.trx_mb)
        for encoded in (False, True):
            url, identity = make_archive(workdir, binlogs, encoded)
            r = measure(workdir, url, identity, args.code_root, args.write)
            mb = 1 << 20
            print(f"{'zstd+age' if encoded else 'plain':8}  raw {r['raw_bytes'] / mb:7.1f} MB  "
                  f"stored {r['stored_bytes'] / mb:7.1f} MB  peak RSS {r['hwm_after'] / mb:7.1f} MB"
                  f" (before the decode {r['hwm_before'] / mb:5.1f} MB)  {r['seconds']:6.1f} s  "
                  f"{r['transactions']} transactions  error {r['error'] and r['error']['kind']}"
                  f"  result sha256 {r['result_sha256'][:16]}", flush=True)
            if "hwm_attach" in r:
                print(f"{'':8}  then the driver's attach_unit: peak RSS {r['hwm_attach'] / mb:7.1f}"
                      f" MB (before it {r['hwm_attach_before'] / mb:5.1f} MB; "
                      f"{r['attached_bytes'] / mb:.1f} MB of events attached)", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
