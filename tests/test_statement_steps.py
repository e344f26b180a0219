"""A logged statement's context as SQL (pure): user variables of every type, DECIMAL's
binary form, the session's SETs with the defaults an event leaves out, an event with no
SQL form refused by name, an INCIDENT marker as the selection judges it, and the --sql
file's end (its name when the replay ends well, INCOMPLETE when it does not)."""

import struct
from decimal import Decimal

import pytest

from mysqlbackup.binlog import context as cx
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.query_vars import RawQuery, session_statements
from replay.job.decoding.transaction import Transaction
from replay.job.sinks.sqlfile import INCOMPLETE, SqlFileSink
from replay.job.sinks.statements import UnappliableEvent, transaction_steps, user_var_sql
from tests.helpers import make_event, selection_of


def user_var(name, kind=None, charset=0, value=b"", flags=None):
    body = struct.pack("<I", len(name)) + name
    if kind is None:
        body += b"\x01"
    else:
        body += b"\x00" + struct.pack("<BII", kind, charset, len(value)) + value
        body += b"" if flags is None else bytes([flags])
    return make_event(ev.USER_VAR, body, 100)


def test_user_variables_of_every_type_are_set_as_mysqlbinlog_prints_them():
    def sql(event):
        return user_var_sql(cx.parse_user_var(event, True))
    assert sql(user_var(b"s", cx.STRING_RESULT, 33, "é".encode())) == \
        "SET @`s`:=_utf8mb3 X'C3A9' COLLATE `utf8mb3_general_ci`"
    assert sql(user_var(b"b`q", cx.STRING_RESULT, 63, b"\x00\xff")) == \
        "SET @`b``q`:=_binary X'00FF' COLLATE `binary`"
    assert sql(user_var(b"n")) == "SET @`n`:=NULL"
    assert sql(user_var(b"r", cx.REAL_RESULT, 0, struct.pack("<d", 0.1))) == "SET @`r`:=0.1e0"
    assert sql(user_var(b"e", cx.REAL_RESULT, 0, struct.pack("<d", 1e300))) == \
        "SET @`e`:=1e+300"
    assert sql(user_var(b"i", cx.INT_RESULT, 0, struct.pack("<q", -5), 0)) == "SET @`i`:=-5"
    assert sql(user_var(b"u", cx.INT_RESULT, 0, struct.pack("<Q", 2 ** 64 - 1),
                        cx.UNSIGNED_F)) == "SET @`u`:=18446744073709551615"
    # DECIMAL(8,6) 12.345678: precision and scale, then MySQL's binary form
    assert sql(user_var(b"d", cx.DECIMAL_RESULT, 0, bytes([8, 6]) +
                        bytes.fromhex("8C05464E"))) == "SET @`d`:=12.345678"
    # MariaDB 11's UCA 14.0.0 collations: by rule (utf8mb4_uca1400_ai_ci is 2304)
    assert sql(user_var(b"m", cx.STRING_RESULT, 2304, b"a")) == \
        "SET @`m`:=_utf8mb4 X'61' COLLATE `utf8mb4_uca1400_ai_ci`"
    assert sql(user_var(b"m", cx.STRING_RESULT, 2048 + (4 << 8) + (24 << 3) + 7, b"a")) == \
        "SET @`m`:=_utf32 X'61' COLLATE `utf32_uca1400_croatian_nopad_as_cs`"
    with pytest.raises(UnappliableEvent, match="collation 4000"):
        sql(user_var(b"x", cx.STRING_RESULT, 4000, b"a"))


def test_binary_decimals_decode_as_mysql_packs_them():
    assert cx.decimal_from_bin(bytes.fromhex("810DFB38D204D2"), 14, 4) == \
        Decimal("1234567890.1234")
    assert cx.decimal_from_bin(bytes([0x7E, 0xF2, 0x04, 0xC7, 0x2D, 0xFB, 0x2D]), 14, 4) == \
        Decimal("-1234567890.1234")
    assert cx.decimal_from_bin(bytes.fromhex("80000000"), 4, 2) == Decimal("0.00")


def test_a_session_is_set_whole_so_no_other_sessions_setting_carries_over():
    plain = RawQuery("db", b"INSERT", {"flags2": 0, "sql_mode": 0, "charset": (33, 33, 8)},
                     1700000000, 42)
    sets = session_statements(plain, mariadb=True)
    assert sets[:2] == ["SET TIMESTAMP=1700000000", "SET @@session.pseudo_thread_id=42"]
    assert "SET @@session.auto_increment_increment=1, @@session.auto_increment_offset=1" \
        in sets  # the event leaves the defaults out: the last session's must not stay
    assert "SET @@session.lc_time_names=0" in sets
    assert "SET @@session.collation_database=DEFAULT" in sets
    assert sets[2] == ("SET @@session.foreign_key_checks=1, @@session.sql_auto_is_null=0, "
                       "@@session.unique_checks=1, @@session.check_constraint_checks=1, "
                       "@@session.explicit_defaults_for_timestamp=0, "
                       "@@session.sql_if_exists=0, "
                       "@@session.system_versioning_insert_history=0")
    mysql = RawQuery("db", b"CREATE", {"flags2": 1 << 26, "auto_increment": (7, 3),
                                       "explicit_defaults_for_timestamp": 1}, 1, 9)
    sets = session_statements(mysql, mariadb=False)
    assert sets[2] == ("SET @@session.foreign_key_checks=0, @@session.sql_auto_is_null=0, "
                       "@@session.unique_checks=1")
    assert "SET @@session.auto_increment_increment=7, @@session.auto_increment_offset=3" \
        in sets and sets[-1] == "SET @@session.explicit_defaults_for_timestamp=1"


def fde():
    """A MariaDB 10.11 format description: post-headers of 13 bytes, CRC32."""
    body = (struct.pack("<H", 4) + b"10.11.9-MariaDB".ljust(50, b"\0") + struct.pack("<I", 0)
            + bytes([ev.HEADER_LEN]) + bytes([13] * 40) + b"\x01")
    return ev.parse_format_description(make_event(ev.FORMAT_DESCRIPTION, body, 0))


def test_an_event_with_no_sql_form_is_refused_naming_the_transaction():
    trx = Transaction(file="binlog.000007", start=1234, end=2000, gtid="0-1-5",
                      events=[make_event(ev.QUERY, b"\0" * 13 + b"\0BEGIN", 10),
                              make_event(172, b"\0" * 20, 50)])
    ignorable = make_event(200, b"\0" * 8, 40, flags=0x80)  # LOG_EVENT_IGNORABLE_F: skipped
    assert transaction_steps(Transaction(file="b", start=4, end=9, events=[ignorable]), fde(),
                             True) == []
    with pytest.raises(UnappliableEvent, match=r"^transaction 0-1-5 at binlog\.000007:1234 "
                       r"holds a TYPE_172 event, which the statements way cannot apply: use "
                       r"--apply native"):
        transaction_steps(trx, fde(), True)


def test_an_incident_is_a_gap_where_the_replay_reaches_it_and_nothing_past_the_stop():
    incident = Transaction(file="b.000002", start=900, end=930, commit_ts=100,
                           incident="INCIDENT event (LOST_EVENTS)")
    assert selection_of().decide(incident) == (
        "gap", "INCIDENT event (LOST_EVENTS): the source lost events here; resync required")
    # a stop datetime at or before it: the replay stops before, and never judges it
    assert selection_of(stop_datetime="1970-01-01T00:01:40Z").decide(incident)[0] == "stop"


def test_the_sql_file_takes_its_name_only_when_the_replay_ends_well(tmp_path):
    done = SqlFileSink(str(tmp_path / "ok.sql")).open("db1")
    done.close()
    done.finish({})
    text = (tmp_path / "ok.sql").read_text()
    assert "DELIMITER /*!*/;\n" in text and text.endswith("DELIMITER ;\n")
    assert not (tmp_path / "ok.sql.partial").exists()
    failed = SqlFileSink(str(tmp_path / "bad.sql")).open("db1")
    failed.failed()
    failed.close()
    assert not (tmp_path / "bad.sql").exists()
    assert (tmp_path / "bad.sql.partial").read_text().endswith(INCOMPLETE)
