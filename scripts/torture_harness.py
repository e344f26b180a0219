"""Torture suite harness: the daemon as a subprocess, the CLI, polling, shared context.

What every torture module shares (``scripts/torture.py`` runs the scenarios): the
repository on ``sys.path``, moto's dummy AWS credentials in the environment,
``mysqlbackup`` runs (``cli``, ``Stream``), ``wait_for``, ``last_line``, the summary
skeleton (``new_result``) and the ``Context`` (options, work directory, one primary).
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from mysqlbackup.sandbox import MariaDBSandbox  # noqa: E402
from tests.helpers import cli_env  # noqa: E402

AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1"}
os.environ.update(AWS)


def env():
    """The environment for a ``mysqlbackup`` child: repository, password, dummy AWS keys."""
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
        """Start it (``first_only``: extra arguments for this start only); log appended."""
        self.mark = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "mysqlbackup", "stream", *self.args,
                 *first_only], env=env(), stdout=log, stderr=subprocess.STDOUT)
        return self

    def alive(self):
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        """SIGKILL and reap it; return its exit code."""
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
        """Its log since the last start (``whole``: since the first)."""
        with open(self.log_path, "rb") as f:
            f.seek(0 if whole else self.mark)
            return f.read().decode("utf-8", "replace")


def new_result(name):
    """The summary skeleton of a scenario (not ok until the scenario says so)."""
    return {"scenario": name, "kills": 0, "acknowledged": 0, "lost": None, "duplicates": None,
            "files_identical": None, "exit_codes": {}, "messages": [], "ok": False}


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
        """A ``Stream`` of ``url`` into ``directory``, its log next to it (not started)."""
        os.makedirs(os.path.dirname(directory), exist_ok=True)
        return Stream(url, directory, *extra, server_id=server_id or 100 + self.count,
                      log_path=directory.rstrip("/") + ".log")

    def semi_sync_ready(self, timeout=30):
        """Wait until the primary has one semi-sync client and semi-sync is ON."""
        return wait_for(lambda: self.server.status("Rpl_semi_sync_master_clients") == "1"
                        and self.server.status("Rpl_semi_sync_master_status") == "ON",
                        timeout, 0.1)

    def close(self):
        """Stop the primary; remove the work directory unless ``--keep``."""
        self.server.stop()
        if not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)
