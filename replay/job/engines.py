"""Who runs the job's tasks: Spark (one task per file, in parallel) or the driver itself.

Small files share a task (``batches``): consecutive files, in order, each still read,
checked and decoded whole by itself, so that a task's cost follows the bytes it reads
rather than the file count (a quiet server's archive is thousands of small files).

Both run the same task functions (``replay.job.tasks``: ``digest_unit``, then
``decode_unit`` a window of files at a time) and hand back the same results; the driver
(``replay.job.run``) checks and applies them alike. ``SparkTasks`` pays a start-up (a
JVM, its Python workers: seconds) for a decode spread over every core; ``LocalTasks``
decodes in this process, one file after another, at no start-up: the better choice for
an archive small enough that the start-up costs more than the parallel decode saves
(``restore`` chooses it there: ``choose_engine``).
"""

import os
import time

from mysqlbackup.errors import UsageError
from replay.spark.context import under_spark_submit
from replay.spark.shipping import check_executors, executor_options, explain_failure
from replay.job.tasks import decode_unit, digest_unit, keep_spec

ENGINES = ("auto", "spark", "local")
LOCAL_MAX_BYTES = 256 * 1000 * 1000  # auto: below this many bytes to read, no Spark
BATCH_BYTES = 32 << 20   # small files share a task up to this many bytes
BATCH_FILES = 200        # and this many files
TASKS_PER_CORE = 4       # a batch is small enough that each core gets about this many


def unit_bytes(unit):
    """Archived bytes of one unit (as its indexes say)."""
    return sum(obj.index.get("size") or 0 for obj in unit.objects)


def batches(units, parallelism, batch_bytes=BATCH_BYTES, most=BATCH_FILES):
    """The decode's tasks: consecutive runs of unit indices, in order. A file of more
    than a batch's bytes is a task alone (one task per file, as ever); smaller ones
    share a task up to ``batch_bytes`` and ``most`` files, the batch smaller still when
    the archive is small, so that every core gets about TASKS_PER_CORE tasks."""
    sizes = [unit_bytes(unit) for unit in units]
    target = max(1, min(batch_bytes, sum(sizes) // max(1, TASKS_PER_CORE * parallelism)))
    found, current, held = [], [], 0
    for i, size in enumerate(sizes):
        if current and (held + size > target or len(current) >= most):
            found.append(current)
            current, held = [], 0
        current.append(i)
        held += size
    if current:
        found.append(current)
    return found


def check_engine(asked, master=None, spark_settings=()):
    """UsageError when ``asked`` is "local" and a Spark option is given too (``--master``
    or ``spark_settings``: their names): they would be ignored without a word."""
    given = ([f"--master {master}"] if master else []) + list(spark_settings)
    if asked == "local" and given:
        raise UsageError(f"--engine local decodes in this process, without Spark: "
                         f"{', '.join(given)} would be ignored (give --engine spark or auto)")


def choose_engine(asked, bytes_to_read, filtered, master=None, spark_settings=()):
    """(engine, why): ``asked`` ("spark" or "local") as given; "auto": local for an
    archive under LOCAL_MAX_BYTES to read without filters, without --master, without
    Spark settings (``spark_settings``: the names of the Spark options given, such as
    "--conf": a user who gives them means Spark) and not under spark-submit, else
    spark."""
    if asked != "auto":
        return asked, "asked for"
    if master:
        return "spark", f"--master {master}"
    if under_spark_submit():
        return "spark", "under spark-submit"
    if spark_settings:
        return "spark", f"{', '.join(spark_settings)} given: Spark settings"
    if filtered:
        return "spark", "filters: Spark decodes every file in parallel"
    if bytes_to_read >= LOCAL_MAX_BYTES:
        return "spark", (f"{bytes_to_read / 1e6:.0f} MB to read: Spark decodes the files "
                         "in parallel")
    return "local", (f"{bytes_to_read / 1e6:.0f} MB to read, under "
                     f"{LOCAL_MAX_BYTES / 1e6:.0f} MB: no Spark start-up, decoded here")


class LocalTasks:
    """The tasks run in this process, one file after another (no Spark)."""

    name = "local"
    parallelism = 1

    def __init__(self, units, opts, write=None):
        self.units, self.opts, self.ran = units, opts, 0
        self.keeps = [keep_spec(opts.selection, unit, write, seq)
                      for seq, unit in enumerate(units)]
        self.batches = [[i] for i in range(len(units))]  # one process: nothing to share

    def digests(self):
        """``digest_unit`` of every unit, in order."""
        o = self.opts
        return [digest_unit(unit, o.archive_url, o.archive_options) for unit in self.units]

    def decode(self, chosen):
        """``decode_unit`` of the units of the batches ``chosen``, in order."""
        o = self.opts
        parts = [p for b in chosen for p in self.batches[b]]
        self.ran += len(parts)
        return [decode_unit(self.units[p], o.archive_url, o.archive_options, o.keyring,
                            self.keeps[p]) for p in parts]

    def spark_tasks(self, expected):
        """Spark tasks run: none."""
        return 0


class SparkTasks:
    """The tasks run on Spark: one partition, hence one task, per batch of units (a
    file, or several small ones: ``batches``); this
    run's jobs in a job group of their own, so that its tasks can be counted. Each task
    hands back the events of the transactions the driver applies (``tasks.keep_spec``),
    or writes them itself for a sink that says how (``write``: ``--parquet``): the
    driver reads no object.

    The storage options travel in the tasks' closure with the driver's S3 credentials
    added (``shipping.executor_options``: an executor needs none of its own); before
    the first task, each context's executors are probed once for the modules the tasks
    import (``shipping.check_executors``), and a failed job is raised as one line
    (``shipping.explain_failure``)."""

    name = "spark"

    def __init__(self, context, units, opts, write=None):
        url, keyring = opts.archive_url, opts.keyring
        options = executor_options(url, opts.archive_options)
        if write is not None:  # a destination's credentials travel
            write = write.shipped(executor_options)
        self.sc = context
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        extra = () if write is None else (write.module,)  # what its tasks import
        probed = getattr(self.sc, "_mysqlbackup_probed", set())
        if not self.sc.master.startswith("local") and (protocol, extra) not in probed:
            self._run(check_executors, self.sc, url, extra)  # local[*]: this very Python
            self.sc._mysqlbackup_probed = probed | {(protocol, extra)}
        pairs = [(unit, keep_spec(opts.selection, unit, write, seq))
                 for seq, unit in enumerate(units)]
        self.parallelism = self.sc.defaultParallelism
        self.batches = batches(units, self.parallelism)
        groups = [[pairs[i] for i in batch] for batch in self.batches]
        self.rdd = self.sc.parallelize(groups, len(groups))
        self.decoded = self.rdd.map(lambda group: [
            decode_unit(unit, url, options, keyring, keep) for unit, keep in group])
        self.digested = self.rdd.map(lambda group: [
            digest_unit(unit, url, options) for unit, _ in group])
        self.group = f"mysqlbackup-replay-{os.getpid()}-{time.time_ns()}"

    def digests(self):
        """``digest_unit`` of every unit, in order, a task per batch (a job group of its
        own: the decode's tasks are counted apart)."""
        self.sc.setJobGroup(f"mysqlbackup-check-{os.getpid()}-{time.time_ns()}",
                            "replay: digests")
        return [r for group in self._run(self.digested.collect) for r in group]

    def decode(self, chosen):
        """``decode_unit`` of the units of the batches ``chosen``, in order, one task a
        batch."""
        self.sc.setJobGroup(self.group, "replay")  # job groups are per thread
        groups = self._run(self.sc.runJob, self.decoded, lambda it: list(it), chosen)
        return [r for group in groups for r in group]

    @staticmethod
    def _run(call, *args):
        """``call(*args)``, a failed Spark job raised as one line."""
        from py4j.protocol import Py4JJavaError
        try:
            return call(*args)
        except Py4JJavaError as e:
            raise explain_failure(e) from None

    def spark_tasks(self, expected, patience=5.0):
        """Tasks Spark actually ran for this replay's decode jobs (one per batch). Its
        status tracker learns of a finished job a moment later: wait a little for
        ``expected``."""
        deadline = time.monotonic() + patience
        while True:
            total = self._count()
            if total >= expected or time.monotonic() > deadline:
                return total
            time.sleep(0.05)

    def _count(self):
        tracker, total = self.sc.statusTracker(), 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in (job.stageIds if job else ()):
                stage = tracker.getStageInfo(stage_id)
                total += stage.numTasks if stage else 0
        return total
