"""The pure parts of serve's MySQL side: the GTID set of COM_BINLOG_DUMP_GTID (classic
and tagged, and what a hostile client may send), caching_sha2_password's tokens and
RSA exchange, HEARTBEAT_LOG_EVENT_V2 as mysqld 9.7 sent it, where a GTID dump starts,
and the answers to a MySQL replica's queries."""

import struct
from dataclasses import replace

import pytest

from mysqlbackup.binlog.gtid import MysqlGtidSet
from mysqlbackup.source.protocol import binlog_dump_gtid_payload
from replay.planning.units import Unit
from replay.serve.protocol import mysql as my
from replay.serve.protocol import packets as pk
from replay.serve.feed import DumpRefused, DumpStart
from replay.serve.mysqlfeed import first_unit
from replay.serve.protocol.queries import ServerFacts, Session, answer

UUID = "92a4fe6b-e9af-11f1-ae8f-02fc00000001"
OTHER = "11111111-2222-3333-4444-555555555555"


@pytest.mark.parametrize("text", ["", f"{UUID}:1-4:7", f"{UUID}:1-4:nightly:1-3,{OTHER}:5",
                                  f"{UUID}:nightly:2"])
def test_gtid_sets_decode_as_encoded(text):
    gtids = MysqlGtidSet.parse(text) if text else MysqlGtidSet()
    request = my.parse_binlog_dump_gtid(binlog_dump_gtid_payload(7, gtids))
    assert (str(request.gtids), request.server_id, request.file, request.pos) == (
        str(gtids), 7, "", 4)


@pytest.mark.parametrize("blob", [b"", b"\x01", struct.pack("<Q", 2**40) + bytes(8),
                                  struct.pack("<Q", 1) + bytes(16) + struct.pack("<Q", 5),
                                  struct.pack("<Q", 1) + bytes(16) + struct.pack("<Qqq", 1, 5, 2),
                                  b"\x01" + (1).to_bytes(6, "little") + b"\x01" + bytes(16)
                                  + b"\xff"])
def test_hostile_gtid_sets_are_malformed_packets(blob):
    with pytest.raises(pk.MalformedPacket):
        my.decode_gtid_set(blob)


def test_a_dump_request_cut_short():
    payload = binlog_dump_gtid_payload(7, MysqlGtidSet.parse(f"{UUID}:1-3"))
    for cut in (5, 12, len(payload) - 1):
        with pytest.raises(pk.MalformedPacket):
            my.parse_binlog_dump_gtid(payload[:cut])


def test_caching_sha2_tokens_and_the_rsa_exchange():
    scramble = bytes(range(20))
    token = my.sha2_token("secret", scramble)
    assert my.sha2_token_ok("secret", scramble, token)
    assert not my.sha2_token_ok("Secret", scramble, token)
    assert not my.sha2_token_ok("secret", scramble, token[:31])
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    key = my.new_rsa_key()
    public = load_pem_public_key(my.public_pem(key))
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    sent = public.encrypt(my.xor_scramble(b"secret\0", scramble), oaep)
    assert my.rsa_password(key, sent, scramble) == "secret"
    assert my.rsa_password(key, b"junk", scramble) is None
    assert my.clear_password(b"secret\0") == "secret"


def test_the_handshake_names_caching_sha2_and_the_version():
    hello = my.handshake_v10(11, "9.7.4-2", b"a" * 20)
    assert hello.startswith(b"\x0a9.7.4-2\0\x0b\0\0\0") and hello.endswith(
        b"\0caching_sha2_password\0")
    # after the version: connection id (4), scramble (8), filler (1): the low capability
    # bytes at 22, the character set, the status (2), the high bytes at 27
    caps = struct.unpack_from("<H", hello, 22)[0] | struct.unpack_from("<H", hello, 27)[0] << 16
    assert hello[24] == 255
    assert caps & pk.CLIENT_PROTOCOL_41 and not caps & (pk.CLIENT_SSL | my.CLIENT_DEPRECATE_EOF)
    assert struct.unpack_from("<H", my.handshake_v10(11, "9.7.4-2", b"a" * 20, ssl=True),
                              22)[0] & pk.CLIENT_SSL


def test_heartbeat_v2_is_mysqlds():
    # as mysqld 9.7 sent it at binlog.000003:1047 (server_id 1, CRC32)
    beat = my.heartbeat_v2("binlog.000003", 1047, 1, True)
    assert beat.hex() == ("00000000" "29" "01000000" "2c000000" "17040000" "0000"
                          "010d62696e6c6f672e3030303030330203fc170400" "a802b5d9")
    assert my.heartbeat("binlog.000003", 1047, 1, True, v2=False)[4] == 27


def unit(before, after, last=None):
    index = {"gtid_before": before, "gtid_after": after, "last_gtid": last}
    return Unit("f", (), index, False, "f", ())


def test_where_a_gtid_dump_starts_and_what_it_refuses():
    units = [unit(f"{UUID}:1-3", f"{UUID}:1-6"), unit(f"{UUID}:1-6", f"{UUID}:1-9"),
             unit(f"{UUID}:1-9", f"{UUID}:1-12", f"{UUID}:12")]

    def start(text):
        return first_unit(units, DumpStart(gtids=MysqlGtidSet.parse(text)))
    assert start(f"{UUID}:1-3") == (0, 4)
    assert start(f"{UUID}:1-7") == (1, 4)
    assert start(f"{UUID}:1-12,{OTHER}:1-100") == (2, 4)  # another server's GTIDs: fine
    with pytest.raises(DumpRefused, match="purged required binary logs.*is '.*:1-2', and "
                       r"the missing transactions are '.*:3'"):
        start(f"{UUID}:1-2")
    with pytest.raises(DumpRefused, match="Replica has more GTIDs than the source has"):
        start(f"{UUID}:1-13")


def test_a_mysql_replicas_queries_are_answered_as_mysqld():
    facts = ServerFacts(server_id=1, version="9.7.4-2", checksum="CRC32", flavor="mysql",
                        server_uuid=UUID, gtid_binlog_pos=f"{UUID}:1-5")
    session = Session()
    for sql in (("SET @master_heartbeat_period = 500000000, @source_heartbeat_period = "
                 "500000000"), ("SET @master_binlog_checksum = @@global.binlog_checksum, "
                                "@source_binlog_checksum = @@global.binlog_checksum"),
                f"SET @slave_uuid = '{OTHER}', @replica_uuid = '{OTHER}'"):
        assert answer(sql, session, facts).kind == "ok"
    assert (session.heartbeat_ns, session.checksum_aware) == (500000000, True)
    for sql, value in (("SELECT @@GLOBAL.SERVER_ID", 1), ("SELECT @@GLOBAL.GTID_MODE", "ON"),
                       ("SELECT @@GLOBAL.SERVER_UUID", UUID),
                       ("SELECT @source_binlog_checksum", "CRC32"),
                       ("SELECT @@GLOBAL.gtid_executed", f"{UUID}:1-5")):
        reply = answer(sql, session, facts)
        assert (reply.kind, reply.rows, reply.columns[0].name) == ("rows", [[value]],
                                                                   sql[7:]), sql


def test_a_later_epochs_first_file_is_a_start_only_for_a_replica_holding_its_skips():
    """After a failover the new server's first file skips, as duplicates, what the old
    one's last file sent: a replica lacking them starts in the old one's file."""
    units = [unit("", f"{UUID}:1-9"),
             replace(unit(f"{UUID}:1-5", f"{UUID}:1-9,{OTHER}:1-3", f"{OTHER}:3"),
                     skip=f"{UUID}:6-9")]
    assert first_unit(units, DumpStart(gtids=MysqlGtidSet.parse(f"{UUID}:1-5"))) == (0, 4)
    assert first_unit(units, DumpStart(gtids=MysqlGtidSet.parse(f"{UUID}:1-9"))) == (1, 4)
