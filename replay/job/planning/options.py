"""Parsing of replay's start, stop and filter options (pure)."""

from datetime import datetime, timezone

from mysqlbackup.binlog.gtid import guess_flavor, parse_gtid_set, parse_one
from mysqlbackup.binlog.position import parse_position
from mysqlbackup.errors import UsageError
from replay.job.decoding.rewrite import parse_rewrites
from replay.job.planning.selection import Selection


def parse_datetime(text):
    """Epoch seconds of an ISO 8601 datetime; without a zone it is UTC (never local time)."""
    try:
        value = datetime.fromisoformat(text.strip().replace(" ", "T", 1))
    except ValueError:
        raise UsageError(f"bad --stop-datetime {text!r}: use ISO 8601, e.g. "
                         f"2026-11-21T09:30:00Z or 2026-11-21 10:30:00+01:00") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def parse_one_gtid(text, option):
    """One GTID of either flavor (``gtid.parse_one``), the option named when it is bad."""
    try:
        return parse_one(text)
    except UsageError:
        raise UsageError(f"{option} takes one GTID (MariaDB DOMAIN-SERVER-SEQ or MySQL "
                         f"UUID[:TAG]:N), got {text!r}") from None


def parse_gtid_list(text, option):
    """A set of single GTIDs: '0-1-5,0-1-9' or 'UUID:5,UUID:9' (each one transaction)."""
    out = set()
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        out.add(parse_one_gtid(item, option))
    return out


def position(text, option):
    """The Position of ``option``'s 'FILE:POS' value (None when not given)."""
    if not text:
        return None
    try:
        return parse_position(text)
    except UsageError:
        raise UsageError(f"bad {option}: expected FILE:POS, got {text!r}") from None


def build_selection(start_gtid=None, start_position=None, stop_datetime=None,
                    stop_before_gtid=None, stop_position=None, exclude_gtids=None,
                    databases=(), tables=(), rewrites=()):
    """A Selection from the CLI's option values. A value given empty is refused, never
    taken for "not given": ``--stop-before-gtid "$(cat f)"`` of an empty file must not
    restore past the statement it was meant to stop before."""
    given = {"--start-gtid": start_gtid, "--start-position": start_position,
             "--stop-datetime": stop_datetime, "--stop-before-gtid": stop_before_gtid,
             "--stop-position": stop_position, "--exclude-gtids": exclude_gtids}
    for option, value in given.items():
        if value is not None and not str(value).strip():
            raise UsageError(f"{option} is empty")
    for t in tables:
        if t.count(".") != 1:
            raise UsageError(f"bad --table {t!r}: expected DB.TABLE")
    return Selection(
        start_gtids=(parse_gtid_set(start_gtid, guess_flavor(start_gtid)) if start_gtid
                     else None),
        start_position=position(start_position, "--start-position"),
        stop_datetime=parse_datetime(stop_datetime) if stop_datetime else None,
        stop_before_gtid=(parse_one_gtid(stop_before_gtid, "--stop-before-gtid")
                          if stop_before_gtid else None),
        stop_position=position(stop_position, "--stop-position"),
        exclude=parse_gtid_list(exclude_gtids, "--exclude-gtids"),
        databases=set(databases), tables=set(tables), rewrite=parse_rewrites(rewrites))
