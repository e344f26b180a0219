"""Torture suite load and copy checks: semi-sync client load, then the local copy
judged from outside.

``Load`` commits from client threads and records each id whose COMMIT returned;
``check_copy`` compares every local file with the primary's (byte for byte; the active
file may differ only in the in-use flag at offset 21) and finds every acknowledged id
exactly once with ``mariadb-binlog -v`` (``binlog_ids``), not with our own decoder.
"""

import collections
import json
import os
import re
import subprocess
import threading
import time

from torture_harness import last_line, wait_for
from tests.helpers import read, same_except_in_use_flag


class Load:
    """Client threads committing until stopped; ``acked`` holds each id whose COMMIT
    returned. Thread 0 commits 20-row transactions, the others single rows."""

    running = set()  # started and not stopped: a scenario that raised leaves them here

    def __init__(self, server, db, threads=3):
        self.server, self.db, self.acked = server, db, []
        self.stopped, self.errors = threading.Event(), 0
        server.execute(f"CREATE DATABASE IF NOT EXISTS {db}",
                       f"CREATE TABLE IF NOT EXISTS {db}.t (id BIGINT PRIMARY KEY, w INT)")
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(threads)]

    def start(self):
        """Start the client threads and the semi-sync watcher."""
        for t in self.threads:
            t.start()
        threading.Thread(target=self._watch, daemon=True).start()
        Load.running.add(self)
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
        """Stop committing; wait for the client threads."""
        self.stopped.set()
        for t in self.threads:
            t.join(90)
        Load.running.discard(self)


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


def first_difference(local, primary):
    """Where the local copy first differs from the primary's file (sizes and offset)."""
    a, b = read(local), read(primary)
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y and i != 21),
              min(len(a), len(b)))
    return (f"{os.path.basename(local)}: local {len(a)} bytes, primary {len(b)}, first "
            f"difference at {at}: local {a[at:at + 24].hex()} primary {b[at:at + 24].hex()}")


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
        result["messages"].extend(first_difference(os.path.join(directory, n),
                                                   server.binlog_path(n)) for n in different)
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
    """True when the local copy of the primary's current file is as long as the primary's."""
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
    """True when the copy lost nothing, duplicated nothing and every file is identical."""
    return result["lost"] == 0 and result["duplicates"] == 0 and bool(result["files_identical"])
