"""Archive objects -> the events of one dump, as a MySQL 8.4/9.x primary sends them.

``MysqlWalk`` is ``feed._Walk`` with MySQL's rules, as mysqld 9.7 was seen to send:

* by GTID set (COM_BINLOG_DUMP_GTID): the newest file whose GTIDs before it (its
  PREVIOUS_GTIDS, the index's ``gtid_before``) the replica holds, from offset 4: the
  fake ROTATE, its format description (its 'created' cleared when the replica holds
  the file's first transaction), PREVIOUS_GTIDS as the file has it, the transactions
  the replica lacks; where it skipped some, a heartbeat naming the end of what it
  skipped goes before the next event sent (and at the end of what there is);
* by file:position (COM_BINLOG_DUMP): as ``feed`` does for MariaDB;
* refused with ER 1236 as mysqld refuses: GTIDs before the archive's first file that
  the replica lacks (purged), or more GTIDs of the source's own UUID than it has.
"""

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MysqlGtidSet, parse_one
from replay.serve.protocol import mysql as my
from replay.serve.protocol import packets as pk
from replay.serve.feed import DumpRefused, EndInfo, _file_start, _Walk, with_sql


def gtid_set(text):
    """The MysqlGtidSet of an index's GTID text ('' or None: empty)."""
    return MysqlGtidSet.parse(text) if text and ":" in text else MysqlGtidSet()


def first_unit(units, start):
    """(index of the unit to start from, offset) for ``start``, as mysqld chooses: by
    GTID set, the newest file whose ``gtid_before`` the set holds (and, the first file
    of a later epoch, the duplicates it skips); DumpRefused (ER 1236)
    when the archive lacks what the replica needs or the replica is ahead of it."""
    if not units:
        raise DumpRefused(my.PURGED.format(sent="", missing=""))
    if start.gtids is None:
        return _file_start(units, start)
    state = start.gtids
    purged = gtid_set(units[0].index.get("gtid_before"))
    if not state.covers(purged):
        raise DumpRefused(my.PURGED.format(sent=state, missing=purged.subtract(state)))
    last = units[-1].index.get("last_gtid")
    if last:
        own = parse_one(last)[0].split(":")[0]
        end = gtid_set(units[-1].index.get("gtid_after"))
        mine = MysqlGtidSet({s: v for s, v in state.sids.items() if s.split(":")[0] == own})
        if not end.covers(mine):
            raise DumpRefused(my.AHEAD)
    # the first file of a later epoch skips what the epoch before it sent (a failover):
    # a start there only when the replica holds those too
    at = next((i for i in range(len(units) - 1, -1, -1)
               if state.covers(gtid_set(units[i].index.get("gtid_before")))
               and state.covers(gtid_set(units[i].skip))), 0)
    return at, 4


def emptied(trx, checksum, fde):
    """A MySQL transaction sent empty: its GTID event, BEGIN and commit (XID or
    COMMIT), or for a statement alone (a DDL) its GTID event and the statement turned
    into ``DO 0``; log_pos kept."""
    first, last = trx.events[0], trx.events[-1]
    if first[4] not in (ev.GTID, ev.GTID_TAGGED):
        raise DumpRefused(f"cannot skip the transaction at {trx.file}:{trx.start}: it has no "
                        "GTID event")
    if last[4] == ev.XID:
        events = iter(trx.events)  # forward: a spooled transaction is read back in order
        next(events)
        return [first, next(events), last]
    statement = next((e for e in trx.events if e[4] == ev.QUERY), None)
    if statement is None:
        raise DumpRefused(f"cannot skip the transaction at {trx.file}:{trx.start}: no "
                        "statement event to empty")
    return [first, with_sql(statement, b"DO 0", checksum, fde,
                            log_pos=ev.parse_header(last).log_pos)]


class MysqlWalk(_Walk):
    """One dump of a MySQL primary across files (``feed._Walk``'s machinery)."""

    first_unit = staticmethod(first_unit)

    def __init__(self, start, ctx):
        state = start.gtids
        super().__init__(start.__class__(start.file, start.pos, None, start.epoch), ctx)
        self.state, self.list_sent = state, True
        self.skip_end = None        # (file, pos) where skipped transactions ended
        self.last_gtid = None

    def unit(self, unit, offset, first, resumed=False):
        """The events of one unit, a heartbeat before the first event sent after
        skipped transactions (mysqld's, so that the replica's position moves)."""
        self.clear_created = first and self.state is not None and self._holds_first(unit)
        inner = super().unit(unit, offset, first, resumed)
        for item in inner:
            if self.skip_end is not None:
                yield "event", self._beat(*self.skip_end)
                self.skip_end = None
            yield item

    def _beat(self, file, pos):
        return my.heartbeat(file, pos, self.ctx.server_id, self.ctx.checksum,
                            self.ctx.heartbeat_v2)

    def _holds_first(self, unit):
        first = unit.index.get("first_gtid")
        return bool(first) and self.state.contains(*parse_one(first))

    def _note_start_state(self, unit):
        return None

    def _header(self, off, event, offset, first):
        if event[4] == ev.FORMAT_DESCRIPTION:
            crc = ev.parse_format_description(event).checksum_alg == ev.CHECKSUM_CRC32
            event = pk.without_in_use(event, crc)
        if event[4] == ev.FORMAT_DESCRIPTION and first and self.state is not None:
            yield "event", (pk.resent_fde(event, clear_log_pos=False) if self.clear_created
                            else event)
            self.pos = off + len(event)
            return
        yield from super()._header(off, event, offset, first)

    def _skip_set(self, unit):
        return gtid_set(unit.skip)

    def _duplicate(self, trx):
        return bool(trx.gtid_key and self.duplicates.contains(*trx.gtid_key))

    def _emptied(self, trx, checksum, fde):
        return emptied(trx, checksum, fde)

    def _held(self, trx):
        return self.state is not None and trx.gtid_key is not None and \
            self.state.contains(*trx.gtid_key)

    def _skipped(self, trx):
        self.pos = trx.end
        self.skip_end = (self.file, trx.end)
        return iter(())

    def _check_reached(self, trx):
        return None

    def finish(self):
        """The closing items: the heartbeat of a skipped tail, ('end', EndInfo)."""
        if self.skip_end is not None and self.end is None:
            yield "event", self._beat(*self.skip_end)
            self.skip_end = None
        yield "end", self.end or EndInfo(self.file, self.pos, self.last_gtid,
                                         self.ctx.cut_reason or "end of the archive",
                                         self.epoch)
