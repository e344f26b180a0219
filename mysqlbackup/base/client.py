"""The server's own tools as child processes: found on PATH (a source's own product's
tool: MySQL's and MariaDB's ``mysqldump`` differ), a private options file for the
password (never on a command line) with the TLS options in that client's names,
stdout read as a stream, stderr kept."""

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading

from mysqlbackup.errors import MysqlBackupError
from mysqlbackup.source.tls import certificate_options, client_options

STDERR_LINES = 200


class ToolError(MysqlBackupError):
    """A backup tool is missing from PATH, or failed (its last stderr line included)."""


def find_tool(names):
    """Path of the first of ``names`` on PATH, else ToolError (a dump client:
    ``find_client``)."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise _not_found(names)


def _not_found(names):
    return ToolError(f"{' / '.join(names)} not found on PATH: install the server's client "
                     f"tools (Debian: mariadb-client, mariadb-backup; MySQL: mysql-client)")


PRODUCTS = {"mariadb": "MariaDB", "mysql": "MySQL"}
# what a source of each flavor needs, named in the refusal of the other product's tool
WANTED = {"mariadb": "MariaDB's own mariadb-dump (package mariadb-client)",
          "mysql": "MySQL's own mysqldump (package mysql-client)"}
VERSION_TIMEOUT = 30


def find_client(names, flavor):
    """(path, version line) of the first of ``names`` on PATH (each name in every PATH
    folder, in order) that is ``flavor``'s own client, by what ``--version`` says.

    ``mysqldump`` is both MySQL's tool and, on a MariaDB install, a link to
    mariadb-dump: their options differ (MySQL's refuses ``--ssl``, ``--gtid``,
    ``--ignore-database``; MariaDB's cannot write MySQL's GTID set), so the other
    product's tool is refused, in one line, rather than run."""
    other = None
    for name in names:
        for path in _everywhere(name):
            product, version = tool_product(path)
            if product == flavor:
                return path, version
            other = other or (path, product, version)
    if other is None:
        raise _not_found(names)
    path, product, version = other
    raise ToolError(f"{path} is {PRODUCTS[product]}'s client ({version}), not "
                    f"{PRODUCTS[flavor]}'s: a {PRODUCTS[flavor]} source needs "
                    f"{WANTED[flavor]} on PATH")


def _everywhere(name):
    """Every executable ``name`` on PATH, in PATH's order (one per real file)."""
    seen = set()
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = shutil.which(name, path=folder or os.curdir)
        if path and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            yield path


def tool_product(path):
    """("mariadb" or "mysql", its version line) of a server tool, from ``--version``
    (MariaDB's say "MariaDB": ``mysqldump  Ver 10.19 Distrib 10.11.19-MariaDB, ...``);
    ToolError when it does not run."""
    try:
        done = subprocess.run([path, "--version"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=VERSION_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as e:
        raise ToolError(f"cannot run {path} --version: {e}") from None
    text = done.stdout.decode("utf-8", "replace").strip()
    if done.returncode != 0 or not text:
        said = (done.stderr.decode("utf-8", "replace").strip() or "no output").splitlines()
        raise ToolError(f"{path} --version failed (exit {done.returncode}): {said[-1]}")
    line = " ".join(text.splitlines()[0].split())
    return ("mariadb" if "mariadb" in line.lower() else "mysql"), line


def option_value(text):
    """``text`` quoted for a MySQL options file."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def options_text(spec, groups=("client",), flavor="mariadb"):
    """The body of an options file that logs ``spec``'s user in with its password, and
    the client's TLS options in ``flavor``'s names (MariaDB: ``tls.client_options``;
    MySQL: ``mysql_client_options``)."""
    body = f"user={option_value(spec.user)}\npassword={option_value(spec.password)}\n"
    entries = mysql_client_options(spec.tls) if flavor == "mysql" else client_options(spec.tls)
    body += "".join(name + ("" if value is None else f"={option_value(value)}") + "\n"
                    for name, value in entries)
    return "".join(f"[{group}]\n{body}" for group in groups)


def mysql_client_options(tls):
    """Options-file entries (name, value or None) for MySQL's own clients (mysqldump,
    mysql): ``ssl-mode`` takes our modes by their own names. Where the connection may
    be clear text, ``get-server-public-key``: caching_sha2_password (MySQL's default)
    then sends the password RSA-encrypted, as PyMySQL does, instead of failing."""
    entries = [("ssl-mode", tls.mode.upper().replace("-", "_"))] + certificate_options(tls)
    if not tls.required:
        entries.append(("get-server-public-key", None))
    return entries


@contextlib.contextmanager
def options_file(spec, groups=("client",), flavor="mariadb"):
    """A 0600 temporary options file with ``spec``'s credentials, removed afterwards."""
    fd, path = tempfile.mkstemp(prefix="mysqlbackup-", suffix=".cnf")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(options_text(spec, groups, flavor))
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class ToolProcess:
    """A running tool: ``stdout`` to read from; stderr drained by a thread into its
    last lines (and handed to ``on_stderr`` line by line)."""

    def __init__(self, argv, on_stderr=None, cwd=None):
        self.name = os.path.basename(argv[0])
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=cwd, start_new_session=True)
        self.stdout = self.proc.stdout
        self.lines = collections.deque(maxlen=STDERR_LINES)
        self._on_stderr = on_stderr
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            self.lines.append(line)
            if self._on_stderr:
                self._on_stderr(line)

    def finish(self):
        """Wait for the exit; ToolError with the last stderr line unless it is 0."""
        code = self.proc.wait()
        self._reader.join(timeout=10)
        if code != 0:
            how = f"exit {code}" if code > 0 else f"killed by {_signal_name(-code)}"
            raise ToolError(f"{self.name} failed ({how}): {self.last_error()}")

    def last_error(self):
        """The last non-empty stderr line (what the tool said went wrong)."""
        return self.said() or "no message"

    def said(self):
        """The last non-empty stderr line, None when the tool wrote none."""
        for line in reversed(self.lines):
            if line.strip():
                return line.strip()
        return None

    def kill(self):
        """Stop the tool (our child, by its pid) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
