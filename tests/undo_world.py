"""What the tests of ``mysqlbackup undo`` share: the tables (every column type the check
compares; NULLs, zero dates, negative TIME, a BIT, a SET), the bad transaction and the
later writes, a twin table of each that gets every statement but the bad one, a file://
archive of a server's binlogs, and the module-scoped servers."""

import shutil

import pytest

from mysqlbackup.binlog.gtid import MysqlGtidSet
from tests.helpers import current_binlog, module_primary, run_cli


TYPES = ("id INT NOT NULL PRIMARY KEY, ti TINYINT, su SMALLINT UNSIGNED, mi MEDIUMINT, "
         "bu BIGINT UNSIGNED, f FLOAT, d DOUBLE, de DECIMAL(20,6), dt DATETIME(3), "
         "da DATE, tm TIME(2), ts TIMESTAMP(6) NULL, y YEAR, ch CHAR(5), "
         "vc VARCHAR(300) CHARACTER SET latin1, bi BINARY(6), vb VARBINARY(20), tx TEXT, "
         "bl BLOB, en ENUM('a','b','c'), st SET('x','y','z'), bt BIT(10), js JSON, "
         "gen INT AS (id * 2) VIRTUAL")

COLUMNS = ("id, ti, su, mi, bu, f, d, de, dt, da, tm, ts, y, ch, vc, bi, vb, tx, bl, en, st, "
           "bt, js")

def row(i):
    return (f"({i}, {i % 128 - 64}, {i * 300}, {-i * 1000}, {18446744073709551615 - i}, "
            f"{i}.1, {i}.000001, {i}.123456, '2026-01-0{i % 9 + 1} 10:00:0{i % 10}.5{i % 10}', "
            f"{'0000-00-00' if i % 7 == 0 else '2026-02-28'}, '-{i}:30:00.25', "
            f"{'NULL' if i % 5 == 0 else f'FROM_UNIXTIME({1700000000 + i})'}, {1990 + i % 50}, "
            f"'c{i}', 'caf\\xe9 {i}', X'0102', X'00ff{i:02x}', 'text {i}', X'deadbeef00', "
            f"'{'abc'[i % 3]}', 'x,z', b'101{i % 2}', '{{\"k\": {i}, \"s\": \"v\"}}')")

LATER = ["UPDATE shop.items SET tx = 'later', f = 0.3 WHERE id BETWEEN 31 AND 40",
         "INSERT INTO shop.items (id, tx) VALUES (100, 'new')",
         "DELETE FROM shop.items WHERE id = 39",
         "INSERT INTO shop.nokey VALUES (9, 'later')"]

BAD = ["BEGIN",
       "UPDATE shop.items SET de = 0, tx = NULL, bl = X'00', js = '[]' WHERE id <= 10",
       "DELETE FROM shop.items WHERE id BETWEEN 11 AND 20",
       "INSERT INTO shop.items (id, tx) VALUES (50, 'bad'), (51, 'bad')",
       "UPDATE shop.items SET id = id + 1000 WHERE id = 21",
       "DELETE FROM shop.nokey WHERE k <= 2",
       "UPDATE shop.nokey SET v = 'bad' WHERE k = 3",
       "COMMIT"]

def shop_server(tmp_path_factory):
    """A module's MariaDB 10.11 primary with a ``shop`` schema, permissive sql_mode
    (yields it; a module's ``shop`` fixture yields from it)."""
    server = module_primary(tmp_path_factory, "undo",
                            "SET GLOBAL sql_mode = ''",
                            "CREATE DATABASE shop")
    try:
        yield server
    finally:
        server.stop(remove=True)


def _setup(server):
    server.execute(
        "SET SESSION sql_mode = ''",
        "DROP TABLE IF EXISTS shop.items, shop.items_ref, shop.nokey, shop.nokey_ref",
        f"CREATE TABLE shop.items ({TYPES}) ENGINE=InnoDB",
        f"INSERT INTO shop.items ({COLUMNS}) VALUES " + ", ".join(row(i) for i in range(1, 41)),
        "CREATE TABLE shop.nokey (k INT, v VARCHAR(20)) ENGINE=InnoDB",
        "INSERT INTO shop.nokey VALUES (1, 'a'), (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
        "CREATE TABLE shop.items_ref LIKE shop.items",
        f"INSERT INTO shop.items_ref ({COLUMNS}) SELECT {COLUMNS} FROM shop.items",
        "CREATE TABLE shop.nokey_ref LIKE shop.nokey",
        "INSERT INTO shop.nokey_ref SELECT * FROM shop.nokey")

def last_gtid(server):
    """The GTID of the server's last transaction (MariaDB or MySQL)."""
    if hasattr(server, "current_binlog"):
        uuid = server.execute("SELECT @@server_uuid")[0][0]
        executed = server.execute("SELECT @@gtid_executed")[0][0].replace("\n", "")
        if not executed:
            return None  # gtid_mode=OFF
        return f"{uuid}:{MysqlGtidSet.parse(executed).sids[uuid][-1][1] - 1}"
    return server.execute("SELECT @@gtid_binlog_pos")[0][0].split(",")[-1]

def _bad(server):
    """Run the bad transaction; its GTID."""
    server.execute("SET SESSION sql_mode = ''", *BAD)
    return last_gtid(server)

def _later(server):
    twin = [s.replace("shop.items ", "shop.items_ref ").replace("shop.nokey ",
                                                                  "shop.nokey_ref ")
            for s in LATER]
    server.execute("SET SESSION sql_mode = ''", *LATER, *twin)

def _archive(server, tmp_path, *import_args):
    """A file:// archive of the server's binlogs (imported with ``import_args``)."""
    server.execute("FLUSH BINARY LOGS")
    folder = tmp_path / "binlogs"
    folder.mkdir()
    newest = current_binlog(server)
    for name in [n for n in server.binlog_files() if n != newest]:
        shutil.copyfile(server.binlog_path(name), folder / name)
    url = f"file://{tmp_path / 'archive'}"
    done = run_cli("archive", "import", str(folder), "--archive", url, "--source-name", "db1",
                   *import_args)
    assert done.returncode == 0, done.stderr
    return url

def _checksums(server):
    rows = server.execute("CHECKSUM TABLE shop.items, shop.items_ref, shop.nokey, "
                          "shop.nokey_ref")
    return {name.split(".")[-1]: value for name, value in rows}

def undo(server, url, *args):
    user, password = getattr(server, "admin", ("root", ""))  # 11.8: root by socket only
    return run_cli("undo", "--archive", url, "--target", f"mysql://{user}@127.0.0.1:"
                   f"{server.port}", *args, password=password)

PEAK = ("import resource, runpy, sys\n"
        "sys.argv = ['mysqlbackup'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('mysqlbackup', run_name='__main__')\n"
        "finally:\n"
        "    print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
        "file=sys.stderr)\n")

def flavour_server(flavour, tmp_path_factory):
    """A module's MariaDB 10.11 or MySQL 9.7 server with a ``shop`` schema, permissive
    sql_mode (yields it); skips where the MySQL tree cannot run, saying why."""
    if flavour == "mariadb":
        server = module_primary(tmp_path_factory, "undotypes")
    else:
        from mysqlbackup.sandbox.mysql import MySQLSandbox, why_no_mysql
        problem = why_no_mysql()
        if problem:
            pytest.skip(problem)
        server = MySQLSandbox(semi_sync_timeout_ms=1000, gtid_mode="ON").start()
    server.execute("SET GLOBAL sql_mode = ''", "CREATE DATABASE shop")
    yield server
    server.stop(remove=True)
