"""MySQL client/server replication packets: pure building and parsing, no I/O.

Packets on the wire: 3-byte little-endian payload length, 1-byte sequence id,
payload. A payload of exactly 0xFFFFFF bytes continues in the next packet.
During a binlog dump every payload is 0x00 (OK) + [0xEF, flag when semi-sync
is on for the connection] + one event; 0xFF is an error, 0xFE an end of stream.
"""

import struct
import uuid

from mysqlbackup.binlog import events as ev

from mysqlbackup.errors import ProtocolError

COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP = 0x12
COM_BINLOG_DUMP_GTID = 0x1E
COM_STMT_PREPARE = 0x16
COM_STMT_EXECUTE = 0x17
MYSQL_TYPE_BLOB = 0xFC
BINLOG_DUMP_NON_BLOCK = 0x01
BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x02
BINLOG_THROUGH_GTID = 0x04
SEMI_SYNC_INDICATOR = 0xEF
SEMI_SYNC_NEED_ACK = 0x01
MAX_PAYLOAD = 0xFFFFFF
_PACKET_HEADER = struct.Struct("<I")  # payload length (3 bytes) | sequence id << 24
_PLAIN_HEADER = struct.Struct("<IB")   # ... and the OK byte
_SEMI_HEADER = struct.Struct("<IBBB")  # ... the OK byte, 0xEF and the semi-sync flag
_SPLIT = 4 + MAX_PAYLOAD  # a packet this long (header included) continues in the next
_EVENT_SIZE = struct.Struct("<9xI")  # an event header's size field

ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
# The flag of a decoded item that is a run of whole events back to back (a squeezed run,
# see ``StreamDecoder``), not one event (True/False: whether it asks for an ACK).
EVENTS = "events"


class ServerError(Exception):
    """An error packet received from the server during the dump (code, message)."""

    def __init__(self, code, message):
        super().__init__(f"({code}) {message}")
        self.code = code
        self.message = message


class EndOfStream(Exception):
    """The server ended the dump with an EOF packet."""


def _lenstr(value):
    data = value.encode("utf-8")
    if len(data) > 255:
        raise ValueError("string longer than 255 bytes")
    return bytes([len(data)]) + data


def lenenc_int(n):
    """A length-encoded integer (the client/server protocol's variable-length form)."""
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + struct.pack("<I", n)[:3]
    return b"\xfe" + struct.pack("<Q", n)


def parse_prepare_ok(payload):
    """(statement id, columns, parameters) of a COM_STMT_PREPARE OK payload."""
    if not payload or payload[0] != 0:
        raise ValueError("not a COM_STMT_PREPARE OK packet")
    return struct.unpack_from("<IHH", payload, 1)


def stmt_execute_blob_args(stmt_id, value):
    """COM_STMT_EXECUTE body (after the command byte) binding one BLOB parameter to
    ``value`` (bytes): no cursor, one iteration, not NULL, types sent."""
    return (struct.pack("<IBI", stmt_id, 0, 1) + b"\x00\x01"
            + bytes([MYSQL_TYPE_BLOB, 0]) + lenenc_int(len(value)) + value)


def register_slave_payload(server_id, host="", user="", password="", port=0):
    """COM_REGISTER_SLAVE: tells the primary who we are (SHOW SLAVE HOSTS)."""
    return (bytes([COM_REGISTER_SLAVE]) + struct.pack("<I", server_id) + _lenstr(host)
            + _lenstr(user) + _lenstr(password) + struct.pack("<HII", port, 0, 0))


def binlog_dump_payload(server_id, file, pos, flags=BINLOG_SEND_ANNOTATE_ROWS_EVENT):
    """COM_BINLOG_DUMP from ``file``:``pos`` (a blocking dump unless flags say otherwise)."""
    if pos > 0xFFFFFFFF:
        raise ValueError("COM_BINLOG_DUMP positions are 32-bit")
    return (bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", pos, flags, server_id)
            + file.encode("utf-8"))


def encode_mysql_gtid_set(gtids):
    """The binary form of a MysqlGtidSet used by COM_BINLOG_DUMP_GTID: the classic one,
    or, when a GTID of the set is tagged (MySQL 8.4+), the tagged one (the format byte,
    the count in 6 bytes, the format byte again; per entry the uuid, its tag as a
    serialization length and text, then the intervals), as PREVIOUS_GTIDS holds it."""
    entries = sorted(gtids.sids.items())
    tagged = any(":" in sid for sid, _ in entries)
    out = [bytes([ev.GTID_FORMAT_TAGGED]) + len(entries).to_bytes(6, "little")
           + bytes([ev.GTID_FORMAT_TAGGED]) if tagged else struct.pack("<Q", len(entries))]
    for sid, intervals in entries:
        uuid_text, _, tag = sid.partition(":")
        out.append(uuid.UUID(uuid_text).bytes)
        if tagged:
            out.append(ev.varlen_bytes(len(tag)) + tag.encode("ascii"))
        out.append(struct.pack("<Q", len(intervals)))
        out.extend(struct.pack("<qq", lo, hi) for lo, hi in intervals)
    return b"".join(out)


def binlog_dump_gtid_payload(server_id, gtids, file="", pos=4):
    """MySQL COM_BINLOG_DUMP_GTID: stream every transaction not in ``gtids``."""
    data = encode_mysql_gtid_set(gtids)
    name = file.encode("utf-8")
    return (bytes([COM_BINLOG_DUMP_GTID]) + struct.pack("<HII", BINLOG_THROUGH_GTID, server_id,
                                                        len(name))
            + name + struct.pack("<QI", pos, len(data)) + data)


def ack_payload(file, pos):
    """Semi-sync ACK: 0xEF, 8-byte position, file name (no terminator)."""
    return bytes([SEMI_SYNC_INDICATOR]) + struct.pack("<Q", pos) + file.encode("utf-8")


def frame(payload, seq):
    """Wrap one payload (< 16 MiB) into a packet with sequence id ``seq``."""
    return struct.pack("<I", len(payload))[:3] + bytes([seq & 0xFF]) + payload


def parse_error_payload(payload):
    """(code, message) of a 0xFF error payload."""
    code = struct.unpack_from("<H", payload, 1)[0]
    rest = bytes(payload[3:])
    if rest[:1] == b"#":
        rest = rest[6:]
    return code, rest.decode("utf-8", "replace")


def event_size(data, off):
    """The size field of the event header at ``data[off:]`` (whole event, header included)."""
    return _EVENT_SIZE.unpack_from(data, off)[0]


def split_batch(batch):
    """The (event, needs_ack) pairs of a decoded batch: a squeezed run (EVENTS) is split
    into its events, each of which its squeeze found as long as its header says."""
    for data, flag in batch:
        if flag is not EVENTS:
            yield data, flag
            continue
        off = 0
        while off < len(data):
            size = event_size(data, off)
            yield data[off:off + size], False
            off += size


class StreamDecoder:
    """Turns the bytes of a binlog dump into (event, needs_ack) pairs.

    Feed it whatever the socket returned; it keeps a partial packet for the next
    call, joins payloads split at 16 MiB, checks sequence ids, and strips the OK
    byte and the semi-sync header. Events are memoryviews into the received bytes
    (no copy). ``semi_sync`` is decided per connection, never sniffed.

    With ``squeeze`` (``squeeze_packets`` of the fused loop, ``mysqlbackup.speedups``) a
    run of plain event packets becomes one item (events, EVENTS): their events moved
    together in place, back to back. The buffer must then be writable.
    """

    def __init__(self, semi_sync, squeeze=None):
        self.semi_sync = semi_sync
        self.squeeze = squeeze
        self.events = 0  # events decoded so far (a squeezed run counts its events)
        self.tail = b""
        self.expected_seq = 1  # the dump command went out with sequence id 0
        self.parts = []

    def feed(self, data):
        """Add received bytes; return the list of complete (event, needs_ack)."""
        if self.tail:
            data = self.tail + data
        if self.squeeze is not None:
            data = bytearray(data)  # the runs are squeezed in place
        out, off = self.decode(memoryview(data), 0, len(data))
        self.tail = bytes(data[off:]) if off < len(data) else b""
        return out

    def decode(self, view, off, end):
        """Decode the whole packets in ``view[off:end]``: (events, offset after the last).

        Events are memoryviews of ``view``: the caller keeps those bytes unchanged
        until the events are written. Runs of plain event packets take ``_run``; any
        other packet (error, end of stream, ACK request, 16 MiB split, bad sequence
        id) is handled alone, then the run goes on.
        """
        out = []
        while True:
            if not self.parts:
                off = self._run(view, off, end, out)
            if end - off < 4:
                break
            head = _PACKET_HEADER.unpack_from(view, off)[0]
            stop = off + 4 + (head & MAX_PAYLOAD)
            if stop > end:
                break
            self._check_seq(head >> 24)
            self._packet(view[off + 4:stop], out)
            off = stop
        self.events += len(out)  # (``_squeezed_run`` adds a run's other events)
        return out, off

    def _run(self, view, off, end, out):
        """Append the events of the packets from ``off`` that are whole, in sequence and
        plain events (no ACK asked); return the offset of the first other one."""
        if self.squeeze is not None:
            return self._squeezed_run(view, off, end, out)
        if self.semi_sync:
            return self._semi_sync_run(view, off, end, out)
        append, seq, unpack = out.append, self.expected_seq, _PLAIN_HEADER.unpack_from
        while end - off >= 5:
            head, ok_byte = unpack(view, off)
            stop = off + 4 + (head & MAX_PAYLOAD)
            if ok_byte or head >> 24 != seq or stop > end or not 4 < stop - off < _SPLIT:
                break
            append((view[off + 5:stop], False))
            seq = (seq + 1) & 0xFF
            off = stop
        self.expected_seq = seq
        return off

    def _squeezed_run(self, view, off, end, out):
        """``_run`` by the fused loop: the run's events, together, as one item."""
        stop, self.expected_seq, size, count = self.squeeze(view, off, end, self.expected_seq,
                                                            self.semi_sync)
        if size:
            out.append((view[off:off + size], EVENTS))
            self.events += count - 1  # ``decode`` counts the item as one
        return stop

    def _semi_sync_run(self, view, off, end, out):
        """``_run`` for a semi-sync connection: a packet that asks for an ACK ends it."""
        append, seq, unpack = out.append, self.expected_seq, _SEMI_HEADER.unpack_from
        while end - off >= 7:
            head, ok_byte, indicator, flag = unpack(view, off)
            stop = off + 4 + (head & MAX_PAYLOAD)
            if ok_byte or indicator != SEMI_SYNC_INDICATOR or flag & SEMI_SYNC_NEED_ACK \
                    or head >> 24 != seq or stop > end or not 6 < stop - off < _SPLIT:
                break
            append((view[off + 7:stop], False))
            seq = (seq + 1) & 0xFF
            off = stop
        self.expected_seq = seq
        return off

    def _packet(self, payload, out):
        """One packet the run left: a part of a split payload, or one ``_decode`` takes."""
        if len(payload) == MAX_PAYLOAD:
            self.parts.append(bytes(payload))
        elif self.parts:
            out.append(self._decode(memoryview(b"".join(self.parts) + payload)))
            self.parts = []
        elif not payload:
            raise ProtocolError("empty packet in the binlog stream")
        else:
            out.append(self._decode(payload))

    @property
    def partial(self):
        """True while part of a 16 MiB-split payload is waiting for the rest."""
        return bool(self.tail or self.parts)

    def _check_seq(self, seq):
        if seq != self.expected_seq:
            raise ProtocolError(f"packet sequence id {seq}, expected {self.expected_seq}")
        self.expected_seq = (seq + 1) & 0xFF

    def _decode(self, payload):
        first = payload[0]
        if first == 0x00:
            if not self.semi_sync:
                return payload[1:], False
            if len(payload) < 3 or payload[1] != SEMI_SYNC_INDICATOR:
                raise ProtocolError("semi-sync header missing from a binlog packet")
            if payload[2] & SEMI_SYNC_NEED_ACK:
                self.expected_seq = 1  # the primary restarts its count after asking for an ACK
                return payload[3:], True
            return payload[3:], False
        if first == 0xFF:
            raise ServerError(*parse_error_payload(payload))
        if first == 0xFE and len(payload) < 9:
            raise EndOfStream()
        raise ProtocolError(f"unexpected packet type 0x{first:02x} in the binlog stream")
