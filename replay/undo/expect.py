"""What the target's rows must hold for an undo to go ahead: the state the named
transactions left, row by row (local I/O: a temporary SQLite file).

The transactions' row images are played forward into it: for a table with a primary key,
each key's last state (the after image, or absent for a deleted row); for a table without
one, each whole row's count (+1 inserted, -1 deleted). Held in a temporary SQLite
database, not in memory, so that a transaction of millions of rows undoes in bounded
memory; ``expected`` reads them back a batch at a time, in key order.
"""

import decimal
import pickle
import sqlite3
import tempfile

ABSENT = None  # the state of a key the transactions deleted
_PENDING = 2000  # keyed states written to the file at once

_SCHEMA = ("CREATE TABLE keyed (tid INTEGER, key TEXT, kv BLOB, state BLOB, PRIMARY KEY (tid, key))",
           "CREATE TABLE counted (tid INTEGER, row TEXT, n INTEGER, state BLOB, "
           "PRIMARY KEY (tid, row))")


def key_text(values):
    """A text that two equal (``values.normal``) tuples share, and only they."""
    return "\x1f".join("\x00" if v is None else _text(v) for v in values)


_EXACT = decimal.Context(prec=200)  # normalize() in the default 28 digits would round


def _text(value):
    if isinstance(value, decimal.Decimal):
        return "d" + format(value.normalize(_EXACT), "f") if value else "d0"
    if isinstance(value, float):
        return "f" + repr(value)
    if isinstance(value, int):
        return "d" + str(value)
    return "s" + value


def _dump(value):
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


class Expected:
    """The state rows must be in, by table id (``put``/``count``, then ``keyed``/
    ``counted``); ``close`` removes the file."""

    def __init__(self):
        self._file = tempfile.NamedTemporaryFile(prefix="mysqlbackup-undo-", suffix=".db")
        self.db = sqlite3.connect(self._file.name)
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("PRAGMA journal_mode=OFF")
        for sql in _SCHEMA:
            self.db.execute(sql)
        self._pending = []

    def put(self, tid, key, state):
        """Key ``key`` (normal values) of table ``tid`` ends as ``state`` (a row's normal
        values, or ABSENT)."""
        self._pending.append((tid, key_text(key), _dump(key),
                              None if state is ABSENT else _dump(state)))
        if len(self._pending) >= _PENDING:
            self._flush()

    def _flush(self):
        if not self._pending:
            return
        self.db.executemany("INSERT OR REPLACE INTO keyed VALUES (?, ?, ?, ?)", self._pending)
        self._pending = []

    def state(self, tid, key):
        """(whether ``key`` of table ``tid`` has a state yet, that state or ABSENT)."""
        self._flush()
        row = self.db.execute("SELECT state FROM keyed WHERE tid = ? AND key = ?",
                              (tid, key_text(key))).fetchone()
        if row is None:
            return False, ABSENT
        return True, None if row[0] is None else pickle.loads(row[0])

    def count(self, tid, row, delta):
        """One more (``delta`` 1) or one fewer (-1) whole row ``row`` in table ``tid``."""
        text = key_text(row)
        updated = self.db.execute("UPDATE counted SET n = n + ? WHERE tid = ? AND row = ?",
                                  (delta, tid, text)).rowcount
        if not updated:
            self.db.execute("INSERT INTO counted VALUES (?, ?, ?, ?)",
                            (tid, text, delta, _dump(row)))

    def keyed(self, tid, batch):
        """Lists of up to ``batch`` (key text, key values, state or ABSENT) of table
        ``tid``."""
        return self._batches("SELECT key, kv, state FROM keyed WHERE tid = ? ORDER BY key",
                             tid, batch)

    def counted(self, tid, batch):
        """Lists of up to ``batch`` (row, count) of the rows of table ``tid`` that must be
        there (count > 0)."""
        return self._batches("SELECT state, n FROM counted WHERE tid = ? AND n > 0 "
                             "ORDER BY row", tid, batch, counted=True)

    def _batches(self, sql, tid, batch, counted=False):
        self._flush()
        cursor = self.db.execute(sql, (tid,))
        while True:
            rows = cursor.fetchmany(batch)
            if not rows:
                return
            if counted:
                yield [(pickle.loads(state), n) for state, n in rows]
            else:
                yield [(key, pickle.loads(kv), None if state is None else pickle.loads(state))
                       for key, kv, state in rows]

    def close(self):
        """Remove the file."""
        self.db.close()
        self._file.close()
