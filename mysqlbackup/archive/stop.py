"""Where a replay, restore, serve or drill stops: one tagged value (pure, no I/O).

A stop point is exactly one of four kinds, each a type of its own: the end of the
archive (``END``), a datetime (``StopDatetime``: stop before the first transaction
committed at or after it), a GTID (``StopGtid``: stop before that transaction) or a
binlog position (``StopPosition``: stop before a transaction ending past it). Two stop
points at once cannot be represented: ``parse_stop`` refuses them, and every command's
stop options are that one parser (``mysqlbackup.cli.options.stop_options``).

Each kind answers every question asked of a stop, so no caller switches on its kind:
for one transaction (``reached``, with its reason), for a file from its index
(``may_hold``, ``after_start_of``, ``passes``), for a run of files (``falls_in``), for
a base backup (``base_past``), and the words a plan or a result shows (``describe``,
``reason``, ``through``, ``target_at``, ``option_text``).
"""

from dataclasses import dataclass
from typing import ClassVar

from mysqlbackup.binlog.gtid import contains, holds, one_text, parse_one
from mysqlbackup.binlog.position import Position, parse_position
from mysqlbackup.errors import UsageError
from mysqlbackup.utc import epoch, iso, parse_datetime

# the options that name a stop point, in the order --help shows them
STOP_OPTIONS = ("--stop-datetime", "--stop-before-gtid", "--stop-position")


@dataclass(frozen=True)
class Stop:
    """The end of the archive: everything archived is replayed (the other kinds are
    its subclasses and override what differs)."""

    option: ClassVar[str] = ""      # the command-line option of the kind
    position: ClassVar = None       # a StopPosition's Position (the others name none)
    last_run_only: ClassVar[bool] = True  # the stop is sought in the newest run only
    needs_gtids: ClassVar[bool] = False  # an archive without GTIDs cannot place it

    @property
    def is_end(self):
        return type(self) is Stop

    @property
    def value_text(self):
        return ""

    @property
    def option_text(self):
        """The stop as an option and its value (``--stop-datetime 2026-...Z``); ""
        for the end."""
        return f"{self.option} {self.value_text}" if self.option else ""

    @property
    def reason(self):
        """Why a replay that met this stop ended (a run's ``stop_reason``)."""
        return "end of the archive"

    def reached(self, gtid_key, commit_ts, end):
        """The reason when a transaction (its GTID as a ``parse_one`` tuple or None, its
        commit time in epoch seconds, the Position just past its last byte) is at or
        past the stop point, else None."""
        return None

    def may_hold(self, span):
        """True when the file ``span`` (a window.Span) may hold the transaction the
        stop falls on."""
        return False

    def after_start_of(self, span):
        """True when every transaction of ``span`` is at or after the stop."""
        return False

    def passes(self, span):
        """True when the stop lies past every transaction of ``span``."""
        return True

    def falls_in(self, run):
        """Index in ``run.spans`` of the file the stop falls in; None when the run ends
        before it (the last file for the end or a datetime past the run)."""
        found = next((i for i, span in enumerate(run.spans) if self.may_hold(span)), None)
        return found if found is not None else len(run.spans) - 1

    def base_past(self, manifest, run, first, stop_at):
        """Why the base ``manifest`` (read from ``run.spans[first]`` on; the stop in
        ``run.spans[stop_at]``) holds transactions at or past the stop; None: it
        does not."""
        return None

    def describe(self):
        """The stop in a sentence's words: 'before 2026-...Z', 'at binlog.000003:4'."""
        return "at the end of the archive"

    def through(self):
        """The last transaction a replay to the stop applies, in a plan's words (a
        plan that reaches the archive's end names its last GTID instead)."""
        return "through the last archived transaction"

    def target_at(self):
        """The moment a target restored to the stop is at, in a plan's words."""
        return "the end of the archive"


END = Stop()


@dataclass(frozen=True)
class StopDatetime(Stop):
    """Stop before the first transaction committed at or after ``at`` (epoch seconds,
    UTC)."""

    at: float
    option: ClassVar[str] = "--stop-datetime"

    @property
    def value_text(self):
        return iso(self.at, 6 if self.at % 1 else 0)

    @property
    def reason(self):
        return "stop datetime reached"

    def reached(self, gtid_key, commit_ts, end):
        return self.reason if commit_ts >= self.at else None

    def may_hold(self, span):
        return bool(span.last_commit) and epoch(span.last_commit) >= self.at

    def after_start_of(self, span):
        return bool(span.first_commit) and epoch(span.first_commit) >= self.at

    def passes(self, span):
        return bool(span.last_commit) and epoch(span.last_commit) < self.at

    def base_past(self, manifest, run, first, stop_at):
        at = run.spans[stop_at]
        if self.passes(at):
            return None  # every archived commit of the run is before the stop
        holds_none = first == stop_at and contains(at.gtid_before, manifest.get("gtid"))
        first_before = bool(at.first_commit) and epoch(at.first_commit) < self.at
        if first < stop_at or holds_none and (stop_at > 0 or first_before):
            return None  # the base holds nothing of the file the stop falls in, and what
            # it holds was committed before the stop (the run's first file: a file before
            # it, deleted by retention or across a hole, may hold commits after the stop)
        if epoch(manifest["end_time"]) >= self.at:  # holds some of it: by its end
            return f"it ended at {manifest['end_time']}, not before {self.value_text}"
        return None

    def describe(self):
        return f"before {self.value_text}"

    def through(self):
        return f"through the last committed before {self.value_text}"

    def target_at(self):
        return f"just before {self.value_text} (the stop datetime)"


@dataclass(frozen=True)
class StopGtid(Stop):
    """Stop before the transaction ``gtid`` (a ``gtid.parse_one`` tuple: (domain,
    server_id, seq) or (uuid[:tag], gno))."""

    gtid: tuple
    option: ClassVar[str] = "--stop-before-gtid"
    last_run_only: ClassVar[bool] = False
    needs_gtids: ClassVar[bool] = True

    @property
    def value_text(self):
        return one_text(self.gtid)

    @property
    def reason(self):
        return f"stop before GTID {self.value_text}"

    def reached(self, gtid_key, commit_ts, end):
        return self.reason if gtid_key == self.gtid else None

    def may_hold(self, span):
        return holds(span.gtid_after, self.gtid)

    def passes(self, span):
        return False

    def falls_in(self, run):
        return next((i for i, span in enumerate(run.spans) if self.may_hold(span)), None)

    def base_past(self, manifest, run, first, stop_at):
        gtid = manifest.get("gtid")
        if gtid and holds(gtid, self.gtid):
            return f"it already holds GTID {self.value_text}"
        return None

    def describe(self):
        return f"before GTID {self.value_text}"

    def through(self):
        return f"up to GTID {self.value_text} (not included)"

    def target_at(self):
        return f"just before GTID {self.value_text}"


@dataclass(frozen=True)
class StopPosition(Stop):
    """Stop before a transaction ending past ``position`` (a binlog Position)."""

    position: Position
    option: ClassVar[str] = "--stop-position"
    last_run_only: ClassVar[bool] = False

    @property
    def value_text(self):
        return str(self.position)

    @property
    def reason(self):
        return "stop position reached"

    def reached(self, gtid_key, commit_ts, end):
        if not Position(end.file, end.offset - 1) < self.position:
            return self.reason
        return None

    def may_hold(self, span):
        return span.name == self.position.file

    def passes(self, span):
        return False

    def falls_in(self, run):
        return position_span(run.spans, self.position.file)

    def base_past(self, manifest, run, first, stop_at):
        at = manifest.get("binlog_file")
        if at and self.position < Position(at, manifest.get("binlog_pos") or 0):
            return f"its position {at}:{manifest.get('binlog_pos')} is past {self.position}"
        return None

    def describe(self):
        return f"at {self.position}"

    def through(self):
        return f"through the last transaction ending at or before {self.position}"

    def target_at(self):
        return f"{self.position} (the stop position)"


def position_span(spans, name):
    """Index in ``spans`` of the file ``name`` (None when absent); a name that two epochs
    of the history hold (a failover to a server reusing the names) is ambiguous: a
    UsageError says to stop by GTID or datetime instead."""
    at = [i for i, span in enumerate(spans) if span.name == name]
    if len(at) > 1:
        raise UsageError(f"{name} is in epochs "
                         f"{' and '.join(str(spans[i].epoch) for i in at)} of the archive's "
                         "history (a failover to a server that reuses the file names): a "
                         "file position is ambiguous there; stop by GTID or datetime")
    return at[0] if at else None


def parse_stop(stop_datetime=None, stop_before_gtid=None, stop_position=None):
    """The Stop of the stop options' values (None: not given): END for none, a
    UsageError for two or more, for a value given empty (``--stop-before-gtid
    "$(cat f)"`` of an empty file must not restore past what it meant to stop before)
    or for a malformed one."""
    given = [(option, text) for option, text in zip(
        STOP_OPTIONS, (stop_datetime, stop_before_gtid, stop_position)) if text is not None]
    if len(given) > 1:
        raise UsageError(f"give at most one of {', '.join(STOP_OPTIONS[:-1])} and "
                         f"{STOP_OPTIONS[-1]} (got {' and '.join(o for o, _ in given)})")
    if not given:
        return END
    option, text = given[0]
    if not str(text).strip():
        raise UsageError(f"{option} is empty")
    if option == "--stop-datetime":
        return StopDatetime(parse_datetime(text))
    if option == "--stop-before-gtid":
        return StopGtid(parse_one_gtid(text, option))
    return StopPosition(parse_file_position(text, option))


def parse_one_gtid(text, option):
    """One GTID of either flavor (``gtid.parse_one``), the option named when it is bad."""
    try:
        return parse_one(text)
    except UsageError:
        raise UsageError(f"{option} takes one GTID (MariaDB DOMAIN-SERVER-SEQ or MySQL "
                         f"UUID[:TAG]:N), got {text!r}") from None


def parse_file_position(text, option):
    """The Position of ``option``'s 'FILE:POS' value (None when not given)."""
    if not text:
        return None
    try:
        return parse_position(text)
    except UsageError:
        raise UsageError(f"bad {option}: expected FILE:POS, got {text!r}") from None
