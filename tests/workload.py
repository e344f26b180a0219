"""A broad workload such as real applications write, in sections, for both engines
(the fidelity suite's source: ``tests/fidelity.py``).

``SCHEMA`` runs before the base; then each section of ``sections(flavor)`` runs and
the source is quiet at its end (a checkpoint). A step is ``(session, sql)``: sessions
are connections of their own (their session variables, temporary tables and
CONNECTION_ID() stay theirs), ``("close", name)`` ends one (the source logs the DROP
of its temporary tables then), ``("load", name, sql, data)`` runs a LOAD DATA LOCAL
INFILE of ``data``, ``("mark", name)`` is a point the runner notes (``Mark``: the GTID
that comes next, the rows of ``f.types`` then) for the change table's test.
"""

import os
import tempfile
import time

import pymysql


def edge_rows(flavor):
    """INSERTs of every column type at its edges (the ``types`` table)."""
    json_doc = '{"a": [1, 2.5, "x\\\\u00e9", null, true], "b": {"c": -1e300}}'
    rows = [
        # minimum values
        "(1, -128, 0, -32768, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, "
        "'-99999999999999999999999999999999999.999999999999999999999999999999', -99999999.99, "
        "-3.40282e38, -1.7976931348623157e308, b'0', b'0', '1000-01-01', "
        "'1000-01-01 00:00:00.000000', '1000-01-01 00:00:00', '1970-01-01 00:00:01.000000', "
        "'-838:59:59.000000', '-838:59:59', 1901, '', '', x'', x'', '', x'', 'a', '', "
        f"'{json_doc}', 'é', 'ü😀')",
        # maximum values
        "(2, 127, 255, 32767, 8388607, 16777215, 2147483647, 4294967295, "
        "9223372036854775807, 18446744073709551615, "
        "'99999999999999999999999999999999999.999999999999999999999999999999', 99999999.99, "
        "3.40282e38, 1.7976931348623157e308, b'1111111111111111111111111111111111111111111111"
        "111111111111111111', b'1', '9999-12-31', '9999-12-31 23:59:59.999999', "
        "'9999-12-31 23:59:59', '2038-01-19 03:14:07.999999', '838:59:59.000000', "
        "'838:59:59', 2155, 'zzzzzzzzzz', REPEAT('v', 300), x'ffffffffffffffff', "
        "REPEAT(x'ff', 20), REPEAT('t', 70000), REPEAT(x'00ff', 30000), 'c', 'x,y,z', "
        "'[]', 'ÿ', REPEAT('😀', 20))",
        # the values easy to get wrong: trailing zero bytes, negative fractions, zero dates
        "(3, 0, 0, 0, 0, 0, 0, 0, 0, 0, '0.000000000000000000000000000001', -0.01, "
        "1.17549e-38, 2.2250738585072014e-308, b'1000000000000000000000000000000000000000000"
        "000000000000000000000', b'0', '0000-00-00', '0000-00-00 00:00:00.000000', "
        "'0000-00-00 00:00:00', '0000-00-00 00:00:00.000000', '-00:00:00.000001', "
        "'-12:34:56', 0, 'a ', 'trailing  ', x'00010000ff000000', x'0000', 'line\\nbreak', "
        "x'000000', 'b', 'y', '\"string\"', 'a\\'b', '\\\\')",
        "(4, 1, 1, 1, 1, 1, 1, 1, 1, 1, '1.5', 1.5, 0.1, 0.1, b'101', b'1', '2024-02-29', "
        "'2024-02-29 12:34:56.789012', '2024-02-29 12:34:56', '2024-02-29 12:34:56.789012', "
        "'-12:34:56.789012', '12:34:56', 2024, 'x', 'x', x'0000000000000000', x'00', 'x', "
        "x'00', 'a', 'x,z', 'null', 'x', 'x')",
        "(5" + ", NULL" * 33 + ")",
    ]
    return [("s1", "SET SESSION sql_mode = ''")] + [
        ("s1", f"INSERT INTO f.types VALUES {row}") for row in rows] + [
        ("s1", "SET SESSION sql_mode = DEFAULT")]


def types_table(flavor):
    json_type = "JSON" if flavor == "mysql" else "LONGTEXT"
    return (
        "CREATE TABLE f.types (id INT PRIMARY KEY, ti TINYINT, tiu TINYINT UNSIGNED, "
        "si SMALLINT, mi MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, "
        "bu BIGINT UNSIGNED, dc DECIMAL(65,30), dc2 DECIMAL(10,2), fl FLOAT, db DOUBLE, "
        "bt BIT(64), b1 BIT(1), d DATE, dt DATETIME(6), dt0 DATETIME, ts TIMESTAMP(6) NULL, "
        "t TIME(6), t0 TIME, y YEAR, c CHAR(10), vc VARCHAR(300), bn BINARY(8), "
        "vb VARBINARY(20), tx MEDIUMTEXT, bl MEDIUMBLOB, e ENUM('a','b','c'), "
        f"st SET('x','y','z'), j {json_type}, l1 VARCHAR(20) CHARACTER SET latin1, "
        "u8 VARCHAR(100) CHARACTER SET utf8mb4) ENGINE=InnoDB")


def schema(flavor):
    """The statements of the schema, run before the base."""
    maria = flavor == "mariadb"
    aria = "Aria" if maria else "MyISAM"
    out = [
        "CREATE DATABASE f",
        types_table(flavor),
        "CREATE TABLE f.nopk (a INT, b VARCHAR(20)) ENGINE=InnoDB",
        "CREATE TABLE f.gen (id INT PRIMARY KEY, a INT, b INT AS (a * 2) VIRTUAL, "
        "c VARCHAR(30) AS (CONCAT('n', a)) STORED, KEY (c))",
        "CREATE TABLE f.orders (id INT AUTO_INCREMENT PRIMARY KEY, who VARCHAR(20), "
        "amount DECIMAL(10,2), at DATETIME(6)) ENGINE=InnoDB",
        "CREATE TABLE f.audit (id INT AUTO_INCREMENT PRIMARY KEY, order_id INT, "
        "what VARCHAR(20)) ENGINE=InnoDB",
        "CREATE TRIGGER f.orders_ai AFTER INSERT ON f.orders FOR EACH ROW "
        "INSERT INTO f.audit (order_id, what) VALUES (NEW.id, 'insert')",
        "CREATE TABLE f.parent (id INT PRIMARY KEY) ENGINE=InnoDB",
        "CREATE TABLE f.child (id INT PRIMARY KEY, parent_id INT, FOREIGN KEY (parent_id) "
        "REFERENCES f.parent (id) ON DELETE CASCADE) ENGINE=InnoDB",
        "CREATE TABLE f.mi (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=MyISAM",
        f"CREATE TABLE f.ar (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE={aria}",
        "CREATE TABLE f.sbr (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(60), "
        "n DECIMAL(20,6), r DOUBLE, at DATETIME(6), ref BIGINT) ENGINE=InnoDB",
        "CREATE VIEW f.big_orders AS SELECT id, who FROM f.orders WHERE amount > 100",
        "CREATE PROCEDURE f.add_order(IN w VARCHAR(20), IN a DECIMAL(10,2)) BEGIN\n"
        "  DECLARE n INT DEFAULT 0;\n  INSERT INTO f.orders (who, amount, at) "
        "VALUES (w, a, NOW(6));\n  SET n = LAST_INSERT_ID();\n"
        "  UPDATE f.orders SET who = CONCAT(w, '#', n) WHERE id = n;\nEND",
        "INSERT INTO f.parent VALUES (1), (2), (3)",
        "INSERT INTO f.child VALUES (1, 1), (2, 1), (3, 2)",
        "INSERT INTO f.orders (who, amount, at) VALUES ('base', 1.00, '2020-01-01')",
    ]
    if maria:
        out.append("CREATE SEQUENCE f.seq START WITH 100 INCREMENT BY 5")
    return out


def rows_section(flavor):
    """ROW format: every type at its edges, keyless tables, generated columns, triggers,
    a stored procedure, savepoints, non-transactional tables beside InnoDB, CREATE ...
    SELECT, ALTER/RENAME/TRUNCATE, cascades; MariaDB: a sequence, a second GTID domain
    and compressed events; MySQL: MINIMAL images, PARTIAL_JSON, compressed transactions."""
    maria = flavor == "mariadb"
    steps = edge_rows(flavor) + [
        ("s1", "UPDATE f.types SET vc = CONCAT(LEFT(vc, 10), '+'), t = '-00:00:01.5', "
               "bn = x'0000000000000001' WHERE id IN (2, 4)"),
        ("s1", "DELETE FROM f.types WHERE id = 5"),
        ("s1", "INSERT INTO f.nopk VALUES (1, 'dup'), (1, 'dup'), (2, 'two'), (NULL, NULL)"),
        ("s1", "UPDATE f.nopk SET b = 'one' WHERE a = 1 LIMIT 1"),
        ("s1", "DELETE FROM f.nopk WHERE a = 2"),
        ("s1", "INSERT INTO f.gen (id, a) VALUES (1, 10), (2, 20), (3, 30)"),
        ("s1", "UPDATE f.gen SET a = a + 1 WHERE id > 1"),
        ("s1", "INSERT INTO f.orders (who, amount, at) VALUES ('row', 150.5, NOW(6))"),
        ("s1", "CALL f.add_order('proc', 250.25)"),
        ("s1", "BEGIN"),
        ("s1", "INSERT INTO f.orders (who, amount, at) VALUES ('kept', 1, NOW(6))"),
        ("s1", "SAVEPOINT sp1"),
        ("s1", "INSERT INTO f.orders (who, amount, at) VALUES ('undone', 2, NOW(6))"),
        ("s1", "UPDATE f.orders SET amount = 999 WHERE who = 'base'"),
        ("s1", "ROLLBACK TO SAVEPOINT sp1"),
        ("s1", "INSERT INTO f.orders (who, amount, at) VALUES ('after', 3, NOW(6))"),
        ("s1", "COMMIT"),
        ("s1", "INSERT INTO f.mi VALUES (1, 'myisam'), (2, 'two')"),
        ("s1", "INSERT INTO f.ar VALUES (1, 'aria')"),
        ("s1", "UPDATE f.mi SET v = 'changed' WHERE id = 2"),
        ("s1", "DELETE FROM f.parent WHERE id = 1"),  # cascades to f.child (not logged)
        ("s1", "CREATE TABLE f.ctas ENGINE=InnoDB AS SELECT id, who, amount FROM f.orders"),
        ("s1", "ALTER TABLE f.ctas ADD COLUMN note VARCHAR(20) DEFAULT 'n', ADD KEY (who)"),
        ("s1", "RENAME TABLE f.ctas TO f.ctas2"),
        ("s1", "INSERT INTO f.ctas2 (id, who, amount) VALUES (100, 'late', 5)"),
        ("s1", "TRUNCATE TABLE f.nopk"),
        ("s1", "INSERT INTO f.nopk VALUES (7, 'after truncate')"),
    ]
    if maria:
        steps += [
            ("s1", "BEGIN"),  # InnoDB and a savepoint rollback beside a non-transactional write
            ("s1", "INSERT INTO f.orders (who, amount, at) VALUES ('mixed', 4, NOW(6))"),
            ("s1", "SAVEPOINT sp2"),
            ("s1", "INSERT INTO f.mi VALUES (3, 'in trx')"),
            ("s1", "INSERT INTO f.orders (who, amount, at) VALUES ('gone', 5, NOW(6))"),
            ("s1", "ROLLBACK TO SAVEPOINT sp2"),
            ("s1", "COMMIT"),
            ("s1", "SELECT NEXT VALUE FOR f.seq"),
            ("s1", "INSERT INTO f.sbr (v, ref) VALUES ('seq', NEXT VALUE FOR f.seq)"),
            # a small cache: the sequence's row is logged in the transaction of the
            # InnoDB row that took a new cache (autocommit, and inside BEGIN .. COMMIT)
            ("s1", "CREATE SEQUENCE f.seq5 START WITH 1 INCREMENT BY 1 CACHE 5"),
            *[("s1", f"INSERT INTO f.sbr (v, ref) VALUES ('seq5 {i}', NEXT VALUE FOR f.seq5)")
              for i in range(7)],
            ("s1", "BEGIN"),
            *[("s1", f"INSERT INTO f.sbr (v, ref) VALUES ('seq5 trx {i}', "
                     "NEXT VALUE FOR f.seq5)") for i in range(6)],
            ("s1", "COMMIT"),
            ("s1", "SELECT SETVAL(f.seq5, 100)"),
            ("s1", "INSERT INTO f.sbr (v, ref) VALUES ('seq5 after setval', "
                   "NEXT VALUE FOR f.seq5)"),
            ("s1", "CREATE TABLE f.dom (id INT PRIMARY KEY, v VARCHAR(20))"),
            ("s2", "SET SESSION gtid_domain_id = 1"),
            ("s2", "INSERT INTO f.dom VALUES (1, 'domain 1'), (2, 'domain 1')"),
            ("s2", "UPDATE f.dom SET v = 'domain 1 again' WHERE id = 2"),
            ("s1", "INSERT INTO f.dom VALUES (3, 'domain 0')"),
            ("root", "SET GLOBAL log_bin_compress = ON"),
            ("s3", "INSERT INTO f.sbr (v, n) VALUES (REPEAT('compressed ', 5), 1)"),
            ("s3", "UPDATE f.types SET tx = REPEAT('compressed text ', 100) WHERE id = 1"),
            ("s3", "CREATE TABLE f.zipped (id INT PRIMARY KEY, v TEXT) "
                   "COMMENT 'a DDL long enough to be compressed: " + "x" * 300 + "'"),
            ("s3", "INSERT INTO f.zipped VALUES (1, REPEAT('z', 1000))"),
            ("root", "SET GLOBAL log_bin_compress = OFF"),
            ("mark", "change table"),
        ]
    else:
        steps += [
            ("s1", "INSERT INTO f.mi VALUES (3, 'autocommit')"),
            ("s1", "BEGIN"),  # InnoDB rows undone by a savepoint rollback
            ("s1", "INSERT INTO f.orders (who, amount, at) VALUES ('mixed', 4, NOW(6))"),
            ("s1", "SAVEPOINT sp2"),
            ("s1", "INSERT INTO f.orders (who, amount, at) VALUES ('gone', 5, NOW(6))"),
            ("s1", "ROLLBACK TO SAVEPOINT sp2"),
            ("s1", "COMMIT"),
            ("mark", "change table"),  # PARTIAL_JSON follows: the change table stops here
            ("s2", "SET SESSION binlog_row_image = MINIMAL"),
            ("s2", "UPDATE f.orders SET amount = amount + 1 WHERE who = 'row'"),
            ("s2", "DELETE FROM f.orders WHERE who = 'after'"),
            ("s3", "SET SESSION binlog_row_value_options = PARTIAL_JSON"),
            ("s3", "UPDATE f.types SET j = JSON_SET(j, '$.b.c', 2, '$.new', 'v') "
                   "WHERE id = 1"),
            ("s3", "UPDATE f.types SET j = JSON_REPLACE(j, '$.b.c', 3) WHERE id = 1"),
            ("s3", "SET SESSION binlog_transaction_compression = ON"),
            ("s3", "INSERT INTO f.sbr (v, n) VALUES (REPEAT('compressed ', 5), 1)"),
            ("s3", "UPDATE f.types SET tx = REPEAT('compressed text ', 100) WHERE id = 1"),
            ("s3", "SET SESSION binlog_transaction_compression = OFF"),
        ]
    steps.append(("s1", "INSERT INTO f.sbr (v) VALUES ('end of rows')"))
    return steps


def statements_section(flavor):
    """STATEMENT and MIXED sessions: NOW(6) in other time zones, RAND(), UUID(),
    LAST_INSERT_ID(), user variables, LOAD DATA LOCAL INFILE, TEMPORARY tables of the
    same name in two sessions, auto_increment_increment/offset, CONNECTION_ID(), and
    a trigger's AUTO_INCREMENT from statements."""
    data = "".join(f"{i}\tloaded {i}\t{i}.5\n" for i in range(1000, 1020)).encode()
    steps = [
        ("a", "SET SESSION binlog_format = STATEMENT"),
        ("b", "SET SESSION binlog_format = STATEMENT"),
        ("c", "SET SESSION binlog_format = MIXED"),
        ("a", "SET SESSION time_zone = '+05:30'"),
        ("a", "INSERT INTO f.sbr (v, at) VALUES ('now in +05:30', NOW(6))"),
        ("b", "SET SESSION time_zone = '-08:00'"),
        ("b", "INSERT INTO f.sbr (v, at, r) VALUES ('now in -08:00', NOW(6), RAND())"),
        ("a", "INSERT INTO f.sbr (v, r) VALUES ('rand', RAND()), ('rand', RAND())"),
        ("a", "INSERT INTO f.sbr (v) VALUES ('for last id')"),
        ("a", "INSERT INTO f.sbr (v, ref) VALUES ('last id', LAST_INSERT_ID())"),
        ("a", "SET @who := 'user var é', @amount := 12.345678, @big := 9007199254740993"),
        ("a", "INSERT INTO f.sbr (v, n, ref) VALUES (@who, @amount, @big)"),
        ("a", "INSERT INTO f.sbr (v, ref) VALUES ('connection', CONNECTION_ID())"),
        ("b", "INSERT INTO f.sbr (v, ref) VALUES ('connection', CONNECTION_ID())"),
        ("a", "CREATE TEMPORARY TABLE f.tmp (k INT, v VARCHAR(20))"),
        ("b", "CREATE TEMPORARY TABLE f.tmp (k INT, v VARCHAR(20))"),
        ("a", "INSERT INTO f.tmp VALUES (1, 'tmp of a')"),
        ("b", "INSERT INTO f.tmp VALUES (2, 'tmp of b')"),
        ("a", "INSERT INTO f.sbr (v, ref) SELECT v, k FROM f.tmp"),
        ("b", "INSERT INTO f.sbr (v, ref) SELECT v, k FROM f.tmp"),
        ("b", "SET SESSION auto_increment_increment = 7, auto_increment_offset = 3"),
        ("b", "INSERT INTO f.sbr (v) VALUES ('step 7'), ('step 7')"),
        ("a", "INSERT INTO f.sbr (v) VALUES ('after step 7 elsewhere'), ('and again')"),
        ("b", "SET SESSION auto_increment_increment = 1, auto_increment_offset = 1"),
        ("load", "a", "LOAD DATA LOCAL INFILE '{path}' INTO TABLE f.sbr (id, v, n)", data),
        ("a", "INSERT INTO f.orders (who, amount, at) VALUES ('sbr a', 10, NOW(6))"),
        ("b", "INSERT INTO f.orders (who, amount, at) VALUES ('sbr b', 20, NOW(6))"),
        ("a", "INSERT INTO f.orders (who, amount, at) VALUES ('sbr a2', 30, NOW(6))"),
        ("b", "CALL f.add_order('sbr proc', 40)"),
        ("c", "INSERT INTO f.sbr (v, at) VALUES (UUID(), NOW(6))"),
        ("c", "INSERT INTO f.sbr (v, r) VALUES ('mixed rand', RAND())"),
        ("a", "UPDATE f.sbr SET n = n * 2 WHERE v LIKE 'loaded%' ORDER BY id LIMIT 5"),
        ("close", "a"),
        ("close", "b"),
        ("s1", "INSERT INTO f.sbr (v) VALUES ('end of statements')"),
    ]
    return steps


def xa_section(flavor):
    """XA transactions: PREPARE then COMMIT, PREPARE then ROLLBACK, ONE PHASE, one
    prepared in a session and committed from another, in ROW and STATEMENT format."""
    return [
        ("x1", "XA START 'xa1'"),
        ("x1", "INSERT INTO f.orders (who, amount, at) VALUES ('xa1', 11, NOW(6))"),
        ("x1", "XA END 'xa1'"),
        ("x1", "XA PREPARE 'xa1'"),
        ("x1", "XA COMMIT 'xa1'"),
        ("x1", "XA START 'xa2'"),
        ("x1", "UPDATE f.orders SET amount = 0 WHERE who = 'base'"),
        ("x1", "XA END 'xa2'"),
        ("x1", "XA PREPARE 'xa2'"),
        ("x1", "XA ROLLBACK 'xa2'"),
        ("x1", "XA START 'xa3'"),
        ("x1", "INSERT INTO f.orders (who, amount, at) VALUES ('xa3 one phase', 33, NOW(6))"),
        ("x1", "XA END 'xa3'"),
        ("x1", "XA COMMIT 'xa3' ONE PHASE"),
        ("x2", "SET SESSION binlog_format = STATEMENT"),
        ("x2", "XA START 'xa4', 'branch', 7"),
        ("x2", "INSERT INTO f.sbr (v, at) VALUES ('xa4 statement', NOW(6))"),
        ("x2", "XA END 'xa4', 'branch', 7"),
        ("x2", "XA PREPARE 'xa4', 'branch', 7"),
        ("close", "x2"),
        ("s1", "INSERT INTO f.sbr (v) VALUES ('between prepare and commit')"),
        ("s1", "XA COMMIT 'xa4', 'branch', 7"),
        ("s1", "INSERT INTO f.sbr (v) VALUES ('the end')"),
    ]


SECTIONS = (("rows", rows_section), ("statements", statements_section),
            ("xa", xa_section))


class Sessions:
    """The workload's connections to the source, one a name, opened at first use."""

    def __init__(self, server):
        self.server, self.conns, self.ids, self.closed = server, {}, {}, set()

    def conn(self, name):
        if name not in self.conns:
            conn = self.conns[name] = pymysql.connect(
                unix_socket=self.server.socket, user="root", autocommit=True,
                charset="utf8mb4", local_infile=True, ssl_disabled=True)
            with conn.cursor() as cur:
                cur.execute("SELECT CONNECTION_ID()")
                self.ids[name] = cur.fetchone()[0]
        return self.conns[name]

    def wait_closed(self, timeout=30):
        """Wait until the sessions closed are gone from the server (it logs the DROP of
        their temporary tables as they end)."""
        deadline = time.monotonic() + timeout
        while self.closed:
            alive = {row[0] for row in self.server.execute(
                "SELECT id FROM information_schema.processlist")}
            self.closed &= alive
            if self.closed and time.monotonic() > deadline:
                raise AssertionError(f"sessions {self.closed} did not end")
            time.sleep(0.05 if self.closed else 0)

    def run(self, step):
        """Run one step of a section."""
        if step[0] == "close":
            conn = self.conns.pop(step[1], None)
            if conn is not None:
                conn.close()
                self.closed.add(self.ids.pop(step[1]))
            return
        if step[0] == "load":
            _, name, sql, data = step
            with tempfile.NamedTemporaryFile(suffix=".tsv", delete=False) as f:
                f.write(data)
            try:
                self._execute(name, sql.format(path=f.name))
            finally:
                os.unlink(f.name)
            return
        self._execute(*step)

    def _execute(self, name, sql):
        with self.conn(name).cursor() as cur:
            cur.execute(sql)
            cur.fetchall()

    def close(self):
        for conn in self.conns.values():
            conn.close()
        self.conns = {}
