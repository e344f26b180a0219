"""The tool's password never shows: not in ``ps``, the daemon's log (debug level, text and
JSON), any command's output or error, the archive (indexes, manifests, reports, the base
dump: it holds the users' password hashes, never the cleartext) or the local directory.

A throwaway MariaDB whose replication user has a known password; the daemon streams and
archives, a base backup is taken (its password from a file), status, verify, archive ls,
config show, and failing commands (a wrong target, a wrong password) run, while a thread
samples ``ps -eo args`` the whole time."""

import os
import subprocess
import threading

import pytest
import zstandard

from tests.helpers import Daemon, caught_up, run_cli, wait_for

PASSWORD = "Sup3r-Secret-Pw"


class PsSampler(threading.Thread):
    """``ps -eo args`` every 50 ms until stopped; every distinct output kept, and how
    many were taken (``samples``: the commands run in-process, so outputs repeat)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen, self.samples, self.stopped = set(), 0, threading.Event()

    def run(self):
        while not self.stopped.wait(0.05):
            self.seen.add(subprocess.run(["ps", "-eo", "args"], capture_output=True,
                                         text=True).stdout)
            self.samples += 1

    def stop(self):
        self.stopped.set()
        self.join(10)
        return self.seen


def _every_file(root):
    for folder, _, names in os.walk(root):
        for name in names:
            yield os.path.join(folder, name)


def _contents(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".zst"):
        data = zstandard.ZstdDecompressor().stream_reader(data).read()
    return data


@pytest.fixture
def server(make_server):
    server = make_server()
    server.execute("SET SESSION sql_log_bin = 0",  # the ALTER itself stays out of the binlogs
                   f"ALTER USER 'repl'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
                   "GRANT SHOW VIEW, TRIGGER, EVENT ON *.* TO 'repl'@'127.0.0.1'")
    return server


def test_the_password_shows_nowhere(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MYSQLBACKUP_LOG_LEVEL", "debug")
    archive, directory = f"file://{tmp_path / 'archive'}", tmp_path / "d"
    password_file = tmp_path / "repl.password"
    password_file.write_text(PASSWORD + "\n")
    outputs, ps = [], PsSampler()
    ps.start()
    try:
        daemon = Daemon(server, directory, "--archive", archive, "--archive-interval", "0.2",
                        "--source-name", "db1", password=PASSWORD).start()
        try:
            server.execute("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY, v TEXT)",
                           *[f"INSERT INTO s.t VALUES ({i}, 'row {i}')" for i in range(20)],
                           "FLUSH BINARY LOGS", "INSERT INTO s.t VALUES (100, 'after')")
            wait_for(lambda: caught_up(server, directory), what="the daemon caught up")
            outputs += _commands(server, archive, directory, password_file)
            wait_for(lambda: "archived binlog.000001" in daemon.output(), what="an upload")
        finally:
            assert daemon.stop() == 0
        outputs.append(daemon.output())
    finally:
        seen = ps.stop()
    assert ps.samples > 5 and any("mysqlbackup stream" in s for s in seen), ps.samples
    assert not [s for s in seen if PASSWORD in s]
    for i, text in enumerate(outputs):
        assert PASSWORD not in text, f"output {i}: {text[:2000]}"
    files = list(_every_file(tmp_path / "archive")) + list(_every_file(directory))
    assert any("/base/" in f and f.endswith(".zst") for f in files)
    assert any(f.endswith("index.json") for f in files)
    for path in files:
        assert PASSWORD.encode() not in _contents(path), path
    dump = next(_contents(f) for f in files if f.endswith("dump.sql.zst"))
    assert b"CREATE USER" in dump and b"`repl`@`127.0.0.1`" in dump  # hashes, not the text


def _commands(server, archive, directory, password_file):
    """Every command's stdout and stderr; each expected to succeed or fail as it should."""
    source = server.url
    runs = [
        (0, ["base", "--source", source, "--archive", archive, "--source-name", "db1",
             "--password-file", str(password_file)], ""),
        (0, ["status", "--dir", str(directory)], PASSWORD),
        (0, ["status", "--dir", str(directory), "--json"], PASSWORD),
        (0, ["verify", "--archive", archive], PASSWORD),
        (0, ["archive", "ls", "--archive", archive], PASSWORD),
        (0, ["config", "show"], PASSWORD),
        (0, ["--log-format", "json", "config", "show", "--json", "stream", "--source", source,
             "--password-file", str(password_file)], PASSWORD),
        (3, ["restore", "--archive", archive, "--target", "mysql://repl@127.0.0.1:1"],
         PASSWORD),
        (3, ["base", "--source", source, "--archive", archive, "--source-name", "db1"],
         PASSWORD + "-wrong"),
        (3, ["--log-format", "json", "base", "--source", source, "--archive", archive,
             "--source-name", "db1"], PASSWORD + "-wrong"),
    ]
    texts = []
    for code, args, password in runs:
        done = run_cli(*args, password=password, timeout=120)
        assert done.returncode == code, (args, done.stdout, done.stderr)
        texts += [done.stdout, done.stderr]
    assert "access denied for repl@127.0.0.1" in texts[-3]  # named, the password not shown
    return texts
