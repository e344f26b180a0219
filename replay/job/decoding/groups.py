"""Which transactions the binlog proves safe to apply side by side (pure).

* MariaDB: transactions that committed in one binlog group commit on the source
  carry the same ``commit_id`` in their GTID event (flag FL_GROUP_COMMIT_ID).
  They held their row locks at the same time there, so they do not conflict.
  Only transactional ones count (FL_TRANSACTIONAL, not FL_STANDALONE, not FL_DDL).
* MySQL: a GTID event carries ``last_committed`` and ``sequence_number``
  (logical clock, per binlog file); a transaction may run once every
  transaction up to its ``last_committed`` has committed.

Either way a transaction not committed by an XID (a write to non-transactional tables,
ended by COMMIT) runs alone (``assemble`` gives it no group): its writes happen, and
are logged, as each statement ends, so beside others it would land out of order.

``batches`` cuts an ordered list of transactions into runs that may be applied
concurrently; whoever applies a batch still commits in the original order, so
the target's GTID order and the resume point stay exact.
"""

import struct

from mysqlbackup.binlog import events as ev

FL_TRANSACTIONAL, FL_DDL = 0x04, 0x20
_MYSQL_CLOCK = struct.Struct("<BqQ")  # typecode 2, last_committed, sequence_number


def commit_group(first_event, checksum):
    """("mariadb", domain, commit_id) or ("mysql", last_committed, sequence_number) of a
    transaction whose first event is ``first_event``; None when it must run alone."""
    etype = first_event[4]
    if etype == ev.MARIA_GTID:
        g = ev.parse_maria_gtid(first_event, checksum)
        safe = g.flags & FL_TRANSACTIONAL and not g.flags & (ev.FL_STANDALONE | FL_DDL)
        return ("mariadb", g.domain, g.commit_id) if safe and g.commit_id is not None else None
    if etype in (ev.GTID, ev.ANONYMOUS_GTID):
        body = ev.event_body(first_event, checksum)
        if len(body) >= 25 + _MYSQL_CLOCK.size and body[25] == 2:
            _, last, seq = _MYSQL_CLOCK.unpack_from(body, 25)
            return ("mysql", last, seq)
    return None


def batches(transactions):
    """Consecutive runs of ``transactions`` that may be applied side by side (in order)."""
    run, first = [], None
    for trx in transactions:
        group = trx.group
        if run and _joins(first, group):
            run.append(trx)
            continue
        if run:
            yield run
        run, first = [trx], tuple(group) if group else None
    if run:
        yield run


def _joins(first, group):
    """True when a transaction of ``group`` can run beside the batch opened by ``first``."""
    if first is None or group is None or first[0] != group[0]:
        return False
    if first[0] == "mariadb":
        return tuple(group) == first
    return group[1] < first[2]  # it waits for nothing the batch commits
