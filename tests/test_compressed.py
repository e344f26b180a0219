"""Compressed binlogs read as the plain events they hold (``mysqlbackup.binlog.compressed``):
MySQL's TRANSACTION_PAYLOAD (binlog_transaction_compression=ON, zstd) and MariaDB's
compressed query and rows events (log_bin_compress=ON, zlib), in replay (assemble, the
streamed decode and attach), the change table and inspect; the files themselves stay
byte-identical. Pure checks over real files of the corpus and events built here (the
header fields, the declared sizes, the memory bound); the live servers' side is in
test_compressed_live.py."""

import struct
import tracemalloc
import zlib

import pytest
import zstandard

from mysqlbackup.binlog import compressed as cz
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.inspect import format_report, inspect_bytes
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.errors import CorruptBinlog
from replay.job.decoding.assemble import (StreamAssembly, StreamAttach, assemble, attach_events,
                                      detach_events)
from tests.helpers import (read)

COMPRESSION_FILE = "rust_mysql_common/transaction_compression.000001"   # MySQL 8.0.32
CONNECTOR_FILE = "mysql-binlog-connector-rust/mysql-bin.000057"         # MySQL 8.0.31


# -- building events -------------------------------------------------------------------

def make_event(etype, body, log_pos=0, checksum=True, timestamp=1_700_000_000):
    size = ev.HEADER_LEN + len(body) + (ev.CRC_LEN if checksum else 0)
    out = struct.pack("<IBIIIH", timestamp, etype, 1, size, log_pos, 0) + bytes(body)
    return out + struct.pack("<I", zlib.crc32(out)) if checksum else out


def packed(value):
    """MySQL's net_store_length."""
    if value < 251:
        return bytes([value])
    if value < 1 << 16:
        return b"\xfc" + value.to_bytes(2, "little")
    if value < 1 << 24:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")


def field(kind, value):
    return packed(kind) + packed(len(packed(value))) + packed(value)


def payload_body(inner, compression=cz.ZSTD, uncompressed=None, size=None, data=None,
                 extra=b""):
    """A TRANSACTION_PAYLOAD body holding the events ``inner`` (bare: no checksum)."""
    raw = b"".join(inner)
    if data is None:
        data = zstandard.ZstdCompressor().compress(raw) if compression == cz.ZSTD else raw
    header = field(2, compression)
    if compression != cz.NONE or uncompressed is not None:
        header += field(3, len(raw) if uncompressed is None else uncompressed)
    header += extra + field(1, len(data) if size is None else size) + b"\x00"
    return header + data


def bare(event, checksum=True):
    """An event as a payload stores it: log_pos 0, no checksum."""
    body = bytes(event[:len(event) - (ev.CRC_LEN if checksum else 0)])
    return body[:9] + struct.pack("<II", len(body), 0) + body[17:]


def build_file(events):
    """magic + the events, each log_pos and CRC32 made right (the first is the FDE)."""
    out, pos = [ev.MAGIC, bytes(events[0])], 4 + len(events[0])
    for event in events[1:]:
        body = bytes(event[:-ev.CRC_LEN])
        pos += len(event)
        head = body[:13] + struct.pack("<I", pos) + body[17:]
        out.append(head + struct.pack("<I", zlib.crc32(head)))
    return b"".join(out)


def file_events(data):
    return [(off, bytes(e)) for off, e in iter_events(data, 4, None)]


def inner_of(data):
    """The inner events of the file's first payload, bare, by an independent reading."""
    off, payload = next((o, e) for o, e in file_events(data) if e[4] == ev.TRANSACTION_PAYLOAD)
    body = payload[ev.HEADER_LEN:-ev.CRC_LEN]
    start = body.index(b"\x28\xb5\x2f\xfd")  # the zstd frame's magic
    raw = zstandard.ZstdDecompressor().stream_reader(body[start:]).read()
    events, pos = [], 0
    while pos < len(raw):
        size = struct.unpack_from("<I", raw, pos + 9)[0]
        events.append(raw[pos:pos + size])
        pos += size
    return off, payload, events


# -- MySQL: TRANSACTION_PAYLOAD of real files --------------------------------------------

def test_a_payload_becomes_the_plain_events_it_holds(shared_binlog):
    data = read(shared_binlog(COMPRESSION_FILE))
    off, payload, inner = inner_of(data)
    parsed = cz.parse_payload(payload, True)
    assert (parsed.compression, parsed.size, parsed.uncompressed_size) == (
        cz.ZSTD, len(parsed.data), sum(map(len, inner)))
    assert all(ev.crc32(e) != ev.CRC_RESIDUE for e in inner)  # stored without checksums
    [trx], incomplete, _ = assemble(data, "c.000001")
    assert incomplete is None and trx.gtid is None and trx.tables == ["test.tb1"]
    assert [ev.event_name(e[4]) for e in trx.events] == [
        "ANONYMOUS_GTID", "QUERY", "TABLE_MAP", "WRITE_ROWS_V2", "XID"]
    gtid_at = next(o for o, e in file_events(data) if e[4] == ev.ANONYMOUS_GTID)
    assert (trx.start, trx.end, trx.rows_events) == (gtid_at, off + len(payload), 1)
    assert trx.events[0] == data[trx.start:off]  # the GTID event as stored
    for plain, stored in zip(trx.events[1:], inner):
        header = ev.parse_header(plain)
        assert ev.crc32(plain) == ev.CRC_RESIDUE and header.size == len(plain)
        assert header.log_pos - header.size == off  # where it lies: the payload's offset
        assert plain[:9] + plain[17:-ev.CRC_LEN] == stored[:9] + stored[17:]


def test_payloads_of_mysql_8_0_31_with_rows_query_events(shared_binlog):
    data = read(shared_binlog(CONNECTOR_FILE))
    transactions, _, _ = assemble(data, "m.000057")
    assert [t.gtid.rsplit(":", 1)[1] for t in transactions] == ["11", "12", "13"]
    assert [ev.event_name(e[4]) for e in transactions[2].events] == [
        "GTID", "QUERY", "ROWS_QUERY", "TABLE_MAP", "UPDATE_ROWS_V2", "ROWS_QUERY",
        "TABLE_MAP", "WRITE_ROWS_V2", "XID"]
    assert transactions[2].tables == ["a.test_table_3"] and transactions[2].rows_events == 2
    report = inspect_bytes(data, "m.000057")
    assert report["error"] is None and report["transactions"] == 3
    assert report["compressed"] == {
        "events": 2, "bytes": 747, "plain_bytes": 1521,
        "plain_types": {"ROWS_QUERY": 3, "TABLE_MAP": 3, "QUERY": 2, "WRITE_ROWS_V2": 2,
                        "XID": 2, "UPDATE_ROWS_V2": 1}}
    assert "  compressed: 2 events, 747 bytes (1521 plain): ROWS_QUERY×3" in \
        "\n".join(format_report(report))


@pytest.mark.parametrize("name", [COMPRESSION_FILE, CONNECTOR_FILE])
def test_streamed_decode_and_attach_give_the_whole_file_s_events(shared_binlog, name):
    data = read(shared_binlog(name))
    whole, _, fde = assemble(data, name)
    walk = StreamAssembly(name)
    for i in range(0, len(data), 7):
        walk.feed(data[i:i + 7])
    streamed, _, fde2, fingerprint = walk.finish()
    assert fde2 == fde and [t.event_lengths for t in streamed] == [
        [len(e) for e in _stored(data, t)] for t in whole]
    cut = StreamAttach(streamed)
    for i in range(0, len(data), 5):
        cut.feed(data[i:i + 5])
    cut.finish(name, fingerprint)
    assert [t.events for t in streamed] == [t.events for t in whole]
    detached = assemble(data, name)[0]
    fingerprint = detach_events(detached, data)
    attach_events(detached, data, name, fingerprint)
    assert [t.events for t in detached] == [t.events for t in whole]


def _stored(data, trx):
    return [e for off, e in file_events(data) if trx.start <= off < trx.end]


# -- MySQL: the header, the declared sizes and the bound ---------------------------------

@pytest.fixture
def parts(shared_binlog):
    """(events of the 8.0.32 file before its payload, the payload's inner events bare,
    events after it)."""
    data = read(shared_binlog(COMPRESSION_FILE))
    events = [e for _, e in file_events(data)]
    at = next(i for i, e in enumerate(events) if e[4] == ev.TRANSACTION_PAYLOAD)
    return events[:at], inner_of(data)[2], events[at + 1:]


def with_payload(parts, body):
    before, _, after = parts
    return build_file(before + [make_event(ev.TRANSACTION_PAYLOAD, body)] + after)


def refused(data, match):
    with pytest.raises(CorruptBinlog, match=match) as caught:
        assemble(data, "x.000001")
    payload_at = next(o for o, e in file_events(data) if e[4] == ev.TRANSACTION_PAYLOAD)
    assert (caught.value.file, caught.value.offset) == ("x.000001", payload_at)
    assert str(caught.value).startswith(f"x.000001 at offset {payload_at}: ")
    return caught.value


def test_a_payload_built_here_decodes_whatever_the_field_order(parts):
    _, inner, _ = parts
    plain = [ev.event_name(e[4]) for e in assemble(with_payload(parts, payload_body(inner)),
                                                   "x")[0][0].events]
    assert plain == ["ANONYMOUS_GTID", "QUERY", "TABLE_MAP", "WRITE_ROWS_V2", "XID"]
    # no compression, an unknown field (skipped by its length), two zstd frames
    for body in (payload_body(inner, cz.NONE), payload_body(inner, extra=field(9, 77)),
                 payload_body(inner, data=zstandard.ZstdCompressor().compress(b"".join(
                     inner[:2])) + zstandard.ZstdCompressor().compress(b"".join(inner[2:])))):
        [trx] = assemble(with_payload(parts, body), "x")[0]
        assert [ev.event_name(e[4]) for e in trx.events] == plain


def test_a_payload_whose_sizes_do_not_match_is_refused(parts):
    _, inner, _ = parts
    total = sum(map(len, inner))
    refused(with_payload(parts, payload_body(inner, uncompressed=total + 1)),
            f"decompresses to {total} bytes, its header says {total + 1}")
    refused(with_payload(parts, payload_body(inner, uncompressed=total - 1)),
            f"decompresses past its declared {total - 1} bytes")
    body = payload_body(inner)
    refused(with_payload(parts, body[:-1]), "says its payload is .* the event holds")
    refused(with_payload(parts, payload_body(inner, size=5)), "says its payload is 5 bytes")
    refused(with_payload(parts, payload_body(inner, cz.NONE, uncompressed=total + 9)),
            f"without compression says {total + 9} bytes uncompressed")
    short = inner[:1] + [inner[1][:9] + struct.pack("<I", 10_000) + inner[1][13:]] + inner[2:]
    refused(with_payload(parts, payload_body(short)), "inner event at byte .* says it is "
            "10000 bytes")


def test_a_payload_that_does_not_decode_is_refused(parts):
    _, inner, _ = parts
    refused(with_payload(parts, payload_body(inner, compression=1)),
            "unknown compression type 1")
    no_size = field(2, cz.ZSTD) + field(1, 10) + b"\x00" + b"\x00" * 10
    refused(with_payload(parts, no_size), r"\(zstd\) without its uncompressed size")
    refused(with_payload(parts, field(2, cz.ZSTD) + b"\x05"), "header does not decode")
    refused(with_payload(parts, field(3, 5) + b"\x00"), "without its payload size or "
            "compression type")
    frame = bytearray(zstandard.ZstdCompressor().compress(b"".join(inner)))
    frame[len(frame) // 2] ^= 0xFF
    refused(with_payload(parts, payload_body(inner, data=bytes(frame))),
            "does not decompress|decompresses to|inner event|holds a")  # no frame checksum
    refused(with_payload(parts, payload_body(inner, data=b"\x01" * 40)),
            r"does not decompress \(zstd")


def test_what_a_payload_may_not_hold_is_refused_by_name(parts):
    before, inner, _ = parts
    gtid = bare(next(e for e in before if e[4] == ev.ANONYMOUS_GTID))
    refused(with_payload(parts, payload_body([gtid] + inner)),
            "TRANSACTION_PAYLOAD holds a ANONYMOUS_GTID event: replay cannot apply it")
    nested = bare(make_event(ev.TRANSACTION_PAYLOAD, payload_body(inner)))
    refused(with_payload(parts, payload_body(inner[:1] + [nested])),
            "holds a TRANSACTION_PAYLOAD event")


def test_an_uncompressed_size_past_the_bound_is_refused_before_decompressing(parts,
                                                                              monkeypatch):
    _, inner, _ = parts
    monkeypatch.setattr(cz, "MAX_UNCOMPRESSED", 100)
    # the data is no zstd at all: the header alone refuses it
    error = refused(with_payload(parts, payload_body(inner, uncompressed=101,
                                                     data=b"\x01" * 30)),
                    "says 101 bytes uncompressed, over the 100 bytes a reader decompresses")
    assert "MAX_UNCOMPRESSED" in str(error)


def test_a_big_payload_streams_through_the_decode_a_chunk_at_a_time(parts):
    """48 MB of rows events in one payload (a few KB stored): the decode task holds one
    inner event and a chunk of the decompressed stream, never the transaction."""
    _, inner, _ = parts
    rows = inner[2]
    big = rows[:9] + struct.pack("<I", 256 << 10) + rows[13:] + b"\x00" * ((256 << 10)
                                                                        - len(rows))
    body = payload_body(inner[:2] + [big] * 192 + inner[3:])
    data = with_payload(parts, body)
    assert len(data) < 64 << 10
    tracemalloc.start()
    try:
        walk = StreamAssembly("big.000001")
        for i in range(0, len(data), 4096):
            walk.feed(data[i:i + 4096])
        [trx], _, _, _ = walk.finish()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert trx.rows_events == 192 and trx.event_lengths == [
        len(e) for _, e in file_events(data) if e[4] in (ev.ANONYMOUS_GTID,
                                                         ev.TRANSACTION_PAYLOAD)]
    assert peak < 2 << 20, peak


def test_inspect_names_a_damaged_payload_and_its_offset(parts):
    _, inner, _ = parts
    data = with_payload(parts, payload_body(inner, uncompressed=3))
    report = inspect_bytes(data, "x.000001")
    at = next(o for o, e in file_events(data) if e[4] == ev.TRANSACTION_PAYLOAD)
    assert report["error"]["offset"] == at
    assert "decompresses past its declared 3 bytes" in report["error"]["message"]
    assert f"  ERROR at offset {at}: TRANSACTION_PAYLOAD decompresses past" in "\n".join(
        format_report(report))


# -- MariaDB: compressed query and rows events -------------------------------------------

def maria_compress(data):
    """MariaDB's binlog_buf_compress: 0x80 | length bytes, the length (high byte first),
    zlib."""
    width = max(1, (len(data).bit_length() + 7) // 8)
    return bytes([0x80 | width]) + len(data).to_bytes(width, "big") + zlib.compress(data)


def compressed_twin(event, fde):
    """The MariaDB compressed event standing for a plain QUERY or rows event (v1, or v2
    read with the default post-header when ``fde`` is None)."""
    etype, end = event[4], len(event) - ev.CRC_LEN
    if etype == ev.QUERY:
        at, new_type = ev.query_parts(event, True, fde)[3] + ev.HEADER_LEN, 165
    else:
        new_type = {23: 166, 24: 167, 25: 168, 30: 169, 31: 170, 32: 171}[etype]
        at = ev.HEADER_LEN + 8
        if etype >= 30:
            at += struct.unpack_from("<H", event, at)[0]
        width, at = ev.packed_int(event, at)
        at += (width + 7) // 8 * (2 if etype in (24, 31) else 1)
    out = bytearray(event[:at]) + maria_compress(bytes(event[at:end]))
    out[4] = new_type
    struct.pack_into("<I", out, 9, len(out) + ev.CRC_LEN)
    return bytes(out) + struct.pack("<I", zlib.crc32(out))


def test_mariadb_compressed_events_give_back_the_plain_ones(source_files):
    checked = {}
    for path in source_files:
        fde = None
        for off, event in file_events(read(path)):
            if event[4] == ev.FORMAT_DESCRIPTION:
                fde = ev.parse_format_description(event)
            elif event[4] in (ev.QUERY, 23, 24, 25):
                twin = compressed_twin(event, fde)
                assert twin[4] in cz.MARIA_COMPRESSED and len(twin) != len(event)
                assert cz.maria_plain(twin, True, fde) == event  # byte for byte
                placed = cz.maria_plain(twin, True, fde, "f", off)
                assert ev.parse_header(placed).log_pos - len(placed) == off
                checked[event[4]] = checked.get(event[4], 0) + 1
    assert checked[ev.QUERY] >= 2 and checked[23] > 100


def test_a_v2_compressed_rows_event_gives_back_mysql_s_rows_event(shared_binlog):
    data = read(shared_binlog(COMPRESSION_FILE))
    rows = [e for e in assemble(data, "c")[0][0].events if e[4] == 30][0]
    assert cz.maria_plain(compressed_twin(rows, None), True, None) == rows


@pytest.mark.parametrize("damage,match", [
    (lambda part: b"\x40" + part[1:], "bad compression header byte 0x40"),
    (lambda part: bytes([part[0] & 0xF8]) + part[1:], "bad compression header byte"),
    (lambda part: bytes([part[0] | 0x10]) + part[1:], "unknown compression algorithm 1"),
    (lambda part: part[:1] + (int.from_bytes(part[1:2], "big") + 1).to_bytes(1, "big")
     + part[2:], "zlib stream gives .* its header says"),
    (lambda part: part[:-3], "does not end|zlib"),
    (lambda part: part + b"xx", "zlib stream gives"),
])
def test_a_damaged_mariadb_compressed_event_is_refused(damage, match):
    statement = b"CREATE TABLE t (a INT PRIMARY KEY, b VARCHAR(10))"
    head = struct.pack("<IIBHH", 7, 0, 1, 0, 0) + b"d\x00"  # thread, time, db len, error, vars
    part = maria_compress(statement)
    assert part[0] == 0x81  # one length byte
    good = make_event(165, head + part, log_pos=900)
    assert ev.parse_query(cz.maria_plain(good, True, None), True).sql == statement.decode()
    event = make_event(165, head + damage(part), log_pos=900)
    with pytest.raises(CorruptBinlog, match=match) as caught:
        cz.maria_plain(event, True, None, "m.000001", 800)
    assert str(caught.value).startswith("m.000001 at offset 800: MARIA_QUERY_COMPRESSED "
                                        "event does not decompress")


def test_a_mariadb_length_past_the_bound_is_refused(monkeypatch):
    monkeypatch.setattr(cz, "MAX_UNCOMPRESSED", 40)
    head = struct.pack("<IIBHH", 7, 0, 1, 0, 0) + b"d\x00"
    event = make_event(165, head + maria_compress(b"x" * 41), log_pos=900)
    with pytest.raises(CorruptBinlog, match="says 41 bytes uncompressed, over the 40"):
        cz.maria_plain(event, True, None, "m.000001", 800)


def ddl_file(source_files):
    """A MariaDB file whose DDL statements (standalone GTID groups) are compressed, the
    last of them its last event."""
    events = [e for _, e in file_events(read(source_files[0]))]
    fde = ev.parse_format_description(events[0])
    queries = [i for i, e in enumerate(events) if e[4] == ev.QUERY]
    kept = events[:queries[1] + 1]
    return build_file([compressed_twin(e, fde) if e[4] == ev.QUERY else e for e in kept])


def test_compressed_ddl_are_transactions_of_their_own(source_files):
    data = ddl_file(source_files)
    transactions, incomplete, _ = assemble(data, "d.000001", facts=(facts := {}))
    assert [t.gtid for t in transactions] == ["0-1-1", "0-1-2"] and incomplete is None
    assert [[ev.event_name(e[4]) for e in t.events] for t in transactions] == [
        ["MARIA_GTID", "QUERY"]] * 2
    assert transactions[1].events[1] == [e for _, e in file_events(read(source_files[0]))
                                         if e[4] == ev.QUERY][1][:13] + \
        transactions[1].events[1][13:]  # the statement as logged (only log_pos differs)
    assert facts["gtid_after"] == "0-1-2"
    report = inspect_bytes(data, "d.000001")
    assert (report["transactions"], report["last_gtid"], report["error"]) == (2, "0-1-2", None)


def test_serve_groups_and_empties_a_compressed_ddl(source_files):
    """serve sends compressed events as stored (a MariaDB replica reads them); it reads
    their statements to find where a group ends and to empty one it skips."""
    from replay.serve.feed import Grouper, emptied
    data = ddl_file(source_files)
    grouper, items = Grouper("d.000001"), []
    for off, event in file_events(data):
        item = grouper.take(off, event)
        if item and item[0] == "trx":
            items.append(item[1])
    assert [t.gtid for t in items] == ["0-1-1", "0-1-2"]
    fde = ev.parse_format_description(file_events(data)[0][1])
    for trx in items:
        stored = list(trx.events)
        assert stored[1][4] == cz.MARIA_QUERY_COMPRESSED
        gtid, statement = emptied(trx, True, fde)
        assert gtid == stored[0] and statement[4] == ev.QUERY
        assert ev.parse_query(statement, True, fde).sql == "DO 0"
        assert ev.parse_header(statement).log_pos == ev.parse_header(stored[1]).log_pos
        assert ev.crc32(statement) == ev.CRC_RESIDUE


def test_the_archive_index_ends_a_group_at_a_compressed_statement(source_files):
    from mysqlbackup.archive.index import build_index
    index = build_index(ddl_file(source_files), "d.000001")
    assert (index["transactions"], index["gtid_after"], index["complete_transactions"]) == (
        2, "0-1-2", True)
