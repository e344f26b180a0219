"""Where a native apply ends, whether it may run in parallel, and how far a target got
(pure over indexes and GTID states, but the one file a stop point falls in, decoded
here): ``expected_end`` from the archive's indexes, ``serial_reason`` (why parallel
apply would not be exact), ``past``/``applied_count`` over the target's
positions. ``replay.restore.native`` drives the target with them."""

from dataclasses import dataclass

from mysqlbackup.archive.window import Span
from mysqlbackup.utc import epoch
from mysqlbackup.binlog.gtid import MariaGtidPos, MysqlGtidSet
from mysqlbackup.errors import MysqlBackupError
from replay.planning.selection import gap_error


@dataclass(frozen=True)
class End:
    """Where the native apply ends: the target's GTID position after the last
    transaction before the stop point, and what the report says of it."""

    gtid_pos: object                    # MariaGtidPos, or MysqlGtidSet (a MySQL source)
    last_gtid: str = None
    last_commit: float = None           # epoch seconds
    stop_reason: str = "end of the archive"


def expected_end(units, selection, start, url, options, keyring=None):
    """The End of a replay of the planned ``units`` (replay.planning.plan.units_to_read) under
    ``selection`` from the GTID position ``start``: from the indexes, and from the
    transactions of the one file a stop point falls in (decoded here, no Spark)."""
    end, last = start.copy(), (None, None)
    for unit in units:
        index = unit.index
        if selection.stop.may_hold(Span.of(index)):
            found = _walk_unit(unit, selection, start, url, options, keyring, last)
            if found is not None:
                return found
        _merge(end, state(index.get("gtid_after"), start))
        if index.get("last_gtid"):
            last = (index["last_gtid"], _epoch(index.get("last_commit")))
    return End(end, *last)


def serial_reason(statements, before, after):
    """Why a parallel native apply of files could give other data than one thread does
    (the pipe ``mariadb-binlog | mariadb`` applies in binlog order), or None.
    ``statements``: each file's index count of statement-based transactions (None: an
    index written before they were counted); ``before``/``after``: the GTID states
    before the first file and after the last. Statement-based transactions take values
    from the order they run in (AUTO_INCREMENT in triggers, ...); a MariaDB replica
    applies each GTID domain on its own, out of the binlog's order."""
    unknown = sum(count is None for count in statements)
    if unknown:
        return (f"the indexes of {unknown} of the files do not say whether they hold "
                "statement-based transactions (archived by an older version)")
    found = sum(statements)
    if found:
        return (f"{found} statement-based transaction{'s' if found > 1 else ''}: their "
                "values follow the order they are applied in")
    if ":" in (before or "") + (after or ""):
        return None
    first, last = MariaGtidPos.parse(before or ""), MariaGtidPos.parse(after or "")
    moved = sorted(d for d, pos in last.domains.items() if first.domains.get(d) != pos)
    if len(moved) > 1:
        return (f"GTID domains {', '.join(map(str, moved))}: a parallel replica applies "
                "each domain on its own, out of the binlog's order")
    return None


def state(text, like):
    """The GTID state ``text`` (an index's; None or '': empty) of ``like``'s flavor."""
    if isinstance(like, MysqlGtidSet):
        return MysqlGtidSet.parse(text) if text and ":" in text else MysqlGtidSet()
    return MariaGtidPos.parse(text or "")


def _walk_unit(unit, selection, start, url, options, keyring, last):
    """The End inside ``unit`` (None: the stop is not in it)."""
    from replay.job.tasks import decode_unit
    result = decode_unit(unit, url, options, keyring)
    if result.error:
        raise MysqlBackupError(f"{unit.where}: {result.error.message}")
    pos = state(unit.index.get("gtid_before"), start)
    _merge(pos, start)
    for trx in result.transactions:
        decision, reason = selection.decide(trx)
        if decision == "gap":
            raise gap_error(trx, reason)
        if decision == "stop":
            return End(pos, *last, stop_reason=reason)
        if trx.gtid_key and (trx.maria_gtid or isinstance(pos, MysqlGtidSet)):
            pos.add(*trx.gtid_key)
            last = (trx.gtid, trx.commit_ts)
    return None


def _merge(pos, other):
    if isinstance(pos, MysqlGtidSet):
        for sid, intervals in other.sids.items():
            for lo, hi in intervals:
                pos.add_interval(sid, lo, hi)
        return
    for domain, (server_id, seq) in other.domains.items():
        pos.add(domain, server_id, seq)


def _epoch(text):
    return epoch(text) if text else None


def past(pos, end):
    """True when ``pos`` is beyond ``end`` in one of ``end``'s domains (a MySQL set: a
    GTID of one of ``end``'s UUIDs that ``end`` lacks)."""
    if isinstance(end, MysqlGtidSet):
        return any(sid in end.sids for sid in pos.subtract(end).sids)
    return any(pos.domains.get(d, (0, -1))[1] > n for d, (_, n) in end.domains.items())


def applied_count(before, after):
    """Transactions between two GTID positions, by their sequence numbers (one source
    numbers a domain's transactions one by one; a MySQL set: the GTIDs it gained)."""
    if isinstance(after, MysqlGtidSet):
        return sum(hi - lo for ivs in after.subtract(before).sids.values() for lo, hi in ivs)
    return sum(seq - (before.domains.get(d, (0, 0))[1])
               for d, (_, seq) in after.domains.items())
