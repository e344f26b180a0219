"""The tables of a dump base, read as its SQL streams by (pure, no I/O): each ``CREATE
TABLE`` of ``mariadb-dump``/``mysqldump --all-databases`` under the ``USE`` before it,
its columns' names, SQL types and nullability, its primary key.

A dump writes one column a line (two spaces, the name in backticks, its type, ``NOT
NULL`` unless it may be NULL) and the key after them (``  PRIMARY KEY (`a`,`b`)``);
the ``)`` of the statement's end closes the table. Only those lines are looked at: any
other line (an INSERT of many megabytes) is passed over without being kept, so memory
stays bounded by the schema, never by the data.
"""

from dataclasses import dataclass

MAX_KEPT_LINE = 64 << 10   # a line longer than this is no line of a table's columns


@dataclass(frozen=True)
class Columns:
    """The columns of one table: names, SQL types (DATA_TYPE: 'int', 'varchar'),
    nullability and the primary key's column indexes."""

    names: tuple
    data_types: tuple
    nullable: tuple
    primary_key: tuple = ()


class SchemaScan:
    """Feed it a dump's bytes (``feed``, then ``finish``; each returns b'': nothing is
    passed on); ``tables`` then maps (schema, table) to its Columns."""

    def __init__(self):
        self.tables = {}
        self._tail, self._skipping = b"", False
        self._schema, self._table, self._columns = None, None, []

    def feed(self, data):
        """Take the next bytes of the dump."""
        lines = data.split(b"\n")
        for i, line in enumerate(lines):
            last = i == len(lines) - 1
            if self._skipping:
                self._skipping = last  # the long line ends at the next newline
                continue
            line = self._tail + line if i == 0 else line
            if last:
                self._tail = line if len(line) <= MAX_KEPT_LINE else b""
                self._skipping = len(line) > MAX_KEPT_LINE
                continue
            self._line(line)
        return b""

    def finish(self):
        """The end of the dump."""
        if self._tail and not self._skipping:
            self._line(self._tail)
        self._tail = b""
        return b""

    def _line(self, raw):
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if self._table is not None:
            self._in_table(line)
        elif line.startswith("USE `"):
            self._schema = _quoted(line[4:])[0]
        elif line.startswith("CREATE TABLE `") and line.endswith("("):
            self._table, self._columns, self._key = _quoted(line[13:])[0], [], ()

    def _in_table(self, line):
        if line.startswith("  `"):
            name, rest = _quoted(line[2:])
            words = rest.split()
            kind = words[0].split("(")[0].lower() if words else ""
            self._columns.append((name, kind, "NOT NULL" not in rest.upper()))
        elif line.startswith("  PRIMARY KEY ("):
            names = [c[0] for c in self._columns]
            self._key = tuple(names.index(n) for n in _names_in(line[15:]) if n in names)
        elif line.startswith(")"):
            if self._schema is not None and self._columns:
                names, kinds, nullable = zip(*self._columns)
                self.tables[(self._schema, self._table)] = Columns(names, kinds, nullable,
                                                                   self._key)
            self._table = None


def _quoted(text):
    """(the name in backticks at the start of ``text``, the text after it); a doubled
    backtick inside is one backtick."""
    name, i = [], 1
    while i < len(text):
        if text[i] == "`":
            if text[i + 1:i + 2] == "`":
                name.append("`")
                i += 2
                continue
            return "".join(name), text[i + 1:]
        name.append(text[i])
        i += 1
    return "".join(name), ""


def _names_in(text):
    """The backticked names of a key's column list (a prefix length after one dropped)."""
    names = []
    while "`" in text:
        name, text = _quoted(text[text.index("`"):])
        names.append(name)
    return names
