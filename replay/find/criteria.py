"""What ``archive find`` looks for, from its options, and whether a transaction (or a
whole file, by its index) can hold it (pure).

A transaction matches when it commits within ``--since`` .. ``--until`` (both
inclusive, whole seconds as the binlog has them) and has a change (``Change``) whose
table matches a ``--table`` pattern (shell wildcards: ``shop.*``; a statement on a
whole schema, such as DROP DATABASE shop, matches every table of it) and whose kind is
a ``--type`` (none given: any); ``--min-rows N`` then asks for N rows over those
changes, a change whose rows the binlog does not tell (DDL, statement-based DML) never
being ruled out by it. Without --table and --type every transaction in the time range
matches, one with no changes too.
"""

from dataclasses import dataclass, field
from datetime import datetime, timezone
from fnmatch import fnmatchcase

from mysqlbackup.errors import UsageError
from mysqlbackup.utc import parse_datetime

KINDS = ("insert", "update", "delete", "ddl")
_INDEX_TIME = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Criteria:
    """The options of one search: table patterns, kinds, time range (epoch seconds,
    inclusive; None: open) and the least rows."""

    tables: tuple = ()
    kinds: frozenset = frozenset()
    since: float = None
    until: float = None
    min_rows: int = None
    _wanted: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, tables=(), kinds=(), since=None, until=None, min_rows=None):
        """Criteria from the command line's values; UsageError naming a bad one."""
        for pattern in tables:
            if pattern.count(".") != 1 or "" in pattern.split("."):
                raise UsageError(f"bad --table {pattern!r}: expected DB.TABLE (shell "
                                 "wildcards allowed: shop.*)")
        for kind in kinds:
            if kind not in KINDS:
                raise UsageError(f"bad --type {kind!r}: one of {', '.join(KINDS)}")
        start, end = (_moment(since, "--since"), _moment(until, "--until"))
        if start is not None and end is not None and start > end:
            raise UsageError(f"--since {since} is after --until {until}")
        if min_rows is not None and min_rows < 1:
            raise UsageError(f"bad --min-rows {min_rows}: at least 1")
        return cls(tuple(tables), frozenset(kinds), start, end, min_rows)

    def wants(self, table, kind):
        """True when a change of ``kind`` to ``table`` is one the options ask for."""
        found = self._wanted.get((table, kind))
        if found is None:
            found = self._wanted[(table, kind)] = (not self.kinds or kind in self.kinds) and (
                not self.tables or any(_table_matches(table, p) for p in self.tables))
        return found

    def hits(self, changes):
        """The changes of a transaction that the table and kind options ask for."""
        if not self.kinds and not self.tables:
            return list(changes)
        return [c for c in changes if self.wants(c.table, c.kind)]

    def keep(self, commit_ts, changes):
        """True when a transaction committed at ``commit_ts`` with ``changes`` matches."""
        if (self.since is not None and commit_ts < self.since) or (
                self.until is not None and commit_ts > self.until):
            return False
        hits = self.hits(changes)
        if not hits and (self.tables or self.kinds or self.min_rows):
            return False
        if self.min_rows is None or any(c.rows is None for c in hits):
            return True
        return sum(c.rows for c in hits) >= self.min_rows

    def outside(self, index):
        """True when the file an index describes committed nothing in the time range
        (its last commit before --since, or its first after --until): it is not read."""
        last, first = _index_time(index.get("last_commit")), _index_time(
            index.get("first_commit"))
        return ((self.since is not None and last is not None and last < self.since)
                or (self.until is not None and first is not None and first > self.until))


def _table_matches(table, pattern):
    if table.endswith(".*"):  # a statement on a whole schema
        return fnmatchcase(table[:-2], pattern.split(".")[0])
    return bool(table) and fnmatchcase(table, pattern)


def _moment(text, option):
    """Epoch seconds of an option's ISO 8601 value (UTC unless it names a zone)."""
    if text is None:
        return None
    if not text.strip():
        raise UsageError(f"{option} is empty")
    return parse_datetime(text, option)


def _index_time(text):
    if not text:
        return None
    return datetime.strptime(text, _INDEX_TIME).replace(tzinfo=timezone.utc).timestamp()
