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
