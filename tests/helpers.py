"""Test helpers: run the daemon as a real process, wait for conditions, compare files."""

import json
import os
import signal
import subprocess
import sys
import time

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.sandbox import REPL_PASSWORD

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli_env(password=REPL_PASSWORD):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["MYSQLBACKUP_PASSWORD"] = password
    return env


# what run_cli runs as a child process whatever it is asked: the daemon (its signals,
# its lock, a process of its own as under systemd)
PROCESS_ONLY = {"stream", "serve"}


def run_cli(*args, password=REPL_PASSWORD, timeout=60, path=None, process=False):
    """Run ``mysqlbackup ARGS`` to completion: (returncode, stdout, stderr) as a
    CompletedProcess has them. ``path``: its PATH (e.g. the MySQL client wrappers first).

    In this process through click's CliRunner (no interpreter, no JVM to start: a replay
    reuses the run's Spark session), unless ``process`` or a command of PROCESS_ONLY:
    then ``python -m mysqlbackup`` as a child, as a user runs it (each command keeps at
    least one such test end to end). ``timeout`` bounds a child only."""
    if process or (args and args[0] in PROCESS_ONLY):
        env = cli_env(password)
        if path is not None:
            env["PATH"] = path
        return subprocess.run([sys.executable, "-m", "mysqlbackup", *args], env=env,
                              capture_output=True, text=True, timeout=timeout)
    return _in_process(args, password, path)


def _in_process(args, password, path):
    import logging
    import traceback
    from types import SimpleNamespace

    from click.testing import CliRunner

    from mysqlbackup import logs
    from mysqlbackup.cli import main
    env = {"MYSQLBACKUP_PASSWORD": password}
    if path is not None:
        env["PATH"] = path
    root = logging.getLogger()
    handlers, level, state = list(root.handlers), root.level, dict(logs._state)
    try:
        result = CliRunner().invoke(main, list(map(str, args)), env=env)
    finally:  # the next test's logging as this one found it (--log-format json too)
        root.handlers[:], root.level = handlers, level
        logs._state.update(state)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))  # a bug: as a child
    return SimpleNamespace(returncode=result.exit_code, stdout=result.stdout, stderr=stderr,
                           args=args)


class Daemon:
    """``mysqlbackup stream`` as a child process."""

    def __init__(self, server, directory, *extra, server_id=77, password=REPL_PASSWORD):
        self.password = password
        if "--archive" in extra and "--compress" not in extra:
            extra = (*extra, "--compress", "none")  # plain objects unless a test asks
        self.args = [sys.executable, "-m", "mysqlbackup", "stream", "--source", server.url,
                     "--server-id", str(server_id), "--dir", str(directory), *extra]
        self.directory = str(directory)
        self.log_path = os.path.join(os.path.dirname(self.directory),
                                     os.path.basename(self.directory) + ".log")
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "ab")
        self.started_at = self.log.tell()  # the log of this run starts here
        self.proc = subprocess.Popen(self.args, env=cli_env(self.password), stdout=self.log,
                                     stderr=subprocess.STDOUT)
        return self

    def wait_streaming(self, timeout=30):
        """Wait until this run (not an earlier one into the same log) streams: it holds
        the directory's lock and its signal handlers are in place."""
        def streaming():
            with open(self.log_path, "rb") as f:
                f.seek(self.started_at)
                return b"streaming from" in f.read() or self.proc.poll() is not None
        wait_for(streaming, timeout, what="the daemon streaming")
        assert self.proc.poll() is None, self.output()[-3000:]
        return self

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.log.close()

    def stop(self):
        """SIGTERM and wait; return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.log.close()
        return code

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def status(self):
        out = run_cli("status", "--dir", self.directory, "--json")
        return json.loads(out.stdout)


def wait_for(predicate, timeout=30, interval=0.05, what="condition"):
    """Poll ``predicate`` until it returns a true value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_semi_sync_client(server, timeout=20):
    wait_for(lambda: server.status("Rpl_semi_sync_master_clients") == "1"
             and server.status("Rpl_semi_sync_master_status") == "ON",
             timeout, what="a semi-sync replica with semi-sync ON")


def wait_semi_sync_source(server, timeout=30):
    """MySQL's: a semi-sync replica connected and semi-sync ON, which it turns on once
    that replica has caught up (a commit before that goes async: no_tx, not yes_tx)."""
    wait_for(lambda: server.status("Rpl_semi_sync_source_clients") == "1"
             and server.status("Rpl_semi_sync_source_status") == "ON",
             timeout, what="a semi-sync replica with semi-sync ON")


def current_binlog(server):
    if hasattr(server, "current_binlog"):  # MySQL 8.4+: SHOW BINARY LOG STATUS
        return server.current_binlog()
    return server.execute("SHOW MASTER STATUS")[0][0]


def module_primary(tmp_path_factory, name, *statements, semi_sync_timeout_ms=1000):
    """A throwaway primary of one test module, ``statements`` run on it (schema)."""
    from mysqlbackup.sandbox import MariaDBSandbox, find_binary
    if find_binary("mariadbd") is None:
        raise AssertionError("mariadbd not found: run scripts/test.sh, which installs "
                             "mariadb-server")
    server = MariaDBSandbox(str(tmp_path_factory.mktemp(name)),
                            semi_sync_timeout_ms=semi_sync_timeout_ms).start()
    if statements:
        server.execute(*statements)
    return server


def wait_archived_to_the_end(primary, store, source="db1", timeout=120):
    """Wait until the archive holds a segment ending where the primary's newest file ends
    (its last transaction archived). Two minutes: on a loaded machine the moto server
    behind an s3:// archive has stalled a request past its timeouts and retries (seen:
    58 s), which the archiver rides out by trying again. The newest file's end is read
    again at each look: after a rotation the server appends its BINLOG_CHECKPOINT event
    to the new file a moment later (a size taken before it is one no segment may end at,
    when the archiver's first pass of the file came after the event)."""
    def archived():
        last = current_binlog(primary)
        size = os.path.getsize(primary.binlog_path(last))
        return any(k.endswith(f"-{size:012d}.json")
                   for k in store.list(f"{source}/partial/{last}"))
    wait_for(archived, timeout=timeout, what="the archive to hold the last transaction")


def caught_up(server, directory, settle=0.3):
    """True when the local copy of the server's newest file is as long as the server's,
    and still is ``settle`` seconds later: after a rotation the server appends its
    BINLOG_CHECKPOINT event to the new file a moment later (and a daemon stops at once)."""
    def same():
        name = current_binlog(server)
        local = os.path.join(str(directory), name)
        return os.path.exists(local) and os.path.getsize(local) == os.path.getsize(
            server.binlog_path(name))
    if not same():
        return False
    time.sleep(settle)
    return same()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def same_except_in_use_flag(local, remote):
    """Local copy equals the server's file, allowing the FDE in-use flag (offset 21).
    The server's active file may go on past the copy with MariaDB binlog checkpoint
    events alone: the server writes one into its new file when the file before it is
    all committed, a moment after a FLUSH, which a daemon stopped at its catch-up has
    not received (nothing else may follow the copy)."""
    a, b = bytearray(read(local)), bytearray(read(remote))
    if len(a) < 22 or len(a) > len(b) or not _checkpoints_only(b, len(a)):
        return False
    a[21] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F
    b[21] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F
    return a == b[:len(a)]


def _checkpoints_only(data, start):
    """True when the events of ``data`` from ``start`` on are binlog checkpoints only."""
    pos = start
    while pos + ev.HEADER_LEN <= len(data):
        if data[pos + 4] != ev.MARIA_BINLOG_CHECKPOINT:
            return False
        length = int.from_bytes(data[pos + 9:pos + 13], "little")
        if length < ev.HEADER_LEN:
            return False
        pos += length
    return pos == len(data)


def maria_gtids(paths):
    """(domain, seq) of every MariaDB GTID event in the files, in order."""
    out = []
    for path in paths:
        data = read(path)
        for _, event in iter_events(data, 4, None):
            if event[4] == ev.MARIA_GTID:
                g = ev.parse_maria_gtid(event, True)
                out.append((g.domain, g.seq))
    return out


def make_event(etype, body, log_pos, checksum=True, flags=0, server_id=1, timestamp=0):
    """Craft one binlog v4 event (with a valid CRC32 when ``checksum``)."""
    import struct
    import zlib
    size = ev.HEADER_LEN + len(body) + (4 if checksum else 0)
    raw = struct.pack("<IBIIIH", timestamp, etype, server_id, size, log_pos, flags) + body
    if checksum:
        raw += struct.pack("<I", zlib.crc32(raw))
    return raw


def packets(events, semi_sync=False, ack_flags=None, first_seq=1):
    """Frame events as the server does in a binlog dump (OK byte, semi-sync header)."""
    from mysqlbackup.source import protocol
    out, seq = [], first_seq
    for i, event in enumerate(events):
        need_ack = bool(ack_flags and ack_flags[i])
        head = b"\x00" + (bytes([0xEF, 1 if need_ack else 0]) if semi_sync else b"")
        out.append(protocol.frame(head + event, seq))
        seq = 1 if need_ack else (seq + 1) & 0xFF
    return b"".join(out)


def file_events(path, check_log_pos=True):
    """The whole events of a binlog file, in order (bytes)."""
    return [bytes(e) for _, e in iter_events(read(path), 4, None, check_log_pos=check_log_pos)]


def backup_dir(files, directory, source_identity):
    """A backup directory holding copies of binlog ``files``, checkpointed at the end
    of the last one (as the daemon leaves it), for driving the archiver directly."""
    import shutil

    from mysqlbackup.localdir.state import State, save_state
    os.makedirs(directory, exist_ok=True)
    for path in files:
        shutil.copyfile(path, os.path.join(directory, os.path.basename(path)))
    last = os.path.basename(files[-1])
    save_state(str(directory), State(file=last, pos=os.path.getsize(files[-1]),
                                     source_identity=source_identity))
    return directory


def tagged(server, *statements, tag="nightly"):
    """Run ``statements`` under GTIDs tagged ``tag`` (MySQL 8.4+: AUTOMATIC:TAG)."""
    conn = server.root()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET gtid_next = 'AUTOMATIC:{tag}'")
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


def change_table_rows(out):
    """The rows of the change table at ``out`` (a folder), its parts in the order its
    ``_SUCCESS`` lists them (commit order)."""
    import pyarrow.parquet as pq
    parts = json.loads((out / "_SUCCESS").read_text())["parts"]
    return [r for part in parts for r in pq.read_table(out / part).to_pylist()]


def selection_of(**options):
    """``build_selection`` of option values as the command line gives them, the stop
    options (stop_datetime, stop_before_gtid, stop_position) among them."""
    from mysqlbackup.archive.stop import parse_stop
    from replay.planning.options import build_selection
    stops = {name: options.pop(name) for name in ("stop_datetime", "stop_before_gtid",
                                                  "stop_position") if name in options}
    return build_selection(stop=parse_stop(**stops), **options)
