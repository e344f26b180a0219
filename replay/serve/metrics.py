"""Prometheus metrics of ``mysqlbackup serve`` (``--metrics-address HOST:PORT``).

A registry of its own whose one collector reads the server's counts at each scrape
(nothing is updated on the connections' paths): connections open, logging in and
dumping, dumps started and refused, and what the bounds refused or ended
(``ServeHandle.stats``: refused logins, refused connections, bad handshakes, packets
too large, timeouts, handshakes ended for newer ones, accept failures). Served by the
daemon's bounded HTTP server (``mysqlbackup.httpd``, through ``httpd.serve_registry``),
under its own prefix for the HTTP server's counts.
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
    """Samples of one ``_Server``, computed when scraped."""

    def __init__(self, server):
        self.server = server

    def describe(self):
        return []  # computed at every scrape

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        server = self.server
        with server.lock:
            stats = dict(server.stats)
            open_, handshaking = len(server.connections), len(server.handshaking)
            dumping, started = len(server.dumps), server.dumps_started
            refused = len(server.errors)
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


def serve_metrics(server, address):
    """The started HTTP server of ``server``'s metrics at ``address`` (HOST:PORT);
    UsageError when it cannot listen there."""
    from prometheus_client import CollectorRegistry

    from mysqlbackup.httpd import serve_registry
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ServeCollector(server))
    return serve_registry(registry, address, counters="mysqlbackup_serve_metrics_http")
