"""Which archived objects a replay reads, in order (pure over the archive's indexes).

A unit is one binlog file: a sealed object, or the segments of the newest
(partial) file. Units wholly inside the start GTID set, before the start
position or after the stop point are left out without being read. A hole in the
chain (a missing file, a GTID gap) is refused unless ``allow_gaps``.
"""

from mysqlbackup.archive_check import check_chain
from mysqlbackup.errors import ResyncRequired, UsageError
from mysqlbackup.names import binlog_sort_key


def pick_source(sources, wanted):
    """The one source to replay: ``wanted``, or the only one in the archive."""
    if wanted:
        if wanted not in sources:
            raise UsageError(f"the archive has no source {wanted!r} (it has: "
                             f"{', '.join(sources) or 'nothing'})")
        return wanted
    if len(sources) != 1:
        raise UsageError(f"the archive holds {len(sources)} sources ({', '.join(sources)}): "
                         f"name one with --source-name")
    return sources[0]


def plan_units(source, sealed, partial, start=None, stop=None, allow_gaps=False):
    """(ordered units to read, True when the stop point cut later files off).

    ``sealed``: [(name, data key or None, index or None)] oldest first;
    ``partial``: (name, [(start, end, data key, index)]) of the newest file or None;
    ``start`` / ``stop``: callables index -> True when the file is wholly before
    the start / wholly after the stop.
    """
    problems = [f"{source}/binlog/{name}: not verified or missing its object"
                for name, key, index in sealed if key is None or index is None]
    indexes = [index for _, _, index in sealed if index is not None]
    problems += check_chain(source, indexes)
    units = [{"name": name, "keys": [key], "index": index, "partial": False}
             for name, key, index in sealed if key is not None and index is not None]
    if partial:
        units.append(_partial_unit(source, partial, indexes[-1] if indexes else None, problems))
    if problems and not allow_gaps:
        raise ResyncRequired("the archive has holes: " + "; ".join(problems)
                             + " (--allow-gaps replays across them)")
    units = [u for u in units if not (start and start(u["index"]))]
    kept = []
    for unit in units:
        if stop and stop(unit["index"]):
            break
        kept.append(unit)
    return sorted(kept, key=lambda u: binlog_sort_key(u["name"])), len(kept) < len(units)


def _partial_unit(source, partial, last_sealed, problems):
    name, segments = partial
    pos, keys, indexes = 0, [], []
    for start, end, key, index in sorted(segments, key=lambda s: s[0]):
        if start != pos or key is None or index is None:
            problems.append(f"{source}/partial/{name}: segment missing at offset {pos}")
            break
        keys.append(key)
        indexes.append(index)
        pos = end
    merged = dict(indexes[-1]) if indexes else {"name": name}
    if indexes:
        merged["gtid_before"] = indexes[0].get("gtid_before")
        merged["first_commit"] = next((i["first_commit"] for i in indexes if i["first_commit"]),
                                      None)
    if last_sealed and last_sealed.get("next_file") not in (None, name):
        problems.append(f"{source}/partial/{name} does not follow {last_sealed['name']}")
    return {"name": name, "keys": keys, "index": merged, "partial": True}
