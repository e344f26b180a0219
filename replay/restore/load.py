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
import subprocess
import tempfile
import time

from mysqlbackup.archive.codec import Digest, decode
from mysqlbackup.base.client import find_tool, options_file
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError

CHUNK = 4 << 20           # bytes of the stored object per ranged read
PROGRESS_EVERY = 5.0      # seconds between progress lines
CLIENTS = ("mariadb", "mysql")


class LoadError(MysqlBackupError):
    """The target's client refused the base's dump, or could not be started."""


def client_args(client, spec, option_file, logged=False):
    """The client's command line: no password, the load session unlogged (``logged``:
    into the target's binlog, for a live server whose replicas must follow)."""
    return [client, f"--defaults-extra-file={option_file}", "--protocol=TCP",
            f"--host={spec.host}", f"--port={spec.port}",
            f"--init-command=SET SESSION sql_log_bin={int(logged)}",
            "--max-allowed-packet=1073741824", "--batch", "--binary-mode"]


def load_dump(store, key, manifest, spec, progress=None, transform=None, keyring=None):
    """Stream the base object ``key`` into the target ``spec``; returns the raw bytes
    loaded. ``transform`` (optional): an object with ``feed(bytes) -> bytes`` and
    ``finish() -> bytes`` applied to the decompressed stream (a table filter); the
    load is then logged (a live server: its replicas get the restored tables too),
    else unlogged (an empty target: the base invents no GTIDs).
    Raises CorruptBinlog naming the object when it is not its manifest's, LoadError
    when the client fails (its last error line). ``keyring`` opens an encrypted base."""
    client = find_tool(CLIENTS)
    with options_file(spec) as option_file, tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(client_args(client, spec, option_file, transform is not None),
                                stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=errors)
        stored, raw = Digest(), Digest()
        try:
            stream_object(store, key, manifest, proc.stdin, (stored, raw), progress, transform,
                          keyring)
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
            raise LoadError(f"the target refused the base {manifest['id']} "
                            f"({os.path.basename(client)} exited {code}): {_last_line(errors)}")
        check_digests(key, manifest, stored, raw)
        return raw.size


def stream_object(store, key, manifest, sink, digests, progress, transform, keyring=None):
    """Write the base object ``key``, decoded (decrypted with ``keyring`` when its manifest
    says age, decompressed; then ``transform``ed), to ``sink`` (a pipe), in ranged reads;
    ``digests`` (stored, raw) see every byte on the way. A stream that does not decode
    raises CorruptBinlog (IdentityError: no key opens it) naming the object."""
    stored, raw = digests
    total = manifest["stored_size"]
    started, last_report = time.monotonic(), [time.monotonic()]

    def read(n):
        if stored.size >= total:
            return b""
        chunk = store.read(key, stored.size, min(total, stored.size + max(n, CHUNK)))
        stored.update(chunk)
        return chunk

    def write(data):
        raw.update(data)
        sink.write(transform.feed(data) if transform else data)
        if progress and time.monotonic() - last_report[0] >= PROGRESS_EVERY:
            last_report[0] = time.monotonic()
            progress(_progress_line(stored.size, total, raw.size, last_report[0] - started))
    decode(read, write, manifest.get("codec", "zstd"), keyring, key, manifest.get("key_ids"))
    if transform:
        sink.write(transform.finish())


def _progress_line(done, total, raw, elapsed):
    rate = raw / elapsed / 1e6 if elapsed else 0.0
    return (f"restore: load: {done / 1e6:.1f} of {total / 1e6:.1f} MB stored read, "
            f"{raw / 1e6:.1f} MB loaded, {rate:.1f} MB/s")


def check_digests(key, manifest, stored, raw):
    """CorruptBinlog naming the object when what streamed is not the manifest's."""
    if not stored.matches(manifest["stored_size"], manifest["sha256"]):
        raise CorruptBinlog(f"the stored object has {stored.size} bytes, sha256 "
                            f"{stored.sha256[:16]}..., its manifest says "
                            f"{manifest['stored_size']} bytes, sha256 "
                            f"{manifest['sha256'][:16]}...: not the archived base", key)
    if not raw.matches(manifest["raw_size"], manifest["raw_sha256"]):
        raise CorruptBinlog(f"the dump decompresses to {raw.size} bytes, sha256 "
                            f"{raw.sha256[:16]}..., its manifest says "
                            f"{manifest['raw_size']} bytes, sha256 "
                            f"{manifest['raw_sha256'][:16]}...: not the archived base", key)


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
