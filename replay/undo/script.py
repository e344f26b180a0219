"""``undo --sql FILE``: the reversal as a SQL script, for review or for a server the tool
cannot reach (local I/O: the file, written durably).

The script is what the engine's client runs: the binlog's format description, then one
transaction of ``BINLOG`` statements, each the reversal of one rows event (its TABLE_MAP
and the reversed rows: ``reverse.reversed_event``), newest first, a comment before each
saying which table, what it undoes and where the original lies. Its header says plainly
that it carries no conflict check: run against rows changed since, it overwrites them.
"""

import base64

from mysqlbackup.durable import open_durably
from replay.job.sinks.statements import MYSQL_GTID_AUTOMATIC
from replay.undo.reverse import reversed_event, row_spans

_UNDOES = {"insert": "deletes the rows it inserted", "delete": "inserts back the rows it "
           "deleted", "update": "updates back the rows it updated"}


def write_script(path, plans, source):
    """Write the script of ``plans`` ([(Found, Changes)] in commit order) to ``path``;
    the rows it reverses."""
    rows = 0
    with open_durably(path) as out:
        gtids = ", ".join(found.gtid for found, _ in plans)
        first = plans[0][0]
        out.write(_text(
            f"-- mysqlbackup undo of {gtids} (source {source})\n"
            "-- NO CONFLICT CHECK: this script reverses the rows whatever they hold now. Run\n"
            "-- against rows changed since the transaction(s), it overwrites those changes.\n"
            "-- `mysqlbackup undo --target` checks every row first and refuses on a "
            "difference.\n"
            f"-- Apply with the {'mariadb' if first.mariadb else 'mysql'} client; the user "
            "needs BINLOG REPLAY or SUPER (MariaDB), BINLOG_ADMIN or SUPER (MySQL).\n"))
        out.write(_binlog([first.fde_event]))
        if not first.mariadb:
            out.write(_text(MYSQL_GTID_AUTOMATIC + ";\n"))
        out.write(b"START TRANSACTION;\n")
        for found, changes in reversed(plans):
            for step in reversed(changes.steps):
                table = changes.maps[step.table_id]
                event = found.events[step.index]
                start, spans = row_spans(event, changes.layouts[step.table_id], found.fde,
                                         found.checksum)
                rows += len(spans)
                out.write(_text(f"-- {table.schema}.{table.table}: {_UNDOES[step.kind]} "
                                f"({len(spans)} row(s); {found.gtid} at "
                                f"{found.where(step.index)})\n"))
                undone = reversed_event(event, spans, start, found.fde, found.checksum)
                out.write(_binlog([found.events[step.table_map], undone]))
        out.write(b"COMMIT;\n")
    return rows


def _binlog(events):
    return b"BINLOG '" + base64.b64encode(b"".join(events)) + b"';\n"


def _text(text):
    return text.encode("utf-8", "replace")
