"""Torture suite archive faults: each fault of ``tests.faults.ARCHIVE_FAULTS`` against
``verify`` and ``replay``.

A daemon under load writes a file:// archive while verify runs on it (exit 0 every
time); each fault is injected into a copy of it; verify must exit 1 naming the object,
replay --sql / --target exit 6 (or 7 for a hole in the chain) naming it with nothing
applied. All replays run in one process (one Spark start): ``replay_batch_main``.
"""

import json
import os
import shutil
import subprocess
import sys
import time

from torture_harness import cli, env, last_line, new_result, wait_for
from torture_load import Load
from mysqlbackup.sandbox import MariaDBSandbox
from tests import faults
from tests.helpers import read

# the replay batch runs through torture.py's hidden --replay-batch option
TORTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torture.py")


def _named(rel, out):
    """True when ``out`` names the object ``rel`` (its binlog name, and segment if any)."""
    parts = rel.split("/")
    return parts[2] in out and (len(parts) < 4 or parts[3] in out)


def _build_archive(ctx, result):
    """A file:// archive of several sealed files and active-file segments, written by a
    daemon under load while verify runs on it (each run must exit 0)."""
    db, directory, start = ctx.begin("archive")
    root = os.path.join(ctx.work, f"{ctx.count}-archive-store")
    url = f"file://{root}"
    # plain objects: the faults flip and cut binlog bytes (codec faults: test_archive_codec)
    stream = ctx.stream(ctx.server.url, directory, "--archive", url, "--compress", "none",
                        "--archive-interval", "1").start("--start-file", start)
    ctx.semi_sync_ready()
    load = Load(ctx.server, db, threads=2).start()
    live = []
    for i in range(4 if ctx.args.quick else 12):
        time.sleep(1.2)
        ctx.server.execute("FLUSH BINARY LOGS")
        live.append(cli("verify", "--archive", url))
    load.stop()
    for i in range(5):
        ctx.server.execute(f"INSERT INTO {db}.t VALUES ({9 * 10 ** 12 + i}, 9)")
    files = ctx.server.binlog_files()
    files, active = files[files.index(start):-1], files[-1]
    size = os.path.getsize(ctx.server.binlog_path(active))
    wait_for(lambda: all(os.path.exists(p + ".json") for p in (
        os.path.join(root, rel) for rel in faults.sealed_objects(root))) and len(
        faults.sealed_objects(root)) >= len(files) and any(
        rel.split("/")[2] == active and rel.endswith(f"-{size:012d}")
        for rel in faults.segment_objects(root)), 30, 0.2)
    result["exit_codes"]["archive_daemon"] = stream.stop()[0]
    bad = [f"exit {c}: {last_line(o)}" for c, o in live if c != 0]
    result["live_verify"] = f"{len(live) - len(bad)}/{len(live)} exit 0"
    if bad:
        result["messages"].append(f"verify on the live archive: {bad[0]}")
    return root, db, load


def _replay_jobs(ctx, root, db, found, target):
    """One process runs every replay (one Spark start): pristine, each fault --sql,
    and replace-object onto a real target."""
    jobs = []
    for name, (rel, copy) in [("pristine", (None, root))] + sorted(found.items()):
        sql = os.path.join(ctx.work, f"replay-{name}.sql")
        jobs.append({"name": name, "rel": rel, "sql": sql,
                     "args": ["replay", "--archive", f"file://{copy}", "--sql", sql]})
    rel, copy = found["replace-object"]
    jobs.append({"name": "replace-object --target", "rel": rel, "sql": None, "target": True,
                 "args": ["replay", "--archive", f"file://{copy}", "--target",
                          f"mysql://admin@127.0.0.1:{target.port}"]})
    spec = os.path.join(ctx.work, "replay-jobs.json")
    with open(spec, "w") as f:
        json.dump(jobs, f)
    proc = subprocess.run([sys.executable, TORTURE, "--replay-batch", spec],
                          env=dict(env(), MYSQLBACKUP_TARGET_PASSWORD="admin-pw"),
                          capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"replay batch printed nothing: {proc.stderr[-1500:]}")
    return jobs, [json.loads(ln) for ln in lines]


# deletions leave a hole in the chain: resync required (7) is a named refusal too
REPLAY_CODES = {"delete-object": (6, 7), "delete-index": (6, 7)}


def _judge_replay(job, res, target, result):
    """A named refusal, and nothing at all applied (no transaction in the --sql file, no
    GTID on the target): every object is proved against its index first."""
    code, out = res["code"], res["output"]
    sql = read(job["sql"]).decode("utf-8", "replace") if job["sql"] and os.path.exists(
        job["sql"]) else ""
    result["exit_codes"][f"replay {job['name']}"] = code
    if job["rel"] is None:
        if code != 0 or "gtid_seq_no=" not in sql:
            result["messages"].append(f"replay of the pristine archive: exit {code}: "
                                      f"{last_line(out)}")
        return
    if job.get("target"):
        pos = target.execute("SELECT @@gtid_binlog_pos")[0][0]
        applied = f"target at GTID {pos}" if pos else ""
    else:
        n = sql.count("gtid_seq_no=")
        applied = f"{n} transactions in the SQL file" if n else ""
    want = REPLAY_CODES.get(job["name"], (6,))
    if code not in want or not _named(job["rel"], out) or applied or "Traceback" in out:
        result["messages"].append(
            f"replay {job['name']}: want exit {want} naming {job['rel']} and nothing applied; "
            f"got exit {code}" + (f", {applied}" if applied else "")
            + f": {last_line(out)[:300]}")


def scenario_archive_faults(ctx):
    """Every archive fault against verify (exit 1, named) and replay (exit 6, named)."""
    result = new_result("archive-faults")
    root, db, load = _build_archive(ctx, result)
    code, out = cli("verify", "--archive", f"file://{root}")
    result["exit_codes"]["verify pristine"] = code
    if code != 0:
        result["messages"].append(f"verify of the pristine archive: exit {code}: "
                                  f"{last_line(out)}")
    found = {}
    for name, inject in faults.ARCHIVE_FAULTS.items():
        copy = os.path.join(ctx.work, "faults", name)
        shutil.copytree(root, copy)
        rel = inject(copy)
        found[name] = (rel, copy)
        code, out = cli("verify", "--archive", f"file://{copy}")
        result["exit_codes"][f"verify {name}"] = code
        if code != 1 or not _named(rel, out) or "Traceback" in out:
            result["messages"].append(f"verify {name}: want exit 1 naming {rel}; got exit "
                                      f"{code}: {last_line(out)[:300]}")
    target = MariaDBSandbox(os.path.join(ctx.work, "target"), server_id=3,
                            semi_sync=False).start()
    try:
        target.execute("SET SESSION sql_log_bin=0",
                       "CREATE USER 'admin'@'127.0.0.1' IDENTIFIED BY 'admin-pw'",
                       "GRANT ALL ON *.* TO 'admin'@'127.0.0.1'")
        jobs, results = _replay_jobs(ctx, root, db, found, target)
        for job, res in zip(jobs, results):
            _judge_replay(job, res, target, result)
    finally:
        target.stop()
    result["acknowledged"] = len(load.acked)
    result["faults"] = len(found)
    result["ok"] = not result["messages"]
    return result


def replay_batch_main(spec):
    """Run each replay job of ``spec`` in this one process (one Spark session): one
    JSON line per job with its exit code and output."""
    import contextlib
    import io
    import traceback
    from mysqlbackup.cli import main as cli_main
    with open(spec) as f:
        jobs = json.load(f)
    for job in jobs:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                cli_main.main(args=job["args"], standalone_mode=False)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except Exception as e:  # noqa: BLE001 - what the CLI would end with
                code = getattr(e, "exit_code", 1)
                buf.write(traceback.format_exc())
        print(json.dumps({"name": job["name"], "code": code, "output": buf.getvalue()[-4000:]}),
              flush=True)
    return 0
