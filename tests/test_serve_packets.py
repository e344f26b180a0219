"""The pure parts of ``mysqlbackup serve``: packets (byte for byte what MariaDB 10.11
sent its replica, captured on the wire), the answers to the replica's queries, where
a dump starts, empty transactions, --listen."""

import struct

import pytest
from pymysql._auth import scramble_native_password

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos
from mysqlbackup.errors import UsageError
from replay.job.decoding.transaction import Transaction
from replay.planning.units import Unit
from replay.serve.protocol import packets as pk
from replay.serve.cli import parse_listen
from replay.serve.feed import (NOT_IN_INDEX, STATE_TOO_OLD, DumpRefused, DumpStart,
                               emptied, first_unit, gtid_state_at)
from replay.serve.protocol.queries import ServerFacts, Session, answer
from tests.helpers import make_event

SCRAMBLE = b"6Y>j{NP)w@vT~AhgN0DG"


def test_native_password_checks_pymysqls_answer():
    stored = pk.password_hash("s3cret")
    token = scramble_native_password(b"s3cret", SCRAMBLE)
    assert pk.native_token("s3cret", SCRAMBLE) == token
    assert pk.native_password_ok(stored, SCRAMBLE, token)
    assert not pk.native_password_ok(stored, SCRAMBLE, scramble_native_password(b"s3creT",
                                                                                SCRAMBLE))
    assert not pk.native_password_ok(stored, SCRAMBLE, b"")


def test_handshake_and_its_response():
    hello = pk.handshake_v10(9, "5.5.5-10.11.19-MariaDB-log", SCRAMBLE)
    assert hello[:1] == b"\x0a" and hello.endswith(b"\0mysql_native_password\0")
    assert hello[hello.index(b"\0") + 5:][:8] == SCRAMBLE[:8]
    assert SCRAMBLE[8:] + b"\0mysql_native_password\0" in hello
    token = scramble_native_password(b"pw", SCRAMBLE)
    caps = pk.CLIENT_PROTOCOL_41 | pk.CLIENT_SECURE_CONNECTION | pk.CLIENT_PLUGIN_AUTH \
        | pk.CLIENT_PLUGIN_AUTH_LENENC | pk.CLIENT_CONNECT_WITH_DB
    response = (struct.pack("<IIB", caps, 1 << 24, 8) + bytes(23) + b"repl\0"
                + bytes([len(token)]) + token + b"db\0mysql_native_password\0")
    assert pk.parse_handshake_response(response) == pk.HandshakeResponse(
        caps, "repl", token, "db", "mysql_native_password")
    with pytest.raises(ValueError):
        pk.parse_handshake_response(struct.pack("<I", 0) + bytes(40))


def test_ssl_offered_only_with_a_certificate_and_the_ssl_request():
    """CLIENT_SSL (0x800) in the capabilities' low half when offered; the client's SSL
    request is the 32-byte start of its response, with CLIENT_SSL."""
    def caps(hello):
        at = hello.index(b"\0") + 1 + 4 + 9
        return struct.unpack_from("<H", hello, at)[0] | struct.unpack_from(
            "<H", hello, at + 5)[0] << 16
    plain = pk.handshake_v10(9, "5.5.5-10.11.19-MariaDB-log", SCRAMBLE)
    offered = pk.handshake_v10(9, "5.5.5-10.11.19-MariaDB-log", SCRAMBLE, ssl=True)
    assert caps(plain) == pk.SERVER_CAPABILITIES and not caps(plain) & pk.CLIENT_SSL
    assert caps(offered) == pk.SERVER_CAPABILITIES | pk.CLIENT_SSL
    request = struct.pack("<IIB", pk.CLIENT_PROTOCOL_41 | pk.CLIENT_SSL, 1 << 24, 8) + bytes(23)
    assert pk.is_ssl_request(request)
    assert not pk.is_ssl_request(request + b"repl\0\0")
    assert not pk.is_ssl_request(struct.pack("<IIB", pk.CLIENT_PROTOCOL_41, 1 << 24, 8)
                                 + bytes(23))


def test_generic_packets_are_the_servers():
    assert pk.ok_packet() == b"\x00\x00\x00\x02\x00\x00\x00"
    assert pk.eof_packet() == b"\xfe\x00\x00\x02\x00"
    assert pk.err_packet(1236, NOT_IN_INDEX) == (
        b"\xff\xd4\x04#HY000Could not find first log file name in binary log index file")
    assert pk.err_packet(1045, "Access denied for user 'repl'@'127.0.0.1' (using password: "
                         "YES)") == (b"\xff\x15\x04#28000Access denied for user "
                                     b"'repl'@'127.0.0.1' (using password: YES)")


def test_artificial_events_are_the_servers():
    rotate = pk.fake_rotate("binlog.000001", 4, 1, True)
    assert ev.parse_header(rotate) == (0, ev.ROTATE, 1, 44, 0, 0x20)
    assert rotate[19:] == b"\x04\x00\x00\x00\x00\x00\x00\x00binlog.000001\xe9\xd2\xcan"
    beat = pk.heartbeat("binlog.000003", 600, 1, True)
    assert ev.parse_header(beat) == (0, ev.HEARTBEAT, 1, 36, 600, 0)
    assert beat[19:] == b"binlog.000003yL\xf8\xf6"
    listed = pk.fake_gtid_list(MariaGtidPos.parse("0-1-8"), 560, 1, True)
    assert ev.parse_header(listed) == (0, ev.MARIA_GTID_LIST, 1, 43, 560, 0x20)
    assert listed[19:] == (b"\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x08"
                           b"\x00\x00\x00\x00\x00\x00\x00\xd4K@/")


def test_resent_format_description():
    body = (struct.pack("<H", 4) + b"10.11.19-MariaDB-log".ljust(50, b"\0")
            + struct.pack("<I", 1700000000) + bytes([19]) + bytes(40) + b"\x01")
    fde = make_event(ev.FORMAT_DESCRIPTION, body, 256, timestamp=1700000000)
    again = pk.resent_fde(fde)
    assert ev.parse_header(again).log_pos == 0 and ev.crc_ok(again)
    assert again[pk.CREATED_AT:pk.CREATED_AT + 4] == bytes(4)
    by_gtid = pk.resent_fde(fde, clear_log_pos=False)
    assert ev.parse_header(by_gtid).log_pos == 256 and ev.crc_ok(by_gtid)
    active = bytearray(fde)  # an active file's: in use, its CRC summed without the flag
    active[17] |= ev.LOG_EVENT_BINLOG_IN_USE_F
    again = pk.resent_fde(pk.without_in_use(bytes(active), True), clear_log_pos=False)
    assert again == by_gtid and ev.crc_ok(again)  # as mariadbd sends it: flag clear
    assert pk.without_in_use(bytes(active), True) == fde


def test_frames_split_at_16_mib():
    data, seq = pk.frames(b"x" * 10, 255)
    assert (data, seq) == (b"\x0a\x00\x00\xffxxxxxxxxxx", 0)
    data, seq = pk.frames(b"y" * pk.MAX_PAYLOAD, 1)
    assert seq == 3 and len(data) == pk.MAX_PAYLOAD + 8
    assert data[:4] == b"\xff\xff\xff\x01" and data[-4:] == b"\x00\x00\x00\x02"


def test_result_set_shape():
    payloads = pk.result_set([pk.Column("x", pk.TYPE_VAR_STRING)], [["CRC32"], [None]])
    assert payloads[0] == b"\x01" and payloads[2] == pk.eof_packet()
    assert payloads[3:] == [b"\x05CRC32", b"\xfb", pk.eof_packet()]


FACTS = ServerFacts(1, "5.5.5-10.11.19-MariaDB-log", "CRC32", 0, "0-1-12",
                    lambda file, pos: "0-1-3" if (file, pos) == ("binlog.000002", 4) else None)


def test_the_replicas_setup_queries():
    """Every query MariaDB 10.11's I/O thread sent (captured), in order."""
    session = Session()

    def value(sql):
        reply = answer(sql, session, FACTS, now=1795466396)
        assert reply.kind == "rows", (sql, reply)
        return reply.rows
    assert value("SELECT UNIX_TIMESTAMP()") == [[1795466396]]
    assert value("SHOW VARIABLES LIKE 'SERVER_ID'") == [["server_id", 1]]
    assert answer("SET @master_heartbeat_period= 1000000000", session, FACTS).kind == "ok"
    assert answer("SET @master_binlog_checksum= @@global.binlog_checksum", session,
                  FACTS).kind == "ok"
    assert value("SELECT @master_binlog_checksum") == [["CRC32"]]
    assert answer("SET @mariadb_slave_capability=4", session, FACTS).kind == "ok"
    assert value("SELECT @@GLOBAL.gtid_domain_id") == [[0]]
    assert answer("SET @slave_connect_state='0-1-8,1-2-3'", session, FACTS).kind == "ok"
    assert answer("SET @slave_gtid_strict_mode=1", session, FACTS).kind == "ok"
    assert value("SELECT binlog_gtid_pos('binlog.000002',4)") == [["0-1-3"]]
    assert value("SELECT binlog_gtid_pos('binlog.000009',4)") == [[None]]
    assert value("SELECT @@GLOBAL.gtid_binlog_pos") == [["0-1-12"]]
    assert (session.heartbeat_ns, session.checksum_aware, session.capability) == (
        1000000000, True, 4)
    assert str(session.connect_state) == "0-1-8,1-2-3"
    assert answer("SELECT @@GLOBAL.nope", session, FACTS).code == 1193
    assert answer("DROP TABLE x", session, FACTS).code == 1235
    assert answer("SET @slave_connect_state='junk'", session, FACTS).kind == "error"


def unit(name, before, after, size=1000):
    index = {"gtid_before": before, "gtid_after": after, "size": size}
    return Unit(name, (), index, False, name, ())


UNITS = [unit("b.1", "", "0-1-5"), unit("b.2", "0-1-5", "0-1-9"), unit("b.3", "0-1-9", "0-1-12")]


def test_where_a_dump_starts():
    assert first_unit(UNITS, DumpStart("b.2", 120)) == (1, 120)
    assert first_unit(UNITS, DumpStart("", 4)) == (0, 4)
    gtid = DumpStart(gtids=MariaGtidPos.parse("0-1-7"))
    assert first_unit(UNITS, gtid) == (1, 4)
    assert first_unit(UNITS, DumpStart(gtids=MariaGtidPos.parse("0-1-12"))) == (2, 4)
    impossible = ("Client requested master to start replication from impossible position; "
                  "the first event '{0}' at {1}, the last event read from '{0}' at 4, the "
                  "last byte read from '{0}' at 4.")   # mariadbd's words
    for start, message in [(DumpStart("b.9", 4), NOT_IN_INDEX),
                           (DumpStart("b.1", 1001), impossible.format("b.1", 1001)),
                           (DumpStart("", 0xFFFFFFFF), impossible.format(".", 0xFFFFFFFF)),
                           (DumpStart("", 0), impossible.format(".", 0)),
                           (DumpStart("b.2", 3), impossible.format("b.2", 3))]:
        with pytest.raises(DumpRefused) as e:
            first_unit(UNITS, start)
        assert (e.value.code, e.value.message) == (1236, message)
    with pytest.raises(DumpRefused) as e:  # the archive starts after what the replica holds
        first_unit(UNITS[1:], DumpStart(gtids=MariaGtidPos.parse("0-1-3")))
    assert e.value.message == STATE_TOO_OLD
    for ahead in ("0-1-13", "0-2-12", "1-1-1"):  # past the archive, another server, domain
        with pytest.raises(DumpRefused) as e:
            first_unit(UNITS, DumpStart(gtids=MariaGtidPos.parse(ahead)))
        assert e.value.message == (f"Error: connecting slave requested to start from GTID "
                                   f"{ahead}, which is not in the master's binlog")
    assert gtid_state_at(UNITS, "b.2", 4) == "0-1-5"
    assert gtid_state_at(UNITS, "b.2", 1000) == "0-1-9"
    assert gtid_state_at(UNITS, "b.2", 500) is None


def _gtid(seq, standalone=False, log_pos=100):
    body = struct.pack("<QIB", seq, 0, ev.FL_STANDALONE if standalone else 0) + bytes(6)
    return make_event(ev.MARIA_GTID, body, log_pos)


def _query(sql, log_pos):
    body = struct.pack("<IIBHH", 7, 0, 1, 0, 0) + b"d\0" + sql
    return make_event(ev.QUERY, body, log_pos)


def test_emptied_transactions_keep_gtid_commit_and_positions():
    xid = make_event(ev.XID, struct.pack("<Q", 5), 300)
    rows = make_event(ev.TABLE_MAP, bytes(20), 200)
    trx = Transaction("b.1", 4, 300, "0-1-5", [0, 1, 5], events=[_gtid(5), rows, xid])
    assert emptied(trx, True, None) == [_gtid(5), xid]
    ddl = Transaction("b.1", 300, 420, "0-1-6", [0, 1, 6],
                      events=[_gtid(6, True, 342), _query(b"DROP TABLE d.t", 420)])
    first, statement = emptied(ddl, True, None)
    assert first == ddl.events[0]
    assert ev.parse_query(statement, True) == ("d", "DO 0")
    assert ev.parse_header(statement).log_pos == 420 and ev.crc_ok(statement)
    with pytest.raises(DumpRefused):
        emptied(Transaction("b.1", 4, 300, events=[_query(b"INSERT", 300)]), True, None)


def test_parse_listen():
    assert parse_listen("127.0.0.1:3307") == ("127.0.0.1", 3307)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("localhost", ":3307", "h:99999", "h:x"):
        with pytest.raises(UsageError):
            parse_listen(bad)


def test_start_server_refuses_filters():
    from replay.planning.selection import Selection
    from replay.serve.server import ServeOptions, start_server
    for selection in (Selection(databases={"d"}), Selection(tables={"d.t"}),
                      Selection(rewrite={"a": "b"})):
        with pytest.raises(UsageError) as e:
            start_server(ServeOptions("file:///nowhere", password="pw", selection=selection))
        assert "serve sends whole transactions" in str(e.value)
    with pytest.raises(UsageError):
        start_server(ServeOptions("file:///nowhere"))


def test_spool_keeps_a_big_transaction_on_disk():
    from replay.serve.feed import Spool
    spool = Spool(limit=10)
    events = [bytes([i]) * 6 for i in range(5)]
    for e in events:
        spool.append(e)
    assert spool.head == events[:1] and spool.file is not None
    assert list(spool) == events and list(spool) == events  # read again and again
    assert (spool[0], spool[-1], len(spool)) == (events[0], events[-1], 5)
    assert list(reversed(spool)) == events[::-1]
    with pytest.raises(IndexError):
        spool[2]
    spool.close()
    assert spool.file is None
