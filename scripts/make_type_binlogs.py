"""Write the ``types-*`` binlog files of tests/data/binlogs/: rows of every column type
MariaDB and MySQL write, made by this project's own throwaway servers, for the
differential test of the row decoders (``tests/test_rowdecode.py``), which then runs on
any clone.

Each file holds one table of every type (``COLUMNS``): extremes, zero dates, negative
times with fractions, empty and full SETs, BIT, GEOMETRY, JSON, text in latin1, gbk, ucs2
and utf8mb4, NULLs, TIMESTAMPs past 2038; inserts, updates and deletes in FULL, MINIMAL and NOBLOB row images;
then the same rows again with binlog_row_metadata MINIMAL (no column names, no
signedness: what ``replay --sql``'s comments show as ``@N``).

- ``types-mariadb-10.11.000001``: the host's mariadbd;
- ``types-mariadb-11.8.000001``: MariaDB 11.8 (.mariadb/tree);
- ``types-mysql-9.7.000001``: MySQL 9.7 (.mysql/tree).

Run once (the files are committed): .venv/bin/python scripts/make_type_binlogs.py
[mariadb-10.11] [mariadb-11.8] [mysql-9.7] (default: all three)
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mysqlbackup.sandbox import MariaDBSandbox  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                   "data", "binlogs")
COLUMNS = (
    "id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED, "
    "mi MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, "
    "bu BIGINT UNSIGNED, f FLOAT, d DOUBLE, dc DECIMAL(10,2), dz DECIMAL(65,30), "
    "d0 DECIMAL(5,0), dn DECIMAL(9,9), c CHAR(10), vc VARCHAR(300), "
    "vl VARCHAR(20) CHARACTER SET latin1, vg VARCHAR(10) CHARACTER SET gbk, "
    "vu VARCHAR(10) CHARACTER SET ucs2, bn BINARY(8), vb VARBINARY(100), tt TINYTEXT, "
    "tx TEXT, mt MEDIUMTEXT, lt LONGTEXT, tb TINYBLOB, bl BLOB, mb MEDIUMBLOB, lb LONGBLOB, "
    "dt DATE, dtt DATETIME, dt6 DATETIME(6), dt3 DATETIME(3), ts TIMESTAMP NULL, "
    "ts6 TIMESTAMP(6) NULL, tm TIME, tm6 TIME(6), tm1 TIME(1), yr YEAR, "
    "e ENUM('a','b','c'), s SET('x','y','z'), b1 BIT(1), b13 BIT(13), b64 BIT(64), "
    "g GEOMETRY, j JSON")
SPECIAL = "CONCAT('a', CHAR(10), CHAR(9), '''', CHAR(92), CHAR(0), 'z')"
ROWS = [
    [1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
     -9223372036854775808, 18446744073709551615, 1.5, "-2.25e300", "-12345678.91",
     "-12345678901234567890123456789012345.123456789012345678901234567890", -99999,
     "-0.999999999", "'char'", "REPEAT('v', 300)", "CONVERT(x'636166e9' USING latin1)",
     "CONVERT(x'd6d0' USING gbk)", "'uc'", "x'62696e00'", "x'00ff10'", "'tiny'", "'text'",
     "'medium'", "'long'", "x'01'", "x'0203'", "x'04'", "x'05'", "'2024-02-29'",
     "'1000-01-01 00:00:00'", "'9999-12-31 23:59:59.999999'", "'2026-11-28 01:02:03.004'",
     "'1970-01-01 00:00:01'", "'2038-01-19 03:14:07.999999'", "'-838:59:59'",
     "'-12:34:56.789012'", "'-00:00:00.5'", 1901, "'c'", "'x,z'", "b'1'",
     "b'1010101010101'", "b'" + "1" * 64 + "'", "ST_GeomFromText('POINT(1 2)')",
     """'{"a": [1, 2.5, "x", null, true], "b": {"c": -3}}'"""],
    [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "''", "''", "''", "''", "''", "''",
     "''", "''", "''", "''", "''", "''", "''", "''", "''", "'0000-00-00'",
     "'0000-00-00 00:00:00'", "'0000-00-00 00:00:00'", "'2000-00-00 00:00:00'",
     "'0000-00-00 00:00:00'", "'0000-00-00 00:00:00'", "'00:00:00'", "'838:59:59.000000'",
     "'00:00:00.1'", 0, "''", "''", "b'0'", "b'0'", "b'0'", "NULL", """'"str"'"""],
    [3] + ["NULL"] * 48,
    [4, 127, 1, 32767, 1, 8388607, 1, 2147483647, 1, 9223372036854775807, 1, -0.1,
     3.141592653589793, 0.05, "0.000000000000000000000000000001", 12345, "0.000000001",
     SPECIAL, "CONVERT(x'656d6f6a6920f09f9880' USING utf8mb4)", "NULL", "NULL", "NULL",
     "x'66756c6c00000000'", "''", "NULL", SPECIAL, "NULL", "REPEAT('L', 300)",
     "NULL", "x'00'", "NULL", "NULL", "'2000-01-01'", "'2000-01-01 12:00:00'",
     "'2000-01-01 12:00:00.000001'", "'2000-01-01 12:00:00.1'", "'2000-01-01 00:00:00'",
     "'2000-01-01 00:00:00.5'", "'12:00:00'", "'00:00:00.000001'", "'-01:00:00.9'", 2155,
     "'a'", "'x,y,z'", "b'0'", "b'1000000000000'", "b'1'",
     "ST_GeomFromText('LINESTRING(0 0,1 1)')", "'[]'"],
]
SESSION = ["SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'"]


def values(row, first=None):
    """The SQL tuple of a row (its id replaced by ``first`` when given)."""
    items = [str(v) for v in row]
    if first is not None:
        items[0] = str(first)
    return "(" + ", ".join(items) + ")"


WORK = [
    "CREATE DATABASE IF NOT EXISTS ty", f"CREATE TABLE ty.a ({COLUMNS})",
    *[f"INSERT INTO ty.a VALUES {values(row)}" for row in ROWS],
    "UPDATE ty.a SET dc = dc + 1, vc = 'changed', j = '{}' WHERE id IN (1, 4)",
    # past 2038: MariaDB 11.5+ stores it (up to 2106), the others a zero TIMESTAMP
    "INSERT INTO ty.a (id, ts, ts6) VALUES (5, '2040-01-01 00:00:00', "
    "'2100-06-01 12:00:00.25')",
    "SET SESSION binlog_row_image = 'MINIMAL'",
    "UPDATE ty.a SET tm6 = '-00:00:01.25', e = 'b' WHERE id = 1",
    "DELETE FROM ty.a WHERE id = 2",
    "SET SESSION binlog_row_image = 'NOBLOB'",
    "UPDATE ty.a SET bl = x'ff', ti = 5 WHERE id = 4",
    "SET SESSION binlog_row_image = 'FULL'",
    "DELETE FROM ty.a WHERE id = 3",
    "SET GLOBAL binlog_row_metadata = 'MINIMAL'",
    *[f"INSERT INTO ty.a VALUES {values(row, 10 + row[0])}" for row in ROWS],
    "UPDATE ty.a SET s = '', e = 'c' WHERE id > 10",
    "SET GLOBAL binlog_row_metadata = 'FULL'",
]


def types_file(server, name):
    """Run ``WORK`` on ``server`` in a binlog file of its own and keep it as ``name``."""
    server.execute("SET GLOBAL binlog_row_metadata = 'FULL'", "FLUSH BINARY LOGS")
    first = server.binlog_files()[-1]
    conn = server.root()
    with conn.cursor() as cur:
        for sql in SESSION + WORK:
            cur.execute(sql)
    conn.close()
    server.execute("FLUSH BINARY LOGS")
    shutil.copyfile(server.binlog_path(first), os.path.join(OUT, name))


def main(which):
    from mysqlbackup.sandbox.mysql import MySQLSandbox, why_no_mysql
    from mysqlbackup.sandbox.tree import MariaDBTreeSandbox
    assert all(len(row) == len(ROWS[0]) for row in ROWS)
    if "mariadb-10.11" in which:
        with MariaDBSandbox(semi_sync=False) as server:
            types_file(server, "types-mariadb-10.11.000001")
    if "mariadb-11.8" in which:
        with MariaDBTreeSandbox(semi_sync=False) as server:
            types_file(server, "types-mariadb-11.8.000001")
    if "mysql-9.7" in which:
        problem = why_no_mysql()
        if problem:
            raise SystemExit(f"no MySQL server: {problem}")
        with MySQLSandbox(server_id=1, semi_sync=False, gtid_mode="ON") as server:
            types_file(server, "types-mysql-9.7.000001")
    for name in sorted(os.listdir(OUT)):
        print(name, os.path.getsize(os.path.join(OUT, name)))


if __name__ == "__main__":
    main(sys.argv[1:] or ["mariadb-10.11", "mariadb-11.8", "mysql-9.7"])
