"""Reusable fault tools for tests and scripts/torture.py.

- ``TcpProxy``: a loopback TCP proxy in front of a source that can cut, stall,
  blackhole, or cut each new connection after the server sent N bytes.
- ``MotoProcess``: moto's S3 server as its own process (SIGSTOP/SIGCONT, kill,
  restart empty on the same port).
- ``Tmpfs`` and ``fsize_prefix``: a small or refusing file system.
- Archive fault injection on a ``file://`` archive (flip, truncate, delete,
  replace, garbage index, bad segment index); each returns the object name
  (relative to the archive root) it damaged, which a refusal must name.
"""

import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.sandbox import free_port

# -- TCP proxy -------------------------------------------------------------------------

class _Link:
    """One proxied connection: the client side and the server side."""

    def __init__(self, client, server, cut_after):
        self.client, self.server = client, server
        self.cut_after = cut_after
        self.from_server = 0
        self.closed = False
        self.lock = threading.Lock()

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.server):
            if sock is None:
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class TcpProxy:
    """Forward 127.0.0.1:``port`` to ``target_host:target_port`` with injectable faults.

    ``cut()`` closes every current connection (both sides); ``stall(True)`` stops
    forwarding bytes (connections stay open); ``blackhole(True)`` accepts new
    connections but neither forwards nor answers (they stay open after
    ``blackhole(False)`` until ``release_holes()`` or ``stop()``); ``cut_after(n)`` cuts each new
    connection once the server sent ``n`` bytes (None: off). ``accepted`` counts
    the connections accepted.
    """

    def __init__(self, target_host, target_port, port=None):
        self.target = (target_host, target_port)
        self.port = port or free_port()
        self.accepted = 0
        self._links = []
        self._holes = []
        self._stalled = threading.Event()
        self._blackhole = False
        self._cut_after = None
        self._lock = threading.Lock()
        self._running = False
        self._listener = None

    @property
    def url(self):
        """A ``mysql://repl@127.0.0.1:PORT`` source URL pointing at the proxy."""
        from mysqlbackup.sandbox import REPL_USER
        return f"mysql://{REPL_USER}@127.0.0.1:{self.port}"

    def start(self):
        """Listen and accept in a background thread; return self."""
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self.port))
        self._listener.listen(64)
        self._running = True
        threading.Thread(target=self._accept_loop, daemon=True).start()
        return self

    def stop(self):
        """Stop listening and close every connection."""
        self._running = False
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes a blocked accept()
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        self.cut()
        with self._lock:
            holes, self._holes = self._holes, []
        for sock in holes:
            sock.close()

    def cut(self):
        """Close every current connection at once, both sides."""
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def stall(self, on):
        """Stop (True) or resume (False) forwarding bytes; connections stay open."""
        if on:
            self._stalled.set()
        else:
            self._stalled.clear()

    def blackhole(self, on):
        """New connections are accepted but nothing is forwarded or answered (True)."""
        self._blackhole = bool(on)

    def release_holes(self):
        """Close the connections a blackhole swallowed (a client that never timed out)."""
        with self._lock:
            holes, self._holes = self._holes, []
        for sock in holes:
            sock.close()

    def cut_after(self, n_bytes_from_server):
        """Cut each new connection once the server sent ``n`` bytes; None turns it off."""
        self._cut_after = n_bytes_from_server

    @property
    def connections(self):
        """How many proxied connections are open now."""
        with self._lock:
            self._links = [link for link in self._links if not link.closed]
            return len(self._links)

    def _accept_loop(self):
        while self._running:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            if self._blackhole:
                with self._lock:
                    self._holes.append(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            link = _Link(client, server, self._cut_after)
            with self._lock:
                self._links.append(link)
            threading.Thread(target=self._pump, args=(link, client, server, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(link, server, client, True),
                             daemon=True).start()

    def _pump(self, link, src, dst, from_server):
        try:
            while not link.closed:
                if self._stalled.is_set():
                    time.sleep(0.01)
                    continue
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready or self._stalled.is_set():
                    continue
                data = src.recv(65536)
                if not data:
                    break
                if from_server and link.cut_after is not None:
                    room = link.cut_after - link.from_server
                    if len(data) >= room:
                        dst.sendall(data[:max(room, 0)])
                        link.from_server += max(room, 0)
                        break
                    link.from_server += len(data)
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        link.close()


# -- moto S3 server as a process ----------------------------------------------------------

class MotoProcess:
    """``python -m moto.server`` on 127.0.0.1:``port``: freeze, thaw, kill, restart empty."""

    def __init__(self, port=None, log_path=os.devnull):
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.proc = None

    def start(self, timeout=30):
        """Start the server and wait until it answers HTTP; return self."""
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"moto server exited with {self.proc.returncode}")
                time.sleep(0.1)
        raise RuntimeError(f"moto server on port {self.port} did not answer in {timeout}s")

    def freeze(self):
        """SIGSTOP: connections stay open, nothing answers."""
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self):
        """SIGCONT after freeze()."""
        self.proc.send_signal(signal.SIGCONT)

    def kill(self):
        """SIGKILL (after SIGCONT, in case it was frozen) and wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.send_signal(signal.SIGCONT)
            self.proc.wait(timeout=10)

    def restart(self):
        """Kill and start again, empty, on the same port."""
        self.kill()
        return self.start()

    stop = kill

    def client(self):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing",
                            config=Config(connect_timeout=3, read_timeout=5,
                                          retries={"max_attempts": 1}))

    def bucket(self, name):
        """Create bucket ``name``; return the archive URL ``s3://name/backups``."""
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}/backups"

    def keys(self, name):
        """Every object key in bucket ``name``."""
        out, token = [], None
        s3 = self.client()
        while True:
            kwargs = {"Bucket": name, **({"ContinuationToken": token} if token else {})}
            page = s3.list_objects_v2(**kwargs)
            out += [o["Key"] for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return out
            token = page["NextContinuationToken"]


# -- a full or refusing file system -------------------------------------------------------

def can_mount_tmpfs():
    """True when this process may mount a tmpfs (root with mount(8) available)."""
    return os.geteuid() == 0 and subprocess.run(["which", "mount"],
                                                capture_output=True).returncode == 0


class Tmpfs:
    """A small tmpfs mounted at ``path`` (root only); ``fill()`` leaves it full."""

    def __init__(self, path, size="16m"):
        self.path, self.size = str(path), size
        self.filler = os.path.join(self.path, ".filler")
        self.mounted = False

    def __enter__(self):
        return self.mount()

    def __exit__(self, *exc):
        self.unmount()

    def mount(self):
        os.makedirs(self.path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", self.path],
                       check=True, capture_output=True)
        self.mounted = True
        return self

    def unmount(self):
        if self.mounted:
            subprocess.run(["umount", "-l", self.path], capture_output=True)
            self.mounted = False

    def fill(self, leave=0):
        """Write a filler file until the file system is full (leaving ``leave`` bytes)."""
        st = os.statvfs(self.path)
        free = st.f_bavail * st.f_frsize - leave
        chunk = b"\0" * (1 << 20)
        # unbuffered: a writer beside it (the daemon) may fill it first, and a buffered
        # file would raise ENOSPC again when it is closed
        try:
            fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            return  # full already
        try:
            while free > 0:
                written = os.write(fd, chunk[:min(len(chunk), free)])
                if not written:
                    break
                free -= written
        except OSError:
            pass  # full
        finally:
            os.close(fd)

    def free(self):
        """Remove the filler file."""
        if os.path.exists(self.filler):
            os.remove(self.filler)


def fsize_prefix(limit_bytes):
    """Command prefix limiting every file a process writes (EFBIG past it)."""
    return ["prlimit", f"--fsize={int(limit_bytes)}", "--"]


# -- archive fault injection on a file:// archive -----------------------------------------

def archive_root(url):
    """Local path of a ``file://`` archive URL."""
    assert url.startswith("file://"), url
    return url[len("file://"):]


def _objects(root, kind):
    out = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            parts = rel.split("/")
            if len(parts) >= 3 and parts[1] == kind and not f.endswith(".json") \
                    and ".tmp-" not in f:
                out.append(rel)
    return sorted(out)


def sealed_objects(root):
    """Relative names of the sealed binlog objects (``SOURCE/binlog/NAME``), oldest first."""
    return _objects(root, "binlog")


def segment_objects(root):
    """Relative names of the partial segments (``SOURCE/partial/NAME/START-END``)."""
    return _objects(root, "partial")


def pick_sealed(root, position=-2):
    """A sealed object with a predecessor and a successor when there are enough."""
    objs = sealed_objects(root)
    assert len(objs) >= 3, f"need 3 sealed objects, have {objs}"
    return objs[position]


def _path(root, rel):
    return os.path.join(root, rel)


def _gtid_offsets(data):
    """Offsets of the MariaDB GTID events (transaction starts) in a whole file."""
    return [off for off, e in iter_events(data, 4, None) if e[4] == ev.MARIA_GTID]


def flip_byte(root, rel=None, offset=None):
    """Flip one byte in the middle of an object (default: size // 2)."""
    rel = rel or pick_sealed(root)
    with open(_path(root, rel), "r+b") as f:
        data = f.read()
        at = len(data) // 2 if offset is None else offset
        f.seek(at)
        f.write(bytes([data[at] ^ 0xFF]))
    return rel


def truncate_mid_event(root, rel=None):
    """Cut an object 10 bytes into an event in its middle."""
    rel = rel or pick_sealed(root)
    path = _path(root, rel)
    with open(path, "rb") as f:
        offs = [off for off, _ in iter_events(f.read(), 4, None)]
    os.truncate(path, offs[len(offs) // 2] + 10)
    return rel


def truncate_at_trx_boundary(root, rel=None):
    """Cut an object where a transaction in its middle begins (a clean boundary)."""
    rel = rel or pick_sealed(root)
    path = _path(root, rel)
    with open(path, "rb") as f:
        offs = _gtid_offsets(f.read())
    assert len(offs) >= 2, f"{rel} has fewer than 2 transactions"
    os.truncate(path, offs[len(offs) // 2])
    return rel


def delete_object(root, rel=None):
    """Remove an object, keeping its index."""
    rel = rel or pick_sealed(root)
    os.remove(_path(root, rel))
    return rel


def delete_index(root, rel=None):
    """Remove an object's index, keeping the object."""
    rel = rel or pick_sealed(root)
    os.remove(_path(root, rel) + ".json")
    return rel


def replace_with_previous(root, rel=None):
    """Overwrite an object with the bytes of the sealed file before it (index kept)."""
    objs = sealed_objects(root)
    rel = rel or pick_sealed(root)
    prev = objs[objs.index(rel) - 1]
    with open(_path(root, prev), "rb") as f:
        data = f.read()
    with open(_path(root, rel), "wb") as f:
        f.write(data)
    return rel


GARBAGE = {"garbage": b"{not json at all", "list": b"[]", "dict": b"{}"}


def garbage_index(root, rel=None, kind="garbage"):
    """Replace an object's index by garbage JSON, ``[]`` or ``{}``."""
    rel = rel or pick_sealed(root)
    with open(_path(root, rel) + ".json", "wb") as f:
        f.write(GARBAGE[kind])
    return rel


def bad_segment_index(root, rel=None):
    """Make a partial segment's index disagree with its object (sha256 and size)."""
    segs = segment_objects(root)
    assert segs or rel, "no partial segment in the archive"
    rel = rel or segs[-1]
    path = _path(root, rel) + ".json"
    with open(path) as f:
        index = json.load(f)
    index["sha256"] = "0" * 64
    index["size"] = index.get("size", 0) + 1
    with open(path, "w") as f:
        json.dump(index, f)
    return rel


ARCHIVE_FAULTS = {
    "flip": flip_byte,
    "truncate-mid-event": truncate_mid_event,
    "truncate-trx-boundary": truncate_at_trx_boundary,
    "delete-object": delete_object,
    "delete-index": delete_index,
    "replace-object": replace_with_previous,
    "garbage-index": lambda root: garbage_index(root, kind="garbage"),
    "empty-list-index": lambda root: garbage_index(root, kind="list"),
    "empty-dict-index": lambda root: garbage_index(root, kind="dict"),
    "bad-segment-index": bad_segment_index,
}
