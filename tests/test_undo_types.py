"""``mysqlbackup undo``, column type by column type on MariaDB 10.11 and MySQL 9.7: each
round-trips and its nearest other value, written since, is a conflict; keys out of the
table's order, in another collation, DECIMALs past 28 digits; which columns count as
generated."""


import pytest

from tests.undo_world import _archive, flavour_server, last_gtid, undo

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=["mariadb", "mysql"])
def one_server(request, tmp_path_factory):
    yield from flavour_server(request.param, tmp_path_factory)


PER_TYPE = [
    ("TINYINT", "-128", "0", "-127"),
    ("SMALLINT UNSIGNED", "65535", "0", "65534"),
    ("MEDIUMINT", "-8388608", "0", "-8388607"),
    ("INT", "2147483647", "0", "2147483646"),
    ("BIGINT UNSIGNED", "18446744073709551615", "0", "18446744073709551614"),
    ("FLOAT", "0.1", "0", "0.10000001"),
    ("DOUBLE", "0.1", "0", "0.10000000000000002"),
    ("DECIMAL(30,10)", "-12345678901234567890.0123456789", "0",
     "-12345678901234567890.0123456788"),
    ("DATE", "'0000-00-00'", "'2026-01-01'", "'0000-00-01'"),
    ("DATETIME(6)", "'1000-01-01 00:00:00.000001'", "'2026-01-01'",
     "'1000-01-01 00:00:00.000002'"),
    ("DATETIME", "'0000-00-00 00:00:00'", "'2026-01-01'", "'0000-00-00 00:00:01'"),
    ("TIME(3)", "'-838:59:58.999'", "'00:00:00'", "'-838:59:58.998'"),
    ("TIMESTAMP(2) NULL", "'2038-01-19 03:14:07.99'", "'2026-01-01'",
     "'2038-01-19 03:14:07.98'"),
    ("YEAR", "0", "2026", "2000"),
    ("CHAR(10)", "'Mixed '", "'x'", "'mixed '"),
    ("VARCHAR(20) CHARACTER SET latin1", "'caf\\xe9'", "'x'", "'cafe'"),
    ("BINARY(8)", "X'0100'", "X'02'", "X'0101'"),
    ("VARBINARY(10)", "X'00ff00'", "X'01'", "X'00ff'"),
    ("TEXT", "REPEAT('t', 60000)", "'x'", "CONCAT(REPEAT('t', 59999), 'T')"),
    ("BLOB", "X'00'", "NULL", "X'0000'"),
    ("ENUM('a','b','A ')", "'A '", "'a'", "'b'"),
    ("SET('x','y','z')", "''", "'x'", "'z'"),
    ("BIT(17)", "b'10000000000000001'", "0", "b'10000000000000011'"),
    ("JSON", "'{\"a\": [1, 2.5, \"x\"], \"b\": null}'", "'[]'", "'{\"a\": [1, 2.5, \"x\"]}'"),
    ("POINT", "POINT(1, 2)", "POINT(0, 0)", "POINT(1, 2.0000001)"),
    ("INET6", "'::ffff:1.2.3.4'", "'::'", "'::ffff:1.2.3.5'"),             # MariaDB
    ("UUID", "'123e4567-e89b-12d3-a456-426614174000'", "NULL",             # MariaDB
     "'123e4567-e89b-12d3-a456-426614174001'"),
    ("VECTOR(3)", "STRING_TO_VECTOR('[1,2,3]')", "STRING_TO_VECTOR('[0,0,0]')",  # MySQL
     "STRING_TO_VECTOR('[1,2,3.0000002]')"),
]


ONLY = {"INET6": "mariadb", "UUID": "mariadb", "VECTOR(3)": "mysql"}


@pytest.mark.parametrize("definition, value, bad, near", PER_TYPE,
                         ids=[t[0].split("(")[0].split()[0].lower() for t in PER_TYPE])
def test_each_type_round_trips_and_its_nearest_change_is_a_conflict(
        one_server, tmp_path, definition, value, bad, near):
    server = one_server
    flavor = "mysql" if hasattr(server, "current_binlog") else "mariadb"
    if ONLY.get(definition, flavor) != flavor:
        pytest.skip(f"{definition} is a type of {ONLY[definition]} only")
    server.execute("SET SESSION sql_mode = ''", "DROP TABLE IF EXISTS shop.t, shop.t_ref",
                   f"CREATE TABLE shop.t (id INT PRIMARY KEY, v {definition}) ENGINE=InnoDB",
                   f"INSERT INTO shop.t VALUES (1, {value}), (2, {value}), (3, {value})",
                   "CREATE TABLE shop.t_ref LIKE shop.t",
                   "INSERT INTO shop.t_ref SELECT * FROM shop.t")
    wanted = server.execute("CHECKSUM TABLE shop.t_ref")[0][1]
    server.execute("SET SESSION sql_mode = ''", "BEGIN", f"UPDATE shop.t SET v = {bad} "
                   "WHERE id = 1", "DELETE FROM shop.t WHERE id = 2",
                   f"INSERT INTO shop.t VALUES (4, {value})", "COMMIT")
    gtid = last_gtid(server)
    server.execute("SET SESSION sql_mode = ''", f"UPDATE shop.t SET v = {near} WHERE id = 4")
    if server.execute("SELECT COUNT(*) FROM shop.t a JOIN shop.t_ref b ON b.id = 1 WHERE "
                      "a.id = 4 AND a.v <=> b.v AND HEX(a.v) <=> HEX(b.v)")[0][0]:
        pytest.fail(f"{near} is stored as {value}: not a change")
    url = _archive(server, tmp_path)
    changed = undo(server, url, "--gtid", gtid)
    assert changed.returncode == 12, changed.stderr
    assert "shop.t (id=4): v expected " in changed.stderr
    server.execute("SET SESSION sql_mode = ''", f"UPDATE shop.t SET v = {value} WHERE id = 4")
    done = undo(server, url, "--gtid", gtid)
    assert done.returncode == 0, done.stderr
    assert server.execute("CHECKSUM TABLE shop.t")[0][1] == wanted


def test_composite_keys_collations_and_long_decimals(one_server, tmp_path):
    """A primary key whose columns are not in the table's order, a string key in a
    collation that is not its character set's default, DECIMAL keys that differ past 28
    digits, a zero TIMESTAMP in a table without a key."""
    server = one_server
    server.execute(
        "SET SESSION sql_mode = ''", "DROP TABLE IF EXISTS shop.ck, shop.ck_ref, shop.z",
        "CREATE TABLE shop.ck (a VARCHAR(10) CHARACTER SET utf8mb4 COLLATE "
        "utf8mb4_unicode_ci, b DECIMAL(32,0), v INT, PRIMARY KEY (b, a)) ENGINE=InnoDB",
        "INSERT INTO shop.ck VALUES ('x', 12345678901234567890123456789011, 1), "
        "('x', 12345678901234567890123456789012, 2), ('y', 1, 3), ('z', 2, 4)",
        "CREATE TABLE shop.ck_ref LIKE shop.ck", "INSERT INTO shop.ck_ref SELECT * FROM shop.ck",
        "CREATE TABLE shop.z (t TIMESTAMP NULL, v INT) ENGINE=InnoDB",
        "INSERT INTO shop.z VALUES ('0000-00-00 00:00:00', 1)")
    wanted = server.execute("CHECKSUM TABLE shop.ck_ref")[0][1]
    server.execute("SET SESSION sql_mode = ''", "BEGIN",
                   "UPDATE shop.ck SET v = 0 WHERE b > 100",
                   "DELETE FROM shop.ck WHERE a = 'y'", "UPDATE shop.z SET v = 2", "COMMIT")
    gtid = last_gtid(server)
    server.execute("UPDATE shop.ck SET v = 5 WHERE a = 'z'",
                   "UPDATE shop.ck_ref SET v = 5 WHERE a = 'z'")
    url = _archive(server, tmp_path)
    done = undo(server, url, "--gtid", gtid)
    assert done.returncode == 0, done.stderr
    assert server.execute("CHECKSUM TABLE shop.ck")[0][1] == \
        server.execute("CHECKSUM TABLE shop.ck_ref")[0][1]
    assert server.execute("SELECT v FROM shop.z") == ((1,),)
    assert wanted  # the reference existed before the bad transaction


@pytest.mark.parametrize("extra, generated", [
    ("VIRTUAL GENERATED", True), ("STORED GENERATED", True), ("PERSISTENT GENERATED", True),
    ("DEFAULT_GENERATED", False), ("DEFAULT_GENERATED on update CURRENT_TIMESTAMP", False),
    ("", False)])
def test_only_generated_columns_are_left_uncompared(extra, generated):
    from replay.undo.target import _column
    row = ("c", "datetime", "datetime", None, None, extra)
    assert _column(row, 18, b"\x00", False).generated is generated
