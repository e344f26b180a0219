"""systemd's notify protocol for ``mysqlbackup stream`` (``Type=notify``).

A datagram of ``KEY=VALUE`` lines to the AF_UNIX socket named by ``$NOTIFY_SOCKET``
(``@name``: the abstract namespace): ``READY=1`` once streaming is safe (the first
ACK sent after its fsync, or a heartbeat with everything durable, or with semi-sync
off the first fsynced batch), ``STATUS=`` with the durable position, ``WATCHDOG=1``
at half of ``$WATCHDOG_USEC``, ``STOPPING=1`` at the end. Every message comes from
the daemon's own loop (``Notifier.watch`` wraps its stop check), so a hung loop
stops the watchdog pings. Without ``$NOTIFY_SOCKET`` everything is a no-op; a
failed send is logged, never fatal.
"""

import logging
import os
import socket
import time

log = logging.getLogger(__name__)

STATUS_EVERY = 1.0  # seconds between STATUS= updates while the position moves


class Notifier:
    """Sends READY/STATUS/WATCHDOG/STOPPING to systemd (no-op without an address)."""

    def __init__(self, address=None, watchdog_usec=None, clock=time.monotonic):
        if address and address.startswith("@"):
            address = "\0" + address[1:]
        self.address = address or None
        self.watchdog_every = watchdog_usec / 2e6 if watchdog_usec else None
        self.clock = clock
        self.sock = None
        self.ready_sent = False
        self.syncer = None
        self.start = None          # (durable position, clock) of the syncer when attached
        self.last_status = None
        self.next_status = self.next_watchdog = 0.0

    @classmethod
    def from_environment(cls, environ=os.environ):
        """From $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID (as sd_notify reads them)."""
        usec = environ.get("WATCHDOG_USEC")
        pid = environ.get("WATCHDOG_PID")
        if not (usec and usec.isdigit()) or (pid and pid != str(os.getpid())):
            usec = None
        return cls(environ.get("NOTIFY_SOCKET"), int(usec) if usec else None)

    def send(self, *lines):
        """Send one datagram of ``KEY=VALUE`` lines; False when it could not go."""
        if not self.address:
            return False
        try:
            if self.sock is None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.sock.sendto("\n".join(lines).encode("utf-8"), self.address)
            return True
        except OSError as e:
            log.warning("cannot notify systemd at %s: %s", self.address.replace("\0", "@"), e)
            return False

    def status(self, text):
        """STATUS=text (one line)."""
        self.last_status = text
        self.send("STATUS=" + text.replace("\n", " "))

    def stopping(self):
        """STOPPING=1; the socket is closed."""
        self.send("STOPPING=1", "STATUS=stopping")
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    # -- driven by the daemon's loop -------------------------------------------------

    def watch(self, stop, on_syncer=None):
        """(a stop check that also ticks this notifier, an ``on_syncer`` hook that
        attaches each connection's Syncer and then calls ``on_syncer``)."""
        def attach(syncer):
            self.syncer, self.start = syncer, (syncer.durable, syncer.clock())
            if on_syncer:
                on_syncer(syncer)
        return _Ticking(stop, self), attach

    def tick(self):
        """Called from the loop: WATCHDOG=1 when due, READY=1 once, STATUS= when it moved."""
        if not self.address:
            return
        now = self.clock()
        if self.watchdog_every and now >= self.next_watchdog:
            self.next_watchdog = now + self.watchdog_every
            self.send("WATCHDOG=1")
        syncer = self.syncer
        if syncer is None:
            return
        if not self.ready_sent and _safe(syncer, self.start):
            self.ready_sent = True
            self.send("READY=1", "STATUS=" + _describe(syncer))
            self.last_status, self.next_status = _describe(syncer), now + STATUS_EVERY
        elif self.ready_sent and now >= self.next_status:
            self.next_status = now + STATUS_EVERY
            text = _describe(syncer)
            if text != self.last_status:
                self.status(text)

    def reconnecting(self, why):
        """STATUS= while the daemon waits to reconnect (the old connection is gone)."""
        self.syncer = None
        self.status(f"reconnecting: {why}")


class _Ticking:
    """A stop check (``stop()``) that ticks the notifier on every call; other
    attributes (a StopRequest's ``clients``) are the wrapped check's."""

    def __init__(self, stop, notifier):
        self.stop, self.notifier = stop, notifier

    def __call__(self):
        self.notifier.tick()
        return self.stop()

    def __getattr__(self, name):
        return getattr(self.stop, name)


def reconnecting(stop, why):
    """Tell systemd the daemon is reconnecting, when ``stop`` is a ticking check."""
    notifier = getattr(stop, "notifier", None)
    if isinstance(notifier, Notifier):
        notifier.reconnecting(why)


def _safe(syncer, start):
    """Everything the source sent is durable once: an ACK was sent in this connection
    (ACKs go out after their fsync), or a heartbeat came (the source had nothing more)
    with nothing unsynced, or, with semi-sync off, a batch was fsynced."""
    if syncer.writer.unsynced:
        return False
    ack = syncer.last_ack
    if ack and ack.get("time") is not None and ack["time"] >= start[1]:
        return True
    if syncer.source_position is not None:
        return True
    return not getattr(syncer.client, "semi_sync", True) and syncer.durable != start[0]


def _describe(syncer):
    ack = syncer.last_ack
    text = f"durable {syncer.durable.file}:{syncer.durable.offset}"
    if syncer.durable_gtid:
        text += f" gtid {syncer.durable_gtid}"
    if ack:
        text += f", last ack {ack['file']}:{ack['pos']}"
    return text
