"""The differential fidelity harness (no tests here: ``test_fidelity*.py`` use it).

A source runs a broad workload in sections (``tests.workload``); between sections the
source is quiet and its state is a *checkpoint*. Each way the tool restores is compared,
at every checkpoint, with the engine's own pipe (``mariadb-binlog | mariadb``,
``mysqlbinlog | mysql``) from the same base, and both with the source at that moment:
table by table (CHECKSUM TABLE and the ordered rows), schema (SHOW CREATE of tables,
views, routines, triggers, sequences) and the GTID state.

What the pipe itself cannot give back, and why, is in ``PIPE_LIMITS``: the one place
a comparison with the source looks away.
"""

import hashlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field

# The pipe's own limits against the source, each with its reason: a column, compared
# with the source, is compared as the limit says (never left out silently). The tool is
# compared with the pipe with none of them.
PIPE_LIMITS = {
    "float-in-dumps": (
        "a FLOAT column's values that come from the dump base: mariadb-dump and mysqldump "
        "print FLOAT with 6 significant digits, so a value such as 3.4028235e38 loads back "
        "as 3.40282e38 (both sides are compared rounded to 6 digits)"),
    "trigger-auto-increment": (
        "MySQL: the AUTO_INCREMENT a trigger takes in a statement-based transaction (the "
        "f.audit rows the orders trigger inserts): the binlog carries the statement's own "
        "INSERT_ID, not the trigger's, so the target's counter decides, and on the source "
        "a rolled-back insert moved that counter where the binlog (in rows, the rollback "
        "left out) moves nothing; f.audit's id is left out of the comparison with the "
        "source (MariaDB logs the rolled-back rows and the ROLLBACK TO, and matches)"),
}
# (flavor, table) -> column indexes a limit leaves out of the comparison with the source
MASKED = {("mysql", "f.audit"): {0}}
SYSTEM_SCHEMAS = {"mysql", "information_schema", "performance_schema", "sys",
                  "mysqlbackup_replay"}


@dataclass
class Fingerprint:
    """What a server holds, in comparable form: per table its CREATE, CHECKSUM and
    ordered rows (a digest and the rows themselves, for a readable difference), the
    schema's other objects, and the GTID state."""

    tables: dict = field(default_factory=dict)    # "db.t" -> {"create", "checksum", "rows"}
    objects: dict = field(default_factory=dict)   # "view db.v" / "procedure db.p" -> text
    gtid: dict = field(default_factory=dict)      # variable -> value

    def differences(self, other, float_columns=None, ignore_auto_increment=False,
                    masked=None):
        """Lines naming each difference from ``other`` (empty when the same).
        ``float_columns``: {"db.t": {column index}} compared rounded, ``masked``: {"db.t":
        {column index}} left out (both PIPE_LIMITS)."""
        out = []
        for name in sorted(set(self.tables) | set(other.tables)):
            mine, theirs = self.tables.get(name), other.tables.get(name)
            if mine is None or theirs is None:
                out.append(f"table {name}: only on the {'other' if mine is None else 'first'}"
                           " side")
                continue
            out += _table_differences(name, mine, theirs, (float_columns or {}).get(name, ()),
                                      ignore_auto_increment, (masked or {}).get(name, ()))
        for name in sorted(set(self.objects) | set(other.objects)):
            if self.objects.get(name) != other.objects.get(name):
                out.append(f"{name}: {self.objects.get(name)!r} != {other.objects.get(name)!r}")
        return out


def _table_differences(name, mine, theirs, floats, ignore_auto_increment, masked=()):
    out = []
    create = [_create_text(t["create"], ignore_auto_increment) for t in (mine, theirs)]
    if create[0] != create[1]:
        out.append(f"table {name}: CREATE differs:\n  {create[0]}\n  {create[1]}")
    rows = [sorted((_masked(_rounded(r, floats), masked) for r in t["rows"]), key=repr)
            for t in (mine, theirs)]
    if rows[0] != rows[1]:
        out.append(f"table {name}: rows differ ({len(rows[0])} vs {len(rows[1])}); "
                   f"first difference: {_first_difference(*rows)}")
    elif not floats and not masked and mine["checksum"] != theirs["checksum"]:
        out.append(f"table {name}: CHECKSUM TABLE {mine['checksum']} != {theirs['checksum']}")
    return out


def _create_text(create, ignore_auto_increment):
    return re.sub(r" AUTO_INCREMENT=\d+", "", create) if ignore_auto_increment else create


def _rounded(row, floats):
    if not floats:
        return row
    return tuple(float(f"{v:.6g}") if i in floats and isinstance(v, float) else v
                 for i, v in enumerate(row))


def _masked(row, masked):
    return tuple(None if i in masked else v for i, v in enumerate(row)) if masked else row


def _first_difference(a, b):
    """The first row that differs, and the rows only one side has (a few)."""
    only = ([r for r in a if r not in b][:3], [r for r in b if r not in a][:3])
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"row {i}: {x!r} != {y!r}; only here: {only[0]!r}, only there: {only[1]!r}"
    return f"row {min(len(a), len(b))}: only here: {only[0]!r}, only there: {only[1]!r}"


def fingerprint(server, flavor):
    """The Fingerprint of every user schema of ``server`` (a sandbox)."""
    fp = Fingerprint()
    conn = server.root()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_schema, table_name, table_type FROM "
                        "information_schema.tables ORDER BY 1, 2")
            for db, name, kind in cur.fetchall():
                if db in SYSTEM_SCHEMAS:
                    continue
                if kind == "VIEW":
                    cur.execute(f"SHOW CREATE VIEW `{db}`.`{name}`")
                    fp.objects[f"view {db}.{name}"] = cur.fetchone()[1]
                    continue
                fp.tables[f"{db}.{name}"] = _table(cur, db, name, kind)
            _routines(cur, fp)
            _triggers(cur, fp)
            fp.gtid = _gtid_state(cur, flavor)
    finally:
        conn.close()
    return fp


def _table(cur, db, name, kind):
    cur.execute(f"SHOW CREATE TABLE `{db}`.`{name}`")
    create = cur.fetchone()[1]
    cur.execute(f"CHECKSUM TABLE `{db}`.`{name}`")
    checksum = cur.fetchone()[1]
    cur.execute(f"SELECT * FROM `{db}`.`{name}`")
    width = len(cur.description)
    rows = sorted((tuple(_comparable(v) for v in row) for row in cur.fetchall()), key=repr)
    return {"create": create, "checksum": checksum, "rows": rows, "width": width,
            "kind": kind}


def _comparable(value):
    """A value as compared: a long bytes/str value by its length and digest."""
    if isinstance(value, (bytes, bytearray, str)) and len(value) > 256:
        raw = value if isinstance(value, (bytes, bytearray)) else value.encode()
        return (type(value).__name__, len(raw), hashlib.sha256(raw).hexdigest())
    return value


def _routines(cur, fp):
    cur.execute("SELECT routine_schema, routine_name, routine_type FROM "
                "information_schema.routines ORDER BY 1, 2, 3")
    for db, name, kind in cur.fetchall():
        if db in SYSTEM_SCHEMAS:
            continue
        cur.execute(f"SHOW CREATE {kind} `{db}`.`{name}`")
        row = cur.fetchone()
        fp.objects[f"{kind.lower()} {db}.{name}"] = (row[1], row[2])  # sql_mode, text


def _triggers(cur, fp):
    cur.execute("SELECT trigger_schema, trigger_name, event_manipulation, action_timing, "
                "event_object_table, action_statement, sql_mode FROM "
                "information_schema.triggers ORDER BY 1, 2")
    for row in cur.fetchall():
        if row[0] not in SYSTEM_SCHEMAS:
            fp.objects[f"trigger {row[0]}.{row[1]}"] = row[2:]


def _gtid_state(cur, flavor):
    names = (("gtid_executed",) if flavor == "mysql" else
             ("gtid_binlog_pos", "gtid_slave_pos", "gtid_current_pos"))
    state = {}
    for name in names:
        cur.execute(f"SELECT @@GLOBAL.{name}")
        state[name] = (cur.fetchone()[0] or "").replace("\n", "")
    return state


def gtid_now(fp, flavor):
    """A Fingerprint's GTID state as a replica of it would start from: MySQL's
    gtid_executed, MariaDB's gtid_current_pos."""
    return fp.gtid["gtid_executed" if flavor == "mysql" else "gtid_current_pos"]


# A transaction whose statements are all on temporary tables (the workload's f.tmp, in
# STATEMENT sessions) leaves no GTID in the binlog of a MariaDB target that logs rows: a
# ROW binlog never logs a temporary table (the engine's own applier's neither); MySQL
# logs its GTID as an empty transaction
TEMPORARY_ONLY = re.compile(r"^(CREATE\s+TEMPORARY|DROP\s+(/\*!40005\s+)?TEMPORARY|"
                            r"INSERT\s+INTO\s+f\.tmp\b)", re.I)
_CONTROL = {"BEGIN", "COMMIT"}


def _no_change():
    from mysqlbackup.binlog import events as ev
    return {ev.TABLE_MAP, ev.XID, ev.MARIA_ANNOTATE_ROWS, ev.ROWS_QUERY, ev.INTVAR,
            ev.RAND, ev.USER_VAR, ev.ROTATE, ev.FORMAT_DESCRIPTION, ev.MARIA_GTID_LIST,
            ev.PREVIOUS_GTIDS, ev.MARIA_BINLOG_CHECKPOINT, ev.STOP}


def logged_gtids(server, groups=False):
    """Every GTID a server's binlog files hold, in order (MariaDB ``D-S-N``, MySQL
    ``UUID[:TAG]:N``): what a replica replaying its binlog would get. ``groups``:
    (GTID, whether its transaction is on temporary tables only) instead."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.binlog.scan import iter_events
    found, no_change = [], _no_change()
    for name in server.binlog_files():
        with open(server.binlog_path(name), "rb") as f:
            data = f.read()
        for _, event in iter_events(data, 4, None, check_log_pos=False):
            kind = event[4]
            if kind == ev.MARIA_GTID:
                g = ev.parse_maria_gtid(event, True)
                found.append([f"{g.domain}-{g.server_id}-{g.seq}", set()])
            elif kind in (ev.GTID, ev.GTID_TAGGED):
                sid, gno = (ev.parse_mysql_gtid if kind == ev.GTID
                            else ev.parse_mysql_gtid_tagged)(event, True)
                found.append([f"{sid}:{gno}", set()])
            elif found and kind == ev.QUERY:
                sql = ev.parse_query(event, True).sql.strip()
                if sql not in _CONTROL:
                    found[-1][1].add("temporary" if TEMPORARY_ONLY.search(sql) else "other")
            elif found and kind not in no_change:
                found[-1][1].add("other")  # rows, compressed events, LOAD DATA, XA ...
    if not groups:
        return [g for g, _ in found]
    return [(g, kinds == {"temporary"}) for g, kinds in found]


def masked_columns(flavor):
    """{"db.t": {column index}} the PIPE_LIMITS leave out of the comparison with the
    source, for ``flavor``."""
    return {table: columns for (f, table), columns in MASKED.items() if f == flavor}


def float_columns(fp):
    """{"db.t": {index of each FLOAT column}} of a Fingerprint (from the CREATE text)."""
    out = {}
    for name, table in fp.tables.items():
        columns = [line.strip() for line in table["create"].splitlines()
                   if line.strip().startswith("`")]
        found = {i for i, line in enumerate(columns) if re.match(r"`[^`]+` float\b", line)}
        if found:
            out[name] = found
    return out


# -- the engine's own tools ------------------------------------------------------------

@dataclass
class Tools:
    """The engine's client and binlog reader (paths), and the PATH that puts them first."""

    flavor: str
    client: str
    binlog: str
    path: str = None

    @classmethod
    def of(cls, flavor, bin_dir=None):
        """The host's MariaDB tools, or (``bin_dir``: wrappers of a tree's) MySQL's or
        MariaDB 11.8's."""
        if bin_dir is None:
            return cls("mariadb", "mariadb", "mariadb-binlog", os.environ["PATH"])
        client, reader = ("mysql", "mysqlbinlog") if flavor == "mysql" else \
            ("mariadb", "mariadb-binlog")
        return cls(flavor, os.path.join(bin_dir, client), os.path.join(bin_dir, reader),
                   str(bin_dir) + os.pathsep + os.environ["PATH"])

    def client_args(self, server, *extra):
        user, password = server.admin
        return [self.client, "--protocol=TCP", "-h127.0.0.1", f"-P{server.port}", f"-u{user}",
                *([f"-p{password}"] if password else []), "--local-infile=1",
                "--binary-mode", *extra]

    def load(self, server, sql_path, *extra):
        """``client < sql_path``; the client's stderr on failure (AssertionError)."""
        with open(sql_path, "rb") as f:
            done = subprocess.run(self.client_args(server, *extra), stdin=f,
                                  capture_output=True, env=dict(os.environ, PATH=self.path))
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]

    def pipe(self, server, files, start, stop):
        """``binlog-reader FILES | client`` from offset ``start`` of the first file to
        offset ``stop`` of the last one (None: its end)."""
        args = [self.binlog, f"--start-position={start}"]
        if stop is not None:
            args.append(f"--stop-position={stop}")
        with tempfile.TemporaryFile() as out:
            subprocess.run(args + [str(f) for f in files], stdout=out, check=True,
                           env=dict(os.environ, PATH=self.path))
            out.seek(0)
            done = subprocess.run(self.client_args(server), stdin=out, capture_output=True,
                                  env=dict(os.environ, PATH=self.path))
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]


def base_dump(store, source, manifest, path):
    """The dump base's SQL, decoded from its archived object into ``path`` (through the
    archive's one reader of objects: zstd and age undone, nothing else)."""
    from mysqlbackup.archive.names import base_key, format_key
    from mysqlbackup.archive.objects import Promise, read_object
    key = format_key(base_key(source, manifest["id"], manifest["member"]))
    with open(path, "wb") as out:
        read_object(store, Promise.of_manifest(key, manifest), out.write)
    return path
