"""Checks of archived binlogs (pure: index dicts in, problems out).

Each problem is a short sentence that names the object and, where it applies,
the offset. ``verify`` (the I/O side) feeds these with what it reads (the bytes
themselves it checks as they stream: ``index.IndexBuilder``).
"""

from mysqlbackup.archive.names import binlog_key, format_key, partial_prefix, segment_key
from mysqlbackup.binlog.names import next_binlog_name

# index fields that must equal the ones recomputed from the object's bytes
_COMPARED = ("size", "sha256", "transactions", "first_gtid", "last_gtid", "first_commit",
             "last_commit", "next_file", "gtid_before", "gtid_after")


def compare_index(where, index, fresh):
    """Problems where ``index`` differs from ``fresh`` (recomputed from the object's bytes)."""
    return [f"{where}: index says {field} {index.get(field)!r}, the object has {fresh[field]!r}"
            for field in _COMPARED if index.get(field) != fresh[field]]


def check_chain(source, indexes):
    """Problems in the order of sealed files: missing files, GTID holes.

    ``indexes``: the index dicts of the sealed files, oldest first.
    """
    problems = []
    for prev, cur in zip(indexes, indexes[1:]):
        where = format_key(binlog_key(source, cur["name"]))
        expected = prev.get("next_file") or next_binlog_name(prev["name"])
        if expected != cur["name"]:
            problems.append(f"{format_key(binlog_key(source, expected))}: missing "
                            f"({prev['name']} is followed by it, the archive goes on with "
                            f"{cur['name']})")
        elif prev.get("gtid_after") != cur.get("gtid_before"):
            problems.append(f"{where}: GTID hole: {prev['name']} ends at "
                            f"{prev.get('gtid_after')!r}, {cur['name']} starts after "
                            f"{cur.get('gtid_before')!r}")
    return problems


def check_segments(source, name, segments, last_sealed, in_flight=()):
    """Problems of the active file's segments: contiguous from 0, after the last sealed file.

    ``segments``: (start, end, index or None) sorted by start; a segment whose start
    is in ``in_flight`` may lack its index (its upload is under way).
    """
    where = partial_prefix(source, name)
    problems, pos = [], 0
    for start, end, index in segments:
        if start != pos:
            problems.append(f"{where} at offset {pos}: segment missing (next starts at {start})")
        if index is None and start not in in_flight:
            problems.append(f"{format_key(segment_key(source, name, start, end))}: no index "
                            f"(upload not finished)")
        pos = end
    if last_sealed and last_sealed.get("next_file") not in (None, name):
        problems.append(f"{where}: follows {last_sealed['name']}, whose ROTATE names "
                        f"{last_sealed['next_file']}")
    return problems
