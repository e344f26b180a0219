import pytest

from mysqlbackup.binlog.gtid import MariaGtidPos, MysqlGtidSet, guess_flavor, parse_gtid_set
from mysqlbackup.errors import UsageError

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_maria_round_trip_and_add():
    pos = MariaGtidPos.parse("0-1-42,1-7-3")
    pos.add(0, 1, 43)
    pos.add(0, 1, 10)  # older: ignored
    assert str(pos) == "0-1-43,1-7-3"
    assert pos.contains(0, 1, 43) and not pos.contains(0, 1, 44) and not pos.contains(2, 1, 1)


@pytest.mark.parametrize("bad", ["0-1", "a-b-c", "0-1-2,0-1-3"])
def test_maria_bad(bad):
    with pytest.raises(UsageError):
        MariaGtidPos.parse(bad)


def test_mysql_merge_and_format():
    s = MysqlGtidSet.parse(f"{UUID.upper()}:1-5:7")
    s.add(UUID, 6)
    assert str(s) == f"{UUID}:1-7"
    s.add(UUID, 9)
    assert str(s) == f"{UUID}:1-7:9"
    assert s.contains(UUID, 3) and not s.contains(UUID, 8)


def test_flavor_guess():
    assert guess_flavor("0-1-5") == "mariadb"
    assert guess_flavor(f"{UUID}:1-3") == "mysql"
    assert parse_gtid_set("", "mariadb").is_empty()


TAGGED_UUID = "cdf976df-e97b-11f1-9636-02fc00000001"
# a GTID_TAGGED event's body as MySQL 9.7.4 wrote it (uuid above, tag nightly, gno 1)
TAGGED_BODY = bytes.fromhex(
    "0278000000023503e503ec7d03a503f622c50359026c04f103000000020404060e6e696768746c79"
    "08080a0c0c7ff041fa922a6106107d041283120b")


def test_mysql_tagged_sets_parse_and_print_as_mysql_does():
    text = f"{TAGGED_UUID}:1-3:abc:5:nightly:1-2"
    gtids = MysqlGtidSet.parse(text)
    assert str(gtids) == text
    assert gtids.contains(f"{TAGGED_UUID}:nightly", 2) and not gtids.contains(TAGGED_UUID, 5)
    joined = MysqlGtidSet.parse(f"{TAGGED_UUID}:1-216,{TAGGED_UUID}:NIGHTLY:1")
    assert str(joined) == f"{TAGGED_UUID}:1-216:nightly:1"
    for bad in (f"{TAGGED_UUID}:nightly", f"{TAGGED_UUID}:1-3:nightly", f"{TAGGED_UUID}:-x"):
        with pytest.raises(UsageError):
            MysqlGtidSet.parse(bad)


def test_a_tagged_gtid_event_and_a_tagged_set_for_the_dump_decode():
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.source.protocol import encode_mysql_gtid_set
    event = bytes(ev.HEADER_LEN) + TAGGED_BODY + bytes(4)
    assert ev.parse_mysql_gtid_tagged(event, True) == (f"{TAGGED_UUID}:nightly", 1)
    gtids = MysqlGtidSet.parse(f"{TAGGED_UUID}:1-3:nightly:1-2")
    encoded = bytes(ev.HEADER_LEN) + encode_mysql_gtid_set(gtids) + bytes(4)
    assert ev.parse_previous_gtids(encoded, True) == gtids.sids  # the same binary form
    for value in (0, 127, 128, 2 ** 20, 2 ** 56 - 1, 2 ** 56, 2 ** 64 - 1):
        raw = ev.varlen_bytes(value)
        assert ev._varlen(raw, 0) == (value, len(raw))


def test_one_containment_for_both_flavors():
    from mysqlbackup.binlog.gtid import MariaGtidPos, MysqlGtidSet, covers
    u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    big, small = MysqlGtidSet.parse(f"{u}:1-10:20,{u}:night:1-2"), MysqlGtidSet.parse(f"{u}:3-5")
    assert covers(big, small) and not covers(small, big)
    assert str(big.subtract(MysqlGtidSet.parse(f"{u}:2-4:night:1"))) == f"{u}:1:5-10:20:night:2"
    assert covers(big, MysqlGtidSet()) and not covers(small, MysqlGtidSet.parse(f"{u}:5-6"))
    maria = MariaGtidPos.parse("0-1-9,1-2-3")
    assert covers(maria, MariaGtidPos.parse("0-1-5")) and covers(maria, MariaGtidPos())
    assert not covers(maria, MariaGtidPos.parse("1-2-4")) and not covers(maria, small)

