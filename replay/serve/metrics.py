"""Prometheus metrics of ``mysqlbackup serve`` (``--metrics-address HOST:PORT``).

A Prometheus registry of its own whose one collector reads serve's counts at each
scrape (``registry.Registry.snapshot``: nothing is updated on the connections'
paths): connections open, logging in and dumping, dumps started and refused, and
what the bounds refused or ended (``ServeHandle.stats``: refused logins, refused
connections, bad handshakes, packets too large, timeouts, handshakes ended for newer
ones, accept failures), and the archive's recovery window (``RecoveryCollector``: the
daemon's ``mysqlbackup_restorable_*`` gauges, read by a thread at most once a minute).
Served by the daemon's bounded HTTP server
(``mysqlbackup.httpd``, through ``httpd.serve_registry``), under its own prefix for
the HTTP server's counts.
"""

STATS = {  # ServeHandle.stats key -> (metric name, help)
    "refused_logins": ("mysqlbackup_serve_refused_logins",
                       "Logins denied (wrong user or password, clear text under "
                       "--require-secure-transport): error 1045"),
    "refused_connections": ("mysqlbackup_serve_refused_connections",
                            "Connections refused with 1040 (Too many connections)"),
    "bad_handshakes": ("mysqlbackup_serve_bad_handshakes",
                       "Handshakes that did not parse (1043) or came out of order (1156)"),
    "too_large": ("mysqlbackup_serve_packets_too_large",
                  "Connections closed for a packet over the limit (1153)"),
    "timed_out": ("mysqlbackup_serve_timeouts",
                  "Connections closed for not sending a whole packet in time"),
    "evicted": ("mysqlbackup_serve_handshakes_evicted",
                "Connections still logging in closed for a newer one (the cap of handshakes)"),
    "accept_errors": ("mysqlbackup_serve_accept_errors",
                      "accept() failures (out of descriptors, memory or buffers: backed off)"),
}


class ServeCollector:
    """Samples of one serve ``Registry``, computed when scraped."""

    def __init__(self, registry):
        self.registry = registry

    def describe(self):
        """No fixed metrics: they are computed at every scrape."""
        return []  # computed at every scrape

    def collect(self):
        """The samples of the registry's snapshot now."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        now = self.registry.snapshot()
        stats, started, refused = now.stats, now.dumps_started, len(now.errors)
        open_, handshaking, dumping = now.connections, now.handshaking, now.dumping
        for key, (name, text) in STATS.items():
            yield CounterMetricFamily(name, text, value=stats.get(key, 0))
        yield CounterMetricFamily("mysqlbackup_serve_dumps", "Dumps replicas started",
                                  value=started)
        yield CounterMetricFamily("mysqlbackup_serve_dumps_refused", "Dumps refused with an "
                                  "error (1236: what the archive lacks)", value=refused)
        yield GaugeMetricFamily("mysqlbackup_serve_connections", "Connections open now",
                                value=open_)
        yield GaugeMetricFamily("mysqlbackup_serve_handshakes", "Connections logging in now",
                                value=handshaking)
        yield GaugeMetricFamily("mysqlbackup_serve_replicas", "Replicas dumping now",
                                value=dumping)


class RecoveryCollector:
    """The served archive's recovery window (``guard.recovery``), its last reading."""

    def __init__(self, watch):
        self.watch = watch

    def describe(self):
        """No fixed metrics: they are computed at every scrape."""
        return []

    def collect(self):
        """The samples of the watch's last reading."""
        import time

        from mysqlbackup.guard.recovery import recovery_families
        yield from recovery_families(self.watch.last, time.time())


def serve_metrics(registry, address, recovery=None):
    """The started HTTP server of the metrics of ``registry`` (a serve ``Registry``) at
    ``address`` (HOST:PORT), with the recovery window of ``recovery`` (a RecoveryWatch)
    when given; UsageError when it cannot listen there."""
    from prometheus_client import CollectorRegistry

    from mysqlbackup.httpd import serve_registry
    metrics = CollectorRegistry(auto_describe=True)
    metrics.register(ServeCollector(registry))
    if recovery is not None:
        metrics.register(RecoveryCollector(recovery))
    return serve_registry(metrics, address, counters="mysqlbackup_serve_metrics_http")
