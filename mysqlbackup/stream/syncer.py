"""The pipeline of one replication connection: decoded events -> local file -> ACK.

``Syncer.process`` takes a batch of events already read from the socket, routes
each one (write it, rotate on a real ROTATE, drop what the server made up for
the stream, stop at an INCIDENT), then calls ``_commit``, the one function that
orders "write, fsync, then ACK": a whole batch is written, fsynced once, and
only then is the newest position that asked for an ACK acknowledged.
"""

import logging
import struct
import time

from mysqlbackup import speedups
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.names import is_binlog_name
from mysqlbackup.binlog.position import Position
from mysqlbackup.binlog.transactions import IN_TRX, INERT_IN_TRX, OUTSIDE, TrxTracker
from mysqlbackup.errors import ProtocolError, ResyncRequired
from mysqlbackup.localdir.state import State, save_state
from mysqlbackup.source.protocol import EVENTS, event_size
from mysqlbackup.stream.metrics import NULL_METRICS

log = logging.getLogger(__name__)

# without an ACK to send, an fsync waits until the source has been silent this long: a
# catch-up that drains the socket now and then is not fsynced at each pause
SYNC_LINGER = 0.005
# While catching up, fsync at least every 64 MiB: 2 GB of 40 KB events on a disk slower
# than the stream took 6.2 s, against 8.0 s every 16 MiB and 6.9 s every 1 GiB.
SYNC_BYTES = 64 << 20
_HEADER = struct.Struct("<IBIIIH")
# event types that need more than "check, write, follow the transaction"
_SPECIAL = frozenset({ev.HEARTBEAT, ev.HEARTBEAT_V2, ev.INCIDENT, ev.ROTATE,
                      ev.FORMAT_DESCRIPTION})


class Syncer:
    """Copies the binlog stream of one connection into the local files."""

    def __init__(self, client, writer, tracker=None, base_state=None, sync_interval=1.0,
                 checkpoint_interval=0.1, clock=time.time, idle_checkpoint=30.0,
                 progress_interval=60.0, metrics=NULL_METRICS):
        self.client = client
        self.writer = writer
        self.tracker = tracker or TrxTracker()
        self.base_state = base_state or State(file=writer.name, pos=writer.pos)
        self.sync_interval = sync_interval
        self.checkpoint_interval = checkpoint_interval
        self.idle_checkpoint = idle_checkpoint
        self.progress_interval = progress_interval
        self.clock = clock
        # events the server makes up (fake ROTATE, heartbeats) can come before any FDE
        self.stream_checksum = getattr(client, "stream_checksum", None)
        self.boundary = Position(writer.name, writer.pos)  # the newest transaction boundary
        self.durable = self.boundary                        # ... of what is fsynced
        self.durable_gtid = self._gtid_text()               # the GTID set up to ``durable``
        self.last_sync = self.last_checkpoint = self.last_progress = clock()
        self.recorded = None  # _recordable() of the last checkpoint written
        self.bytes_written = 0
        self.last_ack = base_state.last_ack if base_state else None
        self.source_position = None
        self.last_event_time = None
        self.events = 0
        self.metrics = metrics          # stream.metrics hooks, called once per batch at most
        self.heartbeat_after = None     # ``events`` when the newest heartbeat came
        self.durable_trx = self.tracker.transactions  # transactions counted durable so far
        self.busy = False               # the newest batch left more bytes waiting
        self.drained = False            # a busy stream drained, its end not yet recorded
        self.last_data = 0.0            # when the newest batch with events came

    def run(self, stop=lambda: False):
        """Process batches until ``stop()`` is true; always leaves a final checkpoint."""
        try:
            while not stop():
                self.process(self.client.read_batch(timeout=self._wake_in(self.clock())))
        finally:
            self.finish()

    def process(self, batch):
        """Route every event of one batch, then write, fsync and ACK once.

        The common event (a real one of a checksummed binlog, not in ``_SPECIAL``, whose
        CRC and position are right) is handled inline, as ``_write`` would: appended, and
        fed to the tracker unless it is a row event (or its TABLE_MAP / ANNOTATE_ROWS)
        inside an open transaction, which the tracker does nothing with
        (``INERT_IN_TRX``). Every other event, and any that fails a check, takes
        ``_route``, which raises the error naming file and position. A run of events
        from the fused decoder loop (flag EVENTS) takes ``_events_run``.
        """
        ack = None
        if batch:
            self.last_data = self.clock()
        writer, tracker, unpack, crc32 = self.writer, self.tracker, _HEADER.unpack_from, ev.crc32
        try:
            for event, needs_ack in batch:
                if needs_ack is EVENTS:
                    self._events_run(event)
                    continue
                name = writer.name  # the file this event goes to: a ROTATE moves on
                when, etype, _, size, end, flags = unpack(event)
                if etype in _SPECIAL or flags & ev.LOG_EVENT_ARTIFICIAL_F or not tracker.checksum \
                        or end != writer.pos + size or crc32(event) != ev.CRC_RESIDUE:
                    self._route(event)  # also every event whose checks fail: it raises
                else:
                    writer.append(event)
                    self.events += 1
                    self.bytes_written += size
                    self.last_event_time = when
                    if etype not in INERT_IN_TRX or tracker.state != IN_TRX:
                        tracker.feed(event)
                        if tracker.state == OUTSIDE:
                            self.boundary = Position(name, writer.pos)
                if needs_ack:  # (an event without an end position: where it was written)
                    ack = Position(name, end or writer.pos)
        finally:
            if not writer.failed:
                self._commit(ack)

    def _events_run(self, data):
        """Whole events back to back: the fused walk takes the common ones (checked
        as ``process`` checks them; the tracker learns the GTIDs and XIDs it took) and
        ``_route`` takes each one it stops at (every event while the file has no CRC to
        check)."""
        walk, tracker, writer, off = speedups.fused.walk_events, self.tracker, self.writer, 0
        while off < len(data):
            if tracker.checksum:
                off += self._walked(data, off, walk(data, off, writer.pos,
                                                    tracker.state == IN_TRX))
            if off < len(data):  # the event the walk stopped at
                size = event_size(data, off)
                self._route(data[off:off + size])
                off += size

    def _walked(self, data, off, result):
        """Account for what the fused walk took from ``data[off:]``; its length."""
        taken, count, in_trx, boundary, when, opened, closed = result
        if taken:
            self.writer.append(data[off:off + taken])
            self.tracker.walked(opened, closed, in_trx)
            if (self.tracker.state == IN_TRX) != in_trx:
                raise ProtocolError(f"the fused walk and the tracker disagree at "
                                    f"{self.writer.name}:{self.writer.pos}")
            self.events += count
            self.bytes_written += taken
            self.last_event_time = when
            if boundary:
                self.boundary = Position(self.writer.name, boundary)
        return taken

    def _route(self, event):
        """The common case (a real event of a transaction) takes the short path. An
        event without an end position (0) is a real one inside a transaction (MariaDB
        11.4+, binlog_legacy_event_pos=OFF: only GTID and commit events carry it), and
        outside one the server's own making (the stream's first format description)."""
        header = _HEADER.unpack_from(event)
        if header[1] in _SPECIAL or header[5] & ev.LOG_EVENT_ARTIFICIAL_F or (
                not header[4] and self.tracker.state == OUTSIDE):
            self._route_special(event, ev.EventHeader(*header))
        else:
            self._write(event, header)

    def _route_special(self, event, header):
        if header.type in (ev.HEARTBEAT, ev.HEARTBEAT_V2):
            self._heartbeat(event, header)
        elif ev.is_artificial(header):
            self._artificial(event, header)
        elif header.type == ev.INCIDENT:
            raise self._incident(event)
        else:
            self._write(event, header)
            if header.type == ev.ROTATE:
                self._rotate(ev.parse_rotate(event, self.tracker.checksum)[1])

    def _write(self, event, header):
        """Check an event (CRC, and its end position where it has one: the file offset
        follows the sizes), append it, and follow transaction boundaries."""
        self._check_crc(event, header[1])
        writer, size = self.writer, header[3]
        if header[4] and header[4] != writer.pos + size:
            raise ProtocolError(f"{ev.event_name(header[1])} event ends at {header[4]} "
                                f"but {writer.name} is at {writer.pos}")
        writer.append(event)
        self.tracker.feed(event)
        self.events += 1
        self.bytes_written += size
        self.last_event_time = header[0]
        if self.tracker.state == OUTSIDE:
            self.boundary = Position(writer.name, writer.pos)

    def _check_crc(self, event, etype):
        """Every event is checked against its file's checksum setting before it is written."""
        checksum = self.tracker.checksum
        if etype == ev.FORMAT_DESCRIPTION:
            checksum = ev.parse_format_description(event).checksum_alg == ev.CHECKSUM_CRC32
        if checksum and ev.crc32(event) != ev.CRC_RESIDUE \
                and not ev.crc_ok(event):  # crc_ok knows the FDE in-use flag exception
            raise ResyncRequired(f"CRC32 mismatch in the {ev.event_name(etype)} event the "
                                 f"source sent (its binlog may be corrupt)", self.writer.name,
                                 self.writer.pos)

    def _artificial(self, event, header):
        """Events the server makes up for the stream are never written, but some inform."""
        if header.type == ev.FORMAT_DESCRIPTION:
            self.tracker.feed(event)  # resumed mid-file: learn the checksum
        elif header.type == ev.ROTATE:
            pos, name = ev.parse_rotate(event, self._checksum())
            if name != self.writer.name:
                # the source went on to the next file without a real ROTATE (after a STOP)
                if pos != 4 or not self.tracker.at_boundary:
                    raise ProtocolError(f"the source jumped to {name}:{pos} in the middle of "
                                        f"{self.writer.name}:{self.writer.pos}")
                self._rotate(name)

    def _checksum(self):
        if self.stream_checksum is None:
            return self.tracker.checksum
        return self.stream_checksum

    def _heartbeat(self, event, header):
        """Heartbeats say where the source is; v1 carries the file name as its body."""
        name = None
        if header.type == ev.HEARTBEAT:
            name = bytes(ev.event_body(event, self._checksum())).decode("utf-8", "replace")
        self.source_position = {"file": name, "pos": header.log_pos, "time": self.clock()}
        self.heartbeat_after = self.events  # nothing came after it yet: caught up

    def _incident(self, event):
        number, name, message = ev.parse_incident(event, self.tracker.checksum)
        return ResyncRequired(f"the source logged incident {number} ({name}): {message!r}; "
                              f"events are missing from the binlog", self.writer.name,
                              self.writer.pos)

    def _rotate(self, next_name):
        if not is_binlog_name(next_name):
            raise ProtocolError(f"the source rotates {self.writer.name} to {next_name!r}, "
                                f"which is not a binlog file name")
        log.info("rotating %s -> %s", self.writer.name, next_name, extra={
            "file": self.writer.name, "position": self.writer.pos, "next_file": next_name})
        self.writer.rotate(next_name)
        self.boundary = Position(next_name, self.writer.pos)
        self._synced(self.clock())
        self.checkpoint()
        self.busy = True  # moving on through the files: the drain after it is recorded at once

    def _commit(self, ack):
        """Write the batch, fsync it when an ACK needs it (or it is due), then ACK."""
        now = self.clock()
        self.writer.flush()
        if ack is not None or (self.writer.unsynced and self._sync_due(now)):
            self._sync_timed()
            self._synced(now)
        if ack is not None:
            self.client.send_ack(ack.file, ack.offset)
            self.last_ack = {"file": ack.file, "pos": ack.offset, "time": now}
            if self.metrics.enabled:
                self.metrics.acked(time.perf_counter() - self.client.received_at)
        self.metrics.source(self.last_event_time, self.heartbeat_after == self.events)
        self._maybe_checkpoint(now, acked=ack is not None)
        if now - self.last_progress >= self.progress_interval:
            self._progress(now)

    def _sync_timed(self):
        """fsync the active file; its duration goes to the metrics when there was any."""
        if not (self.metrics.enabled and self.writer.unsynced):
            self.writer.sync()
            return
        started = time.perf_counter()
        self.writer.sync()
        self.metrics.fsync(time.perf_counter() - started)

    def _progress(self, now):
        rate = self.bytes_written / max(now - self.last_progress, 1e-6) / 1e6
        log.info("at %s:%d, %d events, %.2f MB/s, durable %s", self.writer.name,
                 self.writer.pos, self.events, rate, self.durable, extra={
                     "file": self.writer.name, "position": self.writer.pos,
                     "events": self.events, "mb_per_s": round(rate, 3),
                     "durable": str(self.durable), "gtid": self.durable_gtid})
        self.last_progress, self.bytes_written = now, 0

    def _maybe_checkpoint(self, now, acked=False):
        """Checkpoint when the durable point moved (at most every checkpoint_interval,
        but at once when a busy stream that asks for no ACK has drained, up to the fsync
        of all it wrote, which waits for SYNC_LINGER: the end of a catch-up is recorded
        without waiting, while a semi-sync commit load keeps the limit), and every
        idle_checkpoint seconds anyway so that status sees it lives."""
        since = now - self.last_checkpoint
        moved = self.recorded != self._recordable()
        due = moved and since >= self.checkpoint_interval
        if not acked:  # (a batch with an ACK costs no look at the socket)
            was_busy, self.busy = self.busy, not self._drained()
            self.drained = self.drained or (was_busy and not self.busy)
            due = due or (moved and self.drained)
        if due or since >= self.idle_checkpoint:
            self.checkpoint()

    def _drained(self):
        """Nothing more from the source is waiting to be read."""
        return getattr(self.client, "idle", lambda: True)()

    def _wake_in(self, now):
        """Seconds until a pending fsync or checkpoint is due (None: nothing pending)."""
        waits = []
        if self.writer.unsynced:  # fsync once the stream has been drained for SYNC_LINGER
            waits.append(self.last_data + SYNC_LINGER - now)
        if self.recorded != self._recordable():
            waits.append(self.last_checkpoint + self.checkpoint_interval - now)
        return max(0.0, min(waits)) if waits else None

    def _sync_due(self, now):
        """Without an ACK to send: fsync once the stream is drained (for SYNC_LINGER), or
        every so often."""
        return (self.writer.unsynced >= SYNC_BYTES or now - self.last_sync >= self.sync_interval
                or (now - self.last_data >= SYNC_LINGER
                    and getattr(self.client, "idle", lambda: True)()))

    def _gtid_text(self):
        return str(self.tracker.gtids) if self.tracker.gtids is not None else None

    def _synced(self, now):
        """Everything appended is on disk: the newest boundary becomes the durable one."""
        self.last_sync = now
        self.durable, self.durable_gtid = self.boundary, self._gtid_text()
        # every transaction the tracker completed ends at or before ``boundary``
        self.metrics.durable(self.tracker.transactions - self.durable_trx)
        self.durable_trx = self.tracker.transactions
        self.metrics.position(self.durable.file, self.durable.offset, self.durable_gtid)

    def _recordable(self):
        """What a checkpoint written now would record (compared with ``recorded``); the
        first heartbeat after events (caught up) is recorded too, for ``status``'s lag."""
        return self.durable, self.durable_gtid, self.last_ack, self.heartbeat_after == self.events

    def checkpoint(self):
        """Record the durable boundary (never anything newer) in the checkpoint file."""
        self.last_checkpoint = self.clock()
        self.recorded = self._recordable()
        state = self.base_state
        state.file, state.pos = self.durable.file, self.durable.offset
        state.gtid = self.durable_gtid
        if self.tracker.gtids is not None:
            state.flavor = self.tracker.gtids.flavor
        state.last_ack = self.last_ack
        state.source_position = self.source_position or state.source_position
        state.last_event_time = self.last_event_time or state.last_event_time
        state.updated = self.last_checkpoint
        save_state(self.writer.directory, state)
        self.drained = self.drained and bool(self.writer.unsynced)  # recorded to its end

    def finish(self):
        """Make everything written durable and record the checkpoint.

        After a failed write or fsync nothing more is synced or recorded: the last
        checkpoint stays the truth, and a restart rescans the file from there."""
        if self.writer.fd is not None and not self.writer.failed:
            self.writer.sync()
            self._synced(self.clock())
            self.checkpoint()
