"""Prometheus metrics of ``mysqlbackup stream`` (``--metrics-address HOST:PORT``).

``StreamMetrics`` owns a CollectorRegistry of its own (never the global default
one, so tests and several daemons in one process do not clash) and every metric
object; the pipeline calls its small methods, at most once per batch on the hot
path: ``ReplicaClient`` (``received``), ``Syncer`` (``fsync``, ``acked``,
``durable``, ``position``, ``source``), the daemon (``reconnect``, ``error``)
and the ``Archiver`` (``archive``, ``error``, ``recovery``: the recovery window it reads
from the archive at most once a minute). Values that are only read at a
scrape (the durable position, seconds behind the source, the archive's age) are
stored as plain attributes and turned into samples by a collector when scraped.

``NULL_METRICS`` has the same methods doing nothing: the default everywhere, so
a daemon without ``--metrics-address`` pays one empty method call per batch.
``prometheus_client`` (about 0.1 s to import) is imported only when metrics are on.
"""

import math
import time

from mysqlbackup.localdir.horizon import margin
from mysqlbackup.guard.recovery import recovery_families

# fsync and ACK latencies: from 50 us (a cached SSD fsync) to 10 s (a stalled disk)
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                   0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class NullMetrics:
    """Metrics off: every hook is an empty call."""

    enabled = False

    def received(self, n_bytes, n_events):
        """Bytes and events read from the replication connection (one batch)."""

    def durable(self, n_trx):
        """``n_trx`` more transactions are fsynced."""

    def position(self, file, pos, gtid):
        """The durable position: file, offset and GTID set (text)."""

    def source(self, event_time, caught_up):
        """The newest event's timestamp (source clock, epoch seconds; None: none yet) and
        whether a heartbeat came after it (the source had nothing more to send)."""

    def fsync(self, seconds):
        """One fsync of a binlog file before an ACK or when due."""

    def acked(self, seconds):
        """One ACK sent, ``seconds`` after the batch holding the event that asked for it
        was read."""

    def reconnect(self):
        """The replication connection is opened again after a failure."""

    def error(self, stage, kind):
        """A failure that the daemon retries: ``stage`` 'stream' or 'archive', ``kind`` the
        error's class name."""

    def archive(self, backlog_files, backlog_bytes, last_success, active=None):
        """After an archiver pass (or a failed one): sealed files and their bytes not
        archived yet, the time (epoch) of the last pass that left the archive complete,
        and ``active``: (newest file, end of its archived segments, its durable end then),
        so that a scrape counts the newest file's durable bytes not archived as of now."""

    def recovery(self, reading):
        """The newest reading of the archive's recovery window (``recovery.Recovery``)."""

    def horizon(self, record):
        """A new record of the primary's binlog files and purge settings
        (``localdir.horizon``)."""

    def close(self):
        """Stop serving (nothing to stop here)."""


NULL_METRICS = NullMetrics()


class StreamMetrics(NullMetrics):
    """The daemon's metrics in a registry of their own; ``serve`` exposes them over HTTP."""

    enabled = True

    def __init__(self, archive=False, clock=time.time):
        from prometheus_client import CollectorRegistry
        self.registry = CollectorRegistry(auto_describe=True)
        self.clock = clock
        self.started = clock()
        self._counters(self.registry)
        self._histograms(self.registry)
        self._position = None       # (file, pos, gtid) of the durable point
        self._event_time = None     # newest event's timestamp (source clock)
        self._caught_up = False
        self._archive = ({"files": 0, "bytes": 0, "last_success": None} if archive else None)
        self._horizon = None        # the newest record of the primary's purge horizon
        self._recovery = None       # the newest reading of the recovery window
        self.registry.register(_LiveCollector(self))
        self.server = None          # httpd.MetricsServer once serving

    def _counters(self, registry):
        from prometheus_client import Counter
        self.bytes_received = Counter("mysqlbackup_received_bytes",
                                      "Bytes read from the replication connection",
                                      registry=registry)
        self.events_received = Counter("mysqlbackup_received_events",
                                       "Events read from the replication connection "
                                       "(heartbeats included)", registry=registry)
        self.trx_durable = Counter("mysqlbackup_durable_transactions",
                                   "Transactions fsynced to the local binlog files",
                                   registry=registry)
        self.reconnects = Counter("mysqlbackup_reconnects",
                                  "Reconnections to the source after a failure",
                                  registry=registry)
        self.errors = Counter("mysqlbackup_errors", "Failures retried, by stage and error "
                              "class", ["stage", "kind"], registry=registry)

    def _histograms(self, registry):
        from prometheus_client import Histogram
        self.fsync_seconds = Histogram("mysqlbackup_fsync_duration_seconds",
                                       "fsync of the active binlog file", registry=registry,
                                       buckets=LATENCY_BUCKETS)
        self.ack_seconds = Histogram("mysqlbackup_ack_latency_seconds",
                                     "From reading the event that asked for a semi-sync "
                                     "ACK to sending the ACK (write and fsync included)",
                                     registry=registry, buckets=LATENCY_BUCKETS)

    # -- hooks (see NullMetrics) ----------------------------------------------------

    def received(self, n_bytes, n_events):
        self.bytes_received.inc(n_bytes)
        self.events_received.inc(n_events)

    def durable(self, n_trx):
        if n_trx:
            self.trx_durable.inc(n_trx)

    def position(self, file, pos, gtid):
        self._position = (file, pos, gtid)

    def source(self, event_time, caught_up):
        if event_time is not None:
            self._event_time = event_time
        self._caught_up = caught_up

    def fsync(self, seconds):
        self.fsync_seconds.observe(seconds)

    def acked(self, seconds):
        self.ack_seconds.observe(seconds)

    def reconnect(self):
        self.reconnects.inc()

    def error(self, stage, kind):
        self.errors.labels(stage, kind).inc()

    def archive(self, backlog_files, backlog_bytes, last_success, active=None):
        self._archive = {"files": backlog_files, "bytes": backlog_bytes,
                         "last_success": last_success, "active": active}

    def recovery(self, reading):
        self._recovery = reading

    def horizon(self, record):
        self._horizon = record

    def archive_backlog_bytes(self):
        """Sealed bytes not archived at the last pass, plus the newest file's durable bytes
        after its archived segments (from the durable position now when it is that file)."""
        archive = self._archive
        total, active = archive["bytes"], archive.get("active")
        if active is not None:
            name, archived_end, durable_end = active
            if self._position is not None and self._position[0] == name:
                durable_end = self._position[1]
            total += max(0, durable_end - archived_end)
        return total

    # -- values computed at a scrape --------------------------------------------------

    def seconds_behind(self):
        """0 when a heartbeat came after the newest event, else now minus its timestamp;
        NaN before any event."""
        if self._caught_up:
            return 0.0
        if self._event_time is None:
            return math.nan
        return max(0.0, self.clock() - self._event_time)

    # -- HTTP ---------------------------------------------------------------------------

    def serve(self, address):
        """Serve the registry at ``http://HOST:PORT/`` (``httpd.MetricsServer``: one
        event-loop thread, a bounded number of connections and descriptors).

        A port in use (or an address not of this host) is a UsageError: one line, exit 2."""
        from mysqlbackup.httpd import serve_registry
        self.server = serve_registry(self.registry, address)
        return self

    def close(self):
        """Stop the HTTP server and wait for its thread."""
        if self.server is not None:
            self.server.close()
            self.server = None


class _LiveCollector:
    """Samples computed when scraped: seconds behind the source, the durable position,
    the archive backlog and the age of its last complete pass."""

    def __init__(self, metrics):
        self.metrics = metrics

    def describe(self):
        return []  # computed at every scrape: nothing to check at registration

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
        m = self.metrics
        yield GaugeMetricFamily("mysqlbackup_seconds_behind_source",
                                "Now minus the newest received event's timestamp; 0 when a "
                                "heartbeat came after it", value=m.seconds_behind())
        if m._position is not None:
            file, pos, gtid = m._position
            info = InfoMetricFamily("mysqlbackup_durable_position",
                                    "The newest durable transaction boundary")
            info.add_metric([], {"file": file, "position": str(pos), "gtid": gtid or ""})
            yield info
            yield GaugeMetricFamily("mysqlbackup_durable_offset_bytes", "Offset of the "
                                    "durable position in its binlog file", value=pos)
        if m._archive is not None:
            yield from _archive_families(m._archive, m.archive_backlog_bytes(), m.clock(),
                                         m.started)
        if m._horizon is not None and m._position is not None:
            yield from _horizon_families(margin(m._horizon, m._position[0], m.clock()))
        yield from recovery_families(m._recovery, m.clock())


def _archive_families(archive, backlog_bytes, now, started):
    from prometheus_client.core import GaugeMetricFamily
    yield GaugeMetricFamily("mysqlbackup_archive_backlog_files", "Sealed local binlog files "
                            "not archived yet", value=archive["files"])
    yield GaugeMetricFamily("mysqlbackup_archive_backlog_bytes", "Durable local bytes not "
                            "archived yet (sealed files and the active file's tail)",
                            value=backlog_bytes)
    last = archive["last_success"]
    if last is not None:
        yield GaugeMetricFamily("mysqlbackup_archive_last_success_timestamp_seconds",
                                "End of the last archiver pass that left everything durable "
                                "then archived", value=last)
    yield GaugeMetricFamily("mysqlbackup_archive_seconds_since_last_success",
                            "Seconds since the last complete archiver pass (since the "
                            "daemon started, before the first one)",
                            value=max(0.0, now - (last if last is not None else started)))


def _horizon_families(found):
    from prometheus_client.core import GaugeMetricFamily
    yield GaugeMetricFamily("mysqlbackup_purge_horizon_files", "Binlog files the primary "
                            "held before ours when last read (-1: it no longer held ours)",
                            value=-1 if found["purged"] else found["files_before"])
    if not found["purged"]:
        yield GaugeMetricFamily("mysqlbackup_purge_horizon_bytes", "Bytes of the binlog "
                                "files the primary held before ours", value=found["bytes_before"])
    if found["seconds_left"] is not None:
        yield GaugeMetricFamily("mysqlbackup_purge_horizon_seconds", "At least this long "
                                "before the primary's expiry can purge our file",
                                value=found["seconds_left"])


def open_metrics(address, archive=False):
    """A StreamMetrics serving on ``address`` (HOST:PORT), or NULL_METRICS when None."""
    if not address:
        return NULL_METRICS
    return StreamMetrics(archive=archive).serve(address)
