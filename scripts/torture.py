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
import re
import sys
import time

from torture_harness import Context, cli, last_line, new_result, wait_for  # REPO on sys.path
from torture_load import (Load, caught_up, check_copy, checkpoint_problem, copy_ok,
                          finish_stream, lost_at_kills)
from torture_archive import replay_batch_main, scenario_archive_faults
from mysqlbackup.errors import mask_url
from tests import faults
from tests.helpers import read


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
            retries = stream.output().count("reconnecting in")
            proxy.stop()
            # the third failed attempt: it sleeps through a longer step of the backoff
            wait_for(lambda: stream.output().count("reconnecting in") >= retries + 3
                     or not stream.alive(), 40, 0.1)
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
    """moto S3 frozen (SIGSTOP) a while: ACKs go on, status shows it, all archived after."""
    return _store_scenario(ctx, "store-freeze", _freeze)


def scenario_store_restart(ctx):
    """moto S3 restarted empty: everything is archived again and verify exits 0."""
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
    """A full tmpfs (root only; skipped otherwise): exit 8 naming the path, then resume."""
    if not faults.can_mount_tmpfs():
        r = new_result("fs-full")
        r.update(ok=True, skipped="not root: no tmpfs (fs-fsize covers EFBIG)")
        return r
    return _fs_scenario(ctx, "fs-full")


def scenario_fs_fsize(ctx):
    """``prlimit --fsize`` (EFBIG): exit 8 naming the path, then resume."""
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


SCENARIOS = {"kills": scenario_kills, "proxy": scenario_proxy, "sigterm": scenario_sigterm,
             "store-freeze": scenario_store_freeze, "store-restart": scenario_store_restart,
             "fs-full": scenario_fs_full, "fs-fsize": scenario_fs_fsize,
             "foreign-file": scenario_foreign_file,
             "archive-faults": scenario_archive_faults}


def parse_args(argv=None):
    """The command line (``--kills`` defaults to 10 with ``--quick``, else 100)."""
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
    """Run the chosen scenarios, one masked JSON line each; 0 when all are ok."""
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
            finally:  # a load left committing would change the next scenarios' files
                for load in list(Load.running):
                    load.stop()
            result["seconds"] = round(time.monotonic() - t0, 1)
            print(mask_url(json.dumps(result)), flush=True)
            ok = ok and result["ok"]
    finally:
        ctx.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
