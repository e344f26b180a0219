"""Write the small binlog files of tests/data/binlogs/: made here, by this project's own
throwaway servers, so that the tests that compare the stream's twin paths (the syncer's
inline and general paths, ``fusedloop``, the compiled ``_speedups``) run on any clone,
without the corpus in ../shared.

- ``mariadb-10.11.000001``: MariaDB 10.11 (the host's mariadbd): GTIDs, ANNOTATE_ROWS,
  row events, a multi-statement transaction, a DDL, a MyISAM (standalone) write; closed
  by a ROTATE.
- ``mysql-9.7.000001``: MySQL 9.7 (.mysql/tree): GTIDs, BEGIN..XID transactions, a DDL,
  TRANSACTION_PAYLOAD (binlog_transaction_compression) and plain ones; closed by a ROTATE.

Run once (the files are committed): .venv/bin/python scripts/make_test_binlogs.py
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mysqlbackup.sandbox import MariaDBSandbox  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                   "data", "binlogs")
WORK = [
    "CREATE DATABASE d",
    "CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(40), n DECIMAL(10,2))",
    *[f"INSERT INTO d.t VALUES ({i}, 'row {i}', {i}.5)" for i in range(1, 9)],
    "UPDATE d.t SET v = CONCAT(v, ' updated') WHERE id < 4",
    "DELETE FROM d.t WHERE id = 8",
]
TRANSACTION = ["BEGIN", "INSERT INTO d.t VALUES (20, 'in a transaction', 1)",
               "UPDATE d.t SET n = n + 1 WHERE id = 20", "DELETE FROM d.t WHERE id = 1",
               "COMMIT"]


def mariadb():
    with MariaDBSandbox(semi_sync=False) as server:
        server.execute(*WORK, *TRANSACTION, "CREATE TABLE d.m (id INT) ENGINE=MyISAM",
                       "INSERT INTO d.m VALUES (1), (2)", "ALTER TABLE d.t ADD COLUMN w INT",
                       "INSERT INTO d.t VALUES (30, 'after the alter', 2, 7)",
                       "FLUSH BINARY LOGS")
        first = server.binlog_files()[0]
        shutil.copyfile(server.binlog_path(first), os.path.join(OUT, "mariadb-10.11.000001"))


def mysql():
    from mysqlbackup.sandbox.mysql import MySQLSandbox, why_no_mysql
    problem = why_no_mysql()
    if problem:
        raise SystemExit(f"no MySQL server: {problem}")
    with MySQLSandbox(server_id=1, semi_sync=False, gtid_mode="ON") as server:
        server.execute("FLUSH BINARY LOGS")  # the file below starts with this run's work
        first = server.binlog_files()[-1]
        conn = server.root()
        with conn.cursor() as cur:
            for sql in WORK + TRANSACTION:
                cur.execute(sql)
            cur.execute("SET SESSION binlog_transaction_compression = ON")
            for sql in TRANSACTION[:1] + [f"INSERT INTO d.t VALUES ({i}, REPEAT('z', 30), 3)"
                                          for i in range(40, 60)] + ["COMMIT"]:
                cur.execute(sql)
            cur.execute("SET SESSION binlog_transaction_compression = OFF")
            cur.execute("INSERT INTO d.t VALUES (70, 'plain again', 4)")
        conn.close()
        server.execute("FLUSH BINARY LOGS")
        shutil.copyfile(server.binlog_path(first), os.path.join(OUT, "mysql-9.7.000001"))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    mariadb()
    mysql()
    for name in sorted(os.listdir(OUT)):
        print(name, os.path.getsize(os.path.join(OUT, name)))
