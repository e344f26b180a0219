"""What can be restored: the archive's binlog chain cut into contiguous runs, where
each base backup sits in it, the window of moments restorable, and the base a
restore to a stop point starts from (pure: index and manifest dicts in, no I/O).

A *run* is a sequence of binlog files with no hole between them: each file's
ROTATE names the next one and its GTID state after is the next one's before. A
*hole* (a missing file, a GTID gap) ends a run. A base *sits* in a run when its
GTID position lies between the run's first GTID state and its last; a restore
reads the run from the first file holding a transaction the base lacks.

The base is chosen by GTID, never by the clock of the archive's objects: the
newest base whose position is contained in the stop point's, in the same run
as the stop point. A stop datetime is placed by the files' commit times (the
source's clock, as the base's ``end_time``).

The history across failovers lives here too (``EpochHistory``, ``switch_problem``):
A source's history across failovers: epochs, and where each one takes over (pure).

Epoch 1 is the first server a daemon streamed for the source. When that server fails
and the daemon follows the promoted one by GTID (``stream --follow-by-gtid``), the new
server's files start epoch 2, and so on, the way PostgreSQL's timelines branch. Each
epoch's files live under a key source of their own (``names.epoch_source``), so no
server's file is ever taken for, overwritten or deleted because of another server's
file of the same name. The history object of epoch N (``{source}/epoch/{N}/history.json``),
written once before any of its files, says which server it is, the file it starts
with, and where the epoch before it ends: the daemon's durable file:pos and GTID state
at the switch.

Readers follow epochs in order. The new server's first file is archived whole (its
bytes are the server's own): it starts with transactions the old server wrote too,
which are duplicates by GTID. Every reader skips those (``Switch.skip``: the GTID state
where the previous epoch's archive ends) and never applies a transaction twice.

A switch is sound (``switch_problem``) when the new epoch's first file is the one its
history names, starts within what the previous epoch archived (no gap between them),
and the previous epoch's archive does not go past where the new epoch took over (no
transaction of the old server that the new one lacks).
"""

import json
import re
from dataclasses import asdict, dataclass, replace
from typing import Optional

from mysqlbackup.archive.names import epoch_source
from mysqlbackup.archive.stop import END, Stop
from mysqlbackup.binlog.gtid import contains, shown
from mysqlbackup.binlog.names import next_binlog_name
from mysqlbackup.errors import (CorruptBinlog, ExitCode, MysqlBackupError, ResyncRequired,
                                UsageError)


class NoBaseError(MysqlBackupError):
    """No base backup in the archive can start a restore to the stop point asked for."""

    exit_code = ExitCode.RESYNC


@dataclass(frozen=True)
class Span:
    """One archived binlog file as its index describes it."""

    name: str
    partial: bool
    gtid_before: Optional[str]
    gtid_after: Optional[str]
    first_commit: Optional[str]
    last_commit: Optional[str]
    first_gtid: Optional[str]
    last_gtid: Optional[str]
    next_file: Optional[str]
    size: int
    epoch: int = 1                 # the source's epoch the file belongs to (history)
    skip: Optional[str] = None     # the first file of a later epoch: the GTID state its
    # transactions are duplicates within (where the epoch before it ends)
    statements: Optional[int] = None  # transactions holding a logged statement (None:
    # an index written before it was counted)
    transactions: Optional[int] = None  # complete transactions the file holds

    @classmethod
    def of(cls, index, partial=False):
        return cls(index["name"], partial, index.get("gtid_before"), index.get("gtid_after"),
                   index.get("first_commit"), index.get("last_commit"),
                   index.get("first_gtid"), index.get("last_gtid"), index.get("next_file"),
                   index.get("size", 0), index.get("epoch", 1),
                   statements=index.get("statements"), transactions=index.get("transactions"))

    @property
    def key(self):
        """(epoch, name): what names a file in a source across failovers."""
        return self.epoch, self.name

    @property
    def label(self):
        """The file as messages name it: ``binlog.000002`` or ``binlog.000002 (epoch 2)``."""
        return self.name if self.epoch == 1 else f"{self.name} (epoch {self.epoch})"


@dataclass(frozen=True)
class Hole:
    """A break in the chain between two archived files (``after`` may be None)."""

    after: Optional[str]
    before: str
    description: str
    switch: bool = False  # at a failover: between two epochs of the history


@dataclass(frozen=True)
class Run:
    """Archived files with no hole between them, oldest first."""

    spans: tuple

    @property
    def gtid_before(self):
        return self.spans[0].gtid_before

    @property
    def gtid_after(self):
        return self.spans[-1].gtid_after

    @property
    def last_commit(self):
        return next((s.last_commit for s in reversed(self.spans) if s.last_commit), None)


@dataclass(frozen=True)
class Choice:
    """The base a restore starts from and the files it reads (``run.spans[first..last]``)."""

    manifest: dict
    run: Run
    first: int
    last: int
    stop: Stop

    @property
    def spans(self):
        return self.run.spans[self.first:self.last + 1]

    @property
    def files(self):
        return [s.name for s in self.spans]

    @property
    def keys(self):
        """The (epoch, name) of each file read, in order."""
        return [s.key for s in self.spans]


@dataclass(frozen=True)
class Window:
    """Moments restorable from one run: from the earliest base in it to its last commit."""

    source: str
    base_id: str
    start: str          # the base's end_time: every moment from then on
    end: Optional[str]  # the last commit archived in the run
    end_gtid: Optional[str]
    first_file: str
    last_file: str


_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text):
    """Seconds of a duration such as ``14d``, ``12h``, ``30m``, ``90s`` or ``2w``."""
    m = _DURATION.match((text or "").strip())
    if not m or int(m[1]) == 0:
        raise UsageError(f"bad duration {text!r}: a positive whole number and one unit of "
                         "s, m, h, d, w (e.g. 14d, 12h, 30m)")
    return int(m[1]) * _UNIT_SECONDS[m[2]]


def build_runs(source, sealed, partial=None, later=()):
    """(runs, holes) of a source's archived files: ``sealed`` the sealed files' indexes,
    oldest first; ``partial`` the newest active file's index (its segments merged);
    ``later``: (EpochHistory, sealed, partial) of each later epoch, in order. A run goes
    on across a failover when the switch is sound (``history.switch_problem``); the
    first file of a later epoch then carries ``skip``, the GTID state its duplicates
    are within."""
    spans, switches = _epoch_spans(sealed, partial), {}
    for history, more, last in later:
        added = _epoch_spans(more, last)
        if added:
            switches[len(spans)] = history
        spans += added
    runs, holes, current = [], [], []
    for i, span in enumerate(spans):
        if current and i in switches:
            span = replace(span, skip=current[-1].gtid_after)
            problem = switch_problem(switches[i], current[-1].label, current[-1].gtid_after,
                                     span.name, span.gtid_before)
        else:
            problem = _link_problem(source, current[-1], span) if current else None
        if problem:
            holes.append(Hole(current[-1].label, span.label, problem, i in switches))
            runs.append(Run(tuple(current)))
            current = []
        current.append(span)
    if current:
        runs.append(Run(tuple(current)))
    return runs, holes


def _epoch_spans(sealed, partial):
    return [Span.of(i) for i in sealed] + ([Span.of(partial, True)] if partial else [])


def _link_problem(source, prev, cur):
    where = epoch_source(source, cur.epoch)
    expected = prev.next_file or next_binlog_name(prev.name)
    if expected != cur.name:
        return (f"{where}/binlog/{expected} is missing: {prev.name} ends at GTID "
                f"{prev.gtid_after or '?'}, the archive goes on with {cur.name} after GTID "
                f"{cur.gtid_before or '?'}")
    if prev.gtid_after != cur.gtid_before:
        return (f"{where}/binlog/{cur.name}: GTID hole: {prev.name} ends at "
                f"{prev.gtid_after or '?'}, {cur.name} starts after {cur.gtid_before or '?'}")
    return None


def locate(run, manifest):
    """Index in ``run.spans`` of the first file a restore from ``manifest`` reads, or
    None when the base does not sit in the run. By GTID; a base or archive without
    GTIDs by the base's binlog file name."""
    gtid = manifest.get("gtid")
    if gtid and all(s.gtid_after is not None for s in run.spans):
        if not (contains(gtid, run.gtid_before) and contains(run.gtid_after, gtid)):
            return None
        return next((i for i, s in enumerate(run.spans) if not contains(gtid, s.gtid_after)),
                    len(run.spans) - 1)
    names = [s.name for s in run.spans if s.epoch == 1]  # no GTIDs: never a failover
    return names.index(manifest["binlog_file"]) if manifest.get("binlog_file") in names else None


def choose_base(source, runs, holes, manifests, stop=END, base_id=None):
    """The Choice of the newest base (or ``base_id``) that a restore to ``stop`` can
    start from, proved contiguous to the stop point by the indexes.

    Raises ResyncRequired naming the hole between the newest usable base and the
    stop point, or NoBaseError saying why no base qualifies.
    """
    stop_run, stop_at = _find_stop(source, runs, stop)
    wanted = [m for m in manifests if base_id in (None, m["id"])]
    if base_id and not wanted:
        raise NoBaseError(f"{source}: no base backup {base_id!r} in the archive")
    reasons = []
    for manifest in sorted(wanted, key=lambda m: m["id"], reverse=True):
        placed = [(r, locate(run, manifest)) for r, run in enumerate(runs)]
        placed = [(r, first) for r, first in placed if first is not None]
        if not placed:
            reasons.append(f"base {manifest['id']} (GTID {shown(manifest.get('gtid'))}) is not in "
                           "the archived binlogs")
            continue
        r, first = placed[-1]
        if r < stop_run:
            raise ResyncRequired(_holes_between(source, holes, runs, r, stop_run, manifest))
        why = None if r == stop_run else "it is newer than the stop point"
        why = why or stop.base_past(manifest, runs[r], first, stop_at)
        if why is None and first <= stop_at:
            return Choice(manifest, runs[r], first, stop_at, stop)
        reasons.append(f"base {manifest['id']}: {why or 'it is newer than the stop point'}")
    raise NoBaseError(f"{source}: no base backup can start a restore {stop.describe()}"
                      + (": " + "; ".join(reasons) if reasons else ": the archive has none"))


def _find_stop(source, runs, stop):
    """(run index, span index) of the stop point; NoBaseError when it is not archived."""
    if not runs:
        raise NoBaseError(f"{source}: the archive holds no binlog files")
    if stop.last_run_only:
        return len(runs) - 1, stop.falls_in(runs[-1])
    for r, run in enumerate(runs):
        at = stop.falls_in(run)
        if at is not None:
            return r, at
    if stop.needs_gtids and not any(s.last_gtid for r in runs for s in r.spans):
        raise UsageError(f"{source}: the archived binlogs hold no GTIDs (a source that keeps "
                         f"none: MySQL's gtid_mode OFF): stop with --stop-datetime or "
                         f"--stop-position instead of {stop.describe()}")
    raise NoBaseError(f"{source}: the stop point ({stop.describe()}) is not in the archived "
                      f"binlogs (they end at GTID {shown(runs[-1].gtid_after)}, "
                      f"{runs[-1].spans[-1].label})")


def _holes_between(source, holes, runs, first_run, stop_run, manifest):
    between = [h for h in holes
               if any(h.after == runs[r].spans[-1].label for r in range(first_run, stop_run))]
    return (f"{source}: the binlogs from base {manifest['id']} (GTID "
            f"{shown(manifest.get('gtid'))}) to the stop point are not contiguous: "
            + "; ".join(h.description for h in between))


def recovery_windows(source, runs, manifests):
    """The Windows of a source: per run that holds a base, from the earliest base in
    it (its end_time) to the run's last commit. Moments outside them (before the
    first base, inside a hole, in a run without a base) cannot be restored."""
    windows = []
    for run in runs:
        placed = [m for m in manifests if locate(run, m) is not None]
        if not placed:
            continue
        base = min(placed, key=lambda m: m["id"])
        windows.append(Window(source, base["id"], base["end_time"], run.last_commit,
                              run.gtid_after, run.spans[0].label, run.spans[-1].label))
    return windows


# -- the history across failovers ----------------------------------------------------

HISTORY_VERSION = 1


@dataclass(frozen=True)
class EpochHistory:
    """Epoch ``epoch`` (> 1) of a source: the server, its first file, and the switch."""

    epoch: int
    server_id: int
    server_uuid: Optional[str]
    identity: str                  # the server's identity (server_uuid or server-id-N)
    first_file: str                # the new server's file the epoch starts with (from 4)
    start_gtid: Optional[str]      # the durable GTID state at the switch
    previous_file: str             # the previous epoch's durable end at the switch
    previous_pos: int
    started_at: float              # when the daemon switched (epoch seconds, UTC)

    def to_dict(self):
        return dict(asdict(self), version=HISTORY_VERSION)

    def describe(self):
        """One line for ``archive ls`` and errors."""
        return (f"epoch {self.epoch}: server {self.identity} (server_id {self.server_id}) "
                f"from {self.first_file}, after GTID {self.start_gtid or '(none)'} "
                f"(epoch {self.epoch - 1} ends at {self.previous_file}:{self.previous_pos})")


_FIELDS = {"epoch": int, "server_id": int, "identity": str, "first_file": str,
           "previous_file": str, "previous_pos": int, "started_at": (int, float)}


def parse_history(raw, where):
    """The EpochHistory of a history object's bytes; CorruptBinlog naming ``where``."""
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise CorruptBinlog(f"not a history object: {e}", where) from None
    if not isinstance(data, dict):
        raise CorruptBinlog("not a history object", where)
    for name, kind in _FIELDS.items():
        if not isinstance(data.get(name), kind) or isinstance(data.get(name), bool):
            raise CorruptBinlog(f"history field {name!r} is missing or not a {kind}", where)
    for name in ("server_uuid", "start_gtid"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise CorruptBinlog(f"history field {name!r} is not text", where)
    known = EpochHistory.__dataclass_fields__
    return EpochHistory(**{k: data.get(k) for k in known})


def switch_problem(history, prev_name, prev_after, first_name, first_before):
    """Why the previous epoch's last archived file (``prev_name``, ending at GTID state
    ``prev_after``) does not lead into the new epoch's first archived file
    (``first_name``, starting after ``first_before``); None when it does."""
    where = f"epoch {history.epoch}"
    if first_name != history.first_file:
        return (f"{where} starts with {history.first_file} on {history.identity}, but its "
                f"first archived file is {first_name}")
    if not contains(prev_after, first_before):
        return (f"{where}: GTID hole at the switch to {history.identity}: epoch "
                f"{history.epoch - 1} ends with {prev_name} at {prev_after or '?'}, "
                f"{first_name} starts after {first_before or '?'}")
    if history.start_gtid and not contains(history.start_gtid, prev_after):
        return (f"{where}: epoch {history.epoch - 1} ends with {prev_name} at GTID "
                f"{prev_after}, past where {history.identity} took over "
                f"({history.start_gtid}): its later transactions are not in the new history")
    return None
