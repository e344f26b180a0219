"""The clone method (MySQL only): the server's own clone plugin copies its data
directory, ``CLONE LOCAL DATA DIRECTORY = 'DIR'``, and the copy is streamed into the
archive as a tar stream (``tardir``), then removed.

Server and command run on one host and see DIR by the same absolute path: DIR is a
new folder ``data`` inside a fresh folder made under ``parent`` (the command's TMPDIR
unless told otherwise) which the server must be able to write (as root the command
gives it to the owner of the server's datadir when it can see it).

A local clone does not say where in the binlogs its snapshot sits until a server has
recovered it: the source's own ``mysqld`` is started on the copy, for a moment
(``--skip-grant-tables``, no network, no binlog, a socket in the fresh folder), its
``performance_schema.clone_status`` read (BINLOG_FILE, BINLOG_POSITION,
GTID_EXECUTED: the snapshot's), and it is shut down cleanly: the copy archived is a
recovered data directory, which a restore starts as it is. The files that server
made for itself (its ``auto.cnf``: its server_uuid; its generated ``*.pem`` keys) are
left out of the stream.
"""

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time

import pymysql

from mysqlbackup.base import server
from mysqlbackup.base.client import ToolError
from mysqlbackup.base.dump import DumpError, Snapshot
from mysqlbackup.base.tardir import TarReader
from mysqlbackup.binlog.position import Position
from mysqlbackup.errors import SourceError, UsageError
from mysqlbackup.scratch import find_binary
from mysqlbackup.source.connect import connect as tls_connect

PLUGIN, PLUGIN_LIBRARY = "clone", "mysql_clone.so"
START_TIMEOUT = 600.0      # seconds the copy's server may take to recover and start
STOP_TIMEOUT = 600.0
_ACCESS_DENIED = (1044, 1142, 1227, 1370)   # db, table, specific privilege, routine
_SERVER_MADE = ("auto.cnf",)                # and *.pem: the recovering server's own


class _Done:
    """The ``process`` take_base finishes: the clone ran to its end before the stream."""

    name = "CLONE"

    def finish(self):
        """Nothing to wait for."""

    def kill(self):
        """Nothing to stop."""

    def said(self):
        """No tool spoke."""
        return None


class _Known:
    """The ``parser`` take_base asks for the snapshot: it was read before the stream."""

    def __init__(self, snapshot):
        self._snapshot = snapshot

    def snapshot(self, where, said=None):
        """The Snapshot the copy's clone_status gave."""
        return self._snapshot


class CloneRun:
    """A finished clone, recovered, being streamed: what take_base reads (``read``)
    and records (``details``)."""

    observe = None
    users = None

    def __init__(self, reader, snapshot, details):
        self.reader, self.process, self.parser = reader, _Done(), _Known(snapshot)
        self.read, self._details = reader.read, details

    @property
    def details(self):
        """The manifest's ``details``: how the copy was made, its files and bytes."""
        return dict(self._details, files=self.reader.files, data_bytes=self.reader.size)


@contextlib.contextmanager
def start_clone(spec, facts, parent=None):
    """Clone the source ``spec`` (SourceFacts ``facts``) into a fresh folder under
    ``parent``, recover the copy to read its snapshot, and yield a CloneRun streaming
    it; the copy is removed when the block ends, however it ends."""
    parent = os.path.abspath(parent or tempfile.gettempdir())
    user = f"{spec.user}@{spec.address}"
    conn = server.connect(spec)
    try:
        ensure_plugin(conn, user)
        datadir = server.query(conn, "SELECT @@datadir")[0][0]
    finally:
        conn.close()
    scratch = _scratch(parent, datadir)
    try:
        copy = os.path.join(scratch, "data")
        began = time.monotonic()
        clone_into(spec, copy)
        cloned = time.monotonic()
        binary = _mysqld()
        snapshot = recover(binary, copy, scratch)
        if not facts.gtids:  # gtid_mode not ON: the position alone places the copy
            snapshot = Snapshot(snapshot.position, None)
        details = {"tool": "CLONE LOCAL DATA DIRECTORY", "mysqld": binary,
                   "clone_seconds": round(cloned - began, 3),
                   "recover_seconds": round(time.monotonic() - cloned, 3)}
        skip = [n for n in os.listdir(copy) if n in _SERVER_MADE or n.endswith(".pem")]
        yield CloneRun(TarReader(copy, skip), snapshot, details)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def ensure_plugin(conn, user):
    """Install the clone plugin when the source has not loaded it; SourceError in one
    line when it cannot (the user may not, the library is missing, it is disabled).
    Returns True when this call installed it."""
    rows = server.query(conn, "SELECT PLUGIN_STATUS FROM information_schema.PLUGINS WHERE "
                              "PLUGIN_NAME = %s", (PLUGIN,))
    if rows and rows[0][0] == "ACTIVE":
        return False
    if rows:
        raise SourceError(f"the source's clone plugin is {rows[0][0]}, not ACTIVE: base "
                          f"--method clone needs it loaded (plugin-load-add={PLUGIN_LIBRARY})")
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSTALL PLUGIN {PLUGIN} SONAME '{PLUGIN_LIBRARY}'")
    except pymysql.err.MySQLError as e:
        code = e.args[0] if e.args else 0
        if code in _ACCESS_DENIED:
            raise SourceError(f"the source has no clone plugin loaded, and the source user "
                              f"{user} may not install it (INSTALL PLUGIN {PLUGIN} SONAME "
                              f"'{PLUGIN_LIBRARY}' needs INSERT ON mysql.plugin): grant that, "
                              f"or load it at the server's start (plugin-load-add="
                              f"{PLUGIN_LIBRARY})") from None
        raise SourceError(f"the source cannot load its clone plugin (INSTALL PLUGIN {PLUGIN} "
                          f"SONAME '{PLUGIN_LIBRARY}'): {e.args[-1]}") from None
    return True


def _scratch(parent, server_datadir):
    """A fresh folder under ``parent`` for the copy; as root, given to the owner of the
    server's datadir when this host shows it (the server writes the copy there)."""
    if not os.path.isdir(parent):
        raise UsageError(f"the clone's folder {parent} (--clone-dir, else TMPDIR) does not "
                         "exist: the copy goes into a new folder under it, on the database "
                         "host")
    scratch = tempfile.mkdtemp(prefix="mysqlbackup-clone-", dir=parent)
    if os.geteuid() == 0:
        try:
            st = os.stat(server_datadir)
        except OSError:
            return scratch  # not this host's path (a chroot, a container): as it is
        os.chown(scratch, st.st_uid, st.st_gid)
    return scratch


def clone_into(spec, copy):
    """``CLONE LOCAL DATA DIRECTORY = copy`` on the source (no read timeout: a large
    server takes a while); SourceError in one line when it refuses."""
    try:
        conn = tls_connect(spec, connect_timeout=server.CONNECT_TIMEOUT, read_timeout=None,
                           write_timeout=60, autocommit=True)
    except pymysql.err.MySQLError as e:
        raise SourceError(f"cannot connect to {spec.address}: {e.args[-1]}") from None
    try:
        with conn.cursor() as cur:
            cur.execute("CLONE LOCAL DATA DIRECTORY = %s", (copy,))
    except pymysql.err.MySQLError as e:
        hint = (": the server cannot write there (the folder must be on the database "
                "host, writable by the mysqld user)" if "rrcode: 13" in str(e.args[-1])
                or "ermission" in str(e.args[-1]) else "")
        raise SourceError(f"the source refused CLONE LOCAL DATA DIRECTORY = '{copy}': "
                          f"{e.args[-1]}{hint}") from None
    finally:
        conn.close()


def mysqld_binary(why):
    """MySQL's own mysqld from PATH or /usr/sbin (by what ``--version`` says: MariaDB
    installs a mysqld too); ToolError in one line, ending with ``why`` it is needed."""
    binary = find_binary("mysqld")
    if binary is None:
        raise ToolError(f"mysqld not found on PATH or in /usr/sbin: {why}")
    try:
        done = subprocess.run([binary, "--version"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolError(f"{binary} --version failed: {e}") from None
    version = " ".join(done.stdout.decode("utf-8", "replace").split())
    if done.returncode != 0 or "mariadb" in version.lower():
        raise ToolError(f"{binary} is not MySQL's server ({version or 'no version'}): {why}")
    return binary


def _mysqld():
    return mysqld_binary("base --method clone starts the source's own mysqld on the copy "
                         "(on the database host) to read where its snapshot sits in the "
                         "binlogs")


def recover_argv(binary, copy, scratch):
    """mysqld's arguments for the moment it recovers the copy: no my.cnf, no network,
    no grant tables, no binlog, everything else it writes in ``scratch``."""
    args = [binary, "--no-defaults", f"--datadir={copy}",
            f"--socket={os.path.join(scratch, 'mysqld.sock')}",
            f"--pid-file={os.path.join(scratch, 'mysqld.pid')}",
            f"--log-error={os.path.join(scratch, 'error.log')}", f"--tmpdir={scratch}",
            "--skip-networking", "--skip-grant-tables", "--skip-log-bin",
            "--skip-replica-start", "--mysqlx=OFF", "--secure-file-priv=NULL",
            "--performance-schema=ON", "--gtid-mode=ON", "--enforce-gtid-consistency=ON",
            "--innodb-buffer-pool-size=64M",
            # skip-grant-tables loads no plugin of mysql.plugin: clone_status is clone's
            f"--plugin-load-add={PLUGIN_LIBRARY}"]
    if os.geteuid() == 0:
        args.append(f"--user={_owner(copy)}")
    return args


def _owner(path):
    uid = os.stat(path).st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def recover(binary, copy, scratch, timeout=START_TIMEOUT):
    """Start ``binary`` on the copy, read its clone_status, shut it down; the
    Snapshot (DumpError when the status names no binlog position)."""
    log = os.path.join(scratch, "error.log")
    proc = subprocess.Popen(recover_argv(binary, copy, scratch), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        conn = _wait_ready(proc, os.path.join(scratch, "mysqld.sock"), log, timeout)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT STATE, BINLOG_FILE, BINLOG_POSITION, GTID_EXECUTED "
                            "FROM performance_schema.clone_status")
                rows = cur.fetchall()
        except pymysql.err.MySQLError as e:
            raise ToolError(f"mysqld on the clone cannot show its clone_status: "
                            f"{e.args[-1]}") from None
        finally:
            conn.close()
    except BaseException:
        _stop(proc, 30)
        raise
    _stop(proc, STOP_TIMEOUT, log)
    return status_snapshot(rows)


def status_snapshot(rows):
    """The Snapshot of clone_status ``rows`` (pure): DumpError unless one completed
    clone with a binlog position."""
    if len(rows) != 1 or rows[0][0] != "Completed":
        raise DumpError(f"the copy's clone_status is not one completed clone: {rows!r}")
    _, binlog_file, binlog_pos, gtid = rows[0]
    if not binlog_file:
        raise DumpError("the copy's clone_status names no binlog file: is the source's "
                        "binary log on?")
    return Snapshot(Position(os.path.basename(binlog_file), int(binlog_pos)),
                    (gtid or "").replace("\n", ""))


def _wait_ready(proc, socket_path, log, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ToolError(f"mysqld on the clone exited {proc.returncode} while it "
                            f"recovered it: {last_log_line(log)}")
        try:
            return pymysql.connect(unix_socket=socket_path, user="root", connect_timeout=2,
                                   ssl_disabled=True)  # a socket: no TLS, no CA store read
        except pymysql.err.OperationalError:
            time.sleep(0.2)
    raise ToolError(f"mysqld on the clone not ready after {timeout:.0f} s: "
                    f"{last_log_line(log)}")


def _stop(proc, timeout, log=None):
    """SIGTERM our mysqld (a clean shutdown) and reap it; ToolError when ``log`` is
    given and it did not end cleanly."""
    if proc.poll() is None:
        proc.terminate()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
    if log is not None and code != 0:
        how = f"killed after {timeout:.0f} s" if code is None else f"exit {code}"
        raise ToolError(f"mysqld on the clone did not shut down cleanly ({how}): "
                        f"{last_log_line(log)}")


def last_log_line(path):
    """The last non-empty line of the error log at ``path`` (its last 4 KiB)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            lines = [ln for ln in f.read().decode("utf-8", "replace").splitlines()
                     if ln.strip()]
        return lines[-1] if lines else "empty error log"
    except OSError:
        return f"no error log at {path}"
