"""Server versions as the code reads them (pure): MySQL's calendar versions, MariaDB
11.x/12.x, and the "5.5.5-" a MariaDB server announces itself to clients with."""

from mysqlbackup.binlog.events import is_mariadb_version, parse_version


def test_versions_of_every_numbering_read_right():
    assert parse_version("26.10.0") == (26, 10, 0)
    assert parse_version("28.4.1-log") == (28, 4, 1)
    assert parse_version("9.7.4-2") == (9, 7, 4)
    assert parse_version("12.3.2-MariaDB") == (12, 3, 2)
    assert parse_version("11.8.9-MariaDB-0+deb13u1 from Debian-log") == (11, 8, 9)
    assert parse_version("5.5.5-10.11.6-MariaDB-0+deb12u1") == (10, 11, 6)
    assert parse_version("5.5.5-12.3.2-MariaDB") >= (11, 4, 0)
    assert parse_version("8.0.40") < parse_version("26.10.0") < parse_version("28.4.1")
    assert parse_version("5.6.4-m7-debug-log") == (5, 6, 4)
    assert is_mariadb_version("5.5.5-12.3.2-MariaDB") and not is_mariadb_version("26.10.0")
