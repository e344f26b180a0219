"""The server's own tools as child processes: a private options file for the
password (never on a command line), stdout read as a stream, stderr kept."""

import collections
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading

from mysqlbackup.errors import MysqlBackupError
from mysqlbackup.source.tls import client_options

STDERR_LINES = 200


class ToolError(MysqlBackupError):
    """A backup tool is missing from PATH, or failed (its last stderr line included)."""


def find_tool(names):
    """Path of the first of ``names`` on PATH, else ToolError."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise ToolError(f"{' / '.join(names)} not found on PATH: install the server's client "
                    f"tools (Debian: mariadb-client, mariadb-backup; MySQL: mysql-client)")


def option_value(text):
    """``text`` quoted for a MySQL options file."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def options_text(spec, groups=("client",)):
    """The body of an options file that logs ``spec``'s user in with its password, and
    the client's TLS options (``tls.client_options``)."""
    body = f"user={option_value(spec.user)}\npassword={option_value(spec.password)}\n"
    body += "".join(name + ("" if value is None else f"={option_value(value)}") + "\n"
                    for name, value in client_options(spec.tls))
    return "".join(f"[{group}]\n{body}" for group in groups)


@contextlib.contextmanager
def options_file(spec, groups=("client",)):
    """A 0600 temporary options file with ``spec``'s credentials, removed afterwards."""
    fd, path = tempfile.mkstemp(prefix="mysqlbackup-", suffix=".cnf")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(options_text(spec, groups))
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


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
            raise ToolError(f"{self.name} failed (exit {code}): {self.last_error()}")

    def last_error(self):
        """The last non-empty stderr line (what the tool said went wrong)."""
        for line in reversed(self.lines):
            if line.strip():
                return line.strip()
        return "no message"

    def kill(self):
        """Stop the tool (our child, by its pid) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
