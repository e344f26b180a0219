"""What a logged SQL statement is and which tables it names (pure, no SQL parser: the
leading words of the statement, as a person reading the binlog would tell).

A QUERY event holds DDL (CREATE, ALTER, DROP, RENAME, TRUNCATE, GRANT, ...) or, with
binlog_format STATEMENT or MIXED, the DML itself. ``statement_kind`` names it: 'begin'
and 'commit' (the brackets of a transaction, XA's included), 'savepoint' (SAVEPOINT,
ROLLBACK TO, RELEASE SAVEPOINT), 'insert' (INSERT, REPLACE, LOAD DATA), 'update',
'delete', or 'ddl' for anything else. ``statement_tables`` gives the tables
it names, as 'db.table' (an unqualified name is the statement's default schema), and
'db.*' for a statement on a whole schema (CREATE / DROP / ALTER DATABASE): the target
of INSERT / REPLACE / LOAD DATA, of UPDATE, of DELETE ... FROM, of CREATE / ALTER / DROP
TABLE or VIEW, TRUNCATE, RENAME TABLE (both names of each pair), and CREATE / DROP INDEX
... ON. Leading comments are skipped, and a versioned comment (``/*!50001 ...*/``, as
servers and dumps write) is read as the statement it holds. Anything else names no
table.
"""

import re

from mysqlbackup.binlog.transactions import classify_sql

_COMMENT = re.compile(r"\s*(?:/\*(?!!)(?:.|\n)*?\*/|--[^\n]*\n?|#[^\n]*\n?)")
_VERSIONED = re.compile(r"\s*/\*!\d*\s?")
_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_QUALIFIED = rf"({_NAME}(?:\s*\.\s*{_NAME})?)"
_OPTIONS = r"(?:(?:LOW_PRIORITY|DELAYED|HIGH_PRIORITY|IGNORE|QUICK|CONCURRENT|LOCAL)\s+)*"
_PATTERNS = [  # (kind, pattern whose groups are the table names)
    ("insert", rf"(?:INSERT|REPLACE)\s+{_OPTIONS}(?:INTO\s+)?{_QUALIFIED}"),
    ("insert", rf"LOAD\s+(?:XML|DATA)\b.*?\bINTO\s+TABLE\s+{_QUALIFIED}"),
    ("update", rf"UPDATE\s+{_OPTIONS}{_QUALIFIED}"),
    ("delete", rf"DELETE\s+{_OPTIONS}(?:.*?\s)??FROM\s+{_QUALIFIED}"),
    ("ddl", rf"(?:CREATE|ALTER|DROP)\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+|ONLINE\s+|"
            rf"IGNORE\s+|ALGORITHM\s*=\s*\w+\s+|DEFINER\s*=\s*\S+\s+|"
            rf"SQL\s+SECURITY\s+\w+\s+)*(?:TABLE|VIEW)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
            rf"{_QUALIFIED}"),
    ("ddl", rf"TRUNCATE\s+(?:TABLE\s+)?{_QUALIFIED}"),
    ("ddl", rf"(?:CREATE|DROP)\s+(?:ONLINE\s+|UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)*INDEX\s+"
            rf"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_NAME}\s+ON\s+{_QUALIFIED}"),
]
_COMPILED = [(kind, re.compile(pattern, re.I | re.S)) for kind, pattern in _PATTERNS]
_DML = re.compile(r"(INSERT|REPLACE|LOAD|UPDATE|DELETE)\b", re.I)
_RENAME = re.compile(r"RENAME\s+TABLES?\s+(.*)", re.I | re.S)
_PAIR = re.compile(rf"{_QUALIFIED}\s+TO\s+{_QUALIFIED}", re.I)
_DROP_TABLES = re.compile(rf"DROP\s+(?:TEMPORARY\s+)?TABLES?\s+(?:IF\s+EXISTS\s+)?"
                          rf"({_QUALIFIED}(?:\s*,\s*{_QUALIFIED})*)", re.I)
_LIST = re.compile(_QUALIFIED)
_DATABASE = re.compile(rf"(?:CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)\s+"
                       rf"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?({_NAME})", re.I)
_SAVEPOINT = re.compile(r"(?:SAVEPOINT|ROLLBACK\s+(?:WORK\s+)?TO|RELEASE\s+SAVEPOINT)\b", re.I)
_XA = re.compile(r"XA\s+(?:(END|PREPARE)|(COMMIT|ROLLBACK))\b", re.I)
_KINDS = {"INSERT": "insert", "REPLACE": "insert", "LOAD": "insert", "UPDATE": "update",
          "DELETE": "delete"}


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text):
    """``text`` with its control characters as ``\\xNN``: nothing a terminal acts on."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def bare(sql):
    """The statement without its leading comments (a versioned comment's content kept)."""
    pos = 0
    while True:
        match = _COMMENT.match(sql, pos) or _VERSIONED.match(sql, pos)
        if not match or match.end() == pos:
            return sql[pos:].lstrip()
        pos = match.end()


def statement_kind(sql):
    """'begin', 'commit', 'savepoint', 'insert', 'update', 'delete' or 'ddl' (see the
    module)."""
    text = bare(sql)
    bracket = classify_sql(text)
    if bracket != "other":
        return bracket
    if _SAVEPOINT.match(text):
        return "savepoint"
    xa = _XA.match(text)
    if xa:
        return "begin" if xa[1] else "commit"
    match = _DML.match(text)
    if match and (match[1].upper() != "LOAD" or re.match(r"LOAD\s+(DATA|XML)\b", text, re.I)):
        return _KINDS[match[1].upper()]
    return "ddl"


def statement_tables(sql, db):
    """['db.table', ...] that the statement names (``db``: its default schema), in
    order, without repeats; 'db.*' for a whole schema."""
    text = bare(sql)
    found = []
    rename = _RENAME.match(text)
    drop = _DROP_TABLES.match(text)
    if rename:
        for pair in _PAIR.finditer(rename[1]):
            found += [pair[1], pair[2]]
    elif drop:
        found = [m[1] for m in _LIST.finditer(drop[1])]
    elif _DATABASE.match(text):
        return [f"{_unquote(_DATABASE.match(text)[1])}.*"]
    else:
        for _, pattern in _COMPILED:
            match = pattern.match(text)
            if match:
                found = [match[1]]
                break
    out = []
    for name in (_qualified(n, db) for n in found):
        if name not in out:
            out.append(name)
    return out


def _qualified(name, db):
    parts = re.findall(_NAME, name)
    if len(parts) == 1:
        return f"{db or ''}.{_unquote(parts[0])}"
    return f"{_unquote(parts[0])}.{_unquote(parts[1])}"


def _unquote(name):
    if name.startswith("`") and name.endswith("`"):
        return name[1:-1].replace("``", "`")
    return name
