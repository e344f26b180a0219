"""The change table (``replay --parquet``) against the source (the fidelity suite's): the
table ``f.types`` holds every column type at its edges and was empty at the base, so
the row changes of the first section, folded by primary key, must give exactly the rows
the source holds at that checkpoint, each value in the change table's encoding
(``replay.job.decoding.changes``); rows a ROLLBACK TO SAVEPOINT undid are absent;
``_SUCCESS`` names what the table cannot hold."""

import base64
import datetime
import decimal
import json

import pyarrow.dataset as pads

from tests.fidelity_run import SOURCE
from tests.helpers import run_cli


def change_table(source, stop, url, start=None):
    """``replay --parquet`` from ``start`` (a Checkpoint; None: the base) to ``stop``
    (a Checkpoint or Mark): (rows as dicts, _SUCCESS, the run)."""
    done = run_cli("replay", "--archive", source.url, "--source-name", SOURCE,
                   "--start-gtid", start.gtids if start else source.manifest["gtid"],
                   *source.stop_args(stop), "--parquet", url, "--engine", "spark",
                   password="", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    path = url[len("file://"):]
    rows = pads.dataset(path, format="parquet").to_table().to_pylist()
    with open(f"{path}/_SUCCESS") as f:
        return rows, json.load(f), done


def folded(rows, db, table):
    """The final image of each row of ``db.table`` the changes give, by primary key."""
    state = {}
    for row in rows:
        if (row["db"], row["table"]) != (db, table):
            continue
        key = row["pk"]
        if row["op"] == "delete":
            state.pop(key, None)
        else:
            state[key] = json.loads(row["after"])
    return sorted(state.values(), key=lambda image: image["id"])


def source_images(server, db, table):
    """The source's rows of ``db.table`` in the change table's encoding."""
    conn = server.root()
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SELECT column_name, data_type, column_type FROM "
                        "information_schema.columns WHERE table_schema = %s AND "
                        "table_name = %s ORDER BY ordinal_position", (db, table))
            columns = cur.fetchall()
            cur.execute(f"SELECT * FROM `{db}`.`{table}` ORDER BY id")
            return [{name: encoded(value, kind, full) for (name, kind, full), value
                     in zip(columns, row)} for row in cur.fetchall()]
    finally:
        conn.close()


def encoded(value, kind, full):
    """A value as the source's SELECT gives it, in the change table's encoding."""
    if value is None or (isinstance(value, str) and value.startswith("0000-00-00")):
        return None
    if kind == "bit":
        width = int(full[4:-1])
        return format(int.from_bytes(value, "big"), f"0{width}b")
    if kind == "set":
        members = [m.strip("'") for m in full[4:-1].split(",")]
        return [m for m in members if m in value.split(",")]
    if kind == "timestamp" and value == datetime.datetime(1970, 1, 1):
        return None
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime):
        return value.isoformat() + ("Z" if kind == "timestamp" else "")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        from replay.job.decoding.changejson import time_text
        return time_text(value)
    return value


def same_images(got, want, float_columns=("fl",)):
    """Differences between two lists of images; FLOAT compared to 6 digits (the source's
    SELECT prints FLOAT so, the change table keeps the double the 4 bytes hold)."""
    out = []
    for g, w in zip(got, want):
        for name in sorted(set(g) | set(w)):
            a, b = g.get(name), w.get(name)
            if name in float_columns and isinstance(a, float) and isinstance(b, float):
                a, b = float(f"{a:.6g}"), float(f"{b:.6g}")
            if a != b:
                out.append(f"id {w.get('id')} {name}: change table {g.get(name)!r}, source "
                           f"{w.get(name)!r}")
    if len(got) != len(want):
        out.append(f"{len(got)} rows in the change table, {len(want)} at the source")
    return out


def rows_event_offsets(server, name):
    """The offsets of the rows events (plain or compressed) of the source's file
    ``name``: where each change's ``position`` must point."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.binlog.scan import iter_events
    with open(server.binlog_path(name), "rb") as f:
        data = f.read()
    return {off for off, e in iter_events(data, 4, True)
            if e[4] in ev.ROWS_EVENTS or e[4] == ev.TRANSACTION_PAYLOAD}


def check_change_table(source, tmp_path):
    """The checks of the module's docstring, on ``source`` (a fidelity Source)."""
    mark = source.marks["change table"]
    rows, success, _ = change_table(source, mark, f"file://{tmp_path / 'rows'}")
    # every change names the rows event it came from (MariaDB 11.4+ gives those inside a
    # transaction no end position: the offset comes from where the event lies)
    offsets = {name: rows_event_offsets(source.server, name) for name in {r["file"] for r in rows}}
    misplaced = [(r["file"], r["position"]) for r in rows
                 if r["position"] not in offsets[r["file"]]]
    assert misplaced == [], misplaced[:5]
    problems = same_images(folded(rows, "f", "types"), mark.types)
    assert problems == [], "\n".join(problems)
    orders = {json.loads(r["after"])["who"] for r in rows
              if r["table"] == "orders" and r["after"]}
    assert {"kept", "after", "mixed"} <= orders and not orders & {"undone", "gone"}, orders
    # the cascade of DELETE FROM f.parent WHERE id = 1 deleted two rows of f.child:
    # MariaDB's binlog does not hold them, and the table's _SUCCESS says so; MySQL 9.x
    # applies foreign keys above the engine and logs them
    child = [(r["op"], json.loads(r["before"])["id"]) for r in rows if r["table"] == "child"]
    assert child == ([] if source.flavor == "mariadb" else [("delete", 1), ("delete", 2)]), \
        child
    assert "CASCADE" in success["not_in_table"]["why"], success
    assert success["not_in_table"]["statements"] == 0, success
    statements, checkpoints = source.checkpoints[1], source.checkpoints
    rows, success, done = change_table(source, statements, f"file://{tmp_path / 'sbr'}",
                                       start=checkpoints[0])
    left = success["not_in_table"]
    assert left["statements"] == len(left["first_statements"]) > 10, left
    assert {s["statement"] for s in left["first_statements"]} == {"INSERT", "UPDATE",
                                                                  "LOAD"}, left
    assert "statement-based DML statements are not in the table" in done.stderr, done.stderr
