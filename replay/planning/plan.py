"""Which objects a replay reads, from the archive's indexes alone (the job's first step).

``units_to_read`` lists the source's files epoch after epoch of its history (a sealed
file, or the newest one's segments: a *unit*, one Spark task each), keeps those the
options bound (``first_file``/``last_file``, the stop datetime, the start position) and
refuses, before anything is read, what the indexes already show missing, cut or
unopenable (``replay.planning.units``).
"""

from dataclasses import dataclass, field, replace

from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.errors import MysqlBackupError, UsageError, mask_url
from replay.planning.selection import Selection
from replay.spark.context import SparkSetup
from replay.planning.units import (check_listed_sizes, check_unit_keys, drop_before_start,
                                       pick_source, plan_epochs)


@dataclass
class ReplayOptions:
    """What ``mysqlbackup replay`` was asked to do."""

    archive_url: str
    archive_options: dict = field(default_factory=dict)
    source_name: str = None
    selection: Selection = field(default_factory=Selection)
    allow_gaps: bool = False
    master: str = None
    window: int = None          # tasks (batches of files) per Spark job (default: one a core)
    first_file: str = None      # read no file before it (a restore: the base's first file)
    last_file: str = None       # read no file after it (a restore: the stop point's file)
    keyring: object = None      # archive.codec.Keyring: opens encrypted objects
    engine: str = "spark"       # who runs the tasks: "spark", "local" (this process) or
    # "auto" (``replay.job.run.engine_of``: local for a small archive)
    spark: SparkSetup = field(default_factory=SparkSetup)  # --conf, --driver-host, --python


def units_to_read(opts):
    """(source, units, stop cut later files) from the archive's indexes only, epoch
    after epoch of the source's history."""
    from mysqlbackup.archive.listing import ArchiveListing
    from mysqlbackup.archive.store import ArchiveStore
    listing = ArchiveListing(ArchiveStore(opts.archive_url, opts.archive_options))
    source = pick_source(listing.sources(), opts.source_name)
    epochs, names = [], {}
    for epoch, key_source, history in listing.epochs(source):
        sealed_names = listing.sealed_names(key_source)
        sealed = [(n, listing.sealed[key_source][n].get("data"), listing.index(key_source, n))
                  for n in sealed_names if _within((epoch, n), opts)]
        partial = _newest_partial(listing, key_source)
        indexed = [n for n in sealed_names if listing.sealed[key_source][n].get("index")]
        # the switches need only each epoch's first and last index: the others outside the
        # files asked for are not read
        ends = {n: listing.index(key_source, n) for n in indexed[:1] + indexed[-1:]}
        listed = _listed(list(ends.values()), partial)
        names[epoch] = set(sealed_names) | ({partial[0]} if partial else set())
        if partial and not _within((epoch, partial[0]), opts):
            partial = None
        epochs.append((epoch, key_source, history, sealed, partial, listed))
    units, cut = plan_epochs(source, epochs, opts.selection.wholly_applied,
                             opts.selection.wholly_after, opts.allow_gaps)
    if len(names) > 1:
        units = _mark_positions(units, opts.selection, names)
    units = drop_before_start(units, opts.selection.start_position)
    check_listed_sizes(units, listing.sizes, opts.allow_gaps)
    check_unit_keys(units, opts.keyring)
    return source, units, cut


def _listed(indexes, partial):
    """(first, last) index of an epoch's files: its sealed ones, then its newest file's
    segments (contiguous from 0, indexed); None when it has none."""
    pos, segments = 0, []
    for start, end, _, index in sorted(partial[1] if partial else (), key=lambda s: s[0]):
        if start != pos or index is None:
            break
        segments.append(index)
        pos = end
    every = indexes + segments
    return (every[0], every[-1]) if every else None


def _mark_positions(units, selection, names):
    """``units``, each told where it stands against the start and stop positions' epochs
    (``Unit.position``, read by ``tasks.unit_selection``): a file name two epochs hold is
    ambiguous (UsageError)."""
    def epoch_of(position):
        if position is None:
            return None
        holding = sorted(e for e, held in names.items() if position.file in held)
        if len(holding) > 1:
            raise UsageError(f"{position.file} is in epochs {' and '.join(map(str, holding))} "
                             "of the archive's history (a failover to a server that reuses "
                             "the file names): a file position is ambiguous there; use a "
                             "GTID or a datetime")
        return holding[0] if holding else None
    start, stop = epoch_of(selection.start_position), epoch_of(selection.stop.position)
    return [replace(unit, position=(_against(unit.epoch, start), _against(unit.epoch, stop)))
            for unit in units]


def _against(epoch, other):
    """-1, 0 or 1: ``epoch`` before, at or after ``other`` (None: 0)."""
    return 0 if other is None else (epoch > other) - (epoch < other)


def _within(key, opts):
    """True when file ``key`` (epoch, name) is inside the options' first_file..last_file
    (each (epoch, name), or a name of epoch 1; None: no bound)."""
    return ((opts.first_file is None or _order(key) >= _order(opts.first_file))
            and (opts.last_file is None or _order(key) <= _order(opts.last_file)))


def _order(key):
    epoch, name = (1, key) if isinstance(key, str) else key
    return epoch, binlog_sort_key(name)


def _newest_partial(listing, source):
    names = [n for n in listing.segments[source] if n not in listing.sealed[source]]
    if not names:
        return None
    name = max(names, key=binlog_sort_key)
    try:
        segs = [(s, e, slots.get("data"), listing.read_index(slots["index"])
                 if "index" in slots else None)
                for (s, e), slots in listing.segments[source][name].items()]
    except FileNotFoundError as e:  # sealed between the listing and this read
        raise MysqlBackupError(f"the archive changed while the replay was planned: "
                               f"{mask_url(e)} is gone (the newest file {name} was sealed "
                               "meanwhile?); run the replay again") from None
    return name, segs
