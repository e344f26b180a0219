"""How ``archive find`` prints a match: one line of text, or one object of its JSON
document (pure).

A line: GTID ('-' without one), commit time (UTC), FILE:START-END, the changes
(``Change.text``: 'shop.orders delete 3 rows, shop.customers update 1 row'; past
``CHANGES_SHOWN`` of them, how many more) and, after ' -- ', the statement: the DDL or
statement-based DML itself, or the query the server annotated the rows with; the one
behind the first change the search asked for, else the first the transaction has.
The GTID comes first, so ``cut -d' ' -f1`` gives it.
"""

import json

from replay.job.decoding.summary import format_changes

CHANGES_SHOWN = 10


def statement_of(summary, hits):
    """(statement, 'query' or 'annotate') shown for a match; (None, None) without one."""
    for change in list(hits) + list(summary.changes):
        if change.statement is not None:
            return change.statement, change.source
    return None, None


def match_line(summary, hits):
    """The one line of text of a match."""
    changes = summary.changes
    shown = format_changes(changes[:CHANGES_SHOWN])
    if len(changes) > CHANGES_SHOWN:
        shown += f" (and {len(changes) - CHANGES_SHOWN} more)"
    statement, _ = statement_of(summary, hits)
    return (f"{summary.gtid or '-'} {summary.commit_time} {summary.file}:{summary.start}-"
            f"{summary.end} {shown}" + (f" -- {statement}" if statement else ""))


def match_object(summary, hits):
    """The JSON object of a match."""
    statement, source = statement_of(summary, hits)
    return {"gtid": summary.gtid, "commit_time": summary.commit_time, "epoch": summary.epoch,
            "file": summary.file, "start": summary.start, "end": summary.end,
            "rows": summary.rows,
            "changes": [{"table": c.table, "kind": c.kind, "rows": c.rows,
                         "statement": c.statement, "statement_from": c.source}
                        for c in summary.changes],
            "matched": [summary.changes.index(c) for c in hits],
            "statement": statement, "statement_from": source}


class JsonWriter:
    """One JSON document written a match at a time (``write`` each line it gives):
    ``{"source": ..., "matches": [...], "scanned": {...}}``; nothing is held."""

    def __init__(self, write):
        self.write, self.count = write, 0

    def begin(self, source):
        """The document's start."""
        self.write('{"source": ' + json.dumps(source) + ', "matches": [')

    def match(self, summary, hits):
        """One match."""
        self.write(("\n " if self.count == 0 else ",\n ")
                   + json.dumps(match_object(summary, hits)))
        self.count += 1

    def end(self, scanned):
        """The document's end, with what was scanned."""
        self.write(("\n" if self.count else "") + '], "scanned": ' + json.dumps(scanned)
                   + "}\n")
