"""The Syncer with the real writer and decoder, fed crafted and real binlog bytes."""

import os

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import ResyncRequired
from mysqlbackup.source.protocol import StreamDecoder
from mysqlbackup.stream.syncer import Syncer
from mysqlbackup.stream.writer import BinlogWriter
from tests.helpers import file_events, make_event, packets, read

MARIA = "rust_mysql_common/mariadb-bin.000001"


class StubClient:
    """Stands in for the network only: hands over batches decoded from real bytes."""

    def __init__(self, data, semi_sync):
        self.batch = StreamDecoder(semi_sync).feed(data)
        self.acks = []

    def send_ack(self, file, pos):
        self.acks.append((file, pos))


def syncer_for(tmp_path, name, client):
    writer = BinlogWriter(str(tmp_path))
    writer.open(name, 4)
    fsyncs = []
    writer._fsync = lambda fd: fsyncs.append(os.fstat(fd).st_size)
    return Syncer(client, writer, sync_interval=3600, checkpoint_interval=3600), fsyncs


def test_batch_is_fsynced_once_then_the_newest_ack_is_sent(tmp_path, shared_binlog):
    events = file_events(shared_binlog(MARIA))
    acks = [e[4] == ev.XID for e in events]
    client = StubClient(packets(events, semi_sync=True, ack_flags=acks), semi_sync=True)
    syncer, fsyncs = syncer_for(tmp_path, "mariadb-bin.000001", client)
    syncer.process(client.batch)
    size = 4 + sum(map(len, events))
    assert fsyncs == [size]
    assert client.acks == [("mariadb-bin.000001", size)]
    data = read(tmp_path / "mariadb-bin.000001")
    assert data[:21] + data[22:] == read(shared_binlog(MARIA))[:21] + read(
        shared_binlog(MARIA))[22:]


def test_crafted_incident_stops_before_the_gap(tmp_path, shared_binlog):
    events = file_events(shared_binlog(MARIA))
    first_trx_end = 4 + sum(len(e) for e in events[:8])
    body = (1).to_bytes(2, "little") + bytes([17]) + b"events were lost!"
    incident = make_event(ev.INCIDENT, body, first_trx_end + 19 + len(body) + 4)
    stream = events[:8] + [incident] + events[8:]
    acks = [e[4] == ev.XID for e in stream]
    client = StubClient(packets(stream, semi_sync=True, ack_flags=acks), semi_sync=True)
    syncer, _ = syncer_for(tmp_path, "mariadb-bin.000001", client)
    with pytest.raises(ResyncRequired) as err:
        syncer.process(client.batch)
    message = str(err.value)
    assert message.startswith("resync required")
    assert "incident 1 (LOST_EVENTS)" in message and "events were lost!" in message
    assert f"mariadb-bin.000001:{first_trx_end}" in message
    assert os.path.getsize(tmp_path / "mariadb-bin.000001") == first_trx_end
    # the transaction before the gap is whole and fsynced: its ACK goes out, none past it
    assert client.acks == [("mariadb-bin.000001", first_trx_end)]


def test_real_incident_file_stops_before_the_incident(tmp_path, shared_binlog):
    events = file_events(shared_binlog("rust_mysql_common/bug40482-bin.000001"))
    client = StubClient(packets(events), semi_sync=False)
    syncer, _ = syncer_for(tmp_path, "bug40482-bin.000001", client)
    with pytest.raises(ResyncRequired, match=r"incident 66 .* at bug40482-bin.000001:106"):
        syncer.process(client.batch)
    assert read(tmp_path / "bug40482-bin.000001") == ev.MAGIC + events[0]


def test_crc_mismatch_in_the_stream_stops_before_the_bad_event(tmp_path, shared_binlog):
    events = file_events(shared_binlog(MARIA))
    bad = bytearray(events[6])  # WRITE_ROWS of the first transaction
    bad[25] ^= 0x01
    events[6] = bytes(bad)
    client = StubClient(packets(events), semi_sync=False)
    syncer, _ = syncer_for(tmp_path, "mariadb-bin.000001", client)
    offset = 4 + sum(map(len, events[:6]))
    with pytest.raises(ResyncRequired, match=rf"CRC32 mismatch .* at mariadb-bin.000001:{offset}"):
        syncer.process(client.batch)
    assert os.path.getsize(tmp_path / "mariadb-bin.000001") == offset


def test_the_ack_of_a_rotate_names_the_file_it_closes(tmp_path, shared_binlog):
    """A primary whose semi-sync is OFF asks for a reply on every event while the replica
    catches up, a ROTATE included: that ACK names the old file and its end, never the
    next file (whose bytes up to that offset the backup does not have)."""
    events = file_events(shared_binlog(MARIA))
    end = 4 + sum(map(len, events))
    body = (4).to_bytes(8, "little") + b"mariadb-bin.000002"
    rotate = make_event(ev.ROTATE, body, end + ev.HEADER_LEN + len(body) + 4)
    stream = events + [rotate]
    client = StubClient(packets(stream, semi_sync=True, ack_flags=[True] * len(stream)),
                        semi_sync=True)
    syncer, fsyncs = syncer_for(tmp_path, "mariadb-bin.000001", client)
    syncer.process(client.batch)
    assert client.acks == [("mariadb-bin.000001", end + len(rotate))]
    assert os.path.getsize(tmp_path / "mariadb-bin.000001") == end + len(rotate)
    assert end + len(rotate) in fsyncs  # the closed file was fsynced before the ACK
