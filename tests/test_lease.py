"""Restore leases in a real file:// archive: written, renewed, removed, judged live."""

import json
import os

import pytest

from mysqlbackup.guard.lease import LEASE_EXPIRY, Lease, live_leases
from mysqlbackup.utc import epoch, iso
from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.names import parse_key
from mysqlbackup.archive.store import ArchiveStore
from tests.helpers import wait_for


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now=1_800_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def store(tmp_path):
    return ArchiveStore(f"file://{tmp_path / 'archive'}")


def test_lease_written_under_its_key_with_holder_base_and_stop(store):
    clock = Clock()
    lease = Lease(store, "db1", base="20270115T080000.000Z", stop="--stop-datetime X",
                  clock=clock).acquire()
    key = parse_key(lease.key)
    assert (key.source, key.kind, key.name) == ("db1", "lease", lease.id)
    body = json.loads(store.read(lease.key))
    assert body["holder"] == {"host": os.uname().nodename, "pid": os.getpid(),
                              "pid_ns": os.readlink("/proc/self/ns/pid")}
    assert body["base"] == "20270115T080000.000Z" and body["stop"] == "--stop-datetime X"
    assert body["started"] == body["renewed"] == iso(clock.now, 3)  # milliseconds
    assert list(ArchiveListing(store).leases["db1"]) == [lease.id]


def test_background_renewal_moves_renewed_and_release_removes(store):
    clock = Clock()
    lease = Lease(store, "db1", clock=clock, interval=0.02)
    with lease:
        first = json.loads(store.read(lease.key))["renewed"]
        clock.now += 90
        wait_for(lambda: json.loads(store.read(lease.key))["renewed"] != first, timeout=10,
                 what="the background thread to renew the lease")
        assert epoch(json.loads(store.read(lease.key))["renewed"]) == clock.now
    assert not store.exists(lease.key)
    assert ArchiveListing(store).leases["db1"] == {}


def test_lease_removed_even_when_the_restore_fails(store):
    with pytest.raises(RuntimeError):
        with Lease(store, "db1", interval=3600) as lease:
            assert store.exists(lease.key)
            raise RuntimeError("restore failed")
    assert not store.exists(lease.key)


def test_live_unless_renewal_older_than_expiry(store):
    clock = Clock()
    old = Lease(store, "db1", clock=clock, lease_id="old").acquire()
    clock.now += LEASE_EXPIRY - 10
    fresh = Lease(store, "db1", clock=clock, lease_id="fresh").acquire()
    listing = ArchiveListing(store)
    assert [b["id"] for b in live_leases(listing, "db1", now=clock.now)] == ["fresh", "old"]
    later = clock.now + 11
    assert [b["id"] for b in live_leases(listing, "db1", now=later)] == ["fresh"]
    old.renew()  # renewed at clock.now: live again
    assert [b["id"] for b in live_leases(listing, "db1", now=later)] == ["fresh", "old"]
    assert live_leases(listing, "db1", now=later + LEASE_EXPIRY + 1) == []
    assert fresh.renewals == 0 and old.renewals == 1


def test_damaged_lease_is_judged_by_its_object_time(store):
    store.put_bytes("db1/lease/garbled.json", b"{not json")
    listing = ArchiveListing(store)
    modified = store.modified("db1/lease/garbled.json")
    live = live_leases(listing, "db1", now=modified + 5)
    assert live == [{"id": "garbled", "source": "db1", "damaged": "db1/lease/garbled.json"}]
    assert live_leases(listing, "db1", now=modified + LEASE_EXPIRY + 5) == []


def test_lease_removed_since_the_listing_is_not_live(store):
    lease = Lease(store, "db1").acquire()
    listing = ArchiveListing(store)
    lease.release()
    assert live_leases(listing, "db1") == []


@pytest.mark.server  # starts a process, to have a pid that ran and is gone
def test_a_holder_of_this_host_that_is_gone_is_told_from_one_that_runs():
    """``held_by_dead_process``: only a pid of this host and pid namespace that no longer
    runs; ourselves, a running process, another host or namespace, or a lease that says
    no namespace, are alive."""
    import subprocess
    import sys
    from mysqlbackup.guard.lease import held_by_dead_process
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(done.stdout)
    here = {"host": os.uname().nodename, "pid_ns": os.readlink("/proc/self/ns/pid")}
    assert held_by_dead_process({"holder": dict(here, pid=dead)})
    assert not held_by_dead_process({"holder": dict(here, pid=os.getpid())})
    assert not held_by_dead_process({"holder": dict(here, pid=1)})
    assert not held_by_dead_process({"holder": dict(here, pid=dead, host="elsewhere")})
    assert not held_by_dead_process({"holder": dict(here, pid=dead, pid_ns="pid:[1]")})
    assert not held_by_dead_process({"holder": {"host": here["host"], "pid": dead}})
    assert not held_by_dead_process({"damaged": "x"})
