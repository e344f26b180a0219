"""Which archived objects a replay reads, in order, and whether what was read is
what was archived (pure over the archive's indexes and what the tasks report).

A unit is one binlog file: a sealed object, or the segments of the newest
(partial) file. Units wholly inside the start GTID set, before the start
position or after the stop point are left out without being read. A hole in the
chain (a missing file, a GTID gap) is refused unless ``allow_gaps``.

Once decoded, and before anything of it is applied, each unit is checked
(``check_decoded``): every object's size and sha256 against its own index, the
chain facts its bytes hold (GTID state before and after, the file its ROTATE
names) against the unit's index, and (``check_link``) against the unit replayed
before it. A mismatch is a CorruptBinlog naming the object.

A source with a failover history is planned epoch after epoch (``plan_epochs``): each
epoch's chain as above, and each switch checked (``window.switch_problem``). The
units of a later epoch carry ``skip``: the GTID state where the epoch before it ends in
the archive; their transactions within it are duplicates (the new server's first file
holds the old server's transactions too) and are never applied.
"""

from dataclasses import dataclass, replace

from mysqlbackup.archive.codec import IdentityError, check_keys, codec_of, stored_of
from mysqlbackup.archive.index import check_chain
from mysqlbackup.archive.listing import one_source
from mysqlbackup.archive.window import contains, switch_problem
from mysqlbackup.archive.names import binlog_key, format_key, partial_prefix
from mysqlbackup.archive.objects import Promise, raw_problem, stored_forms, stored_problem
from mysqlbackup.binlog.names import binlog_sort_key, next_binlog_name
from mysqlbackup.errors import (ArchiveHoles, CorruptBinlog, MysqlBackupError, ResyncRequired,
                                mask_url)

CHAIN_FACTS = ("gtid_before", "gtid_after", "next_file")


@dataclass(frozen=True)
class UnitObject:
    """One archived object of a unit: its data ``key``, the file offset it ``start``s
    at (0 for a sealed file, the segment's for the newest one) and its ``index`` (the
    archive's index dict of that object)."""

    key: str
    start: int
    index: dict


@dataclass(frozen=True)
class Unit:
    """One binlog file a replay reads (one Spark task): a sealed object, or the segments
    of the newest (``partial``) file.

    ``keys``: the data keys of its ``objects`` (UnitObject), in file order; ``index``:
    the file's index dict (for the newest file, its segments' merged); ``where``: how
    errors name it (the sealed object's key, the newest file's prefix); ``epoch``: the
    epoch of the source's history it belongs to; ``skip``: the GTID state (text) where
    the epoch before ends, whose transactions this unit repeats (None: none);
    ``position``: (start, stop), the unit's epoch against the start and stop positions'
    epochs (-1 before, 0 same, 1 after; (0, 0) when the source has one epoch)."""

    name: str
    keys: tuple
    index: dict
    partial: bool
    where: str
    objects: tuple
    epoch: int = 1
    skip: str = None
    position: tuple = (0, 0)


def pick_source(sources, wanted):
    """The one source to replay: ``wanted``, or the only one in the archive
    (``listing.one_source``: ArchiveNotFound when the URL is no archive, SourceNotFound
    when it does not hold ``wanted`` or is empty, UsageError for a malformed name or
    several sources and none named)."""
    return one_source(sources, wanted)


def plan_units(source, sealed, partial, start=None, stop=None, allow_gaps=False):
    """(ordered units to read, True when the stop point cut later files off).

    ``sealed``: [(name, data key or None, index or None)] oldest first;
    ``partial``: (name, [(start, end, data key, index)]) of the newest file or None;
    ``start`` / ``stop``: callables index -> True when the file is wholly before
    the start / wholly after the stop.
    """
    problems = [f"{format_key(binlog_key(source, name))}: not verified or missing its object"
                for name, key, index in sealed if key is None or index is None]
    indexes = [index for _, _, index in sealed if index is not None]
    problems += check_chain(source, indexes)
    units = [Unit(name, (key,), index, False, key, (UnitObject(key, 0, index),))
             for name, key, index in sealed if key is not None and index is not None]
    if partial:
        unit = _partial_unit(source, partial, indexes[-1] if indexes else None, problems)
        if unit.keys:  # none: the file's first segment is in flight, nothing to read yet
            units.append(unit)
    if problems and not allow_gaps:
        raise ArchiveHoles(problems)
    units = [u for u in units if not (start and start(u.index))]
    kept = []
    for unit in units:
        if stop and stop(unit.index):
            break
        kept.append(unit)
    return sorted(kept, key=lambda u: binlog_sort_key(u.name)), len(kept) < len(units)


def plan_epochs(source, epochs, start=None, stop=None, allow_gaps=False):
    """``plan_units`` over a source's epochs, oldest first: (units, cut).

    ``epochs``: [(epoch, key source, EpochHistory or None, sealed, partial, listed)]
    where sealed and partial are what ``plan_units`` takes, restricted to the files
    asked for, and ``listed`` the (first, last) index of every file of the epoch the
    archive holds (None when it holds none): the switches are checked on those."""
    units, problems, previous, cut = [], [], None, False
    for epoch, key_source, history, sealed, partial, listed in epochs:
        if listed is None:
            continue
        skip = None
        if previous is not None:
            skip = previous[1].get("gtid_after")
            problem = switch_problem(history, previous[1]["name"], skip, listed[0]["name"],
                                     listed[0].get("gtid_before"))
            if problem:
                problems.append(f"{key_source}: {problem}")
        previous = listed
        try:
            more, cut = plan_units(key_source, sealed, partial, start, stop, allow_gaps)
        except ArchiveHoles as e:  # gathered: every hole of every epoch in one message
            problems.extend(e.problems)
            continue
        units += [replace(unit, epoch=epoch, skip=skip) for unit in more]
        if cut:
            break
    if problems and not allow_gaps:
        raise ArchiveHoles(problems)
    return units, cut


def drop_before_start(units, start):
    """``units`` less those wholly before the start position ``start`` (a Position, or
    None: all kept), never read: a unit of an epoch before the start's, or of the start's
    epoch (or of any, when the start's file is in none) and of a file before the
    start's. ``unit.position[0]`` is the unit's epoch against the start's (-1, 0, 1;
    0 too when the source has one epoch). The start's own file stays: its transactions
    before the position are skipped one by one (``Selection.decide``)."""
    if start is None:
        return units
    first = binlog_sort_key(start.file)
    return [u for u in units if not _before_start(u.position[0], binlog_sort_key(u.name),
                                                    first)]


def _before_start(epoch_against_start, name_key, start_key):
    return epoch_against_start < 0 or (epoch_against_start == 0 and name_key < start_key)


def _partial_unit(source, partial, last_sealed, problems):
    name, segments = partial
    pos, keys, indexes, objects = 0, [], [], []
    ordered = sorted(segments, key=lambda s: s[0])
    for i, (start, end, key, index) in enumerate(ordered):
        if start == pos and key is not None and index is None and i == len(ordered) - 1:
            break  # the newest segment's upload is in flight: replay up to the one before
        if start != pos or key is None or index is None:
            problems.append(f"{partial_prefix(source, name)}: segment missing at offset {pos}")
            break
        keys.append(key)
        indexes.append(index)
        objects.append(UnitObject(key, start, index))
        pos = end
    merged = dict(indexes[-1]) if indexes else {"name": name}
    if indexes:
        merged["gtid_before"] = indexes[0].get("gtid_before")
        merged["first_commit"] = next((i["first_commit"] for i in indexes if i["first_commit"]),
                                      None)
    if last_sealed and last_sealed.get("next_file") not in (None, name):
        problems.append(f"{partial_prefix(source, name)} does not follow {last_sealed['name']}")
    return Unit(name, tuple(keys), merged, True, partial_prefix(source, name), tuple(objects))


def check_decoded(unit, result, allow_gaps=False):
    """Refuse a decoded unit that is not what the archive indexed, before any of it is
    applied: a decode error (CorruptBinlog with the object and offset), an object
    whose size or sha256 is not its index's, bytes whose chain facts are not the
    index's, a sealed file ending inside a transaction.

    Returns True when the newest file's last segment is shorter than its index says
    and ``allow_gaps`` lets the replay go on with what it holds (a hole at the end).
    """
    error = result.error
    if error and error.kind not in ("failed", "sink"):
        _raise_task_error(unit, error)
    tail_lost = _check_digests(unit, result.digests, allow_gaps)
    if error and error.kind == "failed":  # the bytes are the archived ones: a bug
        raise RuntimeError(f"decoding {unit.where} failed:\n{error.message}")
    if not tail_lost:
        facts = result.facts
        for field in CHAIN_FACTS:
            if facts.get(field) != unit.index.get(field):
                raise CorruptBinlog(f"the object's bytes give {field} {facts.get(field)!r}, "
                                    f"its index says {unit.index.get(field)!r}; nothing "
                                    "of it was applied", unit.where)
    if result.incomplete and not unit.partial:
        raise ResyncRequired(f"{unit.where} ends inside a transaction (at "
                             f"{result.incomplete['start']}) but is sealed")
    return tail_lost  # a "sink" error (the task could not write) is raised if the
    # replay reaches the file (``run._apply_file``): a stop point before it ignores it


def check_digests(unit, result, allow_gaps=False):
    """Refuse ``unit`` when the (size, sha256) of its objects as stored, in
    ``result.digests``, are not its indexes' (``codec.stored_of``: the raw ones for
    a plain object), or the task could not read them (``result.error``). Returns
    True when ``allow_gaps`` lets the newest file's last segment be short."""
    if result.error:
        _raise_task_error(unit, result.error)
    return _check_digests(unit, result.digests, allow_gaps, stored=True)


def check_listed_sizes(units, sizes, allow_gaps=False):
    """Refuse, before anything at all is applied, a unit whose object the listing shows
    with another size than its index (replaced or cut); the sha256 of each object is
    checked later, when its window is decoded. With ``allow_gaps`` the newest file's
    last segment may be shorter (its tail lost), as ``check_decoded`` allows."""
    for unit in units:
        last = unit.objects[-1] if unit.objects else None
        for obj in unit.objects:
            listed, indexed = sizes.get(obj.key), stored_of(obj.index)[0]
            if listed is None or listed in [size for size, _ in stored_forms(obj.index)]:
                continue
            if allow_gaps and unit.partial and obj is last and listed < indexed:
                refuse_cut_encoded(obj, listed, indexed)
                continue
            raise CorruptBinlog(f"the archive lists {listed} bytes, its index says {indexed}: "
                                "not the archived object (replaced or cut); nothing was "
                                "applied", obj.key)


def check_unit_keys(units, keyring):
    """Refuse, before anything is read, an encrypted object that ``keyring`` cannot open
    (no identity, or its index names only other keys): IdentityError naming it."""
    for unit in units:
        for obj in unit.objects:
            check_keys(obj.key, codec_of(obj.index), obj.index.get("key_ids"), keyring)


def check_link(previous, unit):
    """Refuse ``unit`` (unit, facts) when it does not continue ``previous`` (the unit
    replayed before it): the previous sealed file's ROTATE names another file, or its
    bytes end at another GTID state than the one this unit's bytes start from."""
    (prev, prev_facts), (cur, facts) = previous, unit
    if prev.epoch != cur.epoch:  # a failover: the switch was planned
        if not contains(prev_facts.get("gtid_after"), facts.get("gtid_before")):
            raise CorruptBinlog(f"starts after GTIDs {facts.get('gtid_before')!r}, but "
                                f"{prev.name} (epoch {prev.epoch}) ends at "
                                f"{prev_facts.get('gtid_after')!r}: a hole at the failover; "
                                "nothing of it was applied", cur.where)
        return
    if not prev.partial:
        expected = prev_facts.get("next_file") or next_binlog_name(prev.name)
        if expected != cur.name:
            raise CorruptBinlog(f"its ROTATE names {expected}, but the replay goes on with "
                                f"{cur.name}: the chain is broken", prev.where)
    if prev_facts.get("gtid_after") != facts.get("gtid_before"):
        raise CorruptBinlog(f"starts after GTIDs {facts.get('gtid_before')!r}, but "
                            f"{prev.name} ends at {prev_facts.get('gtid_after')!r}: the "
                            "chain is broken; nothing of it was applied", cur.where)


def object_at(unit, offset):
    """The key of the unit's object that holds file ``offset`` (a segment of the newest
    file, or the sealed object)."""
    objects = unit.objects
    held = [o for o in objects if offset is not None and o.start <= offset]
    return (held[-1] if held else objects[0]).key


def _check_digests(unit, digests, allow_gaps, stored=False):
    """``digests``: of the objects as stored (``stored``) or of their raw bytes."""
    objects = unit.objects
    for i, (obj, got) in enumerate(zip(objects, digests)):
        promise = Promise.of_index(obj.key, obj.index)
        why = stored_problem(promise, got) if stored else raw_problem(promise, got)
        if why is None:
            continue
        want_size = promise.stored_size if stored or promise.codec == "none" \
            else promise.raw_size
        if allow_gaps and unit.partial and i == len(objects) - 1 and got[0] < want_size:
            refuse_cut_encoded(obj, got[0], want_size)
            return True
        raise CorruptBinlog(why + "; nothing of it was applied", obj.key)
    return False


def refuse_cut_encoded(obj, size, indexed):
    """CorruptBinlog naming the newest file's last segment ``obj`` when it is cut
    (``size`` of ``indexed`` stored bytes) and stored compressed or encrypted:
    ``--allow-gaps`` replays what a cut plain segment holds, but an encoded one
    cannot be read in part with its guarantees (see docs/archive-format.md)."""
    name = codec_of(obj.index)
    if name == "none":
        return
    why = ("age authenticates each 64 KiB chunk and marks the last one, so a cut age file "
           "is refused whole" if "age" in name else
           "a zstd frame is proven whole only by its end (the content checksum)")
    raise CorruptBinlog(
        f"{size} of its {indexed} stored bytes are left: its tail is lost, and it is stored "
        f"as {name}, which is never read in part ({why}); --allow-gaps replays a cut plain "
        "segment, not this one. Nothing was applied. Upload it again from the backup "
        "host's local file, or remove it and its index: the replay then ends where the "
        "segment before it ends", obj.key)


def _raise_task_error(unit, error):
    if error.kind == "corrupt":
        raise CorruptBinlog(error.message, error.object or object_at(unit, error.offset),
                            error.offset)
    if error.kind == "identity":
        raise IdentityError(error.message)
    if error.kind == "missing":
        raise MysqlBackupError(
            f"the archive changed during the replay: {mask_url(error.message)} is gone "
            f"(the newest file {unit.name} was sealed meanwhile?); run the replay again: "
            "it resumes where this one stopped")
    raise MysqlBackupError(f"{unit.where}: cannot read the object: "
                           f"{mask_url(error.message)}")
