"""The restore benchmark's data: the schema, the base rows and the writers' OLTP mix
(scripts/bench_restore.py). The same SQL on MariaDB and MySQL; only the source of
numbered rows differs (``engine.numbers``: MariaDB's ``seq_LO_to_HI`` tables, a
recursive CTE on MySQL), and so does the digest in the filler text (``engine.md5``:
MySQL 9.7 has no MD5(); 32 hex digits of SHA2 there)."""

import os
import random
import threading
import time

SCHEMA = [
    "CREATE DATABASE shop",
    "CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(60), email VARCHAR(80), "
    "city VARCHAR(40), balance DECIMAL(12,2), created DATETIME, notes VARCHAR(600), "
    "KEY (city), KEY (email))",
    "CREATE TABLE shop.products (id INT PRIMARY KEY, sku CHAR(12), name VARCHAR(80), "
    "price DECIMAL(10,2), stock INT, descr VARCHAR(1000), KEY (sku))",
    "CREATE TABLE shop.orders (id BIGINT PRIMARY KEY AUTO_INCREMENT, customer_id INT, "
    "status VARCHAR(12), total DECIMAL(12,2), created DATETIME(6), note VARCHAR(200), "
    "KEY (customer_id), KEY (status, created))",
    "CREATE TABLE shop.order_lines (order_id BIGINT, line_no SMALLINT, product_id INT, "
    "qty INT, price DECIMAL(10,2), PRIMARY KEY (order_id, line_no), KEY (product_id))",
    "CREATE TABLE shop.audit_log (id BIGINT PRIMARY KEY AUTO_INCREMENT, at DATETIME(6), "
    "actor INT, what VARCHAR(40), payload TEXT, KEY (actor, at))",
]
TABLES = ["shop.customers", "shop.products", "shop.orders", "shop.order_lines",
          "shop.audit_log"]
# rows per MB of base (about 1 MB of dump per unit, measured)
PER_MB = {"customers": 650, "products": 170, "orders": 1700, "audit_log": 330}
CITIES = "'Lyon','Oslo','Porto','Turku','Graz','Cork','Brno','Gent'"
CHUNK = 50_000   # rows per INSERT ... SELECT of the base


def fill_selects(n, md5):
    """{table: SELECT list over a column ``seq``} of the base rows."""
    return {
        "customers": "SELECT seq, CONCAT('customer ', seq), CONCAT('c', seq, '@example.com'), "
                     f"ELT(1 + seq % 8, {CITIES}), seq % 1000 + 0.5, "
                     f"'2026-01-01' + INTERVAL seq MINUTE, REPEAT({md5('seq')}, 1 + seq % 12)",
        "products": "SELECT seq, LPAD(seq, 12, '0'), CONCAT('product ', seq), seq % 97 + 0.99, "
                    f"1000000, REPEAT({md5('seq')}, 30)",
        "orders": f"SELECT seq, 1 + seq * 7919 % {n['customers']}, "
                  "ELT(1 + seq % 3, 'new', 'paid', 'shipped'), seq % 500 + 0.25, "
                  "'2026-01-01' + INTERVAL seq SECOND, REPEAT('n', seq % 150)",
        "order_lines": f"SELECT 1 + (seq - 1) DIV 3, 1 + (seq - 1) % 3, "
                       f"1 + seq * 104729 % {n['products']}, 1 + seq % 4, seq % 97 + 0.99",
        "audit_log": "SELECT seq, '2026-01-01' + INTERVAL seq SECOND, seq % 100, 'import', "
                     f"REPEAT({md5('seq')}, 40)",
    }


def load_base_data(source, mb, engine):
    """``mb`` MB of rows, unlogged (the base holds them, no binlog needs to); the row
    counts."""
    n = {name: per * mb for name, per in PER_MB.items()}
    n["order_lines"] = 3 * n["orders"]
    conn = source.root()
    with conn.cursor() as cur:
        for sql in ["SET SESSION sql_log_bin = 0", *engine.session_setup(CHUNK)]:
            cur.execute(sql)
        for table, select in fill_selects(n, engine.md5).items():
            for lo in range(1, n[table] + 1, CHUNK):
                with_, rows = engine.numbers(lo, min(n[table], lo + CHUNK - 1))
                cur.execute(f"INSERT INTO shop.{table} {with_}{select} FROM {rows}")
    conn.close()
    return n


def binlog_after(source, position):
    """Bytes of binlog the source wrote after ``position`` (file, pos)."""
    file, pos = position
    sizes = [(name, os.path.getsize(source.binlog_path(name))) for name in source.binlog_files()]
    return sum(size for name, size in sizes if name >= file) - pos


class Writers:
    """``clients`` connections running the OLTP mix until stopped."""

    def __init__(self, source, clients, counts, engine):
        self.source, self.counts, self.engine = source, counts, engine
        self.stop = threading.Event()
        self.done, self.retries = [0] * clients, [0] * clients
        self.threads = [threading.Thread(target=self._run, args=(c,), daemon=True)
                        for c in range(clients)]
        self.errors = []

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def wait_for(self, transactions, timeout=300):
        """Poll until the writers committed ``transactions`` (a writer's error: at once)."""
        deadline = time.monotonic() + timeout
        while sum(self.done) < transactions and not self.errors:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the writers committed {sum(self.done)} transactions in "
                                   f"{timeout} s")
            time.sleep(0.1)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()
        if self.errors:
            raise RuntimeError(f"a writer failed: {self.errors[0]}")
        return sum(self.done)

    def _run(self, c):
        try:
            conn = self.source.root(autocommit=False)
            mix = Mix(c, len(self.threads), self.counts, self.engine)
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    self._one(conn, cur, mix, c)
            conn.close()
        except Exception as e:  # reported by finish()
            self.errors.append(repr(e))

    def _one(self, conn, cur, mix, c):
        try:
            mix.transaction(cur)
            conn.commit()
            self.done[c] += 1
        except Exception as e:
            if getattr(e, "args", (None,))[0] not in (1205, 1213):  # lock wait, deadlock
                raise
            conn.rollback()
            self.retries[c] += 1


class Mix:
    """One client's transactions; the rows it deletes are its own stripe of old ids.
    ``engine``: its 40 numbered rows for the batch inserts, its MD5."""

    def __init__(self, client, clients, counts, engine):
        self.rng, self.c, self.clients, self.n = random.Random(client), client, clients, counts
        self.forty, self.md5 = engine.numbers(1, 40), engine.md5
        self.old_order = client + 1       # next base order of this client's stripe to delete
        self.old_audit = client * 50 + 1  # next base audit rows of this stripe
        self.orders = []                  # ids of this client's new orders

    def transaction(self, cur):
        kind = self.rng.random()
        if kind < 0.45:
            self.new_order(cur)
        elif kind < 0.65:
            self.payment(cur)
        elif kind < 0.80:
            self.customer_edits(cur)
        elif kind < 0.90:
            self.cleanup(cur)
        else:
            with_, rows = self.forty
            cur.execute(f"INSERT INTO shop.audit_log (at, actor, what, payload) {with_}"
                        f"SELECT NOW(6), {self.c}, 'batch', REPEAT({self.md5('RAND()')}, 32) "
                        f"FROM {rows}")

    def new_order(self, cur):
        rng, n = self.rng, self.n
        cur.execute("INSERT INTO shop.orders (customer_id, status, total, created, note) "
                    "VALUES (%s, 'new', 0, NOW(6), %s)",
                    (rng.randint(1, n["customers"]), "x" * rng.randint(0, 150)))
        order = cur.lastrowid
        products = sorted(rng.sample(range(1, n["products"] + 1), rng.randint(3, 8)))
        cur.executemany("INSERT INTO shop.order_lines VALUES (%s, %s, %s, %s, 9.99)",
                        [(order, i, p, rng.randint(1, 4)) for i, p in enumerate(products, 1)])
        cur.execute("UPDATE shop.products SET stock = stock - 1 WHERE id IN (%s)"
                    % ",".join(map(str, products)))
        cur.execute("UPDATE shop.orders SET total = (SELECT SUM(qty * price) FROM "
                    "shop.order_lines WHERE order_id = %s) WHERE id = %s", (order, order))
        cur.execute("INSERT INTO shop.audit_log (at, actor, what, payload) VALUES "
                    f"(NOW(6), %s, 'order', REPEAT({self.md5('RAND()')}, 32))", (self.c,))
        self.orders = (self.orders + [order])[-200:]

    def payment(self, cur):
        if self.orders:
            paid = self.rng.sample(self.orders, min(len(self.orders), 5))
            cur.execute("UPDATE shop.orders SET status = 'paid' WHERE id IN (%s)"
                        % ",".join(map(str, sorted(paid))))
        cur.execute("UPDATE shop.customers SET balance = balance - 10 WHERE id = %s",
                    (self.rng.randint(1, self.n["customers"]),))

    def customer_edits(self, cur):
        ids = sorted(self.rng.sample(range(1, self.n["customers"] + 1), 5))
        cur.execute(f"UPDATE shop.customers SET city = ELT(1 + FLOOR(RAND() * 8), {CITIES}), "
                    f"notes = REPEAT({self.md5('RAND()')}, 1 + FLOOR(RAND() * 12)) "
                    "WHERE id IN (%s)"
                    % ",".join(map(str, ids)))

    def cleanup(self, cur):
        """Ten old orders of this client's stripe with their lines; 50 old audit rows."""
        ids = [self.old_order + i * self.clients for i in range(10)]
        self.old_order += 10 * self.clients
        listed = ",".join(map(str, ids))
        cur.execute(f"DELETE FROM shop.order_lines WHERE order_id IN ({listed})")
        cur.execute(f"DELETE FROM shop.orders WHERE id IN ({listed})")
        cur.execute("DELETE FROM shop.audit_log WHERE id BETWEEN %s AND %s",
                    (self.old_audit, self.old_audit + 49))
        self.old_audit += 50 * self.clients
