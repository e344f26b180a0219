"""The undo's target server: what it says of the tables, the conflict check with row locks,
and the reversal applied with BINLOG (network I/O).

Everything runs on one connection, in one transaction: the rows the undo changes are read
with ``FOR UPDATE`` (by primary key, a batch at a time; by the whole row where the table
has none) and compared with the state the named transactions left (``expect``); a
difference ends it with ``UndoConflict`` and a ROLLBACK, before anything is written. Then
the reversed events go in with ``BINLOG`` and the transaction commits as one new
transaction of the target (its own GTID: replicas follow), or rolls back (``--dry-run``).
"""

from dataclasses import dataclass

from mysqlbackup.errors import ConflictError
from replay.undo.expect import ABSENT, key_text
from replay.undo.reverse import INSTEAD, UndoRefused
from replay.undo.values import Column, normal, quote

BATCH = 500          # keys read with one locking SELECT
SHOWN = 20           # conflicting rows a refusal lists
_TRANSACTIONAL = ("innodb",)


class UndoConflict(ConflictError):
    """A row the undo would change is no longer as the named transactions left it (a
    later write): nothing was changed."""


@dataclass(frozen=True)
class Table:
    """A table the undo changes, as the target has it: its columns (``values.Column``)
    and the indexes of its primary key's columns (empty without one)."""

    schema: str
    name: str
    columns: tuple
    key: tuple

    @property
    def quoted(self):
        return f"{quote(self.schema)}.{quote(self.name)}"

    @property
    def label(self):
        return f"{self.schema}.{self.name}"


@dataclass
class Conflict:
    """One row that differs: its table, key, column, what the undo expects and what the
    target holds."""

    table: str
    key: str
    column: str
    expected: str
    found: str

    def line(self):
        return (f"{self.table} {self.key}: {self.column} expected {self.expected}, "
                f"found {self.found}")


class UndoTarget:
    """One connection to the target (a ``TargetSession``), in one transaction from
    ``begin`` to ``finish``."""

    def __init__(self, session, lock_timeout=10):
        self.session = session
        version, server_id, self.log_bin = self.run(
            "SELECT VERSION(), @@server_id, @@log_bin")[0]
        self.mariadb = "mariadb" in version.lower()
        self.server_id = int(server_id)
        self.run("SET SESSION time_zone = '+00:00'")
        self._strict()
        self.run(f"SET SESSION innodb_lock_wait_timeout = {int(lock_timeout)}")

    def _strict(self):
        """Row events applied strictly: a row the reversal does not find, or finds twice,
        is an error (MySQL: rbr_exec_mode for the session; MariaDB's slave_exec_mode is
        global: refused when IDEMPOTENT)."""
        if not self.mariadb:
            self.run("SET SESSION rbr_exec_mode = 'STRICT'")
        elif self.run("SELECT @@slave_exec_mode")[0][0].upper() != "STRICT":
            raise UndoRefused("the target's slave_exec_mode is IDEMPOTENT: the reversal's "
                              "rows would be applied without their checks; set it to STRICT "
                              "for the undo")

    def run(self, sql, args=None):
        with self.session.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def table(self, table_map, mysql_json):
        """The ``Table`` of a TABLE_MAP's table; UndoRefused when the target lacks it, when
        it is not the table of the binlog (another column count or names), not
        transactional, or has triggers."""
        schema, name = table_map.schema, table_map.table
        label = f"{schema}.{name}"
        rows = self.run(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, "
            "COLLATION_NAME, EXTRA FROM information_schema.COLUMNS WHERE "
            "TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, name))
        if not rows:
            raise UndoRefused(f"the target has no table {label}: undo changes rows of a table "
                              f"that exists; {INSTEAD}")
        if len(rows) != len(table_map.types) or (
                table_map.names and tuple(r[0] for r in rows) != table_map.names):
            raise UndoRefused(f"{label} on the target is not the table the transaction "
                              f"changed ({len(rows)} columns there, {len(table_map.types)} in "
                              f"the binlog, or other names): its definition changed since; "
                              f"{INSTEAD}")
        self._check_kind(schema, name, label)
        columns = tuple(_column(row, ctype, meta, mysql_json) for row, ctype, meta in
                        zip(rows, table_map.types, table_map.metas or [b""] * len(rows)))
        key = self.run("SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE "
                       "TABLE_SCHEMA = %s AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' "
                       "ORDER BY SEQ_IN_INDEX", (schema, name))
        names = [r[0] for r in rows]
        return Table(schema, name, columns, tuple(names.index(r[0]) for r in key))

    def _check_kind(self, schema, name, label):
        engine = self.run("SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA "
                          "= %s AND TABLE_NAME = %s", (schema, name))
        if not engine or (engine[0][0] or "").lower() not in _TRANSACTIONAL:
            raise UndoRefused(f"{label} on the target is not an InnoDB table "
                              f"({engine[0][0] if engine else 'a view'}): an undo must be all "
                              f"or nothing; {INSTEAD}")
        triggers = self.run("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE "
                            "EVENT_OBJECT_SCHEMA = %s AND EVENT_OBJECT_TABLE = %s",
                            (schema, name))
        if triggers:
            raise UndoRefused(f"{label} has triggers on the target "
                              f"({', '.join(r[0] for r in triggers)}): the reversal would "
                              f"fire them again; {INSTEAD}")

    def cascades(self, schema, name):
        """('db.child', 'ON DELETE CASCADE, ...') of each foreign key through which a change
        to ``schema``.``name`` changes other rows (CASCADE, SET NULL, SET DEFAULT)."""
        rows = self.run(
            "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, DELETE_RULE, UPDATE_RULE FROM "
            "information_schema.REFERENTIAL_CONSTRAINTS WHERE UNIQUE_CONSTRAINT_SCHEMA = %s "
            "AND REFERENCED_TABLE_NAME = %s", (schema, name))
        found = []
        for db, child, on_delete, on_update in rows:
            rules = [f"ON {what} {rule}" for what, rule in (("DELETE", on_delete),
                                                            ("UPDATE", on_update))
                     if rule not in ("RESTRICT", "NO ACTION")]
            if rules:
                found.append((f"{db}.{child}", ", ".join(rules)))
        return found

    def check(self, table, expected, tid, conflicts):
        """Lock and compare every row of ``table`` that ``expected`` has (table id
        ``tid``); each difference appended to ``conflicts``. Returns the rows checked."""
        checked = 0
        if table.key:
            for batch in expected.keyed(tid, BATCH):
                checked += len(batch)
                self._check_keyed(table, batch, conflicts)
        else:
            for batch in expected.counted(tid, BATCH):
                checked += len(batch)
                for row, n in batch:
                    self._check_counted(table, row, n, conflicts)
        return checked

    def _select(self, table, where, args):
        canon = ", ".join(c.canon() for c in table.columns)
        return self.run(f"SELECT {canon} FROM {table.quoted} WHERE {where} FOR UPDATE", args)

    def _check_keyed(self, table, batch, conflicts):
        keys = [table.columns[i] for i in table.key]  # in the key's order
        where, args = [], []
        for _, values, _ in batch:
            sql, params = _match(keys, values)
            where.append(sql)
            args.extend(params)
        found = {}
        for row in self._select(table, " OR ".join(where), args):
            values = [normal(v) for v in row]
            found[key_text([values[i] for i in table.key])] = values
        for key, values, state in batch:
            _compare(table, values, state, found.get(key), conflicts)

    def _check_counted(self, table, row, n, conflicts):
        compared = [(c, v) for c, v in zip(table.columns, row) if not c.generated]
        sql, params = _match([c for c, _ in compared], [v for _, v in compared], exact=True)
        have = len(self._select(table, sql, params))
        if have < n:
            shown = ", ".join(f"{c.name}={_shown(v)}" for c, v in compared[:4])
            conflicts.append(Conflict(table.label, f"({shown})", "(whole row)",
                                      f"{n} such row(s)", f"{have}"))

    def begin(self):
        self.run("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        self.run("BEGIN")

    def finish(self, commit):
        """COMMIT (or ROLLBACK, ``commit`` false); the target's GTID of the undo when it
        says (MariaDB's last_gtid), else None."""
        if not commit:
            self.run("ROLLBACK")
            return None
        self.run("COMMIT")
        if self.mariadb and self.log_bin:
            return self.run("SELECT @@last_gtid")[0][0] or None
        return None


def _column(row, ctype, meta, mysql_json):
    name, _, column_type, charset, collation, extra = row
    extra = (extra or "").upper()
    fixed = 0  # BINARY(n), MariaDB's INET6/UUID: the binlog drops their trailing zeros
    if charset is None and ctype == 254 and len(meta) == 2 and meta[0] not in (247, 248):
        fixed = (((meta[0] << 4) & 0x300) ^ 0x300) + meta[1]
    return Column(ctype, meta, name, unsigned="unsigned" in (column_type or "").lower(),
                  binary_length=fixed,
                  charset=charset, collation=collation,
                  mysql_json=mysql_json and ctype == 245,
                  # VIRTUAL/STORED GENERATED (MariaDB also PERSISTENT); not MySQL's
                  # DEFAULT_GENERATED, a column with an expression default
                  generated=any(word in extra for word in ("VIRTUAL", "STORED GENERATED",
                                                           "PERSISTENT")))


def _match(columns, values, exact=False):
    """(SQL, parameters) of the columns holding the values: ``Column.match`` each (what
    an index serves), or ``Column.same`` with ``exact`` (byte for byte)."""
    parts, args = [], []
    for column, value in zip(columns, values):
        sql, params = column.same(value) if exact else column.match(value)
        parts.append(sql)
        args.extend(params)
    return "(" + " AND ".join(parts) + ")", args


def _compare(table, key, state, found, conflicts):
    label = _key_label(table, key)
    if state is ABSENT:
        if found is not None:
            conflicts.append(Conflict(table.label, label, "(row)", "absent (the transaction "
                                      "deleted it)", "present (written again since)"))
        return
    if found is None:
        conflicts.append(Conflict(table.label, label, "(row)", "present",
                                  "absent (deleted since)"))
        return
    for column, ours, theirs in zip(table.columns, state, found):
        if not column.generated and ours != theirs:
            conflicts.append(Conflict(table.label, label, column.name, _shown(ours),
                                      _shown(theirs)))


def _key_label(table, key):
    names = [table.columns[i].name for i in table.key]
    return "(" + ", ".join(f"{n}={_shown(v)}" for n, v in zip(names, key)) + ")"


def _shown(value):
    if value is None:
        return "NULL"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."
