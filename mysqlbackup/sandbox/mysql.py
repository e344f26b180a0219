"""A throwaway MySQL server for tests, the demo and benchmarks, beside the MariaDB one.

This Debian release ships no MySQL server; ``scripts/mysql_tree.sh`` installs Debian
sid's ``mysql-server-core`` and ``mysql-client`` into a folder of the project once
(``.mysql/tree``), and each sandbox runs ``chroot TREE /usr/sbin/mysqld`` with a
datadir of its own inside the tree, on a free loopback port: binlog ROW + CRC32, GTID
mode as MySQL installs it (OFF) unless asked for (``gtid_mode="ON"``: what the tests
of GTID features run), the semi-sync plugins loaded and the source side on, users as installed
(``caching_sha2_password``, the default), ``skip_name_resolve``. The same interface as
``sandbox.MariaDBSandbox`` (start, stop, execute, status, binlog_files, binlog_path,
replicate_from, url), so tests and helpers take either.

MySQL's client tools (mysqldump, mysql, mysqlbinlog) exist only inside the tree:
``client_wrappers`` writes host-side commands of their names that run them there, for
a PATH that the tool under test searches.
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid


from mysqlbackup.sandbox import (REPL_PASSWORD, REPL_USER, SandboxServer, datadir_from_template,
                                 free_port, private_tmpdir)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TREE_ENV = "MYSQLBACKUP_MYSQL_TREE"


def mysql_tree():
    """The folder of the MySQL tree (``$MYSQLBACKUP_MYSQL_TREE`` or ``.mysql/tree``)."""
    return os.path.abspath(os.environ.get(TREE_ENV) or os.path.join(ROOT, ".mysql", "tree"))


def why_no_tree(tree, what, script, packages, daemon):
    """Why no sandbox of the debootstrap tree ``tree`` can run here (None when one can):
    the tree is not built (``script`` builds it from ``packages``), or this is not root
    (``daemon`` runs through chroot)."""
    if not os.path.exists(os.path.join(tree, ".complete")):
        return (f"no {what} tree at {tree}: {script} builds it ({packages} through "
                "debootstrap; scripts/setup.sh runs it)")
    if os.geteuid() != 0:
        return f"the {what} sandbox runs {daemon} through chroot, which needs root"
    return None


def why_no_mysql(tree=None):
    """Why no MySQL sandbox can run here (None when one can): what the tests skip with."""
    return why_no_tree(tree or mysql_tree(), "MySQL", "scripts/mysql_tree.sh",
                       "Debian sid's mysql-server-core", "mysqld")


class TreeServer(SandboxServer):
    """A sandbox server run in a Debian tree through chroot (MySQL's, MariaDB 11.8's): its
    settings, and a folder of its own there (``inner`` in the chroot, ``basedir`` on
    the host) with its datadir, socket and error log."""

    def __init__(self, tree, server_id, log_bin, log_bin_name, semi_sync,
                 semi_sync_timeout_ms, extra_args):
        self.tree = tree
        self.inner = f"/srv/mysqlbackup/{uuid.uuid4().hex[:12]}"  # its folder, in the chroot
        self.basedir = tree + self.inner
        self.datadir = os.path.join(self.basedir, "data")
        self.socket = os.path.join(self.basedir, "mysqld.sock")
        self.errlog = os.path.join(self.basedir, "error.log")
        self.server_id, self.log_bin, self.log_bin_name = server_id, log_bin, log_bin_name
        self.semi_sync, self.semi_sync_timeout_ms = semi_sync, semi_sync_timeout_ms
        self.extra_args = list(extra_args)
        self.port = None
        self.proc = None


class MySQLSandbox(TreeServer):
    """One throwaway mysqld in the tree; use as a context manager or start()/stop()."""

    flavor = "mysql"
    daemon, ready_timeout = "mysqld", 60

    def __init__(self, server_id=1, log_bin=True, semi_sync=True, semi_sync_timeout_ms=2000,
                 extra_args=(), log_bin_name="binlog", tree=None, files=None,
                 gtid_mode="OFF"):
        """``files``: {name: host path} copied into the server's folder (mode 0600) before
        it starts, e.g. its TLS certificate and key, which ``extra_args`` then name by
        ``inside(name)`` (mysqld sees only the tree). ``gtid_mode``: OFF (MySQL's
        default) or ON (with enforce_gtid_consistency)."""
        self.files = dict(files or {})
        self.gtid_mode = gtid_mode.upper()
        super().__init__(tree or mysql_tree(), server_id, log_bin, log_bin_name, semi_sync,
                         semi_sync_timeout_ms, extra_args)

    # -- lifecycle ---------------------------------------------------------------

    def start(self):
        """Initialise the datadir if needed, start the server, create the repl user."""
        problem = why_no_mysql(self.tree)
        if problem:
            raise RuntimeError(problem)
        private_tmpdir(os.path.join(self.basedir, "tmp"))
        for name, source in self.files.items():
            shutil.copyfile(source, os.path.join(self.basedir, name))
            os.chmod(os.path.join(self.basedir, name), 0o600)
        self.port = self.port or free_port()
        self._write_options()
        if not os.path.isdir(os.path.join(self.datadir, "mysql")):
            shutil.rmtree(self.datadir, ignore_errors=True)
            key = f"mysql-{self.log_bin_name if self.log_bin else 'nobinlog'}"
            datadir_from_template(self.datadir, key, os.path.join(self.tree, "srv",
                                                                 "mysqlbackup"), self._initialize)
            os.unlink(os.path.join(self.datadir, "auto.cnf"))  # its own server_uuid at start
        self.proc = subprocess.Popen(
            ["chroot", self.tree, "/usr/sbin/mysqld", f"--defaults-file={self.inner}/my.cnf",
             *self.extra_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        self._wait_ready()
        self._create_users()
        return self

    def _initialize(self, datadir):
        """mysqld --initialize-insecure into ``datadir`` (a host path inside the tree)."""
        self._chroot("/usr/sbin/mysqld", f"--defaults-file={self.inner}/my.cnf",
                     f"--datadir={datadir[len(self.tree):]}", "--initialize-insecure",
                     check=True)

    def inside(self, name):
        """The path mysqld (in the chroot) knows the file ``name`` of its folder by."""
        return f"{self.inner}/{name}"

    def _chroot(self, *args, check=False):
        done = subprocess.run(["chroot", self.tree, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(args)} failed: "
                               f"{done.stdout.decode(errors='replace')[-2000:]}")
        return done

    def _write_options(self):
        inner = self.inner
        lines = ["[mysqld]", "user=root", f"datadir={inner}/data", f"port={self.port}",
                 "bind-address=127.0.0.1", f"socket={inner}/mysqld.sock",
                 f"pid-file={inner}/mysqld.pid", f"log-error={inner}/error.log",
                 f"tmpdir={inner}/tmp", f"secure-file-priv={inner}",
                 f"server-id={self.server_id}", "skip-name-resolve", "mysqlx=OFF",
                 "innodb-buffer-pool-size=64M", "innodb-redo-log-capacity=64M",
                 "performance-schema=OFF", f"gtid-mode={self.gtid_mode}",
                 f"enforce-gtid-consistency={'ON' if self.gtid_mode == 'ON' else 'OFF'}",
                 "plugin-load-add=semisync_source.so;semisync_replica.so"]
        if self.log_bin:
            lines += [f"log-bin={self.log_bin_name}", "binlog-format=ROW",
                      "binlog-checksum=CRC32", "binlog-row-metadata=FULL"]
        else:
            lines += ["skip-log-bin"]
        if self.semi_sync:
            lines += ["loose-rpl-semi-sync-source-enabled=1",
                      f"loose-rpl-semi-sync-source-timeout={self.semi_sync_timeout_ms}"]
        with open(os.path.join(self.basedir, "my.cnf"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def _create_users(self):
        """Not binlogged, so a replica of this server never sees them twice; the default
        authentication (caching_sha2_password), as users meet it."""
        self.execute(
            "SET SESSION sql_log_bin = 0",
            f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'127.0.0.1' IDENTIFIED BY "
            f"'{REPL_PASSWORD}'",
            f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO "
            f"'{REPL_USER}'@'127.0.0.1'",
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
            "GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")

    # -- SQL helpers beyond SandboxServer's -------------------------------------

    def current_binlog(self):
        return self.execute("SHOW BINARY LOG STATUS")[0][0]

    def replicate_from(self, primary):
        """Make this server a GTID replica of ``primary`` (MySQL's own applier)."""
        self.execute(
            f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', "
            f"SOURCE_PORT={primary.port}, SOURCE_USER='{REPL_USER}', "
            f"SOURCE_PASSWORD='{REPL_PASSWORD}', SOURCE_AUTO_POSITION=1, "
            "GET_SOURCE_PUBLIC_KEY=1", "START REPLICA")



CLIENT_TOOLS = ("mysqldump", "mysql", "mysqlbinlog")
_WRAPPER = """#!{python}
# {name} of the MySQL tree {tree}, run there through chroot (mysqlbackup.sandbox.mysql.
# client_wrappers). An options file named on the command line (--defaults-file=PATH,
# --defaults-extra-file=PATH) is copied into a private (0700) folder inside the tree for
# the tool to read, and so is each host file a TLS option names in it or on the command
# line (ssl-ca, ssl-cert, ssl-key, ssl-crl, server-public-key-path: the option then names
# the copy); the copies are removed when the tool ends, however it ends (even killed).
import os
import shutil
import sys
import tempfile

TREE, BINARY, CHROOT = {tree!r}, {binary!r}, {chroot!r}
OPTIONS = ("--defaults-extra-file=", "--defaults-file=")
FILES = ("ssl-ca", "ssl-cert", "ssl-key", "ssl-crl", "server-public-key-path")


class Scratch:
    \"\"\"The private folder inside the tree, made at the first copy.\"\"\"

    def __init__(self):
        self.path, self.count = None, 0

    def write(self, data, suffix):
        \"\"\"A new 0600 file holding ``data``; its path inside the tree.\"\"\"
        if self.path is None:
            inside = os.path.join(TREE, "tmp")
            os.makedirs(inside, exist_ok=True)
            self.path = tempfile.mkdtemp(prefix="mysqlbackup-wrapper-", dir=inside)
        self.count += 1
        copy = os.path.join(self.path, f"{{self.count}}{{suffix}}")
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as dst:
            dst.write(data)
        return copy[len(TREE):]

    def file(self, path):
        \"\"\"The tree's name for the host file ``path`` (a copy); a path that is no host
        file is left as it is (a path of the tree's own).\"\"\"
        if not os.path.isfile(path):
            return path
        with open(path, "rb") as src:
            return self.write(src.read(), ".file")

    def options(self, path):
        \"\"\"A copy of the options file ``path`` whose TLS file options name copies.\"\"\"
        with open(path, "rb") as src:
            lines = src.read().decode("utf-8", "surrogateescape").splitlines(True)
        for i, line in enumerate(lines):
            name, equals, value = line.partition("=")
            key = name.strip().lower().replace("_", "-")
            key = key[len("loose-"):] if key.startswith("loose-") else key
            if equals and key in FILES:
                lines[i] = f'{{name.strip()}}="{{self.file(unquote(value.strip()))}}"\\n'
        return self.write("".join(lines).encode("utf-8", "surrogateescape"), ".cnf")


def unquote(value):
    \"\"\"An options file's value as the tool reads it (quoted: backslash escapes).\"\"\"
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\\"":
        out, chars = [], iter(value[1:-1])
        for c in chars:
            out.append(next(chars, "") if c == "\\\\" else c)
        return "".join(out)
    return value


def tls_option(arg):
    \"\"\"The TLS file option ``arg`` (--ssl-ca=PATH or --ssl-ca) names, or None.\"\"\"
    if not arg.startswith("--"):
        return None
    name = arg[2:].partition("=")[0].replace("_", "-")
    return name if name in FILES else None


def main():
    args, scratch, given = [], Scratch(), iter(sys.argv[1:])
    for arg in given:
        prefix = next((p for p in OPTIONS if arg.startswith(p)), None)
        if prefix:
            arg = prefix + scratch.options(arg[len(prefix):])
        elif tls_option(arg) and "=" in arg:
            name, _, path = arg.partition("=")
            arg = f"{{name}}={{scratch.file(path)}}"
        elif tls_option(arg):
            args.append(arg)
            arg = next(given, None)
            if arg is None:
                break
            arg = scratch.file(arg)
        args.append(arg)
    argv = [CHROOT, TREE, BINARY, *args]
    if scratch.path is not None:
        # the tool is this process (exec: its pid, its signals, its exit code); a child
        # waits for the end of a pipe only the tool holds, then removes the copies
        read_end, write_end = os.pipe()
        if os.fork() == 0:
            os.close(write_end)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # not the caller's pipes: they end with the tool
                os.dup2(null, fd)
            os.setsid()
            try:
                while os.read(read_end, 1):
                    pass
            finally:
                shutil.rmtree(scratch.path, ignore_errors=True)
                os._exit(0)
        os.close(read_end)
        os.set_inheritable(write_end, True)
    os.execv(CHROOT, argv)


main()
"""


def client_wrappers(directory, tree=None, names=CLIENT_TOOLS):
    """Write executable host-side commands ``names`` (mysqldump, mysql, mysqlbinlog) into
    ``directory`` that run the tree's own tool of that name through chroot (which needs
    root; its path found now: the PATH they run with may lack it), arguments, stdin,
    stdout, stderr, pid and exit code passed through; return ``directory``, to put first
    on PATH. An options file named on the command line is made visible inside the tree
    (a private copy, removed afterwards), and so are the host files its TLS options or
    the command line's (``--ssl-ca`` and the like) name; other paths in the arguments
    are the tree's."""
    for name in names:
        _write_wrapper(directory, tree or mysql_tree(), name, f"/usr/bin/{name}")
    return str(directory)


def _write_wrapper(directory, tree, name, binary):
    """``directory``/``name``: the host-side command that runs ``binary`` of ``tree``."""
    chroot = shutil.which("chroot") or shutil.which("chroot", path="/usr/sbin:/usr/bin")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(_WRAPPER.format(python=sys.executable, name=name, tree=tree, binary=binary,
                                chroot=chroot))
    os.chmod(path, 0o755)


SHARED = "/srv/mysqlbackup-shared"   # the shared folder's name inside the chroot


def shared_dir(tree=None):
    """A folder that mysqld in the chroot and the host both know by one absolute path,
    as a server and a command on one host do (``base --method clone`` writes its copy
    there, ``restore --datadir`` starts a server there): the host path of the tree's
    ``/srv/mysqlbackup-shared``, which inside the chroot is a symlink back to that
    folder (no mount: nothing to undo). Made once; returns the path."""
    tree = tree or mysql_tree()
    host = tree + SHARED
    os.makedirs(host, exist_ok=True)
    link = tree + host   # what the chroot sees at the host path
    os.makedirs(os.path.dirname(link), exist_ok=True)
    try:
        os.symlink(SHARED, link)
    except FileExistsError:
        if os.readlink(link) != SHARED:
            raise RuntimeError(f"{link} is not the shared folder's link to {SHARED}") from None
    return host


@contextlib.contextmanager
def private_shared_dir(tree=None):
    """A fresh folder inside ``shared_dir(tree)``, removed with all it holds when the
    block ends: what one test (or benchmark) puts there, so that another process's
    clean-up never takes it."""
    folder = tempfile.mkdtemp(prefix="t-", dir=shared_dir(tree))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def server_wrapper(directory, tree=None, name="mysqld"):
    """Write a host-side ``name`` (mysqld; the MariaDB tree's: mariadbd) into ``directory``
    that runs the tree's /usr/sbin/``name`` through chroot (pid, signals and exit code its
    own: exec), as ``client_wrappers`` does the client tools; return ``directory``. Paths
    it is given must be the tree's: those under ``shared_dir()`` are."""
    _write_wrapper(directory, tree or mysql_tree(), name, f"/usr/sbin/{name}")
    return str(directory)
