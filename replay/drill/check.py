"""What a restore drill checks (pure): the GTIDs the restored server logged against
what the archive's indexes list between the base and the stop point.

MySQL's GTIDs (``uuid:N``) are checked as sets (``check_mysql_applied``): each logged
once, none the base holds, and together with the base exactly the indexes' GTID set
at the end (within the stop's file otherwise). A source that keeps no GTIDs (MySQL's
gtid_mode OFF) is checked by counts (``check_counted``): the scratch server logged as
many transactions as the replay applied, and the replay took every transaction of the
files it read (before the base or applied) as the indexes count them.

A restore into an empty server loads the base unlogged and applies each binlog
transaction under its own GTID, so the scratch server's binlog holds exactly the
transactions the replay applied. MariaDB numbers a domain's transactions one
after another (``seq_no`` + 1, GTID strict mode), so "each once" means: per domain,
the sequence numbers logged are exactly base+1 .. end, none twice, none missing,
and the end lies where the indexes say the stop point is (exactly the last file's
end when the restore reaches the end of the archive; within the file the stop
falls in otherwise: an index does not list each transaction).
"""

from dataclasses import dataclass

from mysqlbackup.binlog.gtid import MariaGtidPos, MysqlGtidSet
from replay.planning.selection import BOOKKEEPING_SCHEMA

SHOWN = 5  # GTIDs named in a problem, at most


@dataclass(frozen=True)
class Expected:
    """Per domain, what the target must hold: after ``start`` (the base), through at
    least ``low`` and at most ``high`` (equal when the stop is the archive's end)."""

    start: MariaGtidPos
    low: MariaGtidPos
    high: MariaGtidPos

    @property
    def exact(self):
        return self.low == self.high


def _pos(text):
    return MariaGtidPos.parse(text or "")


def expected_of(plan):
    """The Expected GTIDs of a restore.plan.RestorePlan, from its indexes."""
    start, last = _pos(plan.manifest.get("gtid")), plan.choice.spans[-1]
    high = _pos(last.gtid_after)
    if _reaches_end(plan):
        return Expected(start, high, high)
    low = _pos(last.gtid_before)
    for d, (s, n) in start.domains.items():  # the base may be inside the stop's file
        low.add(d, s, n)
    return Expected(start, low, high)


def on_bookkeeping(db, sql):
    """True when a statement (its default schema ``db``, its text ``sql``) is on the
    replay's own bookkeeping schema."""
    return db == BOOKKEEPING_SCHEMA or f"{BOOKKEEPING_SCHEMA}." in sql


def applied_gtids(gtids):
    """{domain: [seq_no, ...]} in the order logged, from (domain, server_id, seq) triples."""
    out = {}
    for domain, _, seq in gtids:
        out.setdefault(domain, []).append(seq)
    return out


def missing_gtids(expected, gtids):
    """(domain, seq_no) of every transaction between the base and the last one the
    target logged, per domain, that the target did not log."""
    logged, gone = applied_gtids(gtids), []
    for d, seqs in sorted(logged.items()):
        first = expected.start.domains.get(d, (0, 0))[1] + 1
        gone += [(d, n) for n in sorted(set(range(first, max(seqs) + 1)) - set(seqs))]
    return gone


def check_applied(expected, gtids, skipped=frozenset()):
    """(problems, count, end position) of the GTIDs the target logged (a list of
    (domain, server_id, seq_no) in order) against ``expected``; ``skipped``: the
    (domain, seq_no) the replay leaves out on purpose (its own bookkeeping rows, logged
    by an earlier restore into the live source), not missing."""
    logged = applied_gtids(gtids)
    problems, end = [], MariaGtidPos()
    domains = sorted(set(logged) | set(expected.low.domains))
    for d in domains:
        seqs = logged.get(d, [])
        first = expected.start.domains.get(d, (0, 0))[1] + 1
        last = max(seqs) if seqs else first - 1
        end.domains[d] = (0, last)
        held = seqs + [n for (sd, n) in skipped if sd == d]
        problems += _twice(d, seqs) + _outside(d, seqs, first) + _missing(d, held, first, last)
        problems += _bounds(d, last, expected)
    return problems, sum(len(s) for s in logged.values()), end


def _twice(d, seqs):
    seen, twice = set(), []
    for n in seqs:
        if n in seen:
            twice.append(n)
        seen.add(n)
    return [f"applied more than once: GTID seq_no {_list(twice)} of domain {d}"] if twice else []


def _outside(d, seqs, first):
    held = sorted({n for n in seqs if n < first})
    return ([f"applied though the base holds them: GTID seq_no {_list(held)} of domain {d} "
             f"(the base is at {first - 1})"] if held else [])


def _missing(d, seqs, first, last):
    gone = sorted(set(range(first, last + 1)) - set(seqs))
    return ([f"missing: GTID seq_no {_list(gone)} of domain {d} ({len(gone)} of "
             f"{first}..{last} not applied)"] if gone else [])


def _bounds(d, last, expected):
    low = expected.low.domains.get(d, (0, 0))[1]
    high = expected.high.domains.get(d, (0, 0))[1]
    if expected.exact and last != low:
        return [f"domain {d}: the target ends at seq_no {last}, the indexes list "
                f"transactions through {low}"]
    if last < low or last > high:
        return [f"domain {d}: the target ends at seq_no {last}, the indexes put the stop "
                f"point between {low} and {high}"]
    return []


def _list(numbers):
    shown = ", ".join(map(str, numbers[:SHOWN]))
    return shown + (f" and {len(numbers) - SHOWN} more" if len(numbers) > SHOWN else "")


@dataclass(frozen=True)
class MysqlExpected:
    """What a MySQL target must hold: the base's set ``start``, and with what it logged
    at least ``low`` and at most ``high`` (equal when the stop is the archive's end)."""

    start: MysqlGtidSet
    low: MysqlGtidSet
    high: MysqlGtidSet

    @property
    def exact(self):
        return self.low == self.high


def _reaches_end(plan):
    return all(plan.stop.passes(span) for span in plan.choice.spans)


def mysql_expected_of(plan):
    """The MysqlExpected of a restore.plan.RestorePlan of a MySQL source with GTIDs."""
    start = MysqlGtidSet.parse(plan.manifest.get("gtid") or "")
    last = plan.choice.spans[-1]
    high = _union(start, MysqlGtidSet.parse(last.gtid_after or ""))
    if _reaches_end(plan):
        return MysqlExpected(start, high, high)
    return MysqlExpected(start, _union(start, MysqlGtidSet.parse(last.gtid_before or "")),
                         high)


def _union(*sets):
    out = MysqlGtidSet()
    for one in sets:
        for sid, intervals in one.sids.items():
            for lo, hi in intervals:
                out.add_interval(sid, lo, hi)
    return out


def check_mysql_applied(expected, logged, skipped=frozenset()):
    """(problems, count, the set held at the end) of the MySQL GTIDs the target logged
    (``logged``: (sid, gno) in order) against ``expected`` (a MysqlExpected);
    ``skipped``: the (sid, gno) the replay leaves out on purpose."""
    seen, twice, held = MysqlGtidSet(), [], []
    for sid, gno in logged:
        (twice if seen.contains(sid, gno) else
         held if expected.start.contains(sid, gno) else []).append(f"{sid}:{gno}")
        seen.add(sid, gno)
    end = _union(expected.start, seen)
    for sid, gno in skipped:
        end.add(sid, gno)
    problems = ([f"applied more than once: {_list(twice)}"] if twice else []) + (
        [f"applied though the base holds them: {_list(held)}"] if held else [])
    missing, beyond = expected.low.subtract(end), end.subtract(expected.high)
    if not missing.is_empty():
        problems.append(f"missing: {missing} (the indexes list them "
                        f"{'through the end' if expected.exact else 'before the stop file'})")
    if not beyond.is_empty():
        problems.append(f"applied past where the indexes put the stop point: {beyond}")
    return problems, len(logged), end


def counted_bounds(plan):
    """(low, high): how many transactions of the files a restore of a source without
    GTIDs reads the replay must take (skip before the base, or apply), from the
    indexes: all of them when it reaches the archive's end, else at least those of the
    files before the stop's file."""
    spans = plan.choice.spans
    total = sum(s.transactions or 0 for s in spans)
    if _reaches_end(plan):
        return total, total
    return total - (spans[-1].transactions or 0), total


def check_counted(bounds, logged, applied, skipped):
    """Problems of a restore of a source without GTIDs: the target logged ``logged``
    transactions, the replay applied ``applied`` and skipped ``skipped`` (the base held
    them); ``bounds``: ``counted_bounds``."""
    problems = []
    if logged != applied:
        problems.append(f"the scratch server logged {logged} transactions, the replay "
                        f"applied {applied}: {'some twice' if logged > applied else 'some lost'}")
    low, high = bounds
    taken = applied + skipped
    if not low <= taken <= high:
        where = "exactly" if low == high else f"between {low} and"
        problems.append(f"the replay took {taken} transactions ({applied} applied, {skipped} "
                        f"held by the base), the indexes list {where} {high} in the files "
                        "it read")
    return problems
