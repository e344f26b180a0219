"""Progress of a replay or restore: the value the job reports, and how the CLI shows it.

The job knows nothing of terminals: it calls its ``progress`` callback with a
``Progress`` value (and, in a restore, with text lines along the way). The CLI
picks ``reporter``: a rich progress bar when stderr is a terminal, plain lines
(``plain_line``, at most one every few seconds, always the last) otherwise, and
JSON log records under ``--log-format json``.
"""

import logging
import sys
import time
from dataclasses import asdict, dataclass

from mysqlbackup import logs

log = logging.getLogger("mysqlbackup.progress")


@dataclass(frozen=True)
class Progress:
    """Where a replay is: files decoded and applied of all, their archived bytes,
    transactions applied and skipped, and seconds since it started applying."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    applied: int
    skipped: int = 0
    rows_events: int = 0
    elapsed: float = 0.0
    final: bool = False         # a stop point ended the replay before its last file

    @property
    def rate(self):
        """Transactions applied per second."""
        return self.applied / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta(self):
        """Seconds left, from the bytes done so far (files when sizes are unknown);
        None before anything is done."""
        done, total = ((self.bytes_done, self.bytes_total) if self.bytes_total
                       else (self.files_done, self.files_total))
        if not done:
            return None
        return self.elapsed / done * max(total - done, 0)

    @property
    def finished(self):
        """The last value of the run."""
        return self.final or self.files_done >= self.files_total


def plain_line(p):
    """One stable line of text for ``p`` (stderr when it is not a terminal)."""
    eta = "-" if p.eta is None else f"{p.eta:.0f}s"
    return (f"replay: files {p.files_done}/{p.files_total}, {p.bytes_done / 1e6:.1f} of "
            f"{p.bytes_total / 1e6:.1f} MB, {p.applied} transactions applied "
            f"({p.rows_events} rows events), {p.skipped} skipped, {p.rate:.0f} trx/s, "
            f"ETA {eta}")


class PlainReporter:
    """Plain lines: text as it comes, a ``Progress`` at most every ``every`` seconds
    (the last one always), through ``echo``."""

    def __init__(self, echo, every=2.0, clock=time.monotonic):
        self.echo, self.every, self.clock, self.last = echo, every, clock, None

    def __call__(self, item):
        if isinstance(item, str):
            self.echo(item)
            return
        now = self.clock()
        if item.finished or self.last is None or now - self.last >= self.every:
            self.last = now
            self.echo(plain_line(item))

    def close(self):
        pass


class JsonReporter(PlainReporter):
    """``--log-format json``: each line a log record, a ``Progress`` with its fields."""

    def __init__(self, every=2.0, clock=time.monotonic):
        super().__init__(log.info, every, clock)

    def __call__(self, item):
        if isinstance(item, str):
            log.info(item)
            return
        now = self.clock()
        if item.finished or self.last is None or now - self.last >= self.every:
            self.last = now
            log.info(plain_line(item), extra=dict(asdict(item), eta=item.eta))


class BarReporter:
    """A rich progress bar on a terminal (files, bytes, transactions, ETA); text lines
    are printed above it."""

    def __init__(self, console=None):
        from rich.console import Console
        self.console = console or Console(stderr=True)
        self.bar, self.task = None, None

    def __call__(self, item):
        if isinstance(item, str):
            self.console.print(item, markup=False, highlight=False)
            return
        if self.bar is None:
            self._start()
        total = item.bytes_total or item.files_total
        self.bar.update(self.task, total=total,
                        completed=item.bytes_done if item.bytes_total else item.files_done,
                        files=f"{item.files_done}/{item.files_total}", applied=item.applied,
                        rate=item.rate, refresh=True)

    def _start(self):
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                                   TimeRemainingColumn)
        self.bar = Progress(TextColumn("replay"), BarColumn(), DownloadColumn(),
                            TextColumn("files {task.fields[files]}"),
                            TextColumn("{task.fields[applied]} trx ({task.fields[rate]:.0f}/s)"),
                            TextColumn("ETA"), TimeRemainingColumn(),
                            console=self.console, transient=False)
        self.task = self.bar.add_task("replay", total=None, files="0/0", applied=0, rate=0.0)
        self.bar.start()

    def close(self):
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def reporter(echo_err, stream=None):
    """The progress callback the CLI hands to the job: a bar when ``stream`` (stderr)
    is a terminal, JSON log records under --log-format json, plain lines otherwise.
    Call its ``close()`` at the end."""
    stream = stream or sys.stderr
    if logs.json_lines():
        return JsonReporter()
    if stream.isatty():
        from rich.console import Console
        return BarReporter(Console(file=stream))
    return PlainReporter(echo_err)


PROGRESS_METRIC = "mysqlbackup_restore_progress_ratio"


class ProgressFile:
    """``--metrics-file``: a reporter that also keeps ``mysqlbackup_restore_progress_ratio``
    in a file for node_exporter's textfile collector: the binlogs' bytes applied of all
    (files when sizes are unknown; at most 0.99 until the end: a base loads before them),
    never going back, 1 once the command ends well (``done``). The file is replaced whole
    (write, rename), at most every ``every`` seconds, ``labels`` ({source, command}) on
    the sample."""

    def __init__(self, inner, path, labels, every=1.0, clock=time.monotonic):
        self.inner, self.path, self.every, self.clock = inner, path, every, clock
        self.labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items()))
        self.ratio = 0.0
        self._write(0.0)
        self.written_at = None  # the first progress is written at once

    def __call__(self, item):
        self.inner(item)
        if isinstance(item, str):
            return
        done, total = ((item.bytes_done, item.bytes_total) if item.bytes_total
                       else (item.files_done, item.files_total))
        ratio = min(0.99, done / total) if total else 0.0  # 1: when the command ends well
        now = self.clock()
        if ratio > self.ratio and (self.written_at is None or item.finished
                                   or now - self.written_at >= self.every):
            self._write(ratio)

    def done(self):
        """The command ended well: the ratio is 1."""
        self._write(1.0)

    def _write(self, ratio):
        from mysqlbackup.durable import write_bytes
        self.ratio, self.written_at = max(self.ratio, ratio), self.clock()
        text = (f"# HELP {PROGRESS_METRIC} Share of the restore done (0 to 1, never going "
                f"back)\n# TYPE {PROGRESS_METRIC} gauge\n"
                f"{PROGRESS_METRIC}{{{self.labels}}} {self.ratio:.6f}\n")
        write_bytes(self.path, text.encode("utf-8"))

    def close(self):
        self.inner.close()


def _label_value(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
