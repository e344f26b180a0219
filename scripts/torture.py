#!/usr/bin/env python3
"""Torture suite: the daemon and the archive under faults, checked from outside.

Every stream scenario runs ``mysqlbackup stream`` as a real subprocess as the
semi-sync replica of a throwaway MariaDB primary whose semi-sync timeout is long
(60 s), so every COMMIT that returned to a client was ACKed by the daemon. Client
threads record each id whose COMMIT returned; afterwards ``mariadb-binlog -v``
(not our own decoder) must find every acknowledged id in the local copy exactly
once, and every local file must equal the primary's (``cmp``; the active file may
differ only in the in-use flag at offset 21).

Scenarios (``--scenario NAME``, repeatable; default all):
  kills          N kill -9 of the daemon under load, some right after FLUSH BINARY LOGS
  proxy          a TCP proxy of our own: cuts, cuts during connection setup, a stall,
                 a blackholed source; the daemon must survive and catch up
  sigterm        SIGTERM ends the daemon within 3 s while streaming, backing off, or
                 stuck on a source that never answers
  store-freeze   moto S3 frozen (SIGSTOP): ACKs go on, status shows it, all archived after
  store-restart  moto S3 restarted empty: everything archived again, verify exits 0
  fs-full        a full tmpfs (root only): exit 8 naming the path, restart loses nothing
  fs-fsize       prlimit --fsize (EFBIG): the same
  foreign-file   an empty file with a binlog name in the directory: exit 8 naming it,
                 the checkpoint untouched; without it the daemon resumes
  archive-faults each archive fault (flip, truncations, deletions, replaced object,
                 garbage indexes, bad segment index) against verify (exit 1 naming
                 the object) and replay --sql / --target (exit 6 naming it, nothing
                 applied); verify on the live archive must exit 0 every time

One JSON line per scenario on stdout: scenario, kills, acknowledged, lost,
duplicates, files_identical, exit_codes, messages, ok. Exit 0 only when all are ok.
"""

import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from mysqlbackup.sandbox import MariaDBSandbox  # noqa: E402
from mysqlbackup.source import mask_url  # noqa: E402
from tests import faults  # noqa: E402
from tests.helpers import cli_env, read, same_except_in_use_flag  # noqa: E402

AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1"}
os.environ.update(AWS)


def env():
    return dict(cli_env(), **AWS)


def cli(*args, timeout=120):
    """Run ``mysqlbackup ARGS``: (exit code, stdout+stderr)."""
    try:
        p = subprocess.run([sys.executable, "-m", "mysqlbackup", *args], env=env(),
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return "timeout", f"no exit after {timeout}s: {e.stdout or ''}{e.stderr or ''}"
    return p.returncode, p.stdout + p.stderr


def wait_for(predicate, timeout, interval=0.05):
    """Poll until true; return the value, or None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def last_line(text):
    """The last line of an output, prefixed by its first problem line when it has one."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    problems = [ln for ln in lines[:-1] if "problem" in ln.lower() or "error" in ln.lower()]
    return (problems[0].strip()[:300] + " ... " if problems else "") + lines[-1]


class Stream:
    """``mysqlbackup stream`` as a subprocess (optionally under a command prefix)."""

    def __init__(self, url, directory, *extra, log_path, server_id=77):
        self.args = ["--source", url, "--server-id", str(server_id), "--dir", directory, *extra]
        self.directory, self.log_path, self.proc = directory, log_path, None
        self.prefix = []

    def start(self, *first_only):
        self.mark = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "mysqlbackup", "stream", *self.args,
                 *first_only], env=env(), stdout=log, stderr=subprocess.STDOUT)
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=10)

    def stop(self, timeout=30):
        """SIGTERM; return (exit code or 'hung', seconds it took)."""
        t0 = time.monotonic()
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = "hung"
        return code, round(time.monotonic() - t0, 2)

    def output(self, whole=False):
        with open(self.log_path, "rb") as f:
            f.seek(0 if whole else self.mark)
            return f.read().decode("utf-8", "replace")


class Load:
    """Client threads committing until stopped; ``acked`` holds each id whose COMMIT
    returned. Thread 0 commits 20-row transactions, the others single rows."""

    def __init__(self, server, db, threads=3):
        self.server, self.db, self.acked = server, db, []
        self.stopped, self.errors = threading.Event(), 0
        server.execute(f"CREATE DATABASE IF NOT EXISTS {db}",
                       f"CREATE TABLE IF NOT EXISTS {db}.t (id BIGINT PRIMARY KEY, w INT)")
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def _watch(self):
        """Record when the primary's semi-sync is OFF (commits then return unacknowledged)."""
        self.semi_sync_off, conn = [], None
        while not self.stopped.is_set():
            try:
                conn = conn or self.server.root()
                with conn.cursor() as cur:
                    cur.execute("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'")
                    if cur.fetchone()[1] != "ON":
                        self.semi_sync_off.append(round(time.time(), 2))
            except Exception:
                conn = None
            time.sleep(0.1)

    def _run(self, worker):
        rows, next_id, conn = (20 if worker == 0 else 1), worker * 10 ** 9, None
        while not self.stopped.is_set():
            try:
                conn = conn or self.server.root(autocommit=False)
                ids = list(range(next_id, next_id + rows))
                next_id += rows
                with conn.cursor() as cur:
                    cur.executemany(f"INSERT INTO {self.db}.t VALUES (%s, {worker})", ids)
                conn.commit()
                self.acked.extend(ids)
            except Exception:  # a COMMIT that did not return is not acknowledged
                self.errors += 1
                conn = None
                time.sleep(0.1)
        if conn:
            conn.close()

    def stop(self):
        self.stopped.set()
        for t in self.threads:
            t.join(90)


def binlog_ids(paths, db):
    """(Counter of the ids inserted into ``db``.t, {id: (file index, end of its commit)},
    error) as ``mariadb-binlog -v`` (not our decoder) reads the files."""
    counts, where, errors = collections.Counter(), {}, []
    header = f"### INSERT INTO `{db}`.`t`"
    for index, path in enumerate(paths):
        proc = subprocess.Popen(["mariadb-binlog", "--base64-output=decode-rows", "-v", path],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        want, pending = False, []
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith("### INSERT INTO"):
                want = line == header
            elif want and line.startswith("###   @1="):
                pending.append(int(line.split("=", 1)[1].split()[0]))
                want = False
            elif "\tXid = " in line and pending:
                end = int(re.search(r"end_log_pos (\d+)", line)[1])
                for i in pending:
                    counts[i] += 1
                    where[i] = (index, end)
                pending = []
        err = proc.stderr.read().decode("utf-8", "replace")
        if proc.wait() != 0:
            errors.append(f"{os.path.basename(path)}: {' | '.join(err.strip().splitlines())}")
    return counts, where, ("mariadb-binlog cannot read the local copy: " + "; ".join(errors)
                           if errors else None)


def lost_at_kills(kills, acked, where, names):
    """Ids whose COMMIT returned before a kill but whose commit was not inside the local
    files as they stood right after that kill (ACK before the bytes were written)."""
    lost, reach, upto = set(), (-1, 0), 0
    order = {n: i for i, n in enumerate(names)}
    for n_acked, name, size in kills:
        for i in acked[upto:n_acked]:
            reach = max(reach, where.get(i, (10 ** 9, 0)))
        upto = n_acked
        if reach > (order.get(name, -1), size):
            lost.update(i for i in acked[:n_acked]
                        if where.get(i, (10 ** 9, 0)) > (order.get(name, -1), size))
    return lost


def check_copy(server, directory, start, acked, db, result):
    """Fill lost / duplicates / files_identical of ``result`` for the local copy."""
    files = server.binlog_files()
    files = files[files.index(start):]
    local = [os.path.join(directory, n) for n in files]
    missing = [n for n, p in zip(files, local) if not os.path.exists(p)]
    different = [n for n, p in zip(files[:-1], local) if os.path.exists(p)
                 and read(p) != read(server.binlog_path(n))]
    if os.path.exists(local[-1]) and not same_except_in_use_flag(
            local[-1], server.binlog_path(files[-1])):
        different.append(files[-1])
    result["files_identical"] = not missing and not different
    if missing or different:
        result["messages"].append(f"files missing {missing}, different {different}")
    counts, where, error = binlog_ids([p for p in local if os.path.exists(p)], db)
    if error:
        result["files_identical"] = False
        result["messages"].append(error.strip()[:400])
    acked = set(acked)
    result["acknowledged"] = len(acked)
    result["lost"] = len(acked - set(counts))
    result["duplicates"] = sum(c - 1 for c in counts.values() if c > 1)
    if result["lost"]:
        result["messages"].append(f"lost ids e.g. {sorted(acked - set(counts))[:5]}")
    return where, [n for n, p in zip(files, local) if os.path.exists(p)]


def caught_up(server, directory):
    name = server.execute("SHOW MASTER STATUS")[0][0]
    path = os.path.join(directory, name)
    return os.path.exists(path) and os.path.getsize(path) == os.path.getsize(
        server.binlog_path(name))


def checkpoint_problem(directory):
    """None when the checkpoint names the newest local file at its end (as a clean stop
    leaves it with no transaction open), else what is wrong."""
    try:
        with open(os.path.join(directory, "mysqlbackup.state.json")) as f:
            state = json.load(f)
    except (OSError, ValueError) as e:
        return f"no readable checkpoint: {e}"
    names = sorted((n for n in os.listdir(directory) if n.startswith("binlog.")),
                   key=lambda n: int(n.rsplit(".", 1)[1]))
    size = os.path.getsize(os.path.join(directory, names[-1])) if names else None
    if not names or state.get("file") != names[-1] or state.get("pos") != size:
        return (f"checkpoint {state.get('file')}:{state.get('pos')} is not the end of "
                f"{names[-1] if names else 'any file'} ({size} bytes)")
    return None


def new_result(name):
    return {"scenario": name, "kills": 0, "acknowledged": 0, "lost": None, "duplicates": None,
            "files_identical": None, "exit_codes": {}, "messages": [], "ok": False}


def finish_stream(ctx, stream, load, start, result, catch_up=60):
    """Stop the load, rotate, wait for the daemon to catch up, SIGTERM it, check the copy."""
    load.stop()
    ctx.server.execute("FLUSH BINARY LOGS")
    if not wait_for(lambda: caught_up(ctx.server, stream.directory), catch_up, 0.2) or \
            time.sleep(1) or not wait_for(  # MariaDB adds a BINLOG_CHECKPOINT a moment later
                lambda: caught_up(ctx.server, stream.directory), 30, 0.2):
        result["messages"].append(f"daemon not caught up {catch_up}s after the load stopped; "
                                  f"alive={stream.alive()}: {last_line(stream.output())}")
    code, took = stream.stop()
    result["exit_codes"]["final_sigterm"] = code
    if code != 0:
        result["messages"].append(f"final SIGTERM: exit {code}: {last_line(stream.output())}")
    elif checkpoint_problem(stream.directory):
        result["messages"].append(f"after SIGTERM: {checkpoint_problem(stream.directory)}")
    return check_copy(ctx.server, stream.directory, start, load.acked, load.db, result)


def copy_ok(result):
    return result["lost"] == 0 and result["duplicates"] == 0 and bool(result["files_identical"])


class Context:
    """What scenarios share: the options, a work directory and one primary."""

    def __init__(self, args):
        self.args, self.rng = args, random.Random(args.seed)
        if args.workdir:
            os.makedirs(args.workdir, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="mysqlbackup-torture-", dir=args.workdir)
        self.server = MariaDBSandbox(os.path.join(self.work, "primary"),
                                     semi_sync_timeout_ms=60000).start()
        self.count = 0

    def begin(self, name):
        """A fresh database, directory, and the binlog file a scenario starts from."""
        self.count += 1
        self.server.execute("FLUSH BINARY LOGS")
        start = self.server.execute("SHOW MASTER STATUS")[0][0]
        return f"t{self.count}_{name.replace('-', '_')}", os.path.join(
            self.work, f"{self.count}-{name}"), start

    def stream(self, url, directory, *extra, server_id=None):
        os.makedirs(os.path.dirname(directory), exist_ok=True)
        return Stream(url, directory, *extra, server_id=server_id or 100 + self.count,
                      log_path=directory.rstrip("/") + ".log")

    def semi_sync_ready(self, timeout=30):
        return wait_for(lambda: self.server.status("Rpl_semi_sync_master_clients") == "1"
                        and self.server.status("Rpl_semi_sync_master_status") == "ON",
                        timeout, 0.1)

    def close(self):
        self.server.stop()
        if not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)


# -- scenarios -----------------------------------------------------------------------------

def _newest(directory, server, result):
    """(name, size) of the newest local file right after a kill; its bytes must be a
    prefix of the primary's file (never a byte the primary does not have)."""
    names = sorted((n for n in os.listdir(directory) if n.startswith("binlog.")),
                   key=lambda n: int(n.rsplit(".", 1)[1]))
    if not names:
        return "", 0
    data = read(os.path.join(directory, names[-1]))
    with open(server.binlog_path(names[-1]), "rb") as f:
        theirs = f.read(len(data))
    if data[:21] + data[22:] != theirs[:21] + theirs[22:]:
        result["messages"].append(f"at a kill, local {names[-1]} ({len(data)} bytes) is not "
                                  f"a prefix of the primary's file")
    return names[-1], len(data)


def scenario_kills(ctx):
    """N kill -9 under semi-sync load, every fifth right after a rotation, every seventh
    during start-up."""
    result, rng = new_result("kills"), ctx.rng
    db, directory, start = ctx.begin("kills")
    stream = ctx.stream(ctx.server.url, directory).start("--start-file", start)
    ctx.semi_sync_ready()
    no_tx = int(ctx.server.status("Rpl_semi_sync_master_no_tx"))
    load = Load(ctx.server, db).start()
    exits, kills = collections.Counter(), []
    for i in range(ctx.args.kills):
        # most kills land while it streams; every 7th during its start-up (recovery scan,
        # connecting). Killing every start-up would starve the primary: MariaDB keeps the
        # killed dump thread a while and the daemon needs ~3 s to wake it.
        if i % 7 != 6:
            wait_for(lambda: "streaming from" in stream.output() or not stream.alive(), 20,
                     0.02)
        time.sleep(rng.uniform(0.05, 1.0) if i % 7 != 6 else rng.uniform(0, 0.3))
        if i % 5 == 4:
            ctx.server.execute("FLUSH BINARY LOGS")
            time.sleep(rng.uniform(0, 0.05))
        if not stream.alive():
            exits[stream.proc.returncode] += 1
            result["messages"].append(f"daemon exited by itself with {stream.proc.returncode} "
                                      f"before kill {i}: {last_line(stream.output())}")
        else:
            n_acked = len(load.acked)
            stream.kill9()
            kills.append((n_acked, *_newest(directory, ctx.server, result)))
        result["kills"] += 1
        stream.start()
    result["exit_codes"]["self_exits"] = dict(exits)
    result["torn_tails_cut"] = len(re.findall(r": cut \d+ bytes after", stream.output(whole=True)))
    where, names = finish_stream(ctx, stream, load, start, result)
    result["unacked_commits"] = int(ctx.server.status("Rpl_semi_sync_master_no_tx")) - no_tx
    off = load.semi_sync_off
    result["semi_sync_off_seen"] = f"{len(off)} samples" + (
        f" from {time.strftime('%H:%M:%S', time.localtime(off[0]))} to "
        f"{time.strftime('%H:%M:%S', time.localtime(off[-1]))}" if off else "")
    lost = lost_at_kills(kills, load.acked, where, names)
    result["lost_at_kill"] = len(lost)
    if lost:
        result["messages"].append(f"{len(lost)} ids acknowledged before a kill were not in "
                                  f"the local files at that kill, e.g. {sorted(lost)[:3]}")
    result["ok"] = copy_ok(result) and not result["messages"] \
        and result["unacked_commits"] == 0 and result["exit_codes"]["final_sigterm"] == 0
    return result


def _resumes(load, stream, timeout):
    """Seconds until 10 more commits were acknowledged, or None (daemon dead or stuck)."""
    n0, t0 = len(load.acked), time.monotonic()
    if wait_for(lambda: len(load.acked) >= n0 + 10 or not stream.alive(), timeout, 0.05) \
            and stream.alive():
        return round(time.monotonic() - t0, 2)
    return None


def scenario_proxy(ctx):
    """Cuts, cuts at each setup byte count, a stall and a blackhole through a TCP proxy."""
    result = new_result("proxy")
    db, directory, start = ctx.begin("proxy")
    proxy = faults.TcpProxy("127.0.0.1", ctx.server.port).start()
    stream = ctx.stream(proxy.url, directory).start("--start-file", start)
    ctx.semi_sync_ready()
    load = Load(ctx.server, db).start()
    quick = ctx.args.quick
    points = [60, 150, 400] if quick else [1, 20, 60, 90, 120, 150, 200, 300, 400, 600,
                                           900, 1300, 2000, 4000]
    # setup cuts first: the cuts after them show whether the backoff was reset
    steps = [("setup-cut", n) for n in points] + [("cut", None)] * (6 if quick else 20)
    steps += [("stall", 3 if quick else 10), ("blackhole", 5 if quick else 20)]
    resume, failures = {}, []
    try:
        for i, (kind, arg) in enumerate(steps):
            label = f"{kind}-{i}" if arg is None else f"{kind}-{arg}"
            if kind == "cut":
                time.sleep(ctx.rng.uniform(0.3, 1.5))
                proxy.cut()
            elif kind == "setup-cut":
                before = proxy.accepted
                proxy.cut_after(arg)
                proxy.cut()
                wait_for(lambda: proxy.accepted >= before + 2 or not stream.alive(), 40, 0.05)
                proxy.cut_after(None)
            elif kind == "stall":
                proxy.stall(True)
                time.sleep(arg)
                proxy.stall(False)
            else:
                proxy.blackhole(True)
                proxy.cut()
                time.sleep(arg)
                proxy.blackhole(False)
            took = _resumes(load, stream, 45)
            resume[label] = took
            if took is None:
                alive = stream.alive()
                msg = (f"{label}: daemon exited {stream.proc.returncode}: "
                       f"{last_line(stream.output())}" if not alive else
                       f"{label}: no ACK for 45s, daemon stuck")
                failures.append(msg)
                if not alive:
                    result["exit_codes"][label] = stream.proc.returncode
                    stream.start()
                else:
                    proxy.release_holes()
                    proxy.cut()
                if not _resumes(load, stream, 60):
                    failures.append(f"{label}: still no ACK after restart/release")
    finally:
        result["resume_seconds"] = resume
        result["messages"] += failures
        finish_stream(ctx, stream, load, start, result)
        proxy.stop()
    result["ok"] = copy_ok(result) and not result["messages"] and \
        result["exit_codes"]["final_sigterm"] == 0
    return result


def scenario_sigterm(ctx):
    """SIGTERM must end the daemon (exit 0) within 3 s in every state."""
    result = new_result("sigterm")
    db, directory, start = ctx.begin("sigterm")
    proxy = faults.TcpProxy("127.0.0.1", ctx.server.port).start()
    stream = ctx.stream(proxy.url, directory)
    took = {}
    for state in ("streaming", "backing-off", "blackholed"):
        stream.start(*(() if os.path.isdir(directory) else ("--start-file", start)))
        wait_for(lambda: "streaming from" in stream.output(), 20, 0.1)
        if state == "backing-off":
            proxy.stop()
            time.sleep(12)
        elif state == "blackholed":
            proxy.blackhole(True)
            proxy.cut()
            time.sleep(3)
        code, took[state] = stream.stop(timeout=40)
        result["exit_codes"][state] = code
        if code != 0 or took[state] > 3:
            result["messages"].append(f"{state}: exit {code} after {took[state]}s: "
                                      f"{last_line(stream.output())}")
        elif checkpoint_problem(directory):
            result["messages"].append(f"{state}: {checkpoint_problem(directory)}")
        if state == "backing-off":
            proxy = faults.TcpProxy("127.0.0.1", ctx.server.port, port=proxy.port).start()
            stream.args[1] = proxy.url
    proxy.stop()
    result["stop_seconds"] = took
    result["ok"] = not result["messages"]
    return result


def _archived(keys, name):
    return any(k.endswith(f"/binlog/{name}.json") for k in keys)


def _store_scenario(ctx, name, fault):
    result = new_result(name)
    db, directory, start = ctx.begin(name)
    moto = faults.MotoProcess(log_path=os.path.join(ctx.work, f"{name}-moto.log")).start()
    bucket = f"torture-{ctx.count}"
    url = moto.bucket(bucket)
    opts = ("--archive", url, "--archive-option", f"endpoint_url={moto.endpoint}",
            "--archive-interval", "1")
    stream = ctx.stream(ctx.server.url, directory, *opts).start("--start-file", start)
    try:
        ctx.semi_sync_ready()
        load = Load(ctx.server, db).start()
        for _ in range(3):
            time.sleep(1)
            ctx.server.execute("FLUSH BINARY LOGS")
        wait_for(lambda: _archived(moto.keys(bucket), start), 30, 0.5)
        n0 = len(load.acked)
        fault_seconds = fault(moto, bucket, result, stream, ctx)
        result["acked_during_fault"] = len(load.acked) - n0
        if result["acked_during_fault"] < 10:
            result["messages"].append(f"only {result['acked_during_fault']} ACKs in the "
                                      f"{fault_seconds}s of the fault")
        load.stop()
        ctx.server.execute("FLUSH BINARY LOGS")
        wait_for(lambda: caught_up(ctx.server, directory), 60, 0.2)
        sealed = ctx.server.binlog_files()
        sealed = sealed[sealed.index(start):-1]
        done = wait_for(lambda: all(_archived(moto.keys(bucket), n) for n in sealed), 90, 1)
        if not done:
            keys = moto.keys(bucket)
            result["messages"].append("not archived 90s after the fault: " + ", ".join(
                n for n in sealed if not _archived(keys, n)))
            result["status_archive"] = json.loads(cli("status", "--dir", directory,
                                                      "--json")[1] or "{}").get("archive")
        code, out = cli("verify", *opts[:4])
        result["exit_codes"]["verify"] = code
        if code != 0:
            result["messages"].append(f"verify exit {code}: {last_line(out)}")
        code, _ = stream.stop()
        result["exit_codes"]["final_sigterm"] = code
        check_copy(ctx.server, directory, start, load.acked, load.db, result)
    finally:
        if stream.alive():
            stream.stop()
        moto.kill()
    result["ok"] = copy_ok(result) and not result["messages"] and \
        result["exit_codes"]["final_sigterm"] == 0
    return result


def _freeze(moto, bucket, result, stream, ctx):
    seconds = 8 if ctx.args.quick else 45
    moto.freeze()
    t0, seen = time.monotonic(), []
    try:
        while time.monotonic() - t0 < seconds:
            time.sleep(2)
            ctx.server.execute("FLUSH BINARY LOGS")
            code, out = cli("status", "--dir", stream.directory, "--json", timeout=30)
            try:
                seen.append(json.loads(out).get("archive") or {})
            except ValueError:
                seen.append({"unparsable": out[-200:]})
    finally:
        moto.thaw()
    last = seen[-1] if seen else {}
    backlog = last.get("backlog_files")
    shows = bool(last.get("last_error")) or bool(backlog) or bool(last.get("upload_in_progress")
                                                                  or last.get("uploading"))
    result["status_during_freeze"] = {k: last.get(k) for k in (
        "last_error", "backlog_files", "upload_in_progress", "uploading") if k in last}
    if not shows:
        result["messages"].append(f"status during a {seconds}s freeze shows no error, no "
                                  f"backlog and no upload in progress: {json.dumps(last)[:300]}")
    if not stream.alive():
        result["messages"].append(f"daemon exited {stream.proc.returncode} during the freeze")
    return seconds


def _restart_empty(moto, bucket, result, stream, ctx):
    t0 = time.monotonic()
    moto.restart()
    for i in range(4):  # the bucket is back after the uploads failed a while
        time.sleep(1.5)
        ctx.server.execute("FLUSH BINARY LOGS")
        if i == 1:
            moto.bucket(bucket)
    if not stream.alive():
        result["messages"].append(f"daemon exited {stream.proc.returncode} after the restart")
    return round(time.monotonic() - t0, 1)


def scenario_store_freeze(ctx):
    return _store_scenario(ctx, "store-freeze", _freeze)


def scenario_store_restart(ctx):
    return _store_scenario(ctx, "store-restart", _restart_empty)


def _fs_scenario(ctx, name):
    """Make the file system refuse a write: exit 8 with one line naming the path; then a
    restart with room again must resume and lose nothing."""
    result = new_result(name)
    db, directory, start = ctx.begin(name)
    mount = None
    if name == "fs-full":
        mount = faults.Tmpfs(os.path.join(ctx.work, f"{ctx.count}-tmpfs"), "48m").mount()
        directory = os.path.join(mount.path, "dir")
    stream = ctx.stream(ctx.server.url, directory)
    try:
        stream.start("--start-file", start)
        ctx.semi_sync_ready()
        load = Load(ctx.server, db).start()
        time.sleep(1.5)
        if mount:
            mount.fill()
        else:
            stream.kill9()
            size = os.path.getsize(os.path.join(directory, sorted(
                n for n in os.listdir(directory) if n.startswith("binlog."))[-1]))
            stream.prefix = faults.fsize_prefix(size + 30000)
            stream.start()
        exited = wait_for(lambda: not stream.alive(), 30, 0.1)
        out = stream.output()
        code = stream.proc.returncode if exited else "still running"
        result["exit_codes"]["refused"] = code
        line = last_line(out)
        result["refusal"] = line
        if code != 8 or directory not in line or "Traceback" in out:
            result["messages"].append(f"want exit 8 and one line naming {directory}; got "
                                      f"{code}: {line}" + (" (with a traceback)"
                                                           if "Traceback" in out else ""))
        if not exited:
            stream.kill9()
        if mount:
            mount.free()
        stream.prefix = []
        stream.start()
        if not wait_for(lambda: ctx.semi_sync_ready(1) or not stream.alive(), 30, 0.1) \
                or not stream.alive():
            result["exit_codes"]["restart"] = stream.proc.returncode
            result["messages"].append(f"restart after space was freed: exit "
                                      f"{stream.proc.returncode}: {last_line(stream.output())}")
            stream.start()  # keeps the load's commits from hanging while it stops
        time.sleep(1)
        finish_stream(ctx, stream, load, start, result)
    finally:
        if stream.alive():
            stream.stop()
        if mount:
            mount.unmount()
    result["ok"] = copy_ok(result) and not result["messages"]
    return result


def scenario_fs_full(ctx):
    if not faults.can_mount_tmpfs():
        r = new_result("fs-full")
        r.update(ok=True, skipped="not root: no tmpfs (fs-fsize covers EFBIG)")
        return r
    return _fs_scenario(ctx, "fs-full")


def scenario_fs_fsize(ctx):
    return _fs_scenario(ctx, "fs-fsize")


def scenario_foreign_file(ctx):
    """An empty file with a binlog name in the directory (far ahead, or the next name) is
    refused at start with exit 8 naming it, the checkpoint untouched; without it the
    daemon resumes and loses nothing."""
    result = new_result("foreign-file")
    db, directory, start = ctx.begin("foreign-file")
    stream = ctx.stream(ctx.server.url, directory).start("--start-file", start)
    ctx.semi_sync_ready()
    load = Load(ctx.server, db).start()
    time.sleep(1)
    state = os.path.join(directory, "mysqlbackup.state.json")
    for bogus in ("binlog.000099", "next"):
        code, _ = stream.stop()
        newest = sorted(n for n in os.listdir(directory) if n.startswith("binlog."))[-1]
        name = bogus if bogus != "next" else \
            f"binlog.{int(newest.rsplit('.', 1)[1]) + 1:06d}"
        path = os.path.join(directory, name)
        open(path, "wb").close()
        before = read(state)
        stream.start()
        exited = wait_for(lambda: not stream.alive(), 15, 0.1)
        got = stream.proc.returncode if exited else "still running"
        result["exit_codes"][f"empty {bogus}"] = got
        line = last_line(stream.output())
        if got != 8 or path not in line or read(state) != before:
            result["messages"].append(
                f"empty {name}: want exit 8 naming {path}, checkpoint untouched; got {got}"
                f"{', checkpoint rewritten' if read(state) != before else ''}: {line[:300]}")
        if not exited:
            stream.stop()
        os.remove(path)
        stream.start()
        ctx.semi_sync_ready(20)
    time.sleep(1)
    finish_stream(ctx, stream, load, start, result)
    result["ok"] = copy_ok(result) and not result["messages"]
    return result


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
    stream = ctx.stream(ctx.server.url, directory, "--archive", url,
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
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--replay-batch", spec],
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


SCENARIOS = {"kills": scenario_kills, "proxy": scenario_proxy, "sigterm": scenario_sigterm,
             "store-freeze": scenario_store_freeze, "store-restart": scenario_store_restart,
             "fs-full": scenario_fs_full, "fs-fsize": scenario_fs_fsize,
             "foreign-file": scenario_foreign_file,
             "archive-faults": scenario_archive_faults}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                   help="run only this scenario (repeatable; default: all)")
    p.add_argument("--quick", action="store_true",
                   help="the CI-sized run: 10 kills, 3 setup cuts, 6 cuts, short faults")
    p.add_argument("--kills", type=int, help="kill -9 count (default 100, --quick 10)")
    p.add_argument("--seed", type=int, default=1, help="random seed (delays, cut times)")
    p.add_argument("--workdir", help="parent of the work directory (default: $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--replay-batch", metavar="JSON", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.kills is None:
        args.kills = 10 if args.quick else 100
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.replay_batch:
        return replay_batch_main(args.replay_batch)
    ctx, ok = Context(args), True
    try:
        for name in args.scenario or list(SCENARIOS):
            t0 = time.monotonic()
            try:
                result = SCENARIOS[name](ctx)
            except Exception as e:  # a scenario that breaks is a failed scenario
                import traceback
                result = new_result(name)
                result["messages"].append(f"scenario raised {type(e).__name__}: {e}")
                result["traceback"] = traceback.format_exc()[-2000:]
            result["seconds"] = round(time.monotonic() - t0, 1)
            print(mask_url(json.dumps(result)), flush=True)
            ok = ok and result["ok"]
    finally:
        ctx.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
