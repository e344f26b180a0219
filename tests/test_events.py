"""Pure event parsing against real binlog files from ../shared/binlogs."""

import struct

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import iter_events, read_fde
from mysqlbackup.errors import CorruptBinlog
from tests.helpers import file_events, make_event, read


def types(path):
    return [ev.event_name(e[4]) for e in file_events(path)]


def test_fde_of_mariadb_file(shared_binlog):
    _, fde = read_fde(read(shared_binlog("rust_mysql_common/mariadb-bin.000001")))
    assert fde.binlog_version == 4
    assert fde.server_version.startswith("10.5.15-MariaDB")
    assert fde.checksum_alg == ev.CHECKSUM_CRC32


def test_fde_of_pre_checksum_mysql_51(shared_binlog):
    _, fde = read_fde(read(shared_binlog("rust_mysql_common/bug40482-bin.000001")))
    assert fde.server_version == "5.1.30-debug-log"
    assert fde.checksum_alg is None


def test_fde_checksum_off_byte(shared_binlog):
    _, fde = read_fde(read(shared_binlog("rust_mysql_common/bug11747887-bin.000003")))
    assert fde.checksum_alg == ev.CHECKSUM_OFF


def test_event_types_of_gh_ost_file(shared_binlog):
    names = types(shared_binlog("gh-ost/mysql-bin.000066"))
    assert len(names) == 59
    assert names.count("XID") == 11 and names.count("TABLE_MAP") == 16
    assert names[0] == "FORMAT_DESCRIPTION" and names[-1] == "ROTATE"


def test_crc_of_in_use_fde_is_checked_with_flag_cleared(shared_binlog):
    data = read(shared_binlog("rust_mysql_common/json.binlog.000001"))
    fde_event, _ = read_fde(data)
    assert fde_event[17] & ev.LOG_EVENT_BINLOG_IN_USE_F
    assert ev.crc_ok(fde_event)


def test_incident_event_of_real_file(shared_binlog):
    events = file_events(shared_binlog("rust_mysql_common/bug40482-bin.000001"))
    incident = [e for e in events if e[4] == ev.INCIDENT][0]
    number, name, message = ev.parse_incident(incident, checksum=False)
    # MySQL's test data for bug 40482 carries an invalid incident number on purpose
    assert (number, name, message) == (66, "INCIDENT_66", "")


def test_lost_events_incident_crafted():
    body = (1).to_bytes(2, "little") + bytes([11]) + b"lost events"
    number, name, message = ev.parse_incident(make_event(ev.INCIDENT, body, 100), True)
    assert (number, name, message) == (1, "LOST_EVENTS", "lost events")


def test_crc_mismatch_names_offset(shared_binlog):
    data = bytearray(read(shared_binlog("gh-ost/mysql-bin.000066")))
    data[300] ^= 0xFF
    with pytest.raises(CorruptBinlog, match=r"CRC32 mismatch") as err:
        list(iter_events(data, 4, None, file="x"))
    assert err.value.offset is not None and err.value.offset <= 300


def test_torn_event_is_reported_with_offset(shared_binlog):
    whole = read(shared_binlog("gh-ost/mysql-bin.000066"))
    last_offset = list(iter_events(whole, 4, None))[-1][0]
    with pytest.raises(CorruptBinlog, match="torn event") as err:
        list(iter_events(whole[:-10], 4, None, file="f"))
    assert err.value.offset == last_offset


def test_not_a_binlog(shared_binlog):
    with pytest.raises(CorruptBinlog, match="not a binlog"):
        read_fde(read(shared_binlog("mysql-binlog-connector-rust/non-binlog")))


def test_corrupt_query_lengths_are_refused(shared_binlog):
    data = read(shared_binlog("rust_mysql_common/corrupt-relay-bin.000624"))
    fde = None
    with pytest.raises(CorruptBinlog, match="overflow"):
        for off, event in iter_events(data, 4, None, check_log_pos=False):
            if event[4] == ev.FORMAT_DESCRIPTION:
                fde = ev.parse_format_description(event)
            if event[4] == ev.QUERY:
                ev.parse_query(event, False, fde)


def test_rotate_and_query_bodies():
    rot = make_event(ev.ROTATE, (4).to_bytes(8, "little") + b"binlog.000002", 100)
    assert ev.parse_rotate(rot, True) == (4, "binlog.000002")
    body = bytes(13) + b"db\0BEGIN"
    body = body[:8] + b"\x02" + body[9:]
    q = make_event(ev.QUERY, body, 100)
    assert ev.parse_query(q, True) == ("db", "BEGIN")


def test_parse_version():
    assert ev.parse_version("5.6.4-m7-debug-log") == (5, 6, 4)
    assert ev.parse_version("10.11.19-MariaDB-0+deb12u1-log") == (10, 11, 19)


def test_statement_end_flag_is_set_with_a_fresh_crc(shared_binlog):
    import zlib
    data = read(shared_binlog("gh-ost/mysql-bin.000066"))
    events = [bytes(e) for _, e in iter_events(data, 4, None, file="mysql-bin.000066")]
    fde = ev.parse_format_description(events[0])
    ended = next(e for e in events if e[4] in ev.ROWS_EVENTS and ev.rows_statement_end(e, fde))
    at = ev.HEADER_LEN + 6  # v2 rows: table_id (6), then the flags
    cleared = bytearray(ended)
    cleared[at] &= ~ev.STMT_END_F & 0xFF
    cleared[-4:] = struct.pack("<I", zlib.crc32(bytes(cleared[:-4])))
    assert not ev.rows_statement_end(bytes(cleared), fde) and ev.crc_ok(bytes(cleared))
    assert ev.with_statement_end(bytes(cleared), fde, checksum=True) == ended
