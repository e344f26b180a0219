"""The verdicts of ``mysqlbackup check`` (pure): per source, each check's name, ok and
detail from what the archive and the daemon's directory say (``gather``), then the
Nagios-style lines, the JSON document and the exit code.

The checks of a source, in order:

- ``base``: a base backup sits in the archived binlogs (a restore can start from it);
- ``binlogs``: the binlogs from that base to the newest archived moment are contiguous
  and their objects are there (the restore's own plan, holes refused);
- ``keys``: with ``--identity``, it opens every encrypted object of the plan; without
  it, not checked when the plan's objects are encrypted (the plan is then made from
  the indexes alone);
- ``base_age``: the base a restore would start from ended at most ``max_base_age`` ago;
- ``archive_lag``: with ``--dir``, the archive is at most ``max_archive_lag`` behind the
  daemon's durable position (``status``'s notion: 0 when nothing durable waits for the
  archive, else the seconds since the archiver's last successful pass). Without
  ``--dir`` it is not checked: the archive alone cannot tell an idle source from a
  stalled daemon (the newest archived commit of an idle source ages without harm);
- ``purge_horizon``: with ``--dir``, the primary will not purge the binlog the daemon is
  in within ``min_horizon`` (from the daemon's last record of the primary's binlogs:
  ``localdir.horizon``), and had not purged it when last seen;
- ``lock`` (only with ``--retain-window``): the newest base's manifest and the newest binlog
  index are locked (S3 Object Lock) for at least that window from when they were
  written.

A check is ok (True), failed (False) or not checked (None, its detail says why); the
state is CRITICAL when any check failed (or the archive holds no source at all),
UNKNOWN when the archive could not be read at all (no archive at that URL, the store
failing), else OK.
"""

import json
from dataclasses import dataclass
from typing import Optional

from mysqlbackup.utc import epoch, iso
from mysqlbackup.localdir.health import DEFAULT_MAX_ARCHIVE_LAG
from mysqlbackup.localdir.horizon import DEFAULT_MIN_HORIZON, describe, problem

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
STATES = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL", UNKNOWN: "UNKNOWN"}
DEFAULT_MAX_BASE_AGE = 26 * 3600.0   # a nightly base, with two hours of slack
# a lock's date is set when a write starts, its object dated when the write ends (in
# whole seconds on S3): a lock of N days reads as a little less
LOCK_SLACK = 300.0


@dataclass(frozen=True)
class Limits:
    """The thresholds, in seconds."""

    max_base_age: float = DEFAULT_MAX_BASE_AGE
    max_archive_lag: float = DEFAULT_MAX_ARCHIVE_LAG
    min_horizon: float = DEFAULT_MIN_HORIZON
    lock_window: Optional[float] = None  # --retain-window: the objects' lock must cover it


@dataclass(frozen=True)
class Check:
    """One check of one source: ``ok`` None when it was not checked (``detail`` says why)."""

    name: str
    ok: Optional[bool]
    detail: str

    def to_dict(self):
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class Planned:
    """A restore to the newest archived moment, as planned."""

    base_id: str
    base_end: str               # the base's end_time (ISO, UTC)
    moment: str                 # the last commit archived after it (else the base's end)
    gtid: Optional[str]         # the GTID the restored server will be at
    files: int
    first_file: str             # labels: "binlog.000002" or "binlog.000002 (epoch 2)"
    last_file: str


@dataclass(frozen=True)
class SourceFacts:
    """What the archive says of one source."""

    source: str
    planned: Optional[Planned] = None
    refused: Optional[tuple] = None      # (check name, why) a check the archive fails
    newest_base: Optional[tuple] = None  # (id, end_time) of its newest sound base
    archived_end: Optional[str] = None   # "binlog.000004:1234", where its archive ends
    keys: str = "plain"                  # plain | opened | unchecked | refused
    lock: Optional[tuple] = None         # (seconds locked, mode, key) of the newest object
    # locked the least (seconds None: that object is not locked); None: not read


@dataclass(frozen=True)
class DaemonFacts:
    """What the daemon's directory says of the archive (``status``'s facts)."""

    directory: str
    source: Optional[str] = None         # the source it archives (epoch left out)
    lag_s: Optional[float] = None        # status's archive lag
    durable: Optional[str] = None        # "binlog.000004:1234"
    backlog_files: int = 0
    pending_bytes: int = 0
    last_error: Optional[str] = None
    problem: Optional[str] = None        # why its lag cannot be told for this archive
    horizon: Optional[dict] = None       # localdir.horizon.margin of its durable file


@dataclass(frozen=True)
class SourceVerdict:
    """The checks of one source."""

    source: str
    checks: tuple
    facts: SourceFacts
    lag_s: Optional[float] = None        # the archive lag, when it was checked

    @property
    def failed(self):
        return [c for c in self.checks if c.ok is False]

    def summary(self, now):
        """The source's part of the first line."""
        p = self.facts.planned
        if self.failed or p is None:
            return (f"source {self.source}: {', '.join(c.name for c in self.failed)} "
                    "failed")
        lag = "" if self.lag_s is None else f"; archive {self.lag_s:.0f} s behind the daemon"
        return (f"source {self.source}: restorable to {p.moment} (base {p.base_id}, "
                f"{format_age(now - epoch(p.base_end))} ago{lag})")


def evaluate(facts, daemon, limits, now, named=False):
    """The SourceVerdict of ``facts`` (SourceFacts) and ``daemon`` (DaemonFacts or None:
    no ``--dir``); ``named``: the source was asked for by ``--source-name``."""
    lag = _archive_lag(facts, daemon, limits, named)
    checks = (_base(facts), _binlogs(facts), _keys(facts), _base_age(facts, limits, now), lag,
              _purge_horizon(daemon, limits))
    if limits.lock_window is not None:  # asked for with --retain-window only
        checks += (_lock(facts, limits),)
    lag_s = daemon.lag_s if lag.ok else None
    return SourceVerdict(facts.source, checks, facts, lag_s)


def _refusal(facts, name):
    """Why ``facts`` fails check ``name`` (None: it does not)."""
    return facts.refused[1] if facts.refused and facts.refused[0] == name else None


def _base(facts):
    why, p = _refusal(facts, "base"), facts.planned
    if why:
        return Check("base", False, why)
    if p:
        return Check("base", True, f"base {p.base_id} (ended {p.base_end}) sits in the "
                                   "archived binlogs")
    if facts.newest_base:
        return Check("base", True, f"newest base {facts.newest_base[0]} (ended "
                                   f"{facts.newest_base[1]})")
    return Check("base", None, "not checked")


def _binlogs(facts):
    why, p = _refusal(facts, "binlogs"), facts.planned
    if why:
        return Check("binlogs", False, why)
    if p:
        return Check("binlogs", True, f"{p.files} files contiguous from base {p.base_id} to "
                                      f"{p.moment}: {p.first_file} to {p.last_file}")
    return Check("binlogs", None, "not checked: no base to start from")


def _keys(facts):
    why = _refusal(facts, "keys")
    if why:
        return Check("keys", False, why)
    if facts.planned is None:
        return Check("keys", None, "not checked: nothing planned")
    return {"plain": Check("keys", True, "no object of the plan is encrypted"),
            "opened": Check("keys", True, "the identity opens every object of the plan"),
            "unchecked": Check("keys", None, "not checked: the plan's objects are "
                               "encrypted and no --identity was given (the plan was made "
                               "from the indexes alone)")}[facts.keys]


def _base_age(facts, limits, now):
    p = facts.planned
    base = (p.base_id, p.base_end) if p else facts.newest_base
    if base is None:
        return Check("base_age", None, "not checked: no base")
    age = now - epoch(base[1])
    return Check("base_age", age <= limits.max_base_age,
                 f"base {base[0]} ended {format_age(age)} ago "
                 f"(limit {format_limit(limits.max_base_age)})")


def _archive_lag(facts, daemon, limits, named):
    if daemon is None:
        return Check("archive_lag", None, "not checked: no --dir (only the daemon's "
                     "directory knows what is durable and not archived yet)")
    if daemon.problem:
        return Check("archive_lag", False, daemon.problem)
    if daemon.source != facts.source:
        return Check("archive_lag", False if named else None,
                     f"{daemon.directory} is the daemon of source {daemon.source}"
                     + (f", not {facts.source}" if named else ": not checked"))
    if daemon.lag_s is None:
        return Check("archive_lag", False, f"unknown: the daemon at {daemon.directory} "
                     "has not completed an archive pass")
    limit = format_limit(limits.max_archive_lag)
    if daemon.lag_s <= limits.max_archive_lag:
        return Check("archive_lag", True, f"archive {daemon.lag_s:.0f} s behind the daemon "
                     f"(limit {limit})")
    text = (f"archive {daemon.lag_s:.0f} s behind the daemon (limit {limit}): "
            f"{daemon.directory} is durable to {daemon.durable or '?'}, the archive ends at "
            f"{facts.archived_end or '(nothing)'} ({daemon.backlog_files} sealed files and "
            f"{daemon.pending_bytes} bytes of the newest file not archived)")
    return Check("archive_lag", False, text + (f"; last error: {daemon.last_error}"
                                               if daemon.last_error else ""))


def _purge_horizon(daemon, limits):
    if daemon is None or daemon.problem:
        return Check("purge_horizon", None, "not checked: no daemon directory read")
    if daemon.horizon is None:
        return Check("purge_horizon", None, f"not checked: the daemon at {daemon.directory} "
                     "has not recorded the primary's binlogs yet")
    why = problem(daemon.horizon, limits.min_horizon)
    return Check("purge_horizon", why is None, why or describe(daemon.horizon))


def _lock(facts, limits):
    if facts.lock is None:
        return Check("lock", None, "not checked: no object to read")
    seconds, mode, key = facts.lock
    window = format_limit(limits.lock_window)
    if seconds is None:
        return Check("lock", False, f"{key} is not locked (S3 Object Lock): the window of "
                     f"{window} is only as safe as whoever may delete from the archive")
    if seconds + LOCK_SLACK < limits.lock_window:
        return Check("lock", False, f"{key} is locked ({mode}) for {format_age(seconds)}, less "
                     f"than the window of {window}: it may go before the window ends")
    return Check("lock", True, f"the newest objects are locked ({mode}) for "
                 f"{format_age(seconds)} at least (window {window})")


@dataclass(frozen=True)
class Report:
    """The whole answer: every source's verdict, or why the archive cannot be read."""

    archive: str                      # the archive URL, masked
    now: float
    verdicts: tuple = ()
    unknown: Optional[str] = None     # the archive cannot be read at all: why
    critical: Optional[str] = None    # it reads, but holds no source to check: why

    @property
    def code(self):
        if self.unknown is not None:
            return UNKNOWN
        failed = self.critical is not None or any(v.failed for v in self.verdicts)
        return CRITICAL if failed else OK

    def lines(self):
        """The first line (Nagios), then one line per failed check."""
        state = f"CHECK {STATES[self.code]} - "
        if self.unknown is not None or self.critical is not None:
            return [state + (self.unknown or self.critical)]
        first = state + "; ".join(v.summary(self.now) for v in self.verdicts)
        return [first] + [f"{v.source} {c.name}: {c.detail}"
                          for v in self.verdicts for c in v.failed]

    def document(self):
        """The JSON document of ``--json``."""
        return json.dumps({
            "status": STATES[self.code], "exit_code": self.code, "archive": self.archive,
            "checked_at": iso(self.now), "problem": self.unknown or self.critical,
            "sources": [_source_dict(v) for v in self.verdicts],
        }, indent=1)


def _source_dict(verdict):
    p = verdict.facts.planned
    return {"source": verdict.source, "ok": not verdict.failed,
            "restorable_to": p and p.moment, "gtid": p and p.gtid,
            "base": p and p.base_id, "archived_end": verdict.facts.archived_end,
            "checks": [c.to_dict() for c in verdict.checks]}


def format_age(seconds):
    """A rounded age: ``42s``, ``17m``, ``3h``, ``5d``."""
    seconds = max(0.0, seconds)
    for unit, size, below in (("s", 1, 120), ("m", 60, 7200), ("h", 3600, 172800)):
        if seconds < below:
            return f"{round(seconds / size)}{unit}"
    return f"{round(seconds / 86400)}d"


def format_limit(seconds):
    """A limit as it is given: the largest of d, h, m that divides it, else seconds."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
