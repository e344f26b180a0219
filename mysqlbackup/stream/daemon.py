"""``mysqlbackup stream``: connect, check the source, recover, dump, reconnect.

The first connection must succeed (a wrong password or host is reported at
once); after that, a lost connection is retried with exponential backoff (reset
by a connection that streamed) and streaming resumes from the durable position
in the local files. A stop request (SIGTERM/SIGINT through ``StopRequest``) ends
the daemon within about a second in every state: waits are sliced, and a
connection that waits on the network is shut down at once.
"""

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass, replace

from mysqlbackup import speedups
from mysqlbackup.binlog.gtid import guess_flavor, parse_gtid_set
from mysqlbackup.binlog.transactions import TrxTracker
from mysqlbackup.errors import ConnectionLost, LocalStateError, SourceError, UsageError, mask_url
from mysqlbackup.loop import sleep_until
from mysqlbackup.localdir.files import (DirectoryLock, ResumePoint, epoch_dir, list_binlogs,
                                        recover)
from mysqlbackup.localdir.state import State, load_state, save_state
from mysqlbackup.source.client import ReplicaClient, nudge_ack_receiver
from mysqlbackup.stream import notify
from mysqlbackup.durable import fsync_dir
from mysqlbackup.stream.metrics import NULL_METRICS, open_metrics
from mysqlbackup.stream.horizon import recorder_thread
from mysqlbackup.stream.syncer import Syncer
from mysqlbackup.stream.writer import BinlogWriter

log = logging.getLogger(__name__)

ARCHIVER_STOP_WAIT = 5.0  # seconds a stopping daemon waits for the archiver's last pass


@dataclass
class StreamOptions:
    """Everything ``mysqlbackup stream`` was asked to do."""

    source: object
    server_id: int
    directory: str
    start_file: str = None
    start_gtid: str = None
    semi_sync: bool = True
    heartbeat: float = 1.0
    follow_by_gtid: bool = False
    sync_interval: float = 1.0
    checkpoint_interval: float = 0.1
    max_backoff: float = 30.0
    archive_url: str = None
    archive_options: dict = None
    archive_interval: float = 2.0
    window_interval: float = 60.0  # seconds between readings of the recovery window
    source_name: str = None
    keep_local: object = None  # archiver.Retention
    retain: object = None  # retention.prune.retainer: archive retention in the archiver
    codec: object = None  # archive.codec.Codec of new archive objects (None: plain)
    metrics_address: str = None  # HOST:PORT of the Prometheus endpoint (None: off)
    metrics: object = NULL_METRICS  # the StreamMetrics run_stream reports to


class Backoff:
    """Exponential backoff between reconnect attempts, reset after progress."""

    def __init__(self, first=0.5, maximum=30.0):
        self.first, self.maximum, self.delay = first, maximum, first

    def next(self):
        delay, self.delay = self.delay, min(self.delay * 2, self.maximum)
        return delay

    def reset(self):
        self.delay = self.first


class StopRequest:
    """A stop flag for ``run_stream`` that a signal handler sets (``request``): the
    daemon sees it within a poll slice, and every replication connection waiting on
    the network is shut down at once, so nothing waits out a timeout."""

    def __init__(self):
        self.requested = False
        self.clients = set()

    def __call__(self):
        return self.requested

    def request(self, *_):
        """Ask the daemon to stop (signal-handler signature)."""
        self.requested = True
        for client in list(self.clients):
            client.interrupt()


@contextlib.contextmanager
def _watched(stop, client):
    """Let a StopRequest interrupt ``client`` while the block runs."""
    clients = getattr(stop, "clients", None)
    if clients is None:
        yield client
        return
    clients.add(client)
    try:
        if stop():
            client.interrupt()
        yield client
    finally:
        clients.discard(client)


def run_stream(opts, stop=lambda: False, sleep=time.sleep, on_syncer=None, notifier=None):
    """Run the daemon until ``stop()``; raise a MysqlBackupError on a fatal problem.

    A local file-system error (ENOSPC, EROFS, EACCES, EFBIG...) is a LocalStateError
    naming the path (exit 8); the checkpoint never moves past what was fsynced.
    ``notifier`` (default: from $NOTIFY_SOCKET) hears from the stream loop (systemd)."""
    notifier = notifier or notify.Notifier.from_environment()
    try:
        os.makedirs(opts.directory, exist_ok=True)
        with DirectoryLock(opts.directory):
            if (opts.start_file or opts.start_gtid) and list_binlogs(opts.directory):
                raise UsageError(f"{opts.directory} already holds a backup: --start-file and "
                                 f"--start-gtid only apply to an empty directory")
            opts = replace(opts, metrics=open_metrics(opts.metrics_address,
                                                      archive=bool(opts.archive_url)))
            ticking, on_syncer = notifier.watch(stop, on_syncer)  # the loop's thread only
            try:
                with _archiver_thread(opts, stop), recorder_thread(opts, stop) as recorder:
                    _stream_loop(opts, ticking, sleep, _also(on_syncer, recorder.streaming.set))
            finally:
                opts.metrics.close()
    except OSError as e:
        if e.filename is None:
            raise
        raise LocalStateError(f"{e.filename}: {e.strerror or e}") from None
    finally:
        notifier.stopping()


def _also(on_syncer, then):
    """``on_syncer`` (may be None), then ``then()``: each time a syncer starts streaming."""
    def both(syncer):
        if on_syncer:
            on_syncer(syncer)
        then()
    return both


@contextlib.contextmanager
def _archiver_thread(opts, stop):
    """Run the archiver beside the stream (never blocking it); a last pass at the end."""
    if not opts.archive_url:
        yield None
        return
    from mysqlbackup.stream.archiver import \
        Archiver  # fsspec loads only when an archive is asked for
    from mysqlbackup.archive.store import ArchiveStore
    store = ArchiveStore(opts.archive_url, opts.archive_options)
    problem = store.probe()
    if problem:
        log.warning("archive %s not reachable now (%s): streaming goes on, uploads retry",
                    mask_url(opts.archive_url), mask_url(problem))
    archiver = Archiver(opts.directory, store, opts.source_name, opts.archive_interval,
                        opts.keep_local, metrics=opts.metrics, codec=opts.codec,
                        retain=opts.retain, window_interval=opts.window_interval)
    done = threading.Event()
    thread = threading.Thread(target=archiver.run, args=(lambda: done.is_set() or stop(),),
                              name="archiver", daemon=True)
    thread.start()
    try:
        yield archiver
    finally:
        done.set()
        # a last pass finishes what it started; a hung store must not hold the stop up
        thread.join(ARCHIVER_STOP_WAIT)


def _stream_loop(opts, stop, sleep, on_syncer):
    """Stream, reconnecting with backoff; the first connection must succeed.

    The backoff starts again from its first step after a connection that streamed
    (the source started the dump), so a blip after healthy streaming is retried
    within a second, however many blips came before."""
    backoff, connected_once = Backoff(maximum=opts.max_backoff), False
    while not stop():
        attempt = {}
        try:
            _stream_once(opts, stop, on_syncer, attempt)
        except (ConnectionLost, SourceError) as e:
            if not connected_once and isinstance(e, SourceError):
                raise
            if stop():
                return
            opts.metrics.error("stream", type(e).__name__)
            opts.metrics.reconnect()
            if attempt.get("streamed"):
                backoff.reset()
            delay = backoff.next()
            log.warning("%s; reconnecting in %.1fs", e, delay,
                        extra={"error": str(e), "retry_in": delay})
            notify.reconnecting(stop, f"{e}; reconnecting in {delay:.1f}s")
            sleep_until(stop, delay, sleep)
            continue
        finally:
            connected_once = True
        backoff.reset()


def _stream_once(opts, stop, on_syncer, attempt):
    client = ReplicaClient(opts.source, opts.server_id, opts.semi_sync, opts.heartbeat,
                           metrics=opts.metrics)
    writer = BinlogWriter(opts.directory)
    try:
        with _watched(stop, client):
            _stream_with(client, writer, opts, stop, on_syncer, attempt)
    finally:
        client.close()
        writer.close()


def _stream_with(client, writer, opts, stop, on_syncer, attempt):
    """Connect, find the resume point, dump, and run the syncer until ``stop()``."""
    info = client.connect()
    state = load_state(opts.directory)
    if _source_changed(info, state, opts):
        state, point = _switch_epoch(opts, state, info)
    else:
        point = (recover(epoch_dir(opts.directory, state and state.epoch), state)
                 or _epoch_start(state) or _initial_point(client, opts))
    if point.cut_bytes:
        log.warning("cut %d bytes after %s:%d (%s)", point.cut_bytes, point.file, point.pos,
                    point.cut_reason, extra={"file": point.file, "position": point.pos,
                                             "cut_bytes": point.cut_bytes})
    writer.files = epoch_dir(opts.directory, state and state.epoch)
    writer.open(point.file, point.pos)
    state = _base_state(state, info, opts, point)
    client.start_dump(point.file, point.pos)
    _ensure_started(client, opts, stop)
    if stop():
        return
    log.info("streaming from %s:%d (semi-sync %s; %s)", point.file, point.pos,
             "on" if client.semi_sync else "off", speedups.describe(),
             extra={"file": point.file, "position": point.pos, "semi_sync": client.semi_sync,
                    "gtid": None if point.gtids is None else str(point.gtids)})
    syncer = Syncer(client, writer, TrxTracker(gtids=point.gtids), state,
                    opts.sync_interval, opts.checkpoint_interval, metrics=opts.metrics)
    attempt["streamed"] = True
    syncer.checkpoint()
    if on_syncer:
        on_syncer(syncer)
    syncer.run(stop)


def _ensure_started(client, opts, stop, wait=1.0):
    """Wait for the dump's first bytes; on MariaDB, break the semi-sync reconnect deadlock.

    A dump starts within milliseconds; while it is stuck, semi-sync commits on the
    primary wait, so the helper dump goes out after one second (it streams nothing)."""
    if client.wait_started(wait, stop) or stop():
        return
    if not (client.semi_sync and client.info.flavor == "mariadb"):
        raise ConnectionLost(f"the source did not start the binlog dump within {wait:.0f}s")
    log.warning("the source has not started the dump after %.1fs: a previous dump thread of "
                "server_id %d is probably stuck in 'Waiting to finalize termination' (MariaDB "
                "semi-sync); waking its ACK receiver with a short helper dump", wait,
                opts.server_id)
    helper = nudge_ack_receiver(opts.source, opts.server_id, opts.heartbeat)
    try:
        with _watched(stop, helper):
            if not client.wait_started(max(10.0, 3 * opts.heartbeat), stop) and not stop():
                raise ConnectionLost("the source still did not start the binlog dump")
    finally:
        helper.close()


# MariaDB 12.3+ with binlog_storage_engine=innodb: why it is refused (docs/architecture.md
# says what following it would take)
INNODB_BINLOG = ("keeps its binlog inside InnoDB (binlog_storage_engine=innodb, MariaDB "
                 "12.3+): such a server has no semi-sync, so no commit can wait for this "
                 "backup's fsync and the no-loss promise cannot hold; nor does it write the "
                 "files this tool copies (no per-file ROTATE or format description, "
                 "positions by GTID only). Following it is planned; until then back up a "
                 "server with file binlogs")


def _source_changed(info, state, opts):
    """Refuse a source without binlog, one whose binlog is in InnoDB (MariaDB 12.3+),
    or, unless following by GTID, another source."""
    if not info.log_bin:
        raise SourceError(f"the source {opts.source.address} has binary logging disabled "
                          f"(log_bin=OFF): start it with --log-bin")
    if (info.binlog_engine or "").lower() == "innodb":
        raise SourceError(f"the source {opts.source.address} {INNODB_BINLOG}")
    if state is None or state.source_identity in (None, info.identity):
        return False
    if not opts.follow_by_gtid or not state.gtid:
        raise LocalStateError(
            f"{opts.directory} holds the binlogs of source {state.source_identity}, but "
            f"{opts.source.address} is {info.identity}: use another --dir, or "
            f"--follow-by-gtid to continue from the GTID position on the new source")
    log.warning("source changed from %s to %s: following by GTID", state.source_identity,
                info.identity, extra={"gtid": state.gtid})
    return True


def _switch_epoch(opts, state, info):
    """Start the next epoch of the history on the new source (a failover followed by
    GTID): (its State, saved, and the ResumePoint in the new server's file).

    The old epoch ends at its durable end: the last transaction boundary of its local
    files (``recover``: bytes fsynced and ACKed after the last checkpoint count). The new
    server's file holding the next transaction is streamed whole from offset 4 into a
    folder of its own (``epoch_dir``), so its bytes stay the new server's; the
    transactions it shares with the old epoch are duplicates by GTID, skipped by every
    reader. The checkpoint names the new epoch, with its history, before any byte of it
    is written: a crash in between starts the switch again."""
    end = recover(epoch_dir(opts.directory, state.epoch), state)
    gtids = end.gtids if end is not None else None
    if gtids is None:
        raise LocalStateError(f"{opts.directory} has no GTID position to follow the new "
                              f"source {info.identity} from")
    name = _locate_gtid(opts, gtids)
    epoch = (state.epoch or 1) + 1
    folder = epoch_dir(opts.directory, epoch)
    if os.path.isdir(folder) and list_binlogs(folder):
        raise LocalStateError(f"{folder} already holds binlog files that the checkpoint "
                              "does not name: move them out of the directory")
    os.makedirs(folder, exist_ok=True)
    fsync_dir(os.path.dirname(folder))
    fsync_dir(opts.directory)
    history = {"epoch": epoch, "server_id": info.server_id, "server_uuid": info.server_uuid,
               "identity": info.identity, "first_file": name, "start_gtid": str(gtids),
               "previous_file": end.file, "previous_pos": end.pos, "started_at": time.time()}
    state = replace(state, epoch=epoch, epochs=(state.epochs or []) + [history],
                    origin_identity=state.origin_identity or state.source_identity,
                    file=name, pos=4, gtid=str(gtids), source_identity=info.identity,
                    server_id=info.server_id, server_uuid=info.server_uuid)
    save_state(opts.directory, state)
    log.warning("epoch %d: following %s from %s after GTID %s (epoch %d ends at %s:%d)",
                epoch, info.identity, name, gtids, epoch - 1, end.file, end.pos,
                extra={"epoch": epoch, "file": name, "gtid": str(gtids)})
    return state, ResumePoint(name, 4, gtids)


def _epoch_start(state):
    """Where a later epoch starts when the daemon stopped before its first file existed."""
    if state is None or (state.epoch or 1) == 1:
        return None
    return ResumePoint(state.file, 4, parse_gtid_set(state.gtid, state.flavor))


def _locate_gtid(opts, gtids):
    probe = ReplicaClient(opts.source, opts.server_id, False, opts.heartbeat)
    try:
        probe.connect()
        return probe.locate_gtid(gtids)
    finally:
        probe.close()


def _initial_point(client, opts):
    """Where a new directory starts: --start-file, --start-gtid, or the oldest binlog."""
    if opts.start_gtid:
        return ResumePoint(_locate_gtid(opts, parse_gtid_set(opts.start_gtid,
                                                             guess_flavor(opts.start_gtid))), 4)
    if opts.start_file:
        return ResumePoint(opts.start_file, 4)
    files = client.binary_logs()
    if not files:
        raise SourceError(f"the source {opts.source.address} lists no binary logs")
    return ResumePoint(files[0], 4)


def _base_state(state, info, opts, point):
    """The checkpoint record for this connection, with the source's identity in it."""
    state = state or State(file=point.file, pos=point.pos)
    state.source_identity = info.identity
    state.server_id = info.server_id
    state.server_uuid = info.server_uuid
    state.source_address = opts.source.address
    state.flavor = state.flavor or info.flavor
    return state
