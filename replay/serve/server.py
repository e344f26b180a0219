"""The socket server of ``mysqlbackup serve``: one thread per connection.

Each connection (``replay.serve.connection``) gets the handshake of the primary the
archive's source was: MariaDB's, or for a MySQL source mysqld 8.4/9.x's
(``replay.serve.protocol.mysql``); is authenticated against the one user the server was
started with (mysql_native_password; for MySQL caching_sha2_password too, its RSA
key pair generated at start or read from ``ServeOptions.rsa_key``), answers the
replica's set-up queries (``replay.serve.protocol.queries``), and on COM_BINLOG_DUMP (or
MySQL's COM_BINLOG_DUMP_GTID) streams what ``replay.serve.feed`` (for MySQL with
``replay.serve.mysqlfeed``'s walk) reads from the archive, then heartbeats until the
replica goes. A replica that disconnects is logged and the
server keeps serving the others; a dump from a server_id already dumping ends the
older connection, as a primary does.

This module composes the parts: the served archive (``archive.ServedArchive``), the
bookkeeping of the connections (``registry.Registry``), the listener and its accept
loop (``listener.Listener``: it never ends but on ``stop()``; past the caps of
handshakes and of ``max_connections`` a connection gets 1040 at once), the read-only
``auth.Settings`` every connection checks its login against, and the metrics.
Refusals are counted (``ServeHandle.stats``) and logged at most once per kind every
few seconds.
"""

import threading
from dataclasses import dataclass, field, replace

from mysqlbackup.errors import UsageError
from replay.planning.selection import Selection
from replay.serve.archive import ServedArchive
from replay.serve.auth import settings_of, tls_context
from replay.serve.connection import Connection
from replay.serve.protocol.limits import MAX_CONNECTIONS
from replay.serve.listener import Listener
from replay.serve.registry import Registry


@dataclass
class ServeOptions:
    """What to serve, where, to whom. ``selection`` is a replay Selection
    (``replay.planning.options.build_selection``): its stop point and exclusions
    apply; ``listen`` port 0 picks a free port (``ServeHandle.port``)."""

    archive_url: str
    source_name: str = None
    listen: tuple = ("127.0.0.1", 0)
    user: str = "mysqlbackup_serve"
    password: str = None
    selection: Selection = field(default_factory=Selection)
    identity: str = None            # age identity file for encrypted objects
    keyring: object = None          # an archive.codec Keyring (instead of ``identity``)
    storage_options: dict = field(default_factory=dict)
    poll_interval: float = 2.0      # after the archive's end, look for more (None: never)
    tls_cert: str = None            # PEM certificate (chain) offered to replicas: TLS on
    tls_key: str = None             # its private key (PEM; may be inside ``tls_cert``)
    require_tls: bool = False       # a replica that does not ask for TLS is denied (1045)
    max_connections: int = MAX_CONNECTIONS  # logged-in connections at once (more: 1040)
    metrics_address: str = None     # HOST:PORT of a Prometheus endpoint (None: off)
    rsa_key: str = None             # MySQL: PEM RSA private key of caching_sha2_password's
                                    # exchange without TLS (None: one generated at start)


class ServeHandle:
    """A running server: ``host``, ``port``, ``source``, ``stop()``, ``wait_end()``;
    a context manager that stops it on exit."""

    def __init__(self, server):
        self._server = server
        self.host, self.port = server.listener.address
        self.source = server.archive.source

    def stop(self):
        """Close the listener and every connection; join their threads."""
        self._server.stop()

    def wait_end(self, timeout=None):
        """The EndInfo of the newest dump that reached its end (the stop point or the
        archive's end; ``last_gtid``: the last transaction sent), or None when none did
        within ``timeout`` seconds."""
        return self._server.registry.wait_end(timeout)

    @property
    def dumps(self):
        """How many dumps replicas started (a reconnect starts one more)."""
        return self._server.registry.snapshot().dumps_started

    @property
    def dump_tls(self):
        """The TLS version of each dump's connection ('TLSv1.3'; None: clear text),
        oldest first."""
        return list(self._server.registry.snapshot().dump_tls)

    @property
    def stats(self):
        """Counts of what the server refused or ended: 'refused_connections' (1040),
        'refused_logins' (1045), 'bad_handshakes' (1043), 'too_large' (1153),
        'timed_out', 'evicted' (a handshake ended for a newer one), 'accept_errors'."""
        return self._server.registry.snapshot().stats

    @property
    def metrics_port(self):
        """The port of the Prometheus endpoint (None: off)."""
        metrics = self._server.metrics
        return metrics.port if metrics is not None else None

    @property
    def connections(self):
        """How many connections are open now (logged in or not)."""
        return self._server.registry.snapshot().connections

    @property
    def errors(self):
        """The (code, message) of every error sent to a replica's dump, oldest first."""
        return list(self._server.registry.snapshot().errors)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_server(options):
    """Check the archive (its source, its files, what opens them), listen, and serve
    in background threads; returns the ServeHandle. UsageError / MysqlBackupError
    when the archive, the source or the address cannot be used."""
    if options.max_connections < 1:
        raise UsageError("--max-connections must be at least 1")
    if not options.password:
        raise UsageError("serve needs a password for its user ($MYSQLBACKUP_SERVE_PASSWORD "
                         "or --replica-password-file)")
    selection = options.selection
    if selection.databases or selection.tables or selection.rewrite:
        raise UsageError("serve sends whole transactions: no --database, --table or "
                         "--rewrite-db (the replica's replicate-do-db/-table filter them)")
    # where to start is the replica's to say (its GTID state or file:position)
    options = replace(options, selection=replace(selection, start_gtids=None,
                                                 start_position=None))
    server = _Server(options)
    server.start()
    return ServeHandle(server)


class _Server:
    """One serve's parts: ``archive`` (what is served), ``registry`` (its connections,
    dumps and counts), ``listener`` (accepting them), ``settings`` (what each
    connection checks a login against), ``metrics`` (its HTTP server, or None)."""

    def __init__(self, options):
        from mysqlbackup.archive.codec import keyring_from
        keyring = options.keyring or keyring_from(options.identity)
        tls = tls_context(options.tls_cert, options.tls_key)
        self.archive = ServedArchive(options.archive_url, options.storage_options,
                                     options.source_name, options.selection, keyring)
        self.registry = Registry(options.max_connections)
        self.listener = Listener(options.listen, self.registry, self._connection,
                                 options.max_connections)
        try:
            self.settings = settings_of(options, tls, self.archive.facts.flavor)
        except BaseException:
            self.listener.stop()
            raise
        self.metrics_address, self.metrics = options.metrics_address, None
        self.stopped = threading.Event()  # ends the recovery window's thread

    def _connection(self, sock, peer, conn_id):
        """A new connection, given what it talks to and nothing more."""
        return Connection(self.archive, self.registry, self.settings, sock, peer, conn_id)

    def start(self):
        """The metrics' HTTP server (when asked for), then the accept loop."""
        if self.metrics_address:
            from replay.serve.metrics import serve_metrics
            try:
                self.metrics = serve_metrics(self.registry, self.metrics_address,
                                             self._watch_recovery())
            except BaseException:
                self.listener.stop()
                raise
        self.listener.start()

    def _watch_recovery(self):
        """The RecoveryWatch of the served archive, refreshed by a thread till ``stop``."""
        from mysqlbackup.archive.store import ArchiveStore
        from mysqlbackup.guard.recovery import RecoveryWatch, watch_in_thread
        archive = self.archive
        watch = RecoveryWatch(ArchiveStore(archive.archive_url, archive.storage_options),
                              archive.source)
        watch_in_thread(watch, self.stopped)
        return watch

    def stop(self):
        """Admit no more, close the listener and every connection, join their threads,
        close the metrics."""
        self.stopped.set()
        connections = self.registry.close()
        self.listener.stop()
        for conn in connections:
            conn.close()
        self.listener.join(timeout=5)
        for conn in connections:
            conn.thread.join(timeout=5)
        if self.metrics is not None:
            self.metrics.close()
