"""The stream decoder and packet builders (pure), with crafted bytes."""

import struct

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import ProtocolError
from mysqlbackup.source import protocol
from tests.helpers import make_event, packets


def test_semi_sync_header_is_stripped_and_ack_flag_reported():
    e1 = make_event(ev.XID, bytes(8), 100)
    e2 = make_event(ev.XID, bytes(8), 131)
    data = packets([e1, e2], semi_sync=True, ack_flags=[True, False])
    dec = protocol.StreamDecoder(semi_sync=True)
    assert dec.feed(data) == [(e1, True), (e2, False)]


def test_event_starting_with_0xef_is_not_mistaken_for_a_header():
    event = b"\xef" + make_event(ev.XID, bytes(8), 100)[1:]
    dec = protocol.StreamDecoder(semi_sync=False)
    assert dec.feed(packets([event])) == [(event, False)]


def test_partial_packets_are_kept_until_complete():
    e1 = make_event(ev.XID, bytes(8), 100)
    data = packets([e1])
    dec = protocol.StreamDecoder(semi_sync=False)
    assert dec.feed(data[:10]) == []
    assert dec.feed(data[10:]) == [(e1, False)]


def test_payload_of_16_mib_is_joined():
    body = bytes(protocol.MAX_PAYLOAD + 100 - 19 - 4)
    event = make_event(ev.QUERY, body, 0)
    payload = b"\x00" + event
    first, rest = payload[:protocol.MAX_PAYLOAD], payload[protocol.MAX_PAYLOAD:]
    data = protocol.frame(first, 1) + protocol.frame(rest, 2)
    dec = protocol.StreamDecoder(semi_sync=False)
    assert dec.feed(data) == [(event, False)]


def test_wrong_sequence_id_is_an_error():
    dec = protocol.StreamDecoder(semi_sync=False)
    with pytest.raises(ProtocolError, match="sequence id 5"):
        dec.feed(protocol.frame(b"\x00" + make_event(ev.XID, bytes(8), 1), 5))


def test_error_packet_becomes_server_error():
    payload = b"\xff" + struct.pack("<H", 1236) + b"#HY000Could not find first log file"
    with pytest.raises(protocol.ServerError) as err:
        protocol.StreamDecoder(semi_sync=True).feed(protocol.frame(payload, 1))
    assert err.value.code == 1236 and "first log file" in err.value.message


def test_ack_payload_layout():
    assert protocol.ack_payload("binlog.000002", 1234) == (
        b"\xef" + struct.pack("<Q", 1234) + b"binlog.000002")


def test_dump_payload_layout():
    p = protocol.binlog_dump_payload(77, "binlog.000001", 4)
    assert p[0] == protocol.COM_BINLOG_DUMP
    assert struct.unpack_from("<IHI", p, 1) == (4, protocol.BINLOG_SEND_ANNOTATE_ROWS_EVENT, 77)
    assert p[11:] == b"binlog.000001"


def test_length_encoded_integers():
    assert [protocol.lenenc_int(n) for n in (0, 250, 251, 65535, 65536, 1 << 24)] == [
        b"\x00", b"\xfa", b"\xfc\xfb\x00", b"\xfc\xff\xff", b"\xfd\x00\x00\x01",
        b"\xfe" + struct.pack("<Q", 1 << 24)]


def test_prepared_statement_packets():
    ok = b"\x00" + struct.pack("<IHH", 7, 0, 1) + b"\x00\x00\x00"
    assert protocol.parse_prepare_ok(ok) == (7, 0, 1)
    with pytest.raises(ValueError):
        protocol.parse_prepare_ok(b"\xff\x01\x00")
    body = protocol.stmt_execute_blob_args(7, b"QUJD" * 100)
    # stmt id, no cursor, one iteration, NULL bitmap, types bound, BLOB, 400 as lenenc
    assert body[:13] == struct.pack("<IBI", 7, 0, 1) + b"\x00\x01\xfc\x00"
    assert body[13:] == b"\xfc\x90\x01" + b"QUJD" * 100
