"""The local backup directory: listing, locking and crash recovery (disk I/O).

The directory holds binlog files named as on the source, the checkpoint, a lock
file and nothing else: anything unexpected is refused rather than guessed at.
``recover`` finds where streaming must resume so that the local files stay
byte-identical to the source's: it scans the newest file from the checkpoint on,
verifying every event, and cuts a torn event and any incomplete transaction.
"""

import fcntl
import json
import logging
import mmap
import os
import socket
import stat
import time
from dataclasses import dataclass

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import parse_gtid_set
from mysqlbackup.binlog.names import binlog_sort_key, is_binlog_name
from mysqlbackup.binlog.scan import iter_events, read_fde
from mysqlbackup.binlog.transactions import TrxTracker
from mysqlbackup.durable import write_bytes
from mysqlbackup.errors import CorruptBinlog, LocalStateError
from mysqlbackup.localdir.state import (ARCHIVE_STATE_FILE, HORIZON_FILE, LOCK_FILE,
                                        LOCK_HOLDER_FILE,
                                        STATE_FILE)

log = logging.getLogger(__name__)

EPOCHS = "epoch"  # the folder of later epochs' files: {dir}/epoch/{N}/ (a failover)
_OURS = {STATE_FILE, STATE_FILE + ".tmp", LOCK_FILE, ARCHIVE_STATE_FILE,
         ARCHIVE_STATE_FILE + ".tmp", LOCK_HOLDER_FILE, LOCK_HOLDER_FILE + ".tmp",
         HORIZON_FILE, HORIZON_FILE + ".tmp"}


@dataclass
class ResumePoint:
    """Where to continue: a transaction boundary and the GTID set up to it."""

    file: str
    pos: int
    gtids: object = None
    cut_bytes: int = 0
    cut_reason: str = None


def epoch_dir(directory, epoch):
    """The folder of an epoch's local files: the backup directory for epoch 1 (the first
    server streamed), ``{directory}/epoch/{N}`` for each server followed after a failover,
    so that every server's files stay byte-identical to its own, whatever their names."""
    return directory if (epoch or 1) == 1 else os.path.join(directory, EPOCHS, str(epoch))


def list_binlogs(directory):
    """Local binlog file names, oldest first; refuse foreign files and non-binlogs. A
    file removed while it is listed (a running daemon's archiver, ``--keep-local``,
    beside a ``status``) is not there: left out, not refused."""
    return [name for name, _ in sized_binlogs(directory)]


def sized_binlogs(directory):
    """[(name, size)] of the local binlog files, oldest first (``list_binlogs``)."""
    found = []
    for entry in sorted(os.listdir(directory)):
        if entry in _OURS or entry == EPOCHS and os.path.isdir(os.path.join(directory, entry)):
            continue
        path = os.path.join(directory, entry)
        try:
            info = os.stat(path)
            if not is_binlog_name(entry) or not stat.S_ISREG(info.st_mode):
                raise LocalStateError(f"{path} is not a binlog file or a mysqlbackup file: "
                                      f"use a directory of its own for the backup")
            _check_magic(path)
        except FileNotFoundError:
            continue  # removed since the listing
        found.append((entry, info.st_size))
    return sorted(found, key=lambda pair: binlog_sort_key(pair[0]))


def _check_magic(path):
    with open(path, "rb") as f:
        head = f.read(4)
    if len(head) == 4 and head != ev.MAGIC:
        raise LocalStateError(f"{path} is not a binlog file (bad magic bytes): "
                              f"use a directory of its own for the backup")


LOCK_WAIT = 1.0  # seconds a new daemon retries the flock: a ``status`` probe holds it briefly


class DirectoryLock:
    """An exclusive flock on the directory's lock file: one daemon per directory.

    Once taken, the holder's pid, host and start time go durably into the holder
    file beside it (``mysqlbackup.lock.json``), which the refusal of a second daemon
    and ``status`` name. The flock is the truth: the holder file alone (left behind
    by a ``kill -9``) never counts as held (``lock_holder``)."""

    def __init__(self, directory, wait=LOCK_WAIT):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE)
        self.wait = wait
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o640)
        if not _flock(self.fd, fcntl.LOCK_EX, self.wait):
            os.close(self.fd)
            raise LocalStateError(f"another mysqlbackup process{_holder_text(self.directory)} "
                                  f"holds {self.path}: one daemon per directory") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        try:
            write_bytes(os.path.join(self.directory, LOCK_HOLDER_FILE),
                        json.dumps(holder).encode("utf-8"), mode=0o640)
        except BaseException:
            os.close(self.fd)
            raise
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def _flock(fd, kind, wait):
    """Take ``kind`` on ``fd`` without blocking, retrying for ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def lock_holder(directory):
    """Whether a process holds ``directory``'s lock now, tested on the flock itself
    (a shared flock taken and dropped at once, never blocking), and who per the
    holder file: ``{"held", "pid", "host", "since"}``. When held, ``pid`` is None
    if the file names a process that is gone (a new holder has not written it yet);
    when not held, the fields describe the last holder (None if none is known)."""
    path = os.path.join(directory, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        held = False
    except OSError as e:
        raise LocalStateError(f"cannot open {path}: {e.strerror or e}") from None
    else:
        try:
            held = not _flock(fd, fcntl.LOCK_SH, 0)
        finally:
            os.close(fd)  # drops the shared flock, if taken
    holder = read_holder(directory) or {}
    pid = holder.get("pid")
    if held and pid is not None and holder.get("host") == socket.gethostname() \
            and not _alive(pid):
        pid = None
    return {"held": held, "pid": pid, "host": holder.get("host"), "since": holder.get("since")}


def read_holder(directory):
    """The holder file's record ({"pid", "host", "since"}), or None."""
    try:
        with open(os.path.join(directory, LOCK_HOLDER_FILE), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder_text(directory):
    """" (pid N on HOST since TIME)" from the holder file, or "" when it names none."""
    holder = read_holder(directory)
    if not holder or holder.get("pid") is None:
        return ""
    since = holder.get("since")
    when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since)) if since else ""
    return f" (pid {holder['pid']} on {holder.get('host', '?')}{when})"


def recover(directory, state):
    """The ResumePoint of ``directory`` (None when it holds no binlog yet)."""
    names = list_binlogs(directory)
    if not names:
        return None
    last = names[-1]
    path = os.path.join(directory, last)
    size = os.path.getsize(path)
    _check_checkpoint_on_disk(state, names, size, directory)
    _check_chain_after_checkpoint(directory, names, state)
    if size <= len(ev.MAGIC):
        return ResumePoint(last, len(ev.MAGIC), _state_gtids(state))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return _scan_tail(buf, last, state, size)


def _check_checkpoint_on_disk(state, names, size, directory):
    """The checkpoint must point into the local files, or durable data went missing."""
    if state is None:
        return
    if state.file in names:
        size = os.path.getsize(os.path.join(directory, state.file))
        lost, where = state.pos > size, f"{state.file} has {size} bytes"
    else:
        lost = binlog_sort_key(state.file) > binlog_sort_key(names[-1])
        where = f"{directory} ends at {names[-1]} with {size} bytes"
    if lost:
        raise LocalStateError(f"the checkpoint says {state.file}:{state.pos} is durable but "
                              f"{where}: local data was lost (restore the directory or start "
                              f"a new one)")


def _check_chain_after_checkpoint(directory, names, state):
    """The checkpoint is the truth: a file after its file must be the one that file's
    ROTATE names (and so on down the chain), else it was not written by this backup
    and is refused by name; nothing is resumed or checkpointed from it."""
    if state is None or state.file not in names:
        return
    previous, start = state.file, state.pos
    for name in names[names.index(state.file) + 1:]:
        named = _rotates_to(os.path.join(directory, previous), start)
        if named != name:
            why = (f"{previous} rotates to {named}" if named else
                   f"{previous} has no ROTATE after {start}")
            raise LocalStateError(
                f"{os.path.join(directory, name)} is not in the chain of the checkpoint "
                f"{state.file}:{state.pos} ({why}): it was not written by this backup; "
                f"move it out of the directory")
        previous, start = name, len(ev.MAGIC)


def _rotates_to(path, start):
    """The file named by the ROTATE event after ``start`` in ``path`` (None if none)."""
    with open(path, "rb") as f:
        data = f.read()
    checksum = None
    try:
        if len(data) > len(ev.MAGIC):
            checksum = read_fde(data, path)[1].checksum_alg == ev.CHECKSUM_CRC32
        for _, event in iter_events(data, max(start, len(ev.MAGIC)), checksum, file=path):
            if event[4] == ev.ROTATE:
                return ev.parse_rotate(event, checksum)[1]
    except CorruptBinlog:
        return None  # a torn tail: the file never rotated
    return None


def _state_gtids(state):
    if state is None or not state.gtid or not state.flavor:
        return None
    return parse_gtid_set(state.gtid, state.flavor)


def _scan_tail(buf, name, state, size):
    """Scan ``name`` from the checkpoint (or pos 4) and find its last boundary."""
    try:
        fde_event, fde = read_fde(buf, name)
    except CorruptBinlog as e:
        return ResumePoint(name, len(ev.MAGIC), _state_gtids(state), size - 4, str(e))
    tracker, start = TrxTracker(), len(ev.MAGIC)
    if state is not None and state.file == name and state.pos > len(ev.MAGIC):
        tracker.feed(fde_event)
        tracker.gtids = _state_gtids(state)
        start = state.pos
    return _find_boundary(buf, name, start, tracker, fde)


def _find_boundary(buf, name, start, tracker, fde):
    boundary, reason, last_type = start, None, None
    checksum = None if start == len(ev.MAGIC) else fde.checksum_alg == ev.CHECKSUM_CRC32
    try:
        for off, event in iter_events(buf, start, checksum, file=name):
            tracker.feed(event)
            if tracker.at_boundary:
                boundary, last_type = off + len(event), event[4]
                if last_type == ev.ROTATE:
                    next_name = ev.parse_rotate(event, tracker.checksum)[1]
                    return ResumePoint(next_name, len(ev.MAGIC), tracker.gtids)
    except CorruptBinlog as e:
        reason = str(e)
    cut = len(buf) - boundary
    if cut and reason is None:
        reason = "incomplete transaction at the end of the file"
    return ResumePoint(name, boundary, tracker.gtids, cut, reason)
