"""Compressed binlog events -> the plain events they stand for (pure: readers only).

Two servers compress their binlogs, each its own way; the files stay as the server
wrote them (the stream and the archive never decompress), and readers (replay,
``inspect``, serve) turn each compressed event into plain events:

* MySQL 8.0.20+ (``binlog_transaction_compression=ON``): the events of a transaction
  after its GTID event (QUERY ``BEGIN``, TABLE_MAPs, rows events, XID) become one
  TRANSACTION_PAYLOAD event. Its body is a header of (type, length, value) fields, each
  a packed integer (MySQL's ``net_field_length``): 1 the payload's size, 2 the
  compression type (0 zstd, 255 none), 3 the uncompressed size (unknown types skipped
  by their length), 0 ending the header; then the payload: zstd frames holding the
  inner events back to back, each with its 19-byte header, log_pos 0 and no checksum.
* MariaDB 10.2+ (``log_bin_compress=ON``): a QUERY event becomes QUERY_COMPRESSED
  (165), its statement text compressed; a rows event WRITE/UPDATE/DELETE_ROWS v1 (23-25)
  becomes 166-168 and v2 (30-32) 169-171, the row images compressed after the column
  count and bitmaps. The compressed part begins with one byte (0x80 | algorithm << 4 |
  count of length bytes, algorithm 0: zlib), the uncompressed length in that many bytes
  (most significant first), then the zlib stream (MariaDB's ``binlog_buf_uncompress``).

The plain events made here are whole events as a server would have written them
uncompressed: their header's size is theirs, their CRC32 recomputed when the file is
checksummed (what a BINLOG statement, the change table's decoder and a replica expect).
Their log_pos is the compressed event's offset in the file plus their own size, so that
``log_pos - size`` (the position the change table records) is where the compressed
event lies in the file. Memory stays bounded: a payload's uncompressed size is read
from its header before anything is decompressed and refused past ``MAX_UNCOMPRESSED``
(as is a length byte that says more), and the payload is decompressed a chunk at a
time, the caller holding one inner event.
"""

import struct
import zlib
from collections import namedtuple

import zstandard

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import CorruptBinlog

MAX_UNCOMPRESSED = 1 << 30  # max_allowed_packet's own ceiling: no server writes more in one
ZSTD, NONE = 0, 255
COMPRESSION_NAMES = {ZSTD: "zstd", NONE: "none"}
MARIA_QUERY_COMPRESSED = 165
# MariaDB's compressed rows events -> the plain types they stand for
MARIA_ROWS_PLAIN = {166: 23, 167: 24, 168: 25, 169: 30, 170: 31, 171: 32}
MARIA_COMPRESSED = frozenset({MARIA_QUERY_COMPRESSED, *MARIA_ROWS_PLAIN})
COMPRESSED = MARIA_COMPRESSED | {ev.TRANSACTION_PAYLOAD}
_UPDATES = {24, 31}
_CHUNK = 1 << 16

Payload = namedtuple("Payload", "compression size uncompressed_size data")


def parse_payload(event, checksum, file=None, offset=None):
    """The header of a TRANSACTION_PAYLOAD event: ``Payload(compression, size,
    uncompressed_size, data)``, ``data`` a view of the payload bytes; CorruptBinlog
    (naming ``file`` and ``offset``) when the header does not decode, the payload is not
    the rest of the body, the compression type is unknown, or the uncompressed size is
    missing (zstd), past ``MAX_UNCOMPRESSED`` or (no compression) not the payload's."""
    body = ev.event_body(event, checksum)
    fields, pos = {}, 0
    try:
        while True:
            kind, pos = ev.packed_int(body, pos)
            if kind == 0:
                break
            length, pos = ev.packed_int(body, pos)
            if kind in (1, 2, 3):
                fields[kind], end = ev.packed_int(body, pos)
                if end - pos > length:
                    raise ValueError(f"field {kind} longer than its length {length}")
            pos += length
    except (IndexError, ValueError) as e:
        raise CorruptBinlog(f"TRANSACTION_PAYLOAD header does not decode: {e}", file,
                            offset) from None
    if 1 not in fields or 2 not in fields:
        raise CorruptBinlog("TRANSACTION_PAYLOAD header without its payload size or "
                            "compression type", file, offset)
    size, compression, uncompressed = fields[1], fields[2], fields.get(3)
    if size != len(body) - pos:
        raise CorruptBinlog(f"TRANSACTION_PAYLOAD says its payload is {size} bytes, the "
                            f"event holds {len(body) - pos}", file, offset)
    if compression not in COMPRESSION_NAMES:
        raise CorruptBinlog(f"TRANSACTION_PAYLOAD of unknown compression type {compression}",
                            file, offset)
    if compression == NONE:
        if uncompressed not in (None, size):
            raise CorruptBinlog(f"TRANSACTION_PAYLOAD without compression says "
                                f"{uncompressed} bytes uncompressed, holds {size}", file,
                                offset)
        uncompressed = size
    if uncompressed is None:
        raise CorruptBinlog("TRANSACTION_PAYLOAD (zstd) without its uncompressed size",
                            file, offset)
    _check_bound(uncompressed, "TRANSACTION_PAYLOAD", file, offset)
    return Payload(compression, size, uncompressed, body[pos:])


def _check_bound(size, what, file, offset):
    if size > MAX_UNCOMPRESSED:
        raise CorruptBinlog(f"{what} says {size} bytes uncompressed, over the "
                            f"{MAX_UNCOMPRESSED} bytes a reader decompresses "
                            f"(mysqlbackup.binlog.compressed.MAX_UNCOMPRESSED)", file, offset)


def payload_events(event, checksum, file=None, offset=None):
    """The inner events of a TRANSACTION_PAYLOAD event as stored (bytes: log_pos 0, no
    checksum), one at a time, decompressed a chunk at a time; CorruptBinlog when the
    payload does not decompress, its size is not the declared uncompressed size, or an
    inner event's size runs past it."""
    payload = parse_payload(event, checksum, file, offset)
    total, held, done = payload.uncompressed_size, bytearray(), 0
    for chunk in _payload_chunks(payload, file, offset):
        if done + len(held) + len(chunk) > total:
            raise CorruptBinlog(f"TRANSACTION_PAYLOAD decompresses past its declared "
                                f"{total} bytes", file, offset)
        held += chunk
        pos = 0
        while len(held) - pos >= ev.HEADER_LEN:
            size = struct.unpack_from("<I", held, pos + 9)[0]
            if size < ev.HEADER_LEN or done + pos + size > total:
                raise CorruptBinlog(f"TRANSACTION_PAYLOAD: inner event at byte {done + pos} "
                                    f"says it is {size} bytes, {total - done - pos} left",
                                    file, offset)
            if len(held) - pos < size:
                break
            yield bytes(held[pos:pos + size])
            pos += size
        del held[:pos]
        done += pos
    if done + len(held) != total or held:
        raise CorruptBinlog(f"TRANSACTION_PAYLOAD decompresses to {done + len(held)} bytes, "
                            f"its header says {total}", file, offset)


def _payload_chunks(payload, file, offset):
    if payload.compression == NONE:
        yield bytes(payload.data)
        return
    reader = zstandard.ZstdDecompressor().stream_reader(bytes(payload.data),
                                                        read_across_frames=True)
    try:
        while True:
            chunk = reader.read(_CHUNK)
            if not chunk:
                return
            yield chunk
    except zstandard.ZstdError as e:
        raise CorruptBinlog(f"TRANSACTION_PAYLOAD does not decompress (zstd: {e})", file,
                            offset) from None


def reframe(inner, checksum, log_pos):
    """An event stored without checksum (inside a payload, or just decompressed) made a
    whole event of a file: its size set, ``log_pos`` set, a CRC32 appended when
    ``checksum``."""
    size = len(inner) + (ev.CRC_LEN if checksum else 0)
    out = bytes(inner[:9]) + struct.pack("<II", size, log_pos) + bytes(inner[17:])
    return out + struct.pack("<I", ev.crc32(out)) if checksum else out


def maria_plain(event, checksum, fde, file=None, offset=None):
    """The plain QUERY or rows event a MariaDB compressed event (165-171) stands for, as
    MariaDB's own ``query_event_uncompress`` / ``row_log_event_uncompress`` make it: the
    bytes before the compressed part kept, the rest decompressed, the type made plain,
    the size and CRC32 made its own. ``offset``: where the event lies in ``file`` (for
    errors; when given, the plain event's log_pos is ``offset`` plus its size, else
    the header's is kept)."""
    etype = event[4]
    end = len(event) - (ev.CRC_LEN if checksum else 0)
    try:
        if etype == MARIA_QUERY_COMPRESSED:
            plain_type, at = ev.QUERY, _query_text_at(event, fde)
        else:
            plain_type, at = _rows_at(event, etype, fde)
        if at >= end:
            raise ValueError("no compressed part")
        data = _maria_uncompress(memoryview(event)[at:end], file, offset)
    except (IndexError, ValueError, struct.error) as e:
        raise CorruptBinlog(f"{ev.event_name(etype)} event does not decompress: {e}", file,
                            offset) from None
    head = bytearray(event[:at])
    head[4] = plain_type
    log_pos = struct.unpack_from("<I", head, 13)[0]
    if offset is not None:
        log_pos = offset + at + len(data) + (ev.CRC_LEN if checksum else 0)
    return reframe(bytes(head) + data, checksum, log_pos)


def maria_statement_head(event, checksum, fde, size=64):
    """The first ``size`` bytes of the statement of a MariaDB QUERY_COMPRESSED event,
    decompressing no more than that (enough to tell BEGIN / COMMIT / XA from a
    statement: ``transactions.classify_sql``); CorruptBinlog when it does not decode."""
    end = len(event) - (ev.CRC_LEN if checksum else 0)
    try:
        part = memoryview(event)[_query_text_at(event, fde):end]
        flags = part[0]
        lenlen = flags & 0x07
        if flags & 0xF0 != 0x80 or not 1 <= lenlen <= 4:
            raise ValueError(f"bad compression header byte 0x{flags:02x}")
        return zlib.decompressobj().decompress(bytes(part[1 + lenlen:]), size)
    except (IndexError, ValueError, struct.error, zlib.error) as e:
        raise CorruptBinlog(f"MARIA_QUERY_COMPRESSED event does not decompress: {e}") from None


def _query_text_at(event, fde):
    body = ev.HEADER_LEN
    phl = ev.post_header_len(fde, MARIA_QUERY_COMPRESSED, 13)
    db_len = event[body + 8]
    status_len = struct.unpack_from("<H", event, body + 11)[0]
    return body + phl + status_len + db_len + 1


def _rows_at(event, etype, fde):
    """(plain type, where the compressed part starts) of a compressed rows event."""
    v2 = etype >= 169
    phl = ev.post_header_len(fde, etype, 10 if v2 else 8)
    plain = MARIA_ROWS_PLAIN[etype]
    at = ev.HEADER_LEN + 8
    if phl == 10:  # the variable header (its length counts its own 2 bytes)
        at += struct.unpack_from("<H", event, at)[0]
    width, at = ev.packed_int(event, at)
    at += (width + 7) // 8 * (2 if plain in _UPDATES else 1)
    return plain, at


def _maria_uncompress(part, file, offset):
    """MariaDB's ``binlog_buf_uncompress``: the algorithm/length byte, the length (most
    significant byte first), the zlib stream, which must give exactly that length."""
    flags = part[0]
    lenlen, algorithm = flags & 0x07, (flags & 0x70) >> 4
    if flags & 0xE0 != 0x80 or not 1 <= lenlen <= 4:
        raise ValueError(f"bad compression header byte 0x{flags:02x}")
    if algorithm != 0:
        raise ValueError(f"unknown compression algorithm {algorithm}")
    length = int.from_bytes(bytes(part[1:1 + lenlen]), "big")
    if length == 0:
        raise ValueError("uncompressed length 0")
    _check_bound(length, "compressed event", file, offset)
    inflate = zlib.decompressobj()
    try:
        data = inflate.decompress(bytes(part[1 + lenlen:]), length + 1)
    except zlib.error as e:
        raise ValueError(f"zlib: {e}") from None
    if not inflate.eof or inflate.unconsumed_tail or inflate.unused_data or \
            len(data) != length:
        raise ValueError(f"zlib stream gives {len(data)} bytes"
                         f"{'' if inflate.eof else ' and does not end'}, its header says "
                         f"{length}")
    return data


def plain_events(event, offset, checksum, fde, file=None):
    """The plain events ``event`` (at file ``offset``) stands for: itself when it is not
    compressed; else the events it holds, made whole (``reframe``), their log_pos the
    compressed event's ``offset`` plus their size (see the module docstring)."""
    etype = event[4]
    if etype == ev.TRANSACTION_PAYLOAD:
        crc = ev.CRC_LEN if checksum else 0
        return (reframe(inner, checksum, offset + len(inner) + crc)
                for inner in payload_events(event, checksum, file, offset))
    if etype in MARIA_COMPRESSED:
        return iter((maria_plain(event, checksum, fde, file, offset),))
    return iter((event,))
