"""Parsing of replay's start and filter options (pure); its stop is
``mysqlbackup.archive.stop``'s."""

from mysqlbackup.archive.stop import END, parse_file_position, parse_one_gtid
from mysqlbackup.binlog.gtid import guess_flavor, parse_gtid_set
from mysqlbackup.errors import UsageError
from replay.planning.selection import Selection


def parse_gtid_list(text, option):
    """A set of single GTIDs: '0-1-5,0-1-9' or 'UUID:5,UUID:9' (each one transaction)."""
    out = set()
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        out.add(parse_one_gtid(item, option))
    return out


def parse_rewrites(pairs):
    """{'from': 'to'} from FROM:TO strings."""
    mapping = {}
    for pair in pairs or ():
        old, sep, new = pair.partition(":")
        if not sep or not old or not new or ":" in new:
            raise UsageError(f"bad --rewrite-db {pair!r}: expected FROM:TO")
        mapping[old] = new
    return mapping


def build_selection(start_gtid=None, start_position=None, stop=END, exclude_gtids=None,
                    databases=(), tables=(), rewrites=()):
    """A Selection from the CLI's option values (``stop``: the Stop the stop options
    gave, ``mysqlbackup.archive.stop.parse_stop``). A value given empty is refused,
    never taken for "not given": ``--exclude-gtids "$(cat f)"`` of an empty file must
    not replay the statement it was meant to leave out."""
    given = {"--start-gtid": start_gtid, "--start-position": start_position,
             "--exclude-gtids": exclude_gtids}
    for option, value in given.items():
        if value is not None and not str(value).strip():
            raise UsageError(f"{option} is empty")
    for t in tables:
        if t.count(".") != 1:
            raise UsageError(f"bad --table {t!r}: expected DB.TABLE")
    return Selection(
        start_gtids=(parse_gtid_set(start_gtid, guess_flavor(start_gtid)) if start_gtid
                     else None),
        start_position=parse_file_position(start_position, "--start-position"),
        stop=stop,
        exclude=parse_gtid_list(exclude_gtids, "--exclude-gtids"),
        databases=set(databases), tables=set(tables), rewrite=parse_rewrites(rewrites))
