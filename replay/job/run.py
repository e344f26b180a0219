"""The driver of the PySpark replay job: decode one file per Spark task, check, apply.

The driver lists the units (files) from the archive's indexes (``replay.planning.plan.units_to_read``),
Spark decodes them in parallel (``replay.job.tasks``: each task opens its file through
fsspec on the executor, checks magic and every CRC, hashes each object and assembles
complete transactions, handed back without their bytes), the driver checks each unit
against its indexes and the unit before it (``planning.units.check_decoded``,
``check_link``) before anything of its window is applied, and applies the transactions
in commit order to one sink (``replay.job.sinks``), a window of files at a time so that
memory stays bounded. The tasks hand back the events of the transactions the selection
applies, and of no other (``tasks.keep_spec``), or, for a sink whose tasks write
(``--parquet``; ``--sql``, its text), write them and hand back what they wrote, which
the sink adopts (a file whose task declined comes back as events): the
driver reads the indexes, never an object (``attach_unit``, reading a file again on the
driver, serves a result without them).
"""

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import accumulate

from mysqlbackup.archive.stop import END
from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import MysqlBackupError, UsageError, mask_url
from replay.job.decoding.transaction import rewrite_transaction
from replay.planning.plan import units_to_read
from replay.planning.selection import gap_error
from replay.planning.units import check_decoded, check_digests, check_link
from replay.job.progress import Progress
from replay.job.engines import LocalTasks, SparkTasks, choose_engine, unit_bytes
from replay.job.tasks import gtid_state, stream_unit, unit_selection

log = logging.getLogger(__name__)


def attach_unit(result, unit, url, options, keyring=None):
    """Driver side: the unit's bytes, read again (streamed: only the transactions'
    events are kept) and proved equal to the decoded ones, into ``result``."""
    from replay.job.decoding.assemble import StreamAttach
    cut = StreamAttach(result.transactions)
    try:
        stream_unit(unit, url, options, cut.feed, keyring)
    except FileNotFoundError as e:  # the newest file's segments go once it is sealed
        raise MysqlBackupError(f"the archive changed during the replay: {mask_url(e)} is "
                               f"gone (the newest file {unit.name} was sealed meanwhile?); "
                               "run the replay again: it resumes where this one stopped"
                               ) from None
    cut.finish(unit.where, result.fingerprint)
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
                        "lost); --allow-gaps replays what it holds", unit.where)
        if self.previous is not None and not self.allow_gaps:
            check_link(self.previous, (unit, result.facts))
        self.previous = (unit, result.facts)


@dataclass
class RunSummary:
    """What a replay (or a native apply) did: the files read, the transactions applied
    and skipped, the newest the target holds, and why it stopped."""

    source: str = None
    files: int = 0
    applied: int = 0
    skipped: int = 0
    rows_events: int = 0
    workers: int = 1                   # the most target connections used at once
    parallel_applied: int = 0          # transactions applied beside others
    dropped_incomplete: list = field(default_factory=list)  # the newest file's torn tail
    tasks: int = 0                     # files decoded (batched small files count each)
    spark_tasks: int = 0
    engine: str = None                 # who decoded: "spark" or "local" (this process)
    engine_why: str = None             # why that one (``engine_of``)
    last_gtid: str = None              # the last transaction the target holds
    last_commit: float = None          # and its commit time (epoch seconds)
    stop_reason: str = END.reason      # the stop's ``reason``, or the end of the archive
    target_commits: int = 0
    gtid_pos: str = None               # a native apply: the target's GTID position after
    apply: str = "statements"          # or "native": the target's replication applier


def run_replay(opts, sink, spark=None, progress=None):
    """Replay into ``sink``; returns its RunSummary (applied, skipped, dropped, stop).
    ``progress`` (if given) is called with a ``replay.job.progress.Progress`` when the
    objects are checked and after each file is applied. The tasks run on Spark
    (``spark``: a SparkContext, else one of ``opts.master``) or, with ``opts.engine``
    "local", in this process (``replay.job.engines``). ``opts.spark`` says how a context
    is made; "auto" chooses between them by the bytes to read (``engine_of``)."""
    source, units, cut = units_to_read(opts)
    engine, why = engine_of(opts, units, spark)
    opts = replace(opts, engine=engine)
    summary = RunSummary(source, len(units), engine=engine, engine_why=why,
                         stop_reason=opts.selection.stop.reason if cut else END.reason)
    if not units:
        sink.finish(summary)
        return summary
    write = sink.task_spec()  # --parquet: the tasks write the parts themselves
    tasks = (LocalTasks(units, opts, write) if opts.engine == "local"
             else SparkTasks(spark or opts.spark.context(opts.master), units, opts, write))
    url, options, keyring = opts.archive_url, opts.archive_options, opts.keyring
    for unit, result in zip(units, tasks.digests()):  # before anything is applied: every
        check_digests(unit, result, opts.allow_gaps)  # object's size and sha256
    window = opts.window or max(1, tasks.parallelism)  # batches (tasks) decoded at once
    started, stopped = time.monotonic(), False
    sizes = [0, *accumulate(unit_bytes(unit) for unit in units)]  # bytes of the first n
    _report(progress, summary, sizes, 0, started)
    sink.open(source)
    windows = [list(range(first, min(first + window, len(tasks.batches))))
               for first in range(0, len(tasks.batches), window)]

    chain = ChainCheck(opts.allow_gaps)

    def decode(chosen):
        parts = [p for b in chosen for p in tasks.batches[b]]
        summary.tasks += len(parts)  # decoded, even when a stop point comes first
        results = tasks.decode(chosen)
        for result, p in zip(results, parts):  # before anything of this window is applied
            chain.check(units[p], result)
        return [r if r.attached or r.written is not None or r.error
                else attach_unit(r, units[p], url, options, keyring)
                for r, p in zip(results, parts)], parts
    # the next window is decoded while the driver applies this one
    prefetch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")
    try:
        pending = prefetch.submit(decode, windows[0])
        for i in range(len(windows)):
            results, parts = pending.result()
            if i + 1 < len(windows):
                pending = prefetch.submit(decode, windows[i + 1])
            for result, p in zip(results, parts):
                stopped = _apply_file(result, units[p], opts.selection, sink, summary)
                _report(progress, summary, sizes, p + 1, started, final=stopped)
                if stopped:
                    break
            if stopped:
                break
    except BaseException:
        sink.failed()
        raise
    finally:
        prefetch.shutdown(wait=True, cancel_futures=True)
        sink.close()
    summary.spark_tasks = tasks.spark_tasks(summary.tasks)
    summary.workers = sink.most_workers
    summary.parallel_applied = sink.parallel_applied
    summary.target_commits = sink.commits
    sink.finish(summary)
    return summary


def engine_of(opts, units, spark=None):
    """(engine, why) of a replay: ``opts.engine`` as asked; "auto": Spark with a context
    given, else ``engines.choose_engine`` over the bytes of ``units`` (local under
    LOCAL_MAX_BYTES without filters, --master, Spark settings or spark-submit)."""
    if opts.engine == "auto" and spark is not None:
        return "spark", "a Spark context given"
    selection = opts.selection
    filtered = bool(selection.databases or selection.tables or selection.rewrite)
    return choose_engine(opts.engine, sum(unit_bytes(unit) for unit in units), filtered,
                         opts.master, opts.spark.given())


def _apply_file(result, unit, selection, sink, summary):
    """Apply one file's transactions; True when a stop point was reached."""
    stop = selection.stop
    selection, transactions = _in_epoch(selection, unit, result.transactions, summary)
    if selection is None:  # a stop position in an earlier epoch
        summary.stop_reason = stop.reason
        return True
    if result.error:  # its task could not write what this replay applies of it
        raise MysqlBackupError(result.error.message)  # (check_decoded let it by)
    fde = ev.parse_format_description(result.fde)
    checksum = fde.checksum_alg == ev.CHECKSUM_CRC32
    written = result.written is not None  # its task filtered, rewrote and wrote them
    chosen, stopped = _choose(transactions, selection, sink, summary, checksum, fde, written)
    if written:  # the task wrote them: it must have written these
        sink.adopt(result.written, chosen)
    else:
        sink.apply_many(chosen, result.fde, checksum, fde)
    summary.applied += len(chosen)
    summary.rows_events += sum(t.rows_events for t in chosen)
    if stopped:
        return True
    if result.incomplete:  # only the newest file's (units.check_decoded refused others)
        summary.dropped_incomplete.append(result.incomplete)
    return False


def _in_epoch(selection, unit, transactions, summary):
    """(the selection for ``unit``, its transactions less the duplicates of a later
    epoch's first file); (None, []) when a stop position in an earlier epoch ends the
    replay before it. A file position names a file of one epoch (``unit.position``:
    the unit's epoch against the start's and the stop's, -1 before, 0 same, 1 after)."""
    selection = unit_selection(selection, unit)
    if selection is None:
        return None, []
    skip = gtid_state(unit.skip)
    if skip is not None:
        kept = [t for t in transactions if not (t.gtid_key and skip.contains(*t.gtid_key))]
        summary.skipped += len(transactions) - len(kept)
        transactions = kept
    return selection, transactions


def _choose(transactions, selection, sink, summary, checksum, fde, written=False):
    """(transactions to apply, in order; True when a stop point ends the file);
    ``written``: their task wrote them, they are chosen as they came (without bytes)."""
    chosen = []
    for trx in transactions:
        decision, reason = selection.decide(trx)
        if decision == "gap":
            raise gap_error(trx, reason)
        if decision == "stop":
            if sink.is_applied(trx):
                raise UsageError(
                    f"the target already has {_named(trx)}, past the stop point ({reason}): "
                    "a replay cannot go back; restore into a new server")
            summary.stop_reason = reason
            return chosen, True
        if decision == "skip" or sink.is_applied(trx):
            summary.skipped += 1
            if decision != "skip":  # applied by an earlier run
                summary.last_gtid, summary.last_commit = trx.gtid, trx.commit_ts
            continue
        summary.last_gtid, summary.last_commit = trx.gtid, trx.commit_ts
        if written:
            chosen.append(trx)
            continue
        if trx.events is None:  # tasks.wanted chose otherwise: never the case
            raise RuntimeError(f"{_named(trx)} came back from its task without its bytes")
        kept = selection.filter_events(trx, fde, checksum)
        chosen.append(rewrite_transaction(kept, selection.rewrite, checksum))
    return chosen, False


def _named(trx):
    """A transaction as an error names it: its GTID and where it ends."""
    return f"transaction {trx.gtid or '(no GTID)'} ending at {trx.end_position}"


def _report(progress, summary, sizes, done, started, final=False):
    """Hand ``progress`` where the replay is: ``done`` of the units, their bytes
    (``sizes``: the archived bytes of the first n units, n from 0 to all of them, summed
    once: a replay of thousands of small files reports after each); ``final`` when a
    stop point ends it before the last unit."""
    if progress is None:
        return
    progress(Progress(done, len(sizes) - 1, sizes[done], sizes[-1], summary.applied,
                      summary.skipped, summary.rows_events, time.monotonic() - started,
                      final))
