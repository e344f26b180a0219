"""A MariaDB server of our own: ``mariadbd`` from PATH (or /usr/sbin) with a datadir of
its own on a free loopback port, stopped by its pid; it never touches a server it did
not start. ``drill`` restores into one (``ScratchMariaDB``), ``restore --datadir`` and
``base --method clone`` start the server binary with ``find_binary`` and a temporary
folder of the server's own (``private_tmpdir``). The test servers (``sandbox``) are
built on it; production code never imports those.

A datadir is initialised once per process (``datadir_from_template``) and copied for
each server: the same files ``mariadb-install-db`` would write, in a tenth of the time.
"""

import atexit
import contextlib
import hashlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pymysql

log = logging.getLogger(__name__)


def find_binary(name):
    """Path of a MariaDB binary from PATH or /usr/sbin, or None."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")


PORTS_FROM = 10000  # free_port's ports: from here up to the kernel's ephemeral ones
_RANDOM = random.SystemRandom()  # never the seed a test runner sets for ``random``


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now, drawn below the
    kernel's range of ephemeral ports: the outgoing connections of this host take their
    local ports from that range, so none of them can take this one before the server it
    is for binds it (a port 0 picks would be in that range)."""
    low = _ephemeral_low()
    for _ in range(100 if low - PORTS_FROM > 1000 else 0):
        port = _RANDOM.randrange(PORTS_FROM, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_low():
    """The first port of the kernel's ephemeral range (Linux; 32768 where unknown)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_TEMPLATES = {}   # {key: path of this process's initialised datadir}
TEMPLATE_PREFIX = "mysqlbackup-template-"


SOCKET_MAX = 100  # a unix socket's path is at most 107 bytes (sun_path)


def socket_path(basedir):
    """The server's unix socket: ``basedir/mysqld.sock``, or where that path is too long
    for a socket (a deep work directory: the server would exit at once) a short one in
    the system's temporary folder, named after ``basedir``."""
    path = os.path.join(basedir, "mysqld.sock")
    if len(os.fsencode(path)) <= SOCKET_MAX:
        return path
    digest = hashlib.sha256(os.fsencode(os.path.abspath(basedir))).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"mysqlbackup-{digest}.sock")


def datadir_from_template(datadir, key, parent, make):
    """Fill ``datadir`` (absent) with a copy of the datadir ``make(path)`` initialises,
    once per process and ``key``, under ``parent`` (on the datadir's file system: the
    copy is cheap). The template goes at the process's exit; a killed process's are
    swept by the next one to make its own."""
    template = _TEMPLATES.get(key)
    if template is None or not os.path.isdir(template):
        _sweep_templates(parent)
        template = os.path.join(parent, f"{TEMPLATE_PREFIX}{os.getpid()}-{key}")
        shutil.rmtree(template, ignore_errors=True)
        try:
            make(template)
        except BaseException:
            shutil.rmtree(template, ignore_errors=True)
            raise
        _TEMPLATES[key] = template
        atexit.register(shutil.rmtree, template, True)
    shutil.copytree(template, datadir, symlinks=True)


def _sweep_templates(parent):
    """Remove the templates of processes that no longer run."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        pid = name[len(TEMPLATE_PREFIX):].split("-", 1)[0]
        if (name.startswith(TEMPLATE_PREFIX) and pid.isdigit()
                and not os.path.exists(f"/proc/{pid}")):  # that process is gone
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def private_tmpdir(path):
    """Make and return ``path``, a server's own temporary folder.

    At start-up (mariadb-install-db's bootstrap too) mariadbd deletes every ``#sql*``
    file in its tmpdir: left at the shared /tmp, each server we start would delete the
    temporary tables of every other server using /tmp, a bootstrap under way among them
    (seen: "Unknown table 'mysql.tmp_user_sys'")."""
    os.makedirs(path, exist_ok=True)
    return path


class ScratchServer:
    """What every server of our own shares (``basedir``, ``datadir``, ``socket``, ``port``
    and ``proc`` set by its class): stop, context manager, root connections, SQL.
    ``admin``: (user, password) of an administrator's TCP login."""

    admin = ("root", "")
    daemon = "mariadbd"     # the server's binary, as errors name it
    ready_timeout = 30      # seconds a start may take

    def _wait_ready(self):
        """Wait until root logs in over the socket; RuntimeError when the server exits
        or is not ready within ``ready_timeout``, pointing at its error log."""
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.daemon} exited early; see {self.errlog}")
            try:
                self.root().close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.daemon} not ready after {self.ready_timeout}s; see "
                           f"{self.errlog}")

    def stop(self, remove=False):
        """SIGTERM the server (by its pid) and wait; optionally delete its files."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if remove:
            shutil.rmtree(self.basedir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop(remove=True)

    # -- SQL helpers -------------------------------------------------------------

    def root(self, database=None, autocommit=True, charset="utf8mb4"):
        """A new root connection over the unix socket (no TLS there, as the mysql client;
        PyMySQL's default would also load the system's CA store for each connection)."""
        return pymysql.connect(unix_socket=self.socket, user="root", database=database,
                               autocommit=autocommit, connect_timeout=5, charset=charset,
                               ssl_disabled=True)

    def execute(self, *statements):
        """Run statements as root; return the rows of the last one."""
        conn = self.root()
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
                return cur.fetchall()
        finally:
            conn.close()

    def status(self, name):
        """Value of one SHOW GLOBAL STATUS variable, as a string."""
        rows = self.execute(f"SHOW GLOBAL STATUS LIKE '{name}'")
        return rows[0][1] if rows else None

    def binlog_files(self):
        """Names of the binlog files the server has, oldest first."""
        return [row[0] for row in self.execute("SHOW BINARY LOGS")]

    def binlog_path(self, name):
        """Path of one of the server's binlog files."""
        return os.path.join(self.datadir, name)


class ScratchMariaDB(ScratchServer):
    """One mariadbd of our own on a free loopback port (``start``/``stop``, or a context
    manager): root over its socket, and root@127.0.0.1 over TCP."""

    def __init__(self, basedir=None, server_id=1, log_bin=True, semi_sync=True,
                 semi_sync_timeout_ms=2000, extra_args=(), log_bin_name="binlog"):
        self.basedir = basedir or tempfile.mkdtemp(prefix="mysqlbackup-scratch-")
        self.datadir = os.path.join(self.basedir, "data")
        self.socket = socket_path(self.basedir)
        self.pidfile = os.path.join(self.basedir, "mysqld.pid")
        self.errlog = os.path.join(self.basedir, "error.log")
        self.tmpdir = os.path.join(self.basedir, "tmp")   # its own (see private_tmpdir)
        self.server_id = server_id
        self.log_bin = log_bin
        self.log_bin_name = log_bin_name
        self.semi_sync = semi_sync
        self.semi_sync_timeout_ms = semi_sync_timeout_ms
        self.extra_args = list(extra_args)
        self.port = None
        self.proc = None

    # -- lifecycle ---------------------------------------------------------------

    def start(self):
        """Initialise the datadir if needed, start the server, create its users."""
        if not os.path.isdir(os.path.join(self.datadir, "mysql")):
            shutil.rmtree(self.datadir, ignore_errors=True)
            binary = os.fsencode(find_binary("mariadbd") or "")  # one template a server
            datadir_from_template(self.datadir,
                                  f"mariadb-{hashlib.sha256(binary).hexdigest()[:12]}",
                                  tempfile.gettempdir(), self._install_db)
        self.port = self.port or free_port()
        private_tmpdir(self.tmpdir)
        self.proc = subprocess.Popen(self._server_args(), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self._wait_ready()
        self._create_users()
        return self

    @staticmethod
    def _install_db(datadir):
        """mariadb-install-db into ``datadir`` (the accounts as installed), with a
        temporary folder of its own (see :func:`private_tmpdir`)."""
        tool = find_binary("mariadb-install-db")
        if tool is None:
            raise RuntimeError("mariadb-install-db not found: apt-get install mariadb-server")
        os.makedirs(datadir, exist_ok=True)
        tmpdir = private_tmpdir(datadir + ".tmp")
        args = [tool, "--no-defaults", "--user=root", f"--datadir={datadir}",
                f"--tmpdir={tmpdir}", "--auth-root-authentication-method=normal",
                "--skip-test-db"]
        try:
            for attempt in (1, 2):  # a failure says why and is tried once more
                done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                if done.returncode == 0:
                    return
                output = done.stdout.decode(errors="replace").strip()
                log.warning("mariadb-install-db exited %d (attempt %d): %s",
                            done.returncode, attempt, output[-2000:])
                shutil.rmtree(datadir, ignore_errors=True)
                os.makedirs(datadir)
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
        raise RuntimeError(f"mariadb-install-db failed twice for {datadir}: "
                           f"{output[-2000:]}")

    def _server_args(self):
        args = [find_binary("mariadbd"), "--no-defaults", "--user=root",
                f"--datadir={self.datadir}", f"--tmpdir={self.tmpdir}",
                f"--port={self.port}", "--bind-address=127.0.0.1",
                f"--socket={self.socket}", f"--pid-file={self.pidfile}",
                f"--log-error={self.errlog}", f"--server-id={self.server_id}",
                "--skip-name-resolve", "--innodb-buffer-pool-size=64M",
                "--innodb-log-file-size=64M", "--skip-innodb-adaptive-hash-index"]
        if self.log_bin:
            args += [f"--log-bin={self.datadir}/{self.log_bin_name}", "--binlog-format=ROW",
                     "--binlog-checksum=CRC32", "--gtid-strict-mode=1",
                     "--binlog-row-metadata=FULL"]
        if self.semi_sync:
            args += ["--rpl-semi-sync-master-enabled=1",
                     f"--rpl-semi-sync-master-timeout={self.semi_sync_timeout_ms}"]
        return args + self.extra_args

    def _create_users(self):
        """root@127.0.0.1 (TCP) beside the installed accounts, which stay as installed:
        root@<hostname> among them, which this server (--skip-name-resolve, a common
        hardening) ignores and cannot show. Not binlogged."""
        self.execute("SET SESSION sql_log_bin = 0",
                     "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
                     "GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")


INITIALIZE_TIMEOUT = 600  # seconds mysqld --initialize-insecure may take


class ScratchMySQL(ScratchServer):
    """One MySQL mysqld of our own (``binary``: MySQL's server, which the caller found):
    a datadir ``mysqld --initialize-insecure`` made (from a template, once per process
    and binary), a free loopback port, binlog ROW on, GTID mode on or off (``gtids``,
    as the source ran), no X plugin. Its administrator is root@127.0.0.1 over TCP
    (``admin``, made unlogged by an init file at each start): the server may run where
    the caller's unix socket paths mean something else (a chroot)."""

    daemon, ready_timeout = "mysqld", 120

    def __init__(self, binary, basedir=None, server_id=1, gtids=True):
        self.binary, self.gtids, self.server_id = binary, gtids, server_id
        self.basedir = basedir or tempfile.mkdtemp(prefix="mysqlbackup-scratch-")
        self.datadir = os.path.join(self.basedir, "data")
        self.errlog = os.path.join(self.basedir, "error.log")
        self.tmpdir = os.path.join(self.basedir, "tmp")
        self.socket = socket_path(self.basedir)  # mysqld's own; connections go over TCP
        self.port = None
        self.proc = None

    def start(self):
        """Initialise the datadir if needed, start the server, wait for root's login."""
        if not os.path.isdir(os.path.join(self.datadir, "mysql")):
            shutil.rmtree(self.datadir, ignore_errors=True)
            digest = hashlib.sha256(os.fsencode(self.binary)).hexdigest()[:12]
            datadir_from_template(self.datadir, f"mysql-{digest}",
                                  os.path.dirname(os.path.abspath(self.basedir)),
                                  self._initialize)
            os.unlink(os.path.join(self.datadir, "auto.cnf"))  # a server_uuid of its own
        self.port = self.port or free_port()
        private_tmpdir(self.tmpdir)
        init = os.path.join(self.basedir, "init.sql")
        with open(init, "w", encoding="utf-8") as f:
            f.write("SET SESSION sql_log_bin = 0;\n"
                    "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';\n"
                    "GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n")
        self.proc = subprocess.Popen(self._server_args(init), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        self._wait_ready()
        return self

    def _initialize(self, datadir):
        """``mysqld --initialize-insecure`` into ``datadir`` (root@localhost, no password),
        its log beside it (a file: a server that logs in a loop fills no memory of
        ours), within INITIALIZE_TIMEOUT seconds."""
        os.makedirs(os.path.dirname(datadir), exist_ok=True)
        log_path = datadir + ".log"
        try:
            done = subprocess.run([self.binary, "--no-defaults", "--initialize-insecure",
                                   f"--datadir={datadir}", f"--log-error={log_path}",
                                   *as_root()], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=INITIALIZE_TIMEOUT)
            failed = f"exit {done.returncode}" if done.returncode else None
        except subprocess.TimeoutExpired:
            failed = f"not done after {INITIALIZE_TIMEOUT} s"
        try:
            if failed:
                raise RuntimeError(f"mysqld --initialize-insecure of {datadir}: {failed}: "
                                   f"{_tail(log_path)}")
        finally:
            with contextlib.suppress(OSError):
                os.unlink(log_path)

    def _server_args(self, init):
        gtid = "ON" if self.gtids else "OFF"
        return [self.binary, "--no-defaults", f"--datadir={self.datadir}",
                f"--tmpdir={self.tmpdir}", f"--port={self.port}", "--bind-address=127.0.0.1",
                f"--socket={self.socket}", f"--pid-file={os.path.join(self.basedir, 'mysqld.pid')}",
                f"--log-error={self.errlog}", f"--server-id={self.server_id}",
                "--skip-name-resolve", "--mysqlx=OFF", "--skip-replica-start",
                "--secure-file-priv=NULL", "--innodb-buffer-pool-size=64M",
                f"--log-bin={self.datadir}/binlog", "--binlog-checksum=CRC32",
                f"--gtid-mode={gtid}",
                f"--enforce-gtid-consistency={gtid}", f"--init-file={init}", *as_root()]

    def root(self, database=None, autocommit=True, charset="utf8mb4"):
        """A new root connection over TCP (root@127.0.0.1, no password, no TLS)."""
        return pymysql.connect(host="127.0.0.1", port=self.port, user="root",
                               database=database, autocommit=autocommit, connect_timeout=5,
                               charset=charset, ssl_disabled=True)


def _tail(path, size=2000):
    """The last ``size`` bytes of the file ``path`` as text ('' when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - size))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


def as_root():
    """``--user=root`` when this process is root (mysqld and mariadbd refuse to run as
    root without it), else nothing."""
    return ["--user=root"] if os.geteuid() == 0 else []
