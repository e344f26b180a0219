"""Load a clone base (MySQL: a tar stream of a data directory its clone plugin copied
and a server recovered, ``mysqlbackup.base.clone``) into a new datadir and start
MySQL's own mysqld on it, for the restore to replay into (I/O).

The object streams from the archive in ranged reads, decoded on the way
(``physical.pipe_into``: age, zstd) into ``tar -x``, its stored and raw digests
checked against the manifest; nothing is prepared (the copy was recovered when it was
taken): mysqld starts on it as it is (``physical.start_server``), with a server_uuid
of its own, GTID mode on, and the source's accounts (they came with the copy). As
for a physical base, a marker file records the base it holds, so that a restore run
again starts the server instead of refusing the non-empty directory.
"""

import json
import os

from mysqlbackup.base.client import find_tool
from mysqlbackup.durable import write_bytes
from replay.restore.physical import (MARKER, START_TIMEOUT, holds_prepared, pipe_into,
                                     start_server)


def restore_clone(store, key, manifest, datadir, target, progress=None,
                  timeout=START_TIMEOUT, keyring=None):
    """The clone base ``key`` (its ``manifest``) into ``datadir``, and mysqld started on
    it at ``target``'s host and port; returns physical.RestoredServer. ``datadir``: new
    or empty, or holding this base from an earlier run. Raises UsageError (a datadir
    in use, a busy port, a user the server refuses), ToolError (tar or mysqld failed:
    its last line), CorruptBinlog (the object is not its manifest's)."""
    progress = progress or (lambda line: None)
    datadir = os.path.abspath(datadir)
    if not holds_prepared(datadir, manifest):
        extract(store, key, manifest, datadir, progress, keyring)
        write_bytes(os.path.join(datadir, MARKER), json.dumps(
            {"base": manifest["id"], "source": manifest["source"], "state": "prepared"}).encode())
    else:
        progress(f"restore: {datadir} holds base {manifest['id']}: starting it")
    return start_server(datadir, target, progress, timeout, flavor="mysql")


def tar_argv(tar, datadir):
    """``tar``'s arguments: the stream on stdin unpacked into ``datadir``, the files
    owned by whoever unpacks them."""
    return [tar, "-x", "-f", "-", "-C", datadir, "--no-same-owner"]


def extract(store, key, manifest, datadir, progress, keyring=None):
    """The object's tar stream unpacked into ``datadir`` (made when missing), checked
    against the manifest as it streams."""
    os.makedirs(datadir, mode=0o750, exist_ok=True)
    progress(f"restore: extracting clone base {manifest['id']} ({manifest['stored_size']} "
             f"bytes stored, {manifest['raw_size']} raw) into {datadir}")
    pipe_into(store, key, manifest, tar_argv(find_tool(("tar",)), datadir),
              f"tar -x into {datadir}", progress, keyring)
