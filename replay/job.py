"""The PySpark replay job: list, decode one file per Spark task, apply in order.

The driver plans the units (files) from the archive's indexes, Spark decodes
them in parallel (each task opens its file through fsspec on the executor,
checks magic and every CRC, hashes each object and assembles complete
transactions, handed back without their bytes), the driver checks each unit
against its indexes and the unit before it (``plan.check_decoded``,
``plan.check_link``) before anything of its window is applied, reads each file
again, proves it is the one decoded and cuts the events out, and applies the
transactions in commit order to one sink, a window of files at a time so that
memory stays bounded.
"""

import logging
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError, UsageError, mask_url
from replay.decoding.rewrite import rewrite_transaction
from replay.planning.selection import Selection
from replay.planning.units import (check_decoded, check_digests, check_link, check_listed_sizes,
                                   check_unit_keys, drop_before_start, pick_source,
                                   plan_epochs)
from replay.progress import Progress

log = logging.getLogger(__name__)


@dataclass
class ReplayOptions:
    """What ``mysqlbackup replay`` was asked to do."""

    archive_url: str
    archive_options: dict = field(default_factory=dict)
    source_name: str = None
    selection: Selection = field(default_factory=Selection)
    allow_gaps: bool = False
    master: str = None
    window: int = None          # files decoded per Spark job (default: one per core)
    first_file: str = None      # read no file before it (a restore: the base's first file)
    last_file: str = None       # read no file after it (a restore: the stop point's file)
    keyring: object = None      # archive.codec.Keyring: opens encrypted objects


def decode_unit(unit, url, options, keyring=None):
    """Spark task: read one file from the archive and assemble its transactions.

    What comes back to the driver is the transactions without their bytes (event
    lengths instead), the object's size and CRC32 (``fingerprint``), the size and
    sha256 of each object read (``digests``, to compare with their indexes) and what
    the bytes say of their place in the chain (``facts``): the driver checks those
    (``plan.check_decoded``), then reads the object itself and attaches the bytes
    (``attach_unit``), so the binlog does not pass through the JVM. A failure comes
    back as ``error`` (kind, message, offset) instead of an exception, which Spark
    would wrap into its own: the driver raises it with the object named.
    A compressed or encrypted object is decoded as it is read (``keyring`` opens it);
    ``digests`` are then those of its raw bytes, compared with the index's raw ones.
    The file streams through (``StreamAssembly``): the task holds one event and a
    read chunk at a time, never the file."""
    import traceback

    from mysqlbackup.archive.codec import IdentityError
    from replay.decoding.assemble import StreamAssembly
    out = {"name": unit["name"], "partial": unit["partial"], "error": None,
           "digests": [], "facts": {}, "transactions": [], "incomplete": None}
    facts = {}
    walk = StreamAssembly(unit["name"], newest=unit["partial"], facts=facts)
    try:
        digests = stream_unit(unit, url, options, walk.feed, keyring)
    except IdentityError as e:
        return dict(out, error={"kind": "identity", "message": str(e)})
    except CorruptBinlog as e:  # the stored form does not decode: names its object
        return dict(out, error={"kind": "corrupt", "message": bare_message(e),
                                "offset": e.offset, "object": e.file})
    except FileNotFoundError as e:
        return dict(out, error={"kind": "missing", "message": str(e)})
    except Exception as e:  # noqa: BLE001 - a store error of any kind, named by the driver
        return dict(out, error={"kind": "unreadable", "message": f"{type(e).__name__}: {e}"})
    out.update(digests=digests, facts=facts)
    try:
        transactions, incomplete, fde, fingerprint = walk.finish()
    except CorruptBinlog as e:
        return dict(out, error={"kind": "corrupt", "message": bare_message(e),
                                "offset": e.offset})
    except Exception:  # noqa: BLE001 - the driver tells a damaged object from a bug
        return dict(out, error={"kind": "failed", "message": traceback.format_exc()})
    return dict(out, transactions=transactions, incomplete=incomplete, fde=fde,
                fingerprint=fingerprint)


def digest_unit(unit, url, options):
    """Spark task: the (size, sha256) of each object of one unit, read in chunks (never
    whole in memory), or an error record as ``decode_unit`` returns it. An object that
    is not its index's and is a sealed file is scanned, so that a damaged event comes back
    with its offset (not the newest file: the newest file's tail may be short, see
    ``plan.check_digests``)."""
    from mysqlbackup.archive.objects import Promise
    from mysqlbackup.archive.store import ArchiveStore
    try:
        store = ArchiveStore(url, options)
        promises = [Promise.of_index(obj["key"], obj["index"]) for obj in unit["objects"]]
        digests = [store.sha256(promise.key) for promise in promises]
        for promise, got in zip(promises, digests):
            if got != promise.stored and not unit["partial"] and promise.codec == "none":
                _scan_object(store, promise.key, unit["name"])
        return {"error": None, "digests": digests}
    except CorruptBinlog as e:
        return {"error": {"kind": "corrupt", "message": bare_message(e), "offset": e.offset}}
    except FileNotFoundError as e:
        return {"error": {"kind": "missing", "message": str(e)}}
    except Exception as e:  # noqa: BLE001 - a store error of any kind, named by the driver
        return {"error": {"kind": "unreadable", "message": f"{type(e).__name__}: {e}"}}


def _scan_object(store, key, name):
    """Raise CorruptBinlog at the first damaged event of a plain object (magic, framing,
    CRC32), read in chunks; a whole tail event that is merely missing is not found here."""
    from mysqlbackup.archive.objects import Promise, read_object
    from mysqlbackup.binlog.scan import EventStream
    events = EventStream(lambda off, event: None, file=name)
    read_object(store, Promise(key), events.feed)
    events.close()


def bare_message(error):
    """The text of a CorruptBinlog without its 'FILE at offset N: ' prefix."""
    text = str(error)
    if error.file is not None:
        where = f"{error.file}" + (f" at offset {error.offset}"
                                   if error.offset is not None else "") + ": "
        if text.startswith(where):
            return text[len(where):]
    return text


def stream_unit(unit, url, options, feed, keyring=None):
    """Hand the raw bytes of one unit (a sealed file, or the newest one's segments, in
    order) to ``feed`` a chunk at a time; returns the (raw size, raw sha256) of each
    object. A compressed or encrypted object is decoded as it streams in."""
    from mysqlbackup.archive.store import ArchiveStore
    store = ArchiveStore(url, options)
    return [stream_object(store, key, obj["index"], feed, keyring)
            for key, obj in zip(unit["keys"], unit["objects"])]


def stream_object(store, key, index, feed, keyring=None):
    """Hand the raw bytes of one object to ``feed`` a chunk at a time
    (``objects.read_object``: ranged reads, decoded on the way); returns (raw size, raw
    sha256), which the driver compares with its index."""
    from mysqlbackup.archive.objects import Promise, read_object
    digests = read_object(store, Promise.of_index(key, index), feed, keyring)
    return digests.raw_size, digests.raw_sha256


def attach_unit(result, unit, url, options, keyring=None):
    """Driver side: the unit's bytes, read again (streamed: only the transactions'
    events are kept) and proved equal to the decoded ones, into ``result``."""
    from replay.decoding.assemble import StreamAttach
    cut = StreamAttach(result["transactions"])
    try:
        stream_unit(unit, url, options, cut.feed, keyring)
    except FileNotFoundError as e:  # the newest file's segments go once it is sealed
        raise MysqlBackupError(f"the archive changed during the replay: {mask_url(e)} is "
                               f"gone (the newest file {unit['name']} was sealed meanwhile?); "
                               "run the replay again: it resumes where this one stopped"
                               ) from None
    cut.finish(unit["where"], result["fingerprint"])
    return result


class ChainCheck:
    """Driver side: each decoded unit checked against its indexes and against the unit
    replayed before it (across windows), before anything of it is applied."""

    def __init__(self, allow_gaps):
        self.allow_gaps, self.previous = allow_gaps, None

    def check(self, unit, result):
        """Raise CorruptBinlog naming the object when ``result`` is not what was archived."""
        tail_lost = check_decoded(unit, result, self.allow_gaps)
        if tail_lost:
            log.warning("%s: the last segment is shorter than its index says (its tail is "
                        "lost); --allow-gaps replays what it holds", unit["where"])
        if self.previous is not None and not self.allow_gaps:
            check_link(self.previous, (unit, result["facts"]))
        self.previous = (unit, result["facts"])


def plan(opts):
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
        _mark_positions(units, opts.selection, names)
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
    """Tell each unit where it stands against the start and stop positions' epochs
    (``_in_epoch``): a file name two epochs hold is ambiguous (UsageError)."""
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
    start, stop = epoch_of(selection.start_position), epoch_of(selection.stop_position)
    for unit in units:
        unit["position"] = tuple(0 if e is None else (unit["epoch"] > e) - (unit["epoch"] < e)
                                 for e in (start, stop))


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


def spark_session(master=None):
    """A SparkSession (local[*] unless told), with this package shipped to executors."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    builder = (SparkSession.builder.appName("mysqlbackup-replay")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               # what tasks hand back is small (no event bytes); room for big files
               .config("spark.driver.memory",
                       os.environ.get("MYSQLBACKUP_SPARK_DRIVER_MEMORY", "2g"))
               .config("spark.driver.maxResultSize", "0"))
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # under spark-submit: its master rules
    if master or not submitted:
        builder = builder.master(master or "local[*]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    context = spark.sparkContext
    if not getattr(context, "_mysqlbackup_shipped", False):  # once per context: a second
        package = _package_zip()  # mysqlbackup.zip of another path is refused there
        if package:
            context.addPyFile(package)
        context._mysqlbackup_shipped = True
    return spark


def _package_zip():
    """A zip of mysqlbackup/ and replay/ for the executors (as spark-submit --py-files)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, "mysqlbackup")):
        return None  # imported from a zip (spark-submit --py-files): already shipped
    workdir = tempfile.mkdtemp(prefix="mysqlbackup-pyfiles-")
    staging = os.path.join(workdir, "pkg")
    for name in ("mysqlbackup", "replay"):
        shutil.copytree(os.path.join(root, name), os.path.join(staging, name),
                        ignore=shutil.ignore_patterns("__pycache__"))
    return shutil.make_archive(os.path.join(workdir, "mysqlbackup"), "zip", staging)


def run_replay(opts, sink, spark=None, progress=None):
    """Replay into ``sink``; returns the summary dict (applied, skipped, dropped, stop).
    ``progress`` (if given) is called with a ``replay.progress.Progress`` when the
    objects are checked and after each file is applied."""
    source, units, cut = plan(opts)
    summary = {"source": source, "files": len(units), "applied": 0, "skipped": 0,
               "rows_events": 0, "workers": 1, "parallel_applied": 0,
               "dropped_incomplete": [], "tasks": 0, "spark_tasks": 0,
               "last_gtid": None, "last_commit": None,  # the last one the target holds
               "stop_reason": "stop datetime reached" if cut else "end of the archive"}
    if not units:
        return summary
    spark = spark or spark_session(opts.master)
    sc = spark.sparkContext
    rdd = sc.parallelize(units, len(units))  # one partition, hence one task, per file
    url, options, keyring = opts.archive_url, opts.archive_options, opts.keyring
    _check_every_object(sc, rdd, units, opts)
    decoded = rdd.map(lambda unit: decode_unit(unit, url, options, keyring))
    window = opts.window or max(1, sc.defaultParallelism)
    started, stopped = time.monotonic(), False
    _report(progress, summary, units, 0, started)
    sink.open(source)
    group = f"mysqlbackup-replay-{os.getpid()}-{time.time_ns()}"  # this run's jobs only
    windows = [list(range(first, min(first + window, len(units))))
               for first in range(0, len(units), window)]

    chain = ChainCheck(opts.allow_gaps)

    def decode(parts):
        sc.setJobGroup(group, f"replay of {source}")  # job groups are per thread
        summary["tasks"] += len(parts)  # decoded, even when a stop point comes first
        results = sc.runJob(decoded, lambda it: list(it), parts)
        for result, p in zip(results, parts):  # before anything of this window is applied
            chain.check(units[p], result)
        return [attach_unit(r, units[p], url, options, keyring) for r, p in zip(results, parts)]
    # Spark decodes the next window while the driver applies this one
    prefetch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")
    try:
        pending = prefetch.submit(decode, windows[0])
        for i, parts in enumerate(windows):
            results = pending.result()
            if i + 1 < len(windows):
                pending = prefetch.submit(decode, windows[i + 1])
            for result, p in zip(results, parts):
                stopped = _apply_file(result, units[p], opts.selection, sink, summary)
                _report(progress, summary, units, p + 1, started, final=stopped)
                if stopped:
                    break
            if stopped:
                break
    finally:
        prefetch.shutdown(wait=True, cancel_futures=True)
        sink.close()
    summary["spark_tasks"] = _tasks_run(sc, group, summary["tasks"])
    summary["workers"] = sink.most_workers
    summary["parallel_applied"] = sink.parallel_applied
    summary["target_commits"] = sink.commits
    return summary


def _check_every_object(sc, rdd, units, opts):
    """Before anything is applied: every object's size and sha256 against its index, one
    Spark task per file (a job group of its own: the decode's task count stays one per
    file). The decode checks again what it reads, so nothing changed in between."""
    url, options = opts.archive_url, opts.archive_options
    sc.setJobGroup(f"mysqlbackup-check-{os.getpid()}-{time.time_ns()}", "replay: digests")
    results = rdd.map(lambda unit: digest_unit(unit, url, options)).collect()
    for unit, result in zip(units, results):
        check_digests(unit, result, opts.allow_gaps)


def _tasks_run(sc, group, expected, patience=5.0):
    """Tasks Spark actually ran for this replay's jobs (one per file). Spark's status
    tracker learns of a finished job a moment later: wait a little for ``expected``."""
    deadline = time.monotonic() + patience
    while True:
        total = _count_tasks(sc, group)
        if total >= expected or time.monotonic() > deadline:
            return total
        time.sleep(0.05)


def _count_tasks(sc, group):
    tracker, total = sc.statusTracker(), 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in (job.stageIds if job else ()):
            stage = tracker.getStageInfo(stage_id)
            total += stage.numTasks if stage else 0
    return total


def _apply_file(result, unit, selection, sink, summary):
    """Apply one file's transactions; True when a stop point was reached."""
    fde = ev.parse_format_description(result["fde"])
    checksum = fde.checksum_alg == ev.CHECKSUM_CRC32
    selection, transactions = _in_epoch(selection, unit, result["transactions"], summary)
    if selection is None:
        summary["stop_reason"] = "stop position reached"
        return True
    chosen, stopped = _choose(transactions, selection, sink, summary, checksum, fde)
    sink.apply_many(chosen, result["fde"], checksum, fde)
    summary["applied"] += len(chosen)
    summary["rows_events"] += sum(t.rows_events for t in chosen)
    if stopped:
        return True
    if result["incomplete"]:  # only the newest file's (plan.check_decoded refused others)
        summary["dropped_incomplete"].append(result["incomplete"])
    return False


def _in_epoch(selection, unit, transactions, summary):
    """(the selection for ``unit``, its transactions less the duplicates of a later
    epoch's first file); (None, []) when a stop position in an earlier epoch ends the
    replay before it. A file position names a file of one epoch (``unit["position"]``:
    the unit's epoch against the start's and the stop's, -1 before, 0 same, 1 after)."""
    start, stop = unit.get("position", (0, 0))
    if stop > 0:
        return None, []
    changes = {}
    if stop < 0:
        changes["stop_position"] = None
    if start > 0:
        changes["start_position"] = None
    if changes:
        selection = replace(selection, **changes)
    skip = _gtids(unit.get("skip"))
    if skip is not None:
        kept = [t for t in transactions if not (t.gtid_key and skip.contains(*t.gtid_key))]
        summary["skipped"] += len(transactions) - len(kept)
        transactions = kept
    return selection, transactions


def _gtids(text):
    """The GTID state ``text`` (None for none)."""
    if not text:
        return None
    from mysqlbackup.binlog.gtid import guess_flavor, parse_gtid_set
    return parse_gtid_set(text, guess_flavor(text))


def _choose(transactions, selection, sink, summary, checksum, fde):
    """(transactions to apply, in order; True when a stop point ends the file)."""
    chosen = []
    for trx in transactions:
        decision, reason = selection.decide(trx)
        if decision == "stop":
            if sink.is_applied(trx):
                raise UsageError(
                    f"the target already has {_named(trx)}, past the stop point ({reason}): "
                    "a replay cannot go back; restore into a new server")
            summary["stop_reason"] = reason
            return chosen, True
        if decision == "skip" or sink.is_applied(trx):
            summary["skipped"] += 1
            if decision != "skip":  # applied by an earlier run
                summary["last_gtid"], summary["last_commit"] = trx.gtid, trx.commit_ts
            continue
        summary["last_gtid"], summary["last_commit"] = trx.gtid, trx.commit_ts
        kept = selection.filter_events(trx, fde, checksum)
        chosen.append(rewrite_transaction(kept, selection.rewrite, checksum))
    return chosen, False


def _named(trx):
    """A transaction as an error names it: its GTID and where it ends."""
    return f"transaction {trx.gtid or '(no GTID)'} ending at {trx.end_position}"


def _report(progress, summary, units, done, started, final=False):
    """Hand ``progress`` where the replay is: ``done`` of the units, their bytes;
    ``final`` when a stop point ends it before the last unit."""
    if progress is None:
        return
    progress(Progress(done, len(units), _size(units[:done]), _size(units), summary["applied"],
                      summary["skipped"], summary["rows_events"], time.monotonic() - started,
                      final))


def _size(units):
    """Archived bytes of ``units`` (as their indexes say)."""
    return sum(obj["index"].get("size") or 0 for unit in units for obj in unit["objects"])
