"""One daemon per directory and ``status --check`` against a real daemon and server
(issue 13, items 3 and 4): the refusal names the holder's pid, ``status`` says who
holds the lock since when (the flock itself, so a ``kill -9`` leaves no holder), and
the health check says down, stale, behind or archive behind in one line."""

import json
import os
import re
import signal
import socket
import time

import pytest

from mysqlbackup.localdir.state import LOCK_FILE, STATE_FILE, State, load_state
from mysqlbackup.localdir.status import seconds_behind
from tests.helpers import Daemon, caught_up, current_binlog, module_primary, run_cli, wait_for

HOST = socket.gethostname()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A primary of this module's own (old event timestamps go into its binlog)."""
    srv = module_primary(tmp_path_factory, "health-primary", "CREATE DATABASE h",
                         "CREATE TABLE h.t (id INT PRIMARY KEY AUTO_INCREMENT, v INT)")
    yield srv
    srv.stop(remove=True)


def _started(server, directory, *extra, server_id=77):
    # (a daemon started again finds the first one's checkpoint and files: it is started
    # once it streams)
    daemon = Daemon(server, directory, *extra, server_id=server_id).start().wait_streaming()
    wait_for(lambda: os.path.exists(os.path.join(directory, STATE_FILE)), 30,
             what="the daemon's first checkpoint")
    wait_for(lambda: caught_up(server, directory), 30, what="the daemon to catch up")
    return daemon


def _check(directory, *limits):
    out = run_cli("status", "--dir", str(directory), "--check", *limits)
    assert out.stderr == ""
    return out.returncode, out.stdout


def _status(directory):
    return json.loads(run_cli("status", "--dir", str(directory), "--json").stdout)


def _clock(ts):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


@pytest.mark.server
def test_second_daemon_names_the_first_and_status_shows_the_holder(server, tmp_path):
    directory = str(tmp_path / "d")
    before = time.time()
    first = _started(server, directory)
    try:
        second = Daemon(server, directory, server_id=78).start()
        assert second.proc.wait(timeout=20) == 8
        second.log.close()
        lock = os.path.join(directory, LOCK_FILE)
        assert f"another mysqlbackup process (pid {first.proc.pid} on {HOST} since " \
            in second.output()
        assert f"holds {lock}: one daemon per directory" in second.output()

        held = _status(directory)["lock"]
        assert held["held"] is True and held["pid"] == first.proc.pid
        assert before - 1 <= held["since"] <= time.time()
        text = run_cli("status", "--dir", directory).stdout.splitlines()
        assert f"daemon:           pid {first.proc.pid} on {HOST} holds the lock since " \
               f"{_clock(held['since'])}" in text
        code, line = _check(directory)
        assert code == 0
        assert line.startswith(f"OK {directory}: daemon pid {first.proc.pid} on {HOST} holds "
                               f"the lock since {_clock(held['since'])}, checkpoint ")
    finally:
        first.kill9()

    gone = _status(directory)["lock"]
    assert gone == dict(held, held=False)  # the holder file stays; the flock is free
    code, line = _check(directory)
    assert (code, line) == (1, f"UNHEALTHY {directory}: daemon down: no process holds {lock} "
                               f"(last: pid {first.proc.pid} on {HOST}, started "
                               f"{_clock(held['since'])})\n")

    again = _started(server, directory)  # a kill -9 leaves no lock behind
    try:
        assert _status(directory)["lock"]["pid"] == again.proc.pid
        assert _check(directory)[0] == 0
    finally:
        assert again.stop() == 0


@pytest.mark.server
def test_check_stale_then_behind(server, tmp_path):
    directory = str(tmp_path / "d")
    daemon = _started(server, directory, "--heartbeat", "30")
    try:
        code, line = _check(directory)
        assert code == 0 and line.startswith(f"OK {directory}: daemon pid ")
        os.kill(daemon.proc.pid, signal.SIGSTOP)  # hung: holds the lock, writes nothing
        try:
            time.sleep(1.6)
            code, line = _check(directory, "--max-stale", "1")
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)
        state = load_state(directory)
        assert code == 1
        assert re.fullmatch(rf"UNHEALTHY {re.escape(directory)}: stale: the checkpoint is "
                            r"\d+ s old \(limit 1 s\): the daemon holds the lock but is not "
                            r"streaming \(source unreachable, reconnecting, or hung\); "
                            rf"durable {state.file}:{state.pos}\n", line), line
    finally:
        assert daemon.stop() == 0

    # ten minutes old transactions, committed while the daemon is down
    server.execute("SET TIMESTAMP = UNIX_TIMESTAMP() - 600",
                   "INSERT INTO h.t (v) VALUES (1), (2)", "SET TIMESTAMP = DEFAULT")
    daemon = _started(server, directory, "--heartbeat", "30")
    try:
        st = _status(directory)["state"]
        assert 595 <= st["lag_s"] <= 660, st
        assert (st["durable_file"], st["durable_pos"]) == (
            current_binlog(server), int(server.execute("SHOW MASTER STATUS")[0][1]))
        code, line = _check(directory)
        assert code == 1
        lag = int(re.fullmatch(rf"UNHEALTHY {re.escape(directory)}: behind: (\d+) s behind "
                               rf"the source \(limit 60 s\); durable {st['durable_file']}:"
                               rf"{st['durable_pos']}\n", line).group(1))
        assert abs(lag - st["lag_s"]) <= 1
        assert _check(directory, "--max-lag", "900")[0] == 0
    finally:
        assert daemon.stop() == 0


def _archived_end(archive, name):
    """Where the newest file's archived segments end (4: none), from the archive's
    own objects (SOURCE/partial/NAME/START-END with an index)."""
    folder = os.path.join(archive, "t", "partial", name)
    ends = [int(e.split("-")[1][:-5]) for e in os.listdir(folder) if e.endswith(".json")] \
        if os.path.isdir(folder) else []
    return max(ends, default=4)


@pytest.mark.server
def test_check_archive_behind(server, tmp_path):
    directory, archive = str(tmp_path / "d"), str(tmp_path / "archive")
    os.makedirs(archive)
    daemon = _started(server, directory, "--archive", f"file://{archive}", "--source-name", "t",
                      "--archive-interval", "0.2")
    try:
        # a heartbeat says the old last transaction is all there is; all of it archived
        wait_for(lambda: _status(directory)["state"]["lag_s"] == 0, 10, what="a heartbeat")
        wait_for(lambda: (_status(directory)["archive"] or {}).get("lag_s") == 0, 20,
                 what="everything durable archived")
        code, line = _check(directory, "--max-archive-lag", "1")
        assert code == 0, (line, _status(directory))
    finally:
        assert daemon.stop() == 0

    daemon = _started(server, directory, "--archive", f"file://{archive}", "--source-name", "t",
                      "--archive-interval", "120")  # one pass at the start, then none
    try:
        wait_for(lambda: (_status(directory)["archive"] or {}).get("last_success"), 20,
                 what="the archiver's first pass")
        server.execute("INSERT INTO h.t (v) VALUES (3)")
        wait_for(lambda: caught_up(server, directory), 20, what="the daemon to catch up")
        time.sleep(1.2)
        st = _status(directory)
        name, durable = st["state"]["durable_file"], st["state"]["durable_pos"]
        pending = durable - _archived_end(archive, name)
        assert pending > 0 and st["archive"]["pending_bytes"] == pending
        code, line = _check(directory, "--max-archive-lag", "1")
        assert code == 1
        assert re.fullmatch(rf"UNHEALTHY {re.escape(directory)}: archive behind: \d+ s since "
                            r"the last successful archive pass \(limit 1 s\) with 0 sealed "
                            rf"files and {pending} bytes of the newest file not archived\n",
                            line), line
        assert _check(directory)[0] == 0  # the default limit: 300 s
    finally:
        assert daemon.stop() == 0


@pytest.mark.server
def test_check_missing_directory(tmp_path):
    code, line = _check(tmp_path / "none")
    assert (code, line) == (1, f"UNHEALTHY {tmp_path / 'none'}: {tmp_path / 'none'} does not "
                               f"exist\n")


def test_seconds_behind():
    caught = State(file="b.000002", pos=900, last_event_time=1000, updated=1700.0,
                   source_position={"file": "b.000002", "pos": 900, "time": 1690.0})
    assert seconds_behind(caught) == 0.0  # the source's heartbeat named the durable end
    behind = State(file="b.000002", pos=900, last_event_time=1000, updated=1700.0,
                   source_position={"file": "b.000002", "pos": 500, "time": 1090.0},
                   last_ack={"file": "b.000002", "pos": 900, "time": 1042.5})
    assert seconds_behind(behind) == 42.5  # ACKed when it arrived, 42.5 s after its event
    behind.last_ack = None
    assert seconds_behind(behind) == 700.0  # no ACK: the checkpoint's time
    assert seconds_behind(State(file="b.000002", pos=900)) is None


def test_an_archive_error_shows_before_the_first_checkpoint(tmp_path):
    """A daemon whose archive fails from the start has no checkpoint yet: status still
    says why the archive fails (the URL's password masked)."""
    from mysqlbackup.localdir.state import ARCHIVE_STATE_FILE
    from mysqlbackup.localdir.status import collect_status, format_status
    (tmp_path / ARCHIVE_STATE_FILE).write_text(json.dumps({
        "url": "ftp://backup:s3cr3t@127.0.0.1:21/archive", "source": "db1",
        "archived": [], "last_error": "ConnectionRefusedError: [Errno 111] refused",
        "last_error_time": 1764150000.0}))
    lines = format_status(collect_status(str(tmp_path), now=1764150001.0))
    assert lines[3] == "checkpoint:       none yet"
    assert lines[4] == "archive:          ftp://***@127.0.0.1:21/archive (source db1)"
    assert lines[-1].startswith("archive error:    ConnectionRefusedError: [Errno 111] "
                                "refused (at 2025-11-26")
    assert "s3cr3t" not in "\n".join(lines)
