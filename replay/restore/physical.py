"""Load a physical base (mariadb-backup's xbstream; MySQL's clone: ``clonedir``) into
a new datadir and start a server on it, for the restore to replay into (I/O).

The object is streamed from the archive in ranged reads, zstd-decompressed as it
streams (``mysqlbackup.base.stream.stream_object``, the same path a dump takes) into ``mbstream -x``; then
``mariadb-backup --prepare`` makes the copy consistent, and ``mariadbd`` is started
on it (``--no-defaults``, bound to the target's host and port). The server keeps
running after the restore: it is the restored database.

A marker file in the datadir records the base it holds once it is prepared, so a
restore run again after an interruption starts the server on it instead of
refusing a non-empty directory; any other non-empty directory is refused.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

import pymysql

from mysqlbackup.archive.codec import Digest
from mysqlbackup.base.client import ToolError, find_tool
from mysqlbackup.durable import write_bytes
from mysqlbackup.errors import UsageError
from mysqlbackup.scratch import as_root, find_binary, private_tmpdir
from mysqlbackup.base.stream import check_digests, stream_object

MARKER = "mysqlbackup-restore.json"
START_TIMEOUT = 600.0       # seconds a started server may take to accept logins
_ACCESS_DENIED = 1045


@dataclass(frozen=True)
class RestoredServer:
    """The server started on the restored datadir: where it listens, its pid."""

    spec: object          # SourceSpec to connect (the restore's target)
    pid: int
    datadir: str
    error_log: str
    name: str = "mariadbd"  # the server's binary (MySQL's: mysqld)


def restore_physical(store, key, manifest, datadir, target, progress=None,
                     timeout=START_TIMEOUT, keyring=None):
    """The physical base ``key`` (its ``manifest``) into ``datadir``, prepared, and a
    mariadbd started on it at ``target``'s host and port; returns RestoredServer.

    ``target`` (a SourceSpec) names a user of the backed-up source: its users come
    with the copy. ``datadir`` must be new or empty, or hold this base prepared by
    an earlier run (then only the server is started). Raises UsageError (a datadir in
    use, a busy port, a user the restored server refuses), ToolError (mbstream,
    mariadb-backup or mariadbd failed: its last line), CorruptBinlog (the object is
    not its manifest's). A clone base (MySQL) is ``clonedir.restore_clone``'s."""
    progress = progress or (lambda line: None)
    datadir = os.path.abspath(datadir)
    if not holds_prepared(datadir, manifest):
        _extract(store, key, manifest, datadir, progress, keyring)
        _prepare(datadir, progress)
        write_bytes(os.path.join(datadir, MARKER), json.dumps(
            {"base": manifest["id"], "source": manifest["source"], "state": "prepared"}).encode())
    else:
        progress(f"restore: {datadir} holds base {manifest['id']} prepared: starting it")
    return start_server(datadir, target, progress, timeout)


def holds_prepared(datadir, manifest):
    """True when ``datadir`` holds this base prepared; False when it is new or empty;
    UsageError for anything else (never overwrite a directory we did not fill)."""
    if not os.path.exists(datadir) or not os.listdir(datadir):
        return False
    try:
        with open(os.path.join(datadir, MARKER), encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError):
        marker = {}
    if marker.get("base") == manifest["id"] and marker.get("state") == "prepared":
        return True
    raise UsageError(f"--datadir {datadir} is not empty (and holds no prepared copy of base "
                     f"{manifest['id']}): give a new or empty directory")


def _extract(store, key, manifest, datadir, progress, keyring=None):
    os.makedirs(datadir, exist_ok=True)
    progress(f"restore: extracting base {manifest['id']} ({manifest['stored_size']} bytes "
             f"stored) into {datadir}")
    pipe_into(store, key, manifest, [find_tool(("mbstream",)), "-x", "-C", datadir],
              f"mbstream -x into {datadir}", progress, keyring)


def pipe_into(store, key, manifest, argv, what, progress, keyring=None):
    """The base object ``key`` streamed (decoded) into the standard input of the tool
    ``argv`` (an extractor), then checked against its manifest: ToolError naming
    ``what`` and the tool's last error line when it fails, CorruptBinlog when the object
    is not the manifest's."""
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=errors)
        digests = (Digest(), Digest())
        try:
            stream_object(store, key, manifest, proc.stdin, digests, progress, None, keyring)
        except BrokenPipeError:
            pass  # the tool stopped reading: its exit code and error say why
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        if proc.wait() != 0:
            raise ToolError(f"{what} failed (exit {proc.returncode}): {_last_line(errors)}")
    check_digests(key, manifest, *digests)


def _prepare(datadir, progress):
    progress(f"restore: mariadb-backup --prepare {datadir}")
    tool = find_tool(("mariadb-backup", "mariabackup"))
    done = subprocess.run([tool, "--no-defaults", "--prepare", f"--target-dir={datadir}"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
        raise ToolError(f"mariadb-backup --prepare {datadir} failed (exit {done.returncode}): "
                        f"{lines[-1] if lines else 'no message'}")


def server_args(binary, datadir, host, port, flavor="mariadb"):
    """The server's arguments for a restored datadir (the host's my.cnf is not read);
    MySQL's (``flavor``): no X plugin, no file import/export, GTID mode on (the replay
    gives each transaction the source's GTID)."""
    args = [binary, "--no-defaults", f"--datadir={datadir}", f"--port={port}",
            f"--bind-address={host}", f"--socket={_socket_path(port)}",
            f"--tmpdir={_tmpdir_path(datadir)}",
            f"--pid-file={os.path.join(datadir, 'mysqld.pid')}",
            f"--log-error={os.path.join(datadir, 'error.log')}"]
    if flavor == "mysql":
        args += ["--skip-replica-start", "--mysqlx=OFF", "--secure-file-priv=NULL",
                 "--gtid-mode=ON", "--enforce-gtid-consistency=ON"]
    else:
        args += ["--skip-slave-start"]
    return args + as_root()


def _socket_path(port):
    return os.path.join(tempfile.gettempdir(), f"mysqlbackup-restore-{port}.sock")


def _tmpdir_path(datadir):
    """The restored server's own temporary folder, beside its datadir (``DATADIR.tmp``;
    why: ``mysqlbackup.scratch.private_tmpdir``)."""
    return os.path.normpath(datadir) + ".tmp"


def start_server(datadir, target, progress, timeout=START_TIMEOUT, flavor="mariadb"):
    """Start mariadbd (``flavor`` mysql: MySQL's mysqld) on ``datadir`` at ``target``'s
    host:port and wait until ``target``'s user can log in; returns RestoredServer."""
    if flavor == "mysql":
        from mysqlbackup.base.clone import mysqld_binary
        binary = mysqld_binary("a clone base is restored by starting MySQL's own mysqld "
                               "on it")
    else:
        binary = find_binary("mariadbd") or find_tool(("mariadbd", "mysqld"))
    name = os.path.basename(binary)
    if _listening(target.host, target.port):
        raise UsageError(f"{target.address} is in use: choose a free port for the restored "
                         f"server in --target")
    progress(f"restore: starting {name} on {datadir} at {target.address}")
    private_tmpdir(_tmpdir_path(datadir))
    proc = subprocess.Popen(server_args(binary, datadir, target.host, target.port, flavor),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    server = RestoredServer(target, proc.pid, datadir, os.path.join(datadir, "error.log"),
                            name)
    try:
        _wait_ready(proc, server, timeout, name)
    except BaseException:
        stop_server(server)
        raise
    progress(f"restore: {name} pid {proc.pid} serves {datadir} at {target.address} "
             f"(it keeps running; stop it with kill {proc.pid})")
    return server


def _wait_ready(proc, server, timeout, name="mariadbd"):
    deadline = time.monotonic() + timeout
    spec = server.spec
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ToolError(f"{name} on {server.datadir} exited {proc.returncode}: "
                            f"{_last_log_line(server.error_log)}")
        try:
            pymysql.connect(host=spec.host, port=spec.port, user=spec.user,
                            password=spec.password, connect_timeout=2).close()
            return
        except pymysql.err.OperationalError as e:
            if e.args and e.args[0] == _ACCESS_DENIED:
                raise UsageError(f"the restored server refuses {spec.user}@{spec.address}: "
                                 f"the target user must be one of the backed-up source's "
                                 f"users (they come with the physical copy), with its "
                                 f"password") from None
            time.sleep(0.2)
    raise ToolError(f"{name} on {server.datadir} not ready after {timeout:.0f} s: "
                    f"{_last_log_line(server.error_log)}")


def stop_server(server, timeout=60):
    """SIGTERM the server we started (by its pid) and wait until it is gone."""
    try:
        os.kill(server.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            reaped, _ = os.waitpid(server.pid, os.WNOHANG)
        except ChildProcessError:
            reaped = server.pid if not _alive(server.pid) else 0
        if reaped:
            return
        time.sleep(0.1)
    os.kill(server.pid, signal.SIGKILL)


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _listening(host, port):
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def _last_line(stream):
    stream.seek(0)
    lines = [ln for ln in stream.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


def _last_log_line(path):
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            lines = [ln for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        return lines[-1] if lines else "empty error log"
    except OSError:
        return f"no error log at {path}"
