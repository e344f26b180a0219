"""Load a dump base into the target (I/O): the object streamed from the archive in
ranged reads, zstd-decompressed as it streams, piped into the server's own client
(``mariadb``, else ``mysql``) with the binlog of the load session off, and checked
at the end against its manifest (stored and raw size and sha256). Nothing is
staged whole on disk or in memory.

The password goes to the client through a temporary ``--defaults-extra-file``
(mode 0600, removed afterwards: ``mysqlbackup.base.client.options_file``), never
on its command line; so do the target's TLS options (``ssl``, ``ssl-ca``,
``ssl-cert``, ``ssl-key``, ``ssl-verify-server-cert`` or ``skip-ssl``: see
``mysqlbackup.source.tls``). The client cannot refuse clear text without checking a
certificate; with ``--target-ssl-mode required`` the restore's own connection to the
target (``RestoreTarget``, made before the load) has proved TLS is on offer.
"""

import os
import re
import subprocess
import tempfile

from mysqlbackup.archive.codec import Digest
from mysqlbackup.base.client import (ToolError, find_client, find_tool, options_file,
                                     tool_product)
from mysqlbackup.base.stream import check_digests, stream_object
from mysqlbackup.errors import MysqlBackupError
from mysqlbackup.base.userscan import IMPORT_ROLE, UsersScan

CLIENTS = ("mariadb", "mysql")


class LoadError(MysqlBackupError):
    """The target's client refused the base's dump, or could not be started."""


def load_client(manifest):
    """(path, product) of the client that loads the base: the base's own product's
    (MySQL's ``mysql`` for a MySQL base: MariaDB's may lack MySQL's authentication
    plugins), else whichever of ``mariadb`` and ``mysql`` is on PATH. The product
    ("mariadb" or "mysql") names the options it takes (TLS: ``client.options_text``)."""
    if manifest.get("gtid_flavor") == "mysql":
        try:
            return find_client(("mysql",), "mysql")[0], "mysql"
        except ToolError:
            pass  # the other product's client, as before: it loads plain SQL too
    path = find_tool(CLIENTS)
    return path, tool_product(path)[0]


def client_args(client, spec, option_file, logged=False):
    """The client's command line: no password, the load session unlogged (``logged``:
    into the target's binlog, for a live server whose replicas must follow)."""
    return [client, f"--defaults-extra-file={option_file}", "--protocol=TCP",
            f"--host={spec.host}", f"--port={spec.port}",
            f"--init-command=SET SESSION sql_log_bin={int(logged)}",
            "--max-allowed-packet=1073741824", "--batch", "--binary-mode"]


def load_dump(store, key, manifest, spec, progress=None, transform=None, keyring=None,
              logged=False):
    """Stream the base object ``key`` into the target ``spec``; returns the raw bytes
    loaded. ``transform`` (optional): an object with ``feed(bytes) -> bytes`` and
    ``finish() -> bytes`` applied to the decompressed stream (a table filter, the users
    filter). ``logged``: the load goes into the target's binlog (a live server: its
    replicas get the restored tables too), else not (an empty target: the base invents
    no GTIDs).
    Raises CorruptBinlog naming the object when it is not its manifest's, LoadError
    when the client fails (its last error line, where the load stopped and what to do).
    ``keyring`` opens an encrypted base."""
    client, product = load_client(manifest)
    watch = UsersScan()  # what the client was sent: numbered lines, databases, users
    with options_file(spec, flavor=product) as option_file, tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(client_args(client, spec, option_file, logged),
                                stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=errors)
        stored, raw = Digest(), Digest()
        try:
            stream_object(store, key, manifest, proc.stdin, (stored, raw), progress, transform,
                          keyring, watch=watch)
        except BrokenPipeError:
            pass  # the client stopped reading: its exit code and error say why
        except BaseException:
            proc.kill()  # a damaged stream: nothing more goes in, not even a torn statement
            proc.wait()
            raise
        finally:
            _close(proc.stdin)
        code = proc.wait()
        if code != 0:
            raise LoadError(load_failure(manifest, os.path.basename(client), code,
                                         _last_line(errors), raw.size, watch))
        check_digests(key, manifest, stored, raw)
        return raw.size


def load_failure(manifest, client, code, error, streamed, watch):
    """The one line of a load the client gave up: its error, where in the dump it stopped
    (the client's 'at line N', else where the stream was), and what to do. Run again,
    the restore finds its marker row at 'loading' and loads the whole base again over
    what is there (the dump drops and recreates each table, view and routine it holds;
    its accounts are CREATE USER IF NOT EXISTS)."""
    at = re.search(r" at line (\d+)", error)
    where = (f"at line {at[1]} of the dump, {watch.where(int(at[1]))}" if at
             else f"with the stream {watch.where()}")
    users = "users section" in where
    leftover = ("" if manifest.get("gtid_flavor") == "mysql" else  # no import role there
                f"; the dump's {IMPORT_ROLE} may be left on the target")
    return (f"the target refused the base {manifest['id']} ({client} exited {code}): {error}; "
            f"the load stopped {where} ({streamed / 1e6:.1f} of "
            f"{manifest['raw_size'] / 1e6:.1f} MB of the dump streamed), and the target "
            "holds what came before: run the same restore again"
            + (f" (or with --users skip, to leave the accounts out{leftover})" if users else "")
            + " to load the base again from its start over it, or restore into a new "
            "empty server")


def _close(stream):
    try:
        stream.close()
    except BrokenPipeError:
        pass


def _last_line(errors):
    errors.seek(0)
    lines = [line for line in errors.read().decode("utf-8", "replace").splitlines()
             if line.strip()]
    return lines[-1] if lines else "no error message"
