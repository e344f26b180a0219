"""Ship local binlog files to the archive, verify them, keep RPO near zero.

``Archiver.run_once`` does one pass and is what tests drive; ``run`` repeats it
every ``interval`` seconds with backoff while the store is down. A pass:

1. every sealed local file (all but the newest) not yet archived is uploaded,
   read back (size + sha256), and only then gets its index: the index is the
   mark that the object is whole and verified; the file's partial segments go;
2. the newest file's durable prefix (up to the checkpoint, a transaction
   boundary) is uploaded as a new segment when it grew, never otherwise;
3. local retention removes sealed files whose archived copy is verified (or that
   ``retain`` deleted from the archive: their retired mark matches them);
4. with ``retain`` (``stream --retain-window``): archive retention, after a pass
   that archived a sealed file.

A sealed file that ``retain`` deleted from the archive is never uploaded again
(``_retired``: its mark names its size and sha256), while anything else the store
lost is.

Streaming never waits for any of this: the archiver only reads the local files
and the checkpoint, and records its own progress in ``mysqlbackup.archive.json``.
"""

import copy
import json
import logging
import os
import time

from mysqlbackup.archive.codec import CHUNK, PLAIN, Digest
from mysqlbackup.archive.window import EpochHistory, parse_history
from mysqlbackup.archive.index import IndexBuilder, parse_index
from mysqlbackup.archive.objects import stored_forms
from mysqlbackup.archive.listing import archived_server_id
from mysqlbackup.archive.names import (binlog_key, binlog_prefix, epoch_source, format_key,
                                       history_key, parse_key, partial_prefix, retired_key,
                                       retired_prefix, segment_key)
from mysqlbackup.archive.upload import (UploadMismatch, chain_end, index_range,
                                        remove_segments, upload_sealed, upload_segment)
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.binlog.transactions import TrxTracker
from mysqlbackup.durable import fsync_dir, write_bytes
from mysqlbackup.errors import MysqlBackupError, UsageError, mask_url
from mysqlbackup.localdir.files import epoch_dir, list_binlogs
from mysqlbackup.localdir.state import ARCHIVE_STATE_FILE as ARCHIVE_STATE
from mysqlbackup.localdir.state import load_state
from mysqlbackup.loop import sleep_until
from mysqlbackup.stream.metrics import NULL_METRICS
from mysqlbackup.guard.recovery import RecoveryWatch

log = logging.getLogger(__name__)

RELIST_INTERVAL = 60.0   # seconds between listings of the archive (and after every error)
PREFIX_MARK = "(active file)"  # stands for the newest file's segments in ``missing``


class Retention:
    """--keep-local: keep the newest ``count`` sealed files, or those younger than ``age``."""

    def __init__(self, count=None, age=None):
        self.count, self.age = count, age

    @classmethod
    def parse(cls, text):
        """'10' keeps 10 files; '36h', '7d', '90m', '600s' keep files by age; None keeps all."""
        if text is None:
            return None
        units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
        if text.isdigit():
            return cls(count=int(text))
        if text[:-1].isdigit() and text[-1:] in units:
            return cls(age=int(text[:-1]) * units[text[-1]])
        raise UsageError(f"bad --keep-local {text!r}: a count (10) or an age (36h, 7d)")

    def removable(self, sealed, mtime, now):
        """The sealed file names (oldest first) this policy lets go."""
        if self.count is not None:
            return sealed[:max(0, len(sealed) - self.count)]
        return [n for n in sealed if now - mtime(n) > self.age]


class Archiver:
    """Uploads one backup directory's binlogs to one archive store.

    The archive is listed again every ``relist_interval`` seconds and after every
    failed pass, so objects lost from the store are uploaded again while the local
    copy exists.
    """

    def __init__(self, directory, store, source_name=None, interval=2.0, retention=None,
                 clock=time.time, relist_interval=RELIST_INTERVAL, metrics=NULL_METRICS,
                 codec=PLAIN, retain=None, window_interval=60.0):
        self.directory = directory
        self.codec = codec or PLAIN  # how new objects are stored (codec.Codec)
        self.store = store
        self.source_name = source_name
        self.interval = interval
        self.retention = retention
        # archive retention (stream --retain-window), or None: a callable (store, source,
        # now, echo), retention.prune.retainer's, handed in by the command line
        self.retain = retain
        self.retained_once = False  # retain ran in this process (it runs at the start too)
        self.clock = clock
        self.relist_interval = relist_interval
        self.metrics = metrics      # stream.metrics: backlog and last success, per report
        self.recovery = None        # RecoveryWatch: the window's metrics, once a source
        self.window_interval = window_interval
        self.source = source_name
        self.archived = None        # names with a verified sealed copy, per the store
        self.listed_at = None       # when the archive was last listed (clock)
        self.missing = set()        # archived once, gone from the store, local copy kept
        self.retired_names = set()  # names with a retired mark in the store, per the listing
        self.retired = {}           # name -> True when the local file is the one retired
        self.partial = None         # {"name", "end", "tracker", "stale"} of the newest file
        self.owned = set()          # names whose archived copy is this server's file
        self.names = None           # the local binlog names of the current pass
        self.epoch = 1              # the epoch (history) the current files belong to
        self.files = directory      # the folder of its local files (localdir.files.epoch_dir)
        self.finished = set()       # earlier epochs wholly archived in this process
        self.histories = set()      # later epochs whose history object is in the store
        self.report = {"last_error": None, "last_error_time": None, "last_success": None,
                       "uploads": 0, "removed_local": [], "upload_in_progress": None,
                       "reuploaded": 0, "reuploaded_last": [], "lost": [],
                       "last_listed": None, "retired": []}

    # -- one pass --------------------------------------------------------------------

    def run_once(self):
        """One pass: list again when due, sealed files, the newest file's durable prefix,
        retention."""
        state = load_state(self.directory)
        source = self.source_name or (state and (state.origin_identity or
                                                 state.source_identity))
        if source is None:
            return
        self.source = top = source
        if state is not None and (state.epoch or 1) != self.epoch:
            self._enter_epoch(state.epoch)
        if state is not None and state.epochs:
            self._finish_epochs(top, state.epochs)
        source = epoch_source(top, self.epoch)  # the key source of this epoch's files
        names = self.names = list_binlogs(self.files)
        if self._relist_due():
            self._relist(source, names)
        for name in names[:-1]:
            if name in self.archived:  # archived: by this server, not another's same name
                self._check_owner(source, name)
        sealed = [n for n in names[:-1] if n not in self.archived
                  and not self._retired(source, n)]
        for name in sealed:
            self._archive_sealed(source, name, names)
        if state is not None and names and state.file == names[-1]:
            self._archive_prefix(source, names[-1], state.pos)
        self._apply_retention(source, names[:-1])
        if self.retain and (sealed or not self.retained_once):
            self._retain_archive(top)
        self.report["last_success"] = self.clock()
        self.report["last_error"] = None
        self._write_report(source, names)
        if self.metrics.enabled:
            if self.recovery is None:
                self.recovery = RecoveryWatch(self.store, top, self.window_interval,
                                              self.clock)
            self.metrics.recovery(self.recovery.refresh(top))

    def _path(self, name):
        return os.path.join(self.files, name)

    def _enter_epoch(self, epoch):
        """Follow the daemon into a later epoch (a failover): its files, its keys."""
        self.epoch, self.files = epoch, epoch_dir(self.directory, epoch)
        self.archived = self.partial = None
        self.missing, self.retired, self.owned = set(), {}, set()

    # -- earlier epochs (a failover) ---------------------------------------------------

    def _finish_epochs(self, source, histories):
        """Write each later epoch's history object (once, before any of its files), then
        archive what is left of each earlier epoch: its sealed files, and its last file's
        segments up to where the daemon's durable end was at the switch (its server is
        gone: that file never seals). Once done, an epoch is not archived again in this
        process; ``--keep-local`` then lets its local files go as it lets sealed ones go."""
        for history in histories:
            if history["epoch"] not in self.histories:
                self._put_history(source, history)
        for history in histories:
            done, end = history["epoch"] - 1, (history["previous_file"],
                                                history["previous_pos"])
            if done >= self.epoch:
                continue
            if done not in self.finished:
                self._finish_epoch(source, done, *end)
                self.finished.add(done)
            if self.retention is not None:
                self._retain_epoch(source, done, *end)

    def _put_history(self, source, history):
        """The history object of an epoch: written once, never overwritten; another one
        already there (another daemon's failover of the same source) is ArchiveConflict."""
        key = format_key(history_key(source, history["epoch"]))
        record = EpochHistory(**{k: history.get(k) for k in EpochHistory.__dataclass_fields__})
        if self.store.exists(key):
            held = parse_history(self.store.read(key), key)
            if held != record:
                raise ArchiveConflict(
                    f"the archive holds another history for epoch {record.epoch} of "
                    f"{source} ({held.describe()}), not this daemon's ({record.describe()}): "
                    "two daemons followed failovers of one source; stream this one under "
                    "another --source-name")
        else:
            self.store.put_json(key, record.to_dict())
            log.info("archive: %s", record.describe(), extra={"epoch": record.epoch})
        self.histories.add(history["epoch"])

    def _finish_epoch(self, top, epoch, end_file, end_pos):
        folder, source = epoch_dir(self.directory, epoch), epoch_source(top, epoch)
        names = list_binlogs(folder)
        indexed = {k.name for k in map(parse_key, self.store.list(binlog_prefix(source)))
                   if k and k.is_index and k.kind == "binlog"}
        retired = {k.name for k in map(parse_key, self.store.list(retired_prefix(source)))
                   if k and k.kind == "retired"}
        for name in names:
            path = os.path.join(folder, name)
            if name == end_file and name in retired:
                break  # retain deleted its segments: no promised moment needs them
            if name == end_file:
                held, stale = chain_end(self.store.list(partial_prefix(source, name)))
                if held < end_pos:
                    tracker = TrxTracker()
                    if held:
                        index_range(path, IndexBuilder(name, tracker=tracker, end=held), 0,
                                    held)
                    upload_segment(self.store, path, source, name, held, end_pos, tracker,
                                   self.codec)
                    for relative in stale:
                        self.store.remove(relative)
                break
            if name not in indexed and name not in retired:
                upload_sealed(self.store, path, source, name, _predecessor(names, name),
                              self.codec)
        log.info("archive: epoch %d of %s is archived to its end (%s:%d)", epoch, top,
                 end_file, end_pos, extra={"epoch": epoch, "file": end_file,
                                           "position": end_pos})

    def _relist_due(self):
        return (self.archived is None or self.listed_at is None
                or self.clock() - self.listed_at >= self.relist_interval)

    def _relist(self, source, names):
        """What the store holds now: sealed files with data and index, and whether the
        newest file's segments are still there; what went missing is uploaded again."""
        found, indexed = set(), set()
        # a hung store shows in status while it is listed, not only during uploads
        self._uploading(f"{binlog_prefix(source)}/ (listing)", source)
        for relative in self.store.list(binlog_prefix(source)):
            key = parse_key(relative)
            if key:
                (indexed if key.is_index else found).add(key.name)
        whole = found & indexed
        self.retired_names = {key.name for key in map(parse_key, self.store.list(
            retired_prefix(source))) if key and key.kind == "retired"}
        if self.archived is not None:
            gone = self.archived - whole - self.retired_names  # retain's are not lost
            local = set(names[:-1])
            self.missing |= gone & local
            lost = sorted(gone - local, key=binlog_sort_key)
            if gone:
                log.warning("%d archived files are missing from the store; uploading again "
                            "those still local (%s)", len(gone), ", ".join(sorted(gone)))
            if lost:
                self.report["lost"] = (self.report["lost"] + lost)[-20:]
        self.archived = whole
        self._check_partial(source)
        self.report["upload_in_progress"] = None
        self.listed_at = self.report["last_listed"] = self.clock()

    def _check_partial(self, source):
        """Forget the newest file's upload state when the store lost its segments."""
        if not self.partial:
            return
        self._uploading(f"{partial_prefix(source, self.partial['name'])}/ (listing)", source)
        held = chain_end(self.store.list(partial_prefix(source, self.partial["name"])))[0]
        if held < self.partial["end"]:
            log.warning("segments of %s are missing from the store (it holds %d of %d bytes);"
                        " uploading again", self.partial["name"], held, self.partial["end"])
            self.partial = None
            self.missing.add(PREFIX_MARK)

    def _check_owner(self, source, name):
        """ArchiveConflict when the archive holds ``name`` of ``source`` (sealed, or its
        segments) written by another server than the local file's (a failover to a server
        that reuses the file names): that copy is never taken for ours, overwritten or
        deleted (invariant 4); the archiver stops there, loudly, every pass. Once a name."""
        if name in self.owned:
            return
        local = local_server_id(self._path(name))
        self._uploading(f"{binlog_prefix(source)}/{name} (its server, in the archive)", source)
        held = archived_server_id(self.store, source, name)  # a hung store shows in status
        self.report["upload_in_progress"] = None
        if held is not None and local is not None and held != local:
            raise ArchiveConflict(
                f"the archive holds {source} {name} written by server_id {held}, but the "
                f"local {name} is server_id {local}'s (a failover to a server that reuses "
                "the file names?): the archived copy is kept as it is and this one is not "
                "archived; stream this server under another --source-name")
        self.owned.add(name)

    def _archive_sealed(self, source, name, names):
        """Read the sealed file once, in chunks, up to its size now (a sealed file does
        not grow): indexed, encoded and uploaded in the same pass, read back, indexed."""
        self._check_owner(source, name)
        self._uploading(format_key(binlog_key(source, name)), source)
        known = sorted(self.archived | set(names), key=binlog_sort_key)
        index = upload_sealed(self.store, self._path(name), source, name,
                              _predecessor(known, name), self.codec)
        size = index["size"]
        self.archived.add(name)
        self._uploaded(name)
        log.info("archived %s (%d bytes, %d transactions)", name, size, index["transactions"],
                 extra={"file": name, "bytes": size, "transactions": index["transactions"],
                        "gtid": index.get("last_gtid")})
        self._drop_segments(source, name)

    def _uploading(self, key, source):
        """Say in the report which upload (or listing) runs and since when: status shows
        a hung store whatever request it hangs in."""
        self.report["upload_in_progress"] = {"object": key, "since": self.clock()}
        self._write_report(source, self.names)

    def _uploaded(self, what):
        self.report["upload_in_progress"] = None
        self.report["uploads"] += 1
        if what in self.missing:
            self.missing.discard(what)
            self.report["reuploaded"] += 1
            self.report["reuploaded_last"] = (self.report["reuploaded_last"] + [what])[-20:]
            log.info("re-uploaded %s, which was missing from the store", what,
                     extra={"file": what})

    def _drop_segments(self, source, name):
        remove_segments(self.store, source, name)
        if self.partial and self.partial["name"] == name:
            self.partial = None

    def _archive_prefix(self, source, name, durable):
        if self.partial is None or self.partial["name"] != name:
            self._check_owner(source, name)
            self.partial = self._resume_partial(source, name)
        start = self.partial["end"]
        if durable <= start or durable <= 4:
            return  # nothing new is durable: no request at all
        self._uploading(format_key(segment_key(source, name, start, durable)), source)
        # exactly the durable bytes, in one pass; the tracker moves on only once they are
        # archived (a failed upload leaves it where the store's segments end)
        tracker = copy.deepcopy(self.partial["tracker"])
        try:
            upload_segment(self.store, self._path(name), source, name, start, durable,
                           tracker, self.codec)
        except UploadMismatch:
            self.partial = None  # listed again: the object left unindexed goes as stale
            raise
        self.partial["end"], self.partial["tracker"] = durable, tracker
        self._uploaded(PREFIX_MARK)
        for relative in self.partial.pop("stale", ()):
            self.store.remove(relative)  # off the chain: replaced by the segment just written

    def _resume_partial(self, source, name):
        """Where the newest file's segments end in the store, the tracker up to there, and
        the objects off that chain (removed once a new segment covers them)."""
        self._uploading(f"{partial_prefix(source, name)}/ (listing)", source)
        end, stale = chain_end(self.store.list(partial_prefix(source, name)))
        self.report["upload_in_progress"] = None
        tracker = TrxTracker()
        if end:
            index_range(self._path(name), IndexBuilder(
                name, tracker=tracker, end=end), 0, end)
        return {"name": name, "end": end, "tracker": tracker, "stale": stale}

    def _retired(self, source, name):
        """True when retain deleted this very file from the archive (its mark's size and
        sha256 are the local file's): it is not uploaded again. Decided once a file."""
        if name not in self.retired_names:
            return False
        if name not in self.retired:
            mark = json.loads(self.store.read(format_key(retired_key(source, name))))
            digest = Digest()
            with open(self._path(name), "rb") as f:
                for chunk in iter(lambda: f.read(CHUNK), b""):
                    digest.update(chunk)
            self.retired[name] = digest.matches(mark.get("size"), mark.get("sha256"))
            if self.retired[name]:
                self.report["retired"] = (self.report["retired"] + [name])[-20:]
                log.info("not uploading %s again: retain deleted it from the archive",
                         name, extra={"file": name})
            else:
                log.warning("%s is not the file retain deleted under that name (another "
                            "size or sha256): uploading it", name, extra={"file": name})
        return self.retired[name]

    # -- retention ---------------------------------------------------------------------

    def _apply_retention(self, source, sealed):
        if self.retention is None:
            return
        mtime = lambda n: os.path.getmtime(self._path(n))  # noqa: E731
        for name in self.retention.removable(sealed, mtime, self.clock()):
            if self.retired.get(name):
                why = "retain deleted it from the archive"
            elif name in self.archived and self._still_archived(source, name):
                why = "its archived copy is verified"
            else:
                continue
            os.remove(self._path(name))
            fsync_dir(self.files)
            self.report["removed_local"] = (self.report["removed_local"] + [name])[-20:]
            log.info("removed local %s: %s", name, why, extra={"file": name})

    def _retain_archive(self, source):
        """``retain`` over this source (stream --retain-window), its lines logged; the
        archive is listed again on the next pass."""
        self._uploading(f"{source}/ (retention)", source)
        self.retain(self.store, source, self.clock(), lambda line: log.info("retain: %s", line))
        self.report["upload_in_progress"] = None
        self.retained_once, self.listed_at = True, None

    def _still_archived(self, source, name, path=None):
        """Check the archived object is there and whole before the local copy goes."""
        data_key = format_key(binlog_key(source, name))
        index_key = format_key(binlog_key(source, name, index=True))
        if not self.store.exists(index_key):
            return False
        index = parse_index(self.store.read(index_key), index_key, name)
        return (self.store.info_size(data_key) in [f[0] for f in stored_forms(index)]
                and index["size"] == os.path.getsize(path or self._path(name)))

    def _retain_epoch(self, top, epoch, end_file, end_pos):
        """``--keep-local`` over an earlier epoch's files: each goes once its archived copy
        is verified (its last file: once its segments reach its end), or once retain
        deleted it (its retired mark)."""
        folder, source = epoch_dir(self.directory, epoch), epoch_source(top, epoch)
        names = list_binlogs(folder)
        mtime = lambda n: os.path.getmtime(os.path.join(folder, n))  # noqa: E731
        retired = {k.name for k in map(parse_key, self.store.list(retired_prefix(source)))
                   if k and k.kind == "retired"}
        for name in self.retention.removable(names, mtime, self.clock()):
            path = os.path.join(folder, name)
            if name in retired:
                why = "retain deleted it from the archive"
            elif name == end_file and chain_end(
                    self.store.list(partial_prefix(source, name)))[0] >= end_pos:
                why = f"its archived segments reach its end in epoch {epoch} ({end_pos})"
            elif name != end_file and self._still_archived(source, name, path):
                why = "its archived copy is verified"
            else:
                continue
            os.remove(path)
            fsync_dir(folder)
            self.report["removed_local"] = (self.report["removed_local"] + [name])[-20:]
            log.info("removed local %s of epoch %d: %s", name, epoch, why,
                     extra={"file": name, "epoch": epoch})

    # -- loop and report ------------------------------------------------------------------

    def run(self, stop, sleep=time.sleep):
        """Repeat passes until ``stop()``; failures are logged and retried with backoff,
        and the next pass lists the archive again."""
        delay = self.interval
        while True:
            try:
                self.run_once()
                delay = self.interval
            except Exception as e:  # storage down or flaky: keep streaming, retry later
                self.listed_at = None
                self.report["last_error"] = mask_url(
                    str(e) if isinstance(e, MysqlBackupError) else f"{type(e).__name__}: {e}")
                self.report["last_error_time"] = self.clock()
                self.report["upload_in_progress"] = None
                self.metrics.error("archive", type(e).__name__)
                self._write_report(self.source, _local_names(self.files))
                log.warning("archive upload failed (%s); retrying in %.1fs",
                            self.report["last_error"], delay,
                            extra={"error": self.report["last_error"], "retry_in": delay})
                delay = min(delay * 2, 30.0)
            if stop():
                return
            sleep_until(stop, delay, sleep)

    def _write_report(self, source, names):
        """``mysqlbackup.archive.json``: what ``status`` shows (URL masked). ``archived``
        lists the local sealed files with a verified copy, so that ``status`` computes
        the backlog from the files present when it runs."""
        archived = backlog = None
        if names is not None and self.archived is not None:
            archived = [n for n in names[:-1] if n in self.archived]
            backlog = [n for n in names[:-1] if n not in self.archived
                       and not self.retired.get(n)]
        report = dict(self.report, url=mask_url(self.store.url), source=source,
                      archived=archived, backlog_files=backlog, missing=sorted(self.missing),
                      interval=self.interval,
                      partial=({"file": self.partial["name"], "end": self.partial["end"]}
                               if self.partial else None))
        path = os.path.join(self.directory, ARCHIVE_STATE)
        write_bytes(path, json.dumps(report, indent=1, sort_keys=True).encode("utf-8"))
        if self.metrics.enabled and backlog is not None:
            self.metrics.archive(len(backlog),
                                 sum(_size(self._path(n)) for n in backlog),
                                 self.report["last_success"], self._active(names))

    def _active(self, names):
        """(newest file, where its archived segments end, its durable end now) or None."""
        state = load_state(self.directory)
        if state is None or not names or state.file != names[-1]:
            return None
        done = self.partial["end"] if self.partial and self.partial["name"] == names[-1] else 0
        return names[-1], max(done, 4), state.pos


class ArchiveConflict(MysqlBackupError):
    """The archive holds a file of the same name written by another server."""


def local_server_id(path):
    """The server_id of a local binlog file's first event (its format description), or
    None when the file is shorter than that header."""
    with open(path, "rb") as f:
        head = f.read(4 + ev.HEADER_LEN)
    return ev.parse_header(head, 4).server_id if len(head) == 4 + ev.HEADER_LEN else None


def _size(path):
    """Size of a local file; 0 when it went meanwhile (metrics only)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _local_names(directory):
    try:
        return list_binlogs(directory)
    except MysqlBackupError:
        return None


def _predecessor(names, name):
    i = names.index(name)
    return names[i - 1] if i > 0 else None
