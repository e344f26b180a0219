"""The part of a dump that holds some tables, into other schemas (pure: bytes in,
bytes out, fed in chunks of any size).

``restore --table DB.TABLE --rewrite-db DB:NEW`` loads only those tables' part
of a ``mariadb-dump`` / ``mysqldump`` base: the session settings at the top, then
for each wanted table its structure (DROP TABLE IF EXISTS, CREATE TABLE) and its
data (LOCK TABLES, INSERTs, UNLOCK TABLES), under ``CREATE DATABASE IF NOT
EXISTS`` + ``USE`` of the schema it goes to. The dump names its tables
unqualified under its own ``USE``, so that ``USE`` is what is rewritten. Left
out: other tables, views, triggers, routines, events, users and grants (a table
restore into a live server must not touch them).

The dump's own sections are found by its comment headers (``-- Table structure
for table `t```, ``-- Dumping data for table `t```, ``-- Current Database: `db```),
which a data line never matches (row lines start with ``(``, values escape their
newlines), nor a line inside a ``DELIMITER ;;`` block (a routine's or trigger's
body). Inside a wanted section only statements that begin with one of ``KEPT``
are kept; a statement ends with a line ending in ``;``.
"""

import re

_HEADER = re.compile(rb"^-- (Current Database|Table structure for table|Dumping data for table"
                     rb"|Temporary table structure for view|Final view structure for view"
                     rb"|Dumping events for database|Dumping routines for database)"
                     rb"(?::)? [`'](?P<name>.*)[`']\s*$")
KEPT = (b"DROP TABLE IF EXISTS ", b"/*!40101 SET ", b"CREATE TABLE ", b"LOCK TABLES ",
        b"/*!40000 ALTER TABLE ", b"INSERT ", b"REPLACE ", b"UNLOCK TABLES;", b"commit;",
        b"set autocommit=0;")


def quote_name(name):
    """A schema or table name as the dump writes it (backquotes, `` inside)."""
    return "`" + name.replace("`", "``") + "`"


class DumpFilter:
    """Feed a dump's bytes in order; get back the part holding ``tables`` ({"db.table"}),
    each table's schema renamed by ``rewrite`` ({"db": "new"})."""

    def __init__(self, tables, rewrite=None):
        self.tables, self.rewrite = set(tables), dict(rewrite or {})
        self.db = None             # the dump's current schema
        self.used = None           # the schema our output is in (after our USE)
        self.section = "head"      # "head" | "keep" | "drop"
        self.in_statement = False  # inside a statement (kept or not) spanning lines
        self.keeping = False       # that statement is kept
        self.delimited = False     # inside DELIMITER ;; ... DELIMITER ; (routines, triggers)
        self.found = set()         # wanted tables seen in the dump
        self._rest = b""

    def feed(self, data):
        """The kept bytes of the complete lines in ``self._rest + data``."""
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        return b"".join(self._line(line + b"\n") for line in lines)

    def finish(self):
        """The kept part of the last line (a dump ends with a newline: usually none)."""
        rest, self._rest = self._rest, b""
        return self._line(rest) if rest else b""

    def missing(self):
        """Wanted tables the dump did not hold (after ``finish``)."""
        return sorted(self.tables - self.found)

    def _line(self, line):
        if self.delimited or line.startswith(b"DELIMITER ;;"):
            self.delimited = not line.startswith(b"DELIMITER ;\n") and line.strip() != \
                b"DELIMITER ;"
            return line if self.section == "head" else b""
        if self.in_statement:
            return self._continue(line)
        header = _HEADER.match(line.rstrip(b"\n"))
        if header:
            return self._header(header[1], header["name"].replace(b"``", b"`").decode())
        if self.section == "head":
            return line
        if self.section == "keep" and line.startswith(KEPT):
            return self._start(line, True)
        if line.startswith(b"--") or not line.strip():
            return b""
        return self._start(line, False)

    def _start(self, line, keep):
        self.keeping = keep
        self.in_statement = not line.rstrip().endswith(b";")
        return line if keep else b""

    def _continue(self, line):
        if line.rstrip().endswith(b";"):
            self.in_statement = False
        return line if self.keeping else b""

    def _header(self, kind, name):
        if kind == b"Current Database":
            self.db, self.section = name, "drop"
            return b""
        if kind not in (b"Table structure for table", b"Dumping data for table"):
            self.section = "drop"
            return b""
        wanted = f"{self.db}.{name}" in self.tables
        self.section = "keep" if wanted else "drop"
        if not wanted:
            return b""
        self.found.add(f"{self.db}.{name}")
        return self._use(self.rewrite.get(self.db, self.db))

    def _use(self, schema):
        if schema == self.used:
            return b""
        self.used = schema
        quoted = quote_name(schema).encode()
        return b"CREATE DATABASE IF NOT EXISTS " + quoted + b";\nUSE " + quoted + b";\n"
