"""Big binlog files made of a real file's events, for memory tests and measurements.

``grow_binlog`` takes a real MariaDB binlog (checksummed, with GTIDs and a row-based
transaction) and writes a file of the size asked for: the seed's header events
(format description, GTID list, binlog checkpoint), then transactions of about
``trx_bytes`` each, each one the seed's largest transaction with its statements
repeated (GTID, then TABLE_MAP/rows ... again and again, then XID), the GTID's
seq_no renumbered, every event's log_pos and CRC32 written anew, and a ROTATE at the
end naming the next file. Every event stays a real server's event: the scan, the
index and the CRC checks see what they see in a real file of that size (one
transaction spanning many 8 KB rows events, as a large INSERT writes it).
"""

import struct

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import iter_events

_FRAME = struct.Struct("<I")


def _seed_parts(data):
    """(header events, statement events, GTID event, XID event) of a seed binlog: the
    events before its first GTID, and its largest GTID..XID transaction split."""
    events = [bytes(e) for _, e in iter_events(data, 4, None)]
    first = next(i for i, e in enumerate(events) if e[4] == ev.MARIA_GTID)
    best, trx = [], []
    for event in events[first:]:
        if event[4] == ev.MARIA_GTID:
            trx = [event]
        elif trx:
            trx.append(event)
            if event[4] == ev.XID and sum(map(len, trx)) > sum(map(len, best)):
                best, trx = trx, []
    if not best:
        raise ValueError("the seed holds no GTID..XID transaction")
    return events[:first], best[1:-1], best[0], best[-1]


def _placed(event, pos):
    """``event`` moved to file offset ``pos``: its log_pos and CRC32 written anew."""
    out = bytearray(event)
    end = pos + len(out)
    out[13:17] = _FRAME.pack(end)
    out[-4:] = _FRAME.pack(ev.crc32(bytes(out[:-4])))
    return out


def grow_binlog(seed_path, path, size, trx_bytes, next_name, first_seq=1):
    """Write ``path``: a binlog of about ``size`` bytes grown from the real binlog at
    ``seed_path`` (see the module); returns the number of transactions written."""
    with open(seed_path, "rb") as f:
        header, statements, gtid, xid = _seed_parts(f.read())
    block = sum(map(len, statements))
    repeat = max(1, trx_bytes // max(block, 1))
    pos, count = 4, 0
    with open(path, "wb") as out:
        out.write(ev.MAGIC)
        for event in header:
            out.write(_placed(event, pos))
            pos += len(event)
        while pos + trx_bytes <= size or count == 0:
            renumbered = bytearray(gtid)
            renumbered[19:27] = struct.pack("<Q", first_seq + count)
            parts = [renumbered] + statements * repeat + [xid]
            chunk = bytearray()
            for event in parts:
                chunk += _placed(event, pos)
                pos += len(event)
                if len(chunk) >= 8 << 20:
                    out.write(chunk)
                    chunk = bytearray()
            out.write(chunk)
            count += 1
        body = struct.pack("<Q", 4) + next_name.encode()
        rotate = bytearray(struct.pack("<IBIIIH", 0, ev.ROTATE, 1, 19 + len(body) + 4, 0, 0)
                           + body + b"\0\0\0\0")
        out.write(_placed(rotate, pos))
    return count
