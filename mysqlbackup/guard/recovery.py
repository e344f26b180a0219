"""The recovery window as metrics: what the archive can restore, read from its indexes and
manifests alone (archive I/O: listings and small JSON objects, no binlog or base read).

``read_recovery`` gives a ``Recovery``: the first and last restorable moments (the window
``archive ls`` shows: from the earliest base's end in a run without holes to the run's
last commit, over every run that holds a base), the newest sound base's end, and the
holes in the chain after that base (0 while a restore from it reaches the newest
archived transaction). ``RecoveryWatch`` reads it again at most every ``interval``
seconds (a minute: a listing of the whole archive), and ``recovery_families`` turns the
last reading into Prometheus samples with its age, labelled with the source's name. The
daemon's archiver refreshes it after a pass (``Archiver.run_once``); ``serve`` from a
thread of its own (``watch_in_thread``). A reading that fails keeps the one before (its age says how old it is).
"""

import logging
import threading
import time
from dataclasses import dataclass
from typing import Optional

from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.window import locate, recovery_windows
from mysqlbackup.utc import epoch

log = logging.getLogger(__name__)

INTERVAL = 60.0  # seconds between two readings of the archive


@dataclass(frozen=True)
class Recovery:
    """One reading of a source's recovery window (epoch seconds; None: there is none)."""

    source: str
    first: Optional[float]
    last: Optional[float]
    newest_base: Optional[float]
    holes: int
    read_at: float


def read_recovery(store, source, now):
    """The ``Recovery`` of ``source`` in ``store`` as its indexes and manifests say now."""
    listing = ArchiveListing(store)
    runs, holes = listing.chain(source)
    manifests = listing.sound_manifests(source)
    windows = recovery_windows(source, runs, manifests)
    first = epoch(windows[0].start) if windows else None
    last = epoch(windows[-1].end) if windows and windows[-1].end else None
    newest = max(manifests, key=lambda m: m["end_time"], default=None)
    if newest is None:
        after = len(holes)
    else:
        placed = [i for i, run in enumerate(runs) if locate(run, newest) is not None]
        after = len(runs) - 1 - placed[-1] if placed else len(holes)
    return Recovery(source, first, last, epoch(newest["end_time"]) if newest else None,
                    after, now)


class RecoveryWatch:
    """The last ``Recovery`` of one source, read again when ``refresh`` is called at
    least ``interval`` seconds after the reading before (tests drive it with
    ``interval`` 0)."""

    def __init__(self, store, source, interval=INTERVAL, clock=time.time):
        self.store, self.source, self.interval, self.clock = store, source, interval, clock
        self.last = None
        self._tried = None

    def refresh(self, source=None):
        """Read the archive again when due (``source``: the name, once known); the
        reading, or None while there is none."""
        self.source = source or self.source
        now = self.clock()
        if self.source is None or (self._tried is not None
                                   and now - self._tried < self.interval):
            return self.last
        self._tried = now
        try:
            self.last = read_recovery(self.store, self.source, now)
        except Exception as e:  # noqa: BLE001 - a store problem: keep the last reading
            log.warning("recovery window of %s not read (%s: %s); the metrics keep the "
                        "last reading", self.source, type(e).__name__, e)
        return self.last


def watch_in_thread(watch, stopped):
    """A daemon thread that refreshes ``watch`` now and then every ``watch.interval``
    seconds (at least one) until the Event ``stopped`` is set; started, returned."""
    def loop():
        while True:
            watch.refresh()
            if stopped.wait(max(1.0, watch.interval)):
                return
    thread = threading.Thread(target=loop, name="recovery-window", daemon=True)
    thread.start()
    return thread


def recovery_families(recovery, now):
    """Prometheus metric families of one reading (``Recovery``; None: nothing)."""
    from prometheus_client.core import GaugeMetricFamily
    if recovery is None:
        return
    labels, values = ["source"], [recovery.source]

    def gauge(name, text, value):
        family = GaugeMetricFamily(name, text, labels=labels)
        family.add_metric(values, value)
        return family
    if recovery.first is not None:
        yield gauge("mysqlbackup_restorable_first_timestamp_seconds", "The earliest moment a "
                    "restore can reach (the window archive ls shows)", recovery.first)
    if recovery.last is not None:
        yield gauge("mysqlbackup_restorable_last_timestamp_seconds", "The latest moment a "
                    "restore can reach: the newest archived commit with a base before it",
                    recovery.last)
    if recovery.newest_base is not None:
        yield gauge("mysqlbackup_base_newest_timestamp_seconds", "End of the newest sound "
                    "base backup", recovery.newest_base)
    yield gauge("mysqlbackup_archive_holes", "Holes in the binlog chain after the newest "
                "base (0: a restore from it reaches the newest archived transaction)",
                recovery.holes)
    yield gauge("mysqlbackup_recovery_window_age_seconds", "Seconds since the archive was "
                "read for the recovery window metrics", max(0.0, now - recovery.read_at))
