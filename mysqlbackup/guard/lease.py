"""Leases: a running restore (or ``archive rekey``: its ``purpose``) says so in the
archive, so retention never deletes what it reads (``{source}/lease/{id}.json``, named
by ``names.lease_key``), and a rekey swaps no object under a restore.

A lease is written when the restore starts (holder host and pid, start, base,
stop), its ``renewed`` time rewritten every ``RENEW_INTERVAL`` seconds by a
background thread, and removed when the restore ends, even on error. A lease is
live unless its ``renewed`` time is older than ``LEASE_EXPIRY`` (a restore killed
with ``kill -9`` leaves one behind, which expires). ``live_leases`` is what
retention honours: everything a live lease's restore reads stays.
"""

import json
import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timezone

from mysqlbackup.archive.names import format_key, lease_key, lease_prefix, parse_key
from mysqlbackup.errors import mask_url
from mysqlbackup.utc import epoch, iso

log = logging.getLogger(__name__)

RENEW_INTERVAL = 60.0    # seconds between renewals
LEASE_EXPIRY = 15 * 60   # seconds without renewal after which a lease is dead


def new_lease_id(now=None):
    """A unique lease id: the UTC start time, then random hex (sorts in time order)."""
    now = time.time() if now is None else now
    stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:12]}"


class Lease:
    """One restore's (or rekey's) lease on a source's archive: ``acquire``, ``renew``, ``release``;
    as a context manager it acquires, renews in the background and always releases."""

    def __init__(self, store, source, base=None, stop=None, lease_id=None,
                 interval=RENEW_INTERVAL, clock=time.time, purpose="restore"):
        self.store, self.source, self.clock = store, source, clock
        self.id = lease_id or new_lease_id(clock())
        self.key = format_key(lease_key(source, self.id))
        self.interval = interval
        self.body = {"kind": "lease", "id": self.id, "source": source,
                     "holder": {"host": socket.gethostname(), "pid": os.getpid(),
                                "pid_ns": _pid_namespace()},
                     "base": base, "stop": stop, "started": None, "renewed": None,
                     "expires_after": LEASE_EXPIRY, "purpose": purpose}
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = None

    def acquire(self):
        """Write the lease (start and renewed: now)."""
        now = iso(self.clock(), 3)
        self.body.update(started=now, renewed=now)
        self._write()
        return self

    def renew(self):
        """Rewrite the lease with ``renewed`` set to now."""
        self.body["renewed"] = iso(self.clock(), 3)
        self._write()
        self.renewals += 1

    def _write(self):
        self.store.put_bytes(self.key, json.dumps(self.body, indent=1, sort_keys=True).encode())

    def start_renewing(self):
        """Renew every ``interval`` seconds in a daemon thread until ``release``."""
        self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                        name=f"lease-{self.id}")
        self._thread.start()

    def _renew_loop(self):
        while not self._stop.wait(self.interval):
            try:
                self.renew()
            except Exception as e:  # noqa: BLE001 - a store hiccup: try at the next turn
                log.warning("lease %s: renewal failed (%s); retrying in %.0fs",
                            self.key, mask_url(e), self.interval)

    def release(self):
        """Stop renewing and remove the lease (a failure to remove is logged: the lease
        then expires by itself)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            self.store.remove(self.key)
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001 - the restore's own outcome matters more
            log.warning("lease %s could not be removed (%s); it expires %d s after its "
                        "last renewal", self.key, mask_url(e), LEASE_EXPIRY)

    def __enter__(self):
        self.acquire()
        self.start_renewing()
        return self

    def __exit__(self, *exc):
        self.release()


class SourceLeases:
    """The leases of one source as listed now: what ``live_leases`` reads, without a
    whole ArchiveListing (``store``, ``leases``)."""

    def __init__(self, store, source):
        self.store, self.leases = store, {source: {}}
        for relative in store.list(lease_prefix(source)):
            key = parse_key(relative)
            if key is not None and key.kind == "lease":
                self.leases[source][key.name] = relative


def held_by_dead_process(body):
    """True when ``body``'s holder is a process of this host that no longer runs (killed
    with kill -9: its lease stays until it expires): not a reason for another process of
    this host to wait. A holder elsewhere, or one that cannot be told, is alive."""
    holder = body.get("holder") if isinstance(body, dict) else None
    if not isinstance(holder, dict) or holder.get("host") != socket.gethostname() \
            or holder.get("pid_ns") is None or holder.get("pid_ns") != _pid_namespace():
        return False  # elsewhere, or process ids of another namespace (a container)
    pid = holder.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _pid_namespace():
    """This process's pid namespace (Linux), so that a pid is compared only within it."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def is_live(body, now, expiry=LEASE_EXPIRY):
    """True unless ``body``'s renewed time is older than ``expiry`` seconds at ``now``."""
    return now - epoch(body["renewed"]) <= expiry


def live_leases(listing, source, now=None, expiry=LEASE_EXPIRY):
    """The bodies of ``source``'s live leases in an ArchiveListing, oldest id first.

    A lease gone since the listing is not live; one that cannot be read as a lease is
    judged by its object's modification time (live when the store cannot tell), so a
    damaged lease never lets retention delete what a restore reads."""
    now = time.time() if now is None else now
    live = []
    for lease_id in sorted(listing.leases[source]):
        key = listing.leases[source][lease_id]
        try:
            body = json.loads(listing.store.read(key))
            alive = is_live(body, now, expiry)
        except FileNotFoundError:
            continue
        except (ValueError, TypeError, KeyError, AttributeError):
            body = {"id": lease_id, "source": source, "damaged": key}
            modified = listing.store.modified(key)
            alive = modified is None or now - modified <= expiry
        if alive:
            live.append(body)
    return live
