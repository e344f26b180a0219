"""The fused stream loop in pure Python: the same two functions as the compiled
``mysqlbackup._speedups`` (see ``mysqlbackup.speedups``, which picks one), with the same
arguments, results and stops, so the decoder and the Syncer do not know which runs.

``squeeze_packets`` (the decoder's side) walks a run of plain event packets and moves
their events together in place, so that the run becomes one contiguous range of whole
events. ``walk_events`` (the Syncer's side) takes from such a range the common events
that it can check and follow on its own. Both stop, leaving the bytes untouched, at the
first packet or event they do not handle; the caller's general code then handles that
one, so every unusual case, and every error message, stays in one place.

One ``struct`` unpack per packet and per event, the CRC checked by its residue over the
whole event, no per-event objects but a GTID's tuple: about 0.6 us per small event here
against 2.4 for a pass of the general code over each event.
"""

import struct

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.transactions import INERT_IN_TRX
from mysqlbackup.source import protocol

# the kinds of event ``walk_events`` takes (as in ``_speedups``)
KIND_OTHER, KIND_INERT_IN_TRX, KIND_XID, KIND_MARIA_GTID = 0, 1, 2, 3
# the version of the twins: ``_speedups.TWIN`` must be the same (bump both on a change
# of arguments, results or stops)
TWIN = 3


def _kind_table():
    """A KIND_* per event type."""
    kinds = bytearray(256)
    for etype in INERT_IN_TRX:
        kinds[etype] = KIND_INERT_IN_TRX
    kinds[ev.XID] = KIND_XID
    kinds[ev.MARIA_GTID] = KIND_MARIA_GTID
    return bytes(kinds)


KINDS = _kind_table()
# the largest event ``squeeze_packets`` moves: a larger one is cheaper to hand on alone,
# where it is received, than to copy (the general code takes it)
SQUEEZE_MAX = 32 << 10
_HEADER = ev.HEADER_LEN                                  # v4 event header
_SMALLEST = _HEADER + 4                                  # a header and a CRC-32
_GTID_SMALLEST = _HEADER + 13 + 4                        # seq_no, domain, flags, CRC
# packet header, OK byte [, semi-sync indicator and flag], then the event's size field
_PLAIN = struct.Struct("<IB9xI")
_SEMI = struct.Struct("<IBBB9xI")
_EVENT = struct.Struct("<IBIIIH")                        # ev.EventHeader's fields
_GTID = struct.Struct("<QI")                             # a MariaDB GTID's seq_no, domain


def squeeze_packets(buf, off, end, seq, semi_sync):
    """Walk the whole plain event packets of ``buf[off:end]`` (in sequence, no ACK
    asked, one event each whose header size is the payload's, at most SQUEEZE_MAX
    bytes) and move their events together to start at ``off``. Returns (offset after
    the last such packet, the next sequence id, bytes of events now at ``buf[off:]``,
    their number)."""
    if semi_sync:
        return _squeeze_semi_sync(buf, off, end, seq)
    out = start = off
    count, unpack, limit = 0, _PLAIN.unpack_from, protocol.MAX_PAYLOAD + 4
    while end - off >= 5 + _HEADER:
        head, ok_byte, size = unpack(buf, off)
        stop = off + 4 + (head & 0xFFFFFF)
        if head >> 24 != seq or ok_byte or stop > end or size != stop - off - 5 \
                or size < _HEADER or size > SQUEEZE_MAX or stop - off >= limit:
            break
        buf[out:out + size] = buf[off + 5:stop]
        out += size
        off = stop
        seq = (seq + 1) & 0xFF
        count += 1
    return off, seq, out - start, count


def _squeeze_semi_sync(buf, off, end, seq):
    """``squeeze_packets`` of a semi-sync stream: a packet that asks for an ACK stops it."""
    out = start = off
    count, unpack, limit = 0, _SEMI.unpack_from, protocol.MAX_PAYLOAD + 4
    indicator, need_ack = protocol.SEMI_SYNC_INDICATOR, protocol.SEMI_SYNC_NEED_ACK
    while end - off >= 7 + _HEADER:
        head, ok_byte, semi, flag, size = unpack(buf, off)
        stop = off + 4 + (head & 0xFFFFFF)
        if head >> 24 != seq or ok_byte or stop > end or size != stop - off - 7 \
                or size < _HEADER or size > SQUEEZE_MAX or stop - off >= limit \
                or semi != indicator or flag & need_ack:
            break
        buf[out:out + size] = buf[off + 7:stop]
        out += size
        off = stop
        seq = (seq + 1) & 0xFF
        count += 1
    return off, seq, out - start, count


def walk_events(data, off, pos, in_trx):
    """Take the common events of ``data[off:]`` (whole events back to back) at file
    position ``pos``: right end position (or none, 0, for a row event inside a
    transaction: MariaDB 11.4+'s binlog_legacy_event_pos=OFF), not artificial, CRC32 by
    its residue, and of a kind followed here (rows and table maps inside a transaction,
    its XID, a MariaDB GTID that opens one). The GTIDs and XIDs taken alternate: an XID
    first closes the group open before the walk.

    Returns (bytes taken, events taken, in a transaction after them, file position
    after the last XID taken or 0, timestamp of the last taken, [(domain, server_id,
    seq_no) of each GTID taken, in order], XIDs taken): ``TrxTracker.walked``'s."""
    n, start, boundary, when, count, closed, opened = len(data), off, 0, 0, 0, 0, []
    unpack, kinds, crc32, residue = _EVENT.unpack_from, KINDS, ev.crc32, ev.CRC_RESIDUE
    artificial, standalone = ev.LOG_EVENT_ARTIFICIAL_F, ev.FL_STANDALONE
    while n - off >= _HEADER:
        timestamp, etype, server_id, size, end, flags = unpack(data, off)
        stop = off + size
        kind = kinds[etype]
        if size < _SMALLEST or stop > n or flags & artificial or (
                end != pos + size and not (in_trx and kind == KIND_INERT_IN_TRX and end == 0)):
            break
        if in_trx:
            if kind != KIND_INERT_IN_TRX and kind != KIND_XID:
                break
        elif kind != KIND_MARIA_GTID or size < _GTID_SMALLEST \
                or data[off + _HEADER + 12] & standalone:
            break
        if crc32(data[off:stop]) != residue:
            break
        if kind == KIND_XID:
            in_trx, boundary = False, pos + size
            closed += 1
        elif kind == KIND_MARIA_GTID:
            in_trx = True
            seq_no, domain = _GTID.unpack_from(data, off + _HEADER)
            opened.append((domain, server_id, seq_no))
        when, pos, off = timestamp, pos + size, stop
        count += 1
    return off - start, count, in_trx, boundary, when, opened, closed
