"""The daemon side of ``scripts/bench_stream.py``: start ``mysqlbackup stream`` from a
checkout, wait for its durable position, stop it, and collect what it complained about.
The servers and daemons started are kept in SERVERS and DAEMONS for the caller's clean-up.
"""

import os
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from mysqlbackup.sandbox import REPL_PASSWORD  # noqa: E402
from mysqlbackup.localdir.status import collect_status  # noqa: E402

DAEMON_SERVER_ID = 101
DAEMON_ENV = dict(os.environ, PYTHONPATH=REPO, MYSQLBACKUP_PASSWORD=REPL_PASSWORD)
DAEMONS, SERVERS, DAEMON_LOGS = [], [], []


def wait_for(predicate, timeout, what, interval=0.05):
    """Poll ``predicate`` until it is true; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")


def start_daemon(server, directory, log_path, semi_sync=True, repo=REPO, extra=()):
    """Start ``mysqlbackup stream`` (the code in ``repo``) into ``directory``; its output
    goes to ``log_path``."""
    cmd = [sys.executable, "-m", "mysqlbackup", "stream", "--source", server.url,
           "--server-id", str(DAEMON_SERVER_ID), "--dir", directory, *extra]
    cmd += [] if semi_sync else ["--no-semi-sync"]
    DAEMON_LOGS.append(log_path)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, env=dict(DAEMON_ENV, PYTHONPATH=repo), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=repo)
    DAEMONS.append(proc)
    return proc


def stop_daemon(proc, timeout=20):
    """SIGTERM the daemon (by its pid) and wait; kill it if it does not stop in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"  ! daemon pid {proc.pid} ignored SIGTERM for {timeout} s: killing it")
            proc.kill()
            proc.wait()


def wait_daemon(proc, log_path, predicate, timeout, what, interval=0.02):
    """wait_for, but fail at once if the daemon exits."""
    def check():
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited with {proc.returncode}; see {log_path}")
        return predicate()
    wait_for(check, timeout, what, interval)


def durable_at(directory, name, pos):
    """True when the checkpoint's durable position is ``name``:``pos``."""
    state = collect_status(directory).get("state") or {}
    return (state.get("durable_file"), state.get("durable_pos")) == (name, pos)


def daemon_complaints():
    """Warning/error lines the daemon wrote, timestamps cut, each once."""
    lines = []
    for path in dict.fromkeys(DAEMON_LOGS):
        with open(path, errors="replace") as f:
            lines += [line.split(" ", 2)[-1].strip() for line in f
                      if any(w in line for w in ("WARNING", "ERROR", "Traceback", "rror:"))]
    return list(dict.fromkeys(lines))
