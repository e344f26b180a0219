"""Replay/restore progress: the job hands ``Progress`` values to a callback; the CLI shows
plain lines when stderr is not a terminal (exact text, from a real replay) and a rich bar
when it is (chosen for a pty; drawn by rich forced onto a terminal into a StringIO)."""

import io
import os
import pty
import re

import pytest

from mysqlbackup import logs
from replay.job.progress import (BarReporter, JsonReporter, PlainReporter, Progress, plain_line,
                             reporter)
from tests.helpers import run_cli


def test_plain_line_exact():
    p = Progress(files_done=3, files_total=8, bytes_done=3_000_000, bytes_total=8_000_000,
                 applied=1500, skipped=20, rows_events=1480, elapsed=30.0)
    assert plain_line(p) == ("replay: files 3/8, 3.0 of 8.0 MB, 1500 transactions applied "
                             "(1480 rows events), 20 skipped, 50 trx/s, ETA 50s")
    assert plain_line(Progress(0, 8, 0, 8_000_000, 0)) == (
        "replay: files 0/8, 0.0 of 8.0 MB, 0 transactions applied (0 rows events), "
        "0 skipped, 0 trx/s, ETA -")


def test_eta_by_files_when_sizes_are_unknown():
    assert Progress(1, 4, 0, 0, 10, elapsed=6.0).eta == 18.0


def test_plain_reporter_paces_progress_but_never_drops_text_or_the_last_value():
    now, lines = [0.0], []
    report = PlainReporter(lines.append, every=2.0, clock=lambda: now[0])
    values = [Progress(i, 4, i * 1000, 4000, i * 10, elapsed=float(i)) for i in range(5)]
    for t, value in zip([0.0, 0.5, 2.5, 3.0, 3.1], values):
        now[0] = t
        report(value)
        if t == 0.5:
            report("restore: lease db1/lease/x.json held")
    assert lines == [plain_line(values[0]), "restore: lease db1/lease/x.json held",
                     plain_line(values[2]), plain_line(values[4])]
    stopped = Progress(2, 4, 2000, 4000, 20, elapsed=3.2, final=True)  # a stop point
    report(stopped)
    assert lines[-1] == plain_line(stopped)


def test_bar_on_a_forced_terminal():
    from rich.console import Console
    out = io.StringIO()
    bar = BarReporter(Console(file=out, force_terminal=True, width=150))
    bar(Progress(0, 3, 0, 3_000_000, 0))
    bar("restore: loading base 20261123T030012.345Z")
    bar(Progress(2, 3, 2_000_000, 3_000_000, 1234, elapsed=4.0))
    bar(Progress(3, 3, 3_000_000, 3_000_000, 2000, elapsed=5.0))
    bar.close()
    text = out.getvalue()
    assert "\x1b[" in text and "\r" in text  # drawn and redrawn in place, with colours
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "restore: loading base 20261123T030012.345Z" in plain
    assert "files 2/3 1234 trx (308/s)" in plain
    assert "files 3/3 2000 trx (400/s)" in plain
    assert "3.0/3.0 MB" in plain and "ETA 0:00:00" in plain


def test_the_cli_picks_a_bar_on_a_terminal_only():
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as terminal:
            assert isinstance(reporter(print, terminal), BarReporter)
        assert isinstance(reporter(print, io.StringIO()), PlainReporter)
        logs.configure("info", "json")
        assert isinstance(reporter(print, io.StringIO()), JsonReporter)
    finally:
        logs.configure("info", "text")
        os.close(master)
        os.close(slave)


@pytest.fixture(scope="module")
def archive_of_four(source_files, tmp_path_factory):
    """A file:// archive of four real binlog files (three sealed, the active one)."""
    url = f"file://{tmp_path_factory.mktemp('progress') / 'archive'}"
    directory = os.path.dirname(source_files[0])
    done = run_cli("archive", "import", str(directory), "--archive", url, "--source-name", "db1")
    assert done.returncode == 0, done.stderr
    size = sum(os.path.getsize(f) for f in source_files)
    return url, size


def test_replay_plain_lines_when_stderr_is_a_pipe(archive_of_four, tmp_path):
    url, size = archive_of_four
    done = run_cli("replay", "--archive", url, "--sql", str(tmp_path / "out.sql"), timeout=240)
    assert done.returncode == 0, done.stderr
    applied = int(re.search(r"replay of db1: (\d+) applied", done.stdout)[1])
    lines = [line for line in done.stderr.splitlines() if line.startswith("replay: ")]
    mb = f"{size / 1e6:.1f}"
    assert len(lines) >= 2, done.stderr
    assert lines[0] == (f"replay: files 0/4, 0.0 of {mb} MB, 0 transactions applied "
                        "(0 rows events), 0 skipped, 0 trx/s, ETA -")
    last = re.sub(r", \d+ trx/s, ", ", R trx/s, ", lines[-1])
    assert last == (f"replay: files 4/4, {mb} of {mb} MB, {applied} transactions applied "
                    f"({applied - 2} rows events), 0 skipped, R trx/s, ETA 0s")
    assert "\x1b[" not in done.stderr


def test_the_progress_file_never_goes_back_and_ends_at_one(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from replay.job.progress import ProgressFile
    path, seen, now = tmp_path / "restore.prom", [], [0.0]
    progress = ProgressFile(seen.append, str(path), {"source": 'db"1', "command": "restore"},
                            every=1.0, clock=lambda: now[0])

    def ratio():
        [family] = text_string_to_metric_families(path.read_text())
        [sample] = family.samples
        assert sample.labels == {"source": 'db"1', "command": "restore"}
        return sample.value
    assert ratio() == 0.0
    progress("restore: loading base")
    progress(Progress(1, 4, 250, 1000, 10))
    assert ratio() == 0.25
    now[0] = 0.5
    progress(Progress(2, 4, 500, 1000, 20))  # within a second of the last write
    assert ratio() == 0.25
    now[0] = 2.0
    progress(Progress(2, 4, 200, 1000, 20))  # less than shown: never written
    assert ratio() == 0.25
    progress(Progress(4, 4, 1000, 1000, 40))  # the binlogs' end: not yet the command's
    assert ratio() == 0.99
    progress.done()
    assert ratio() == 1.0
    assert len(seen) == 5  # every item still reached the terminal's reporter


def test_the_replay_reports_from_sizes_summed_once():
    """``run._report`` reads the bytes of the first n units from one running sum (a
    replay of 3,000 small files reports after each: summing every unit at each report
    made it quadratic, 13.7 s for 3,000 files where 300 took 0.63 s)."""
    from types import SimpleNamespace

    from replay.job import run
    seen = []
    summary = SimpleNamespace(applied=7, skipped=1, rows_events=3)
    sizes = [0, 10, 30, 60]
    run._report(seen.append, summary, sizes, 2, started=0.0)
    run._report(seen.append, summary, sizes, 3, started=0.0, final=True)
    assert [(p.files_done, p.files_total, p.bytes_done, p.bytes_total, p.final)
            for p in seen] == [(2, 3, 30, 60, False), (3, 3, 60, 60, True)]
    run._report(None, summary, sizes, 1, started=0.0)  # no progress asked: nothing
