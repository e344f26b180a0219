"""``archive find``: the archive's files read one after the other, each streamed through
a ``FileScan``, the matches handed out as they are found (archive I/O here; the rest is
pure).

The files are those a replay of the source would read, in the same order, planned from
the indexes alone (``replay.planning.plan.units_to_read``: every epoch of the source's history, the
newest file's segments, a later epoch's copies of the one before left out); holes in
the chain do not stop a search (``verify`` is for those). A file whose index shows that
it committed nothing in the time range is not read. Each object is read in ranged reads
and decoded (zstd, age) as it streams in (``replay.job.tasks.stream_unit``): memory holds one
read chunk and one event, whatever the file's size.
"""

import time
from dataclasses import dataclass

from mysqlbackup.binlog.gtid import guess_flavor, parse_gtid_set
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError, mask_url
from replay.find.scan import FileScan
from replay.planning.plan import ReplayOptions, units_to_read
from replay.job.tasks import stream_unit
from replay.planning.units import object_at


@dataclass
class Scanned:
    """What a search read: files (and those left unread for the time range), raw bytes,
    transactions, matches, seconds."""

    source: str = None
    files: int = 0
    files_skipped: int = 0
    bytes: int = 0
    transactions: int = 0
    matches: int = 0
    seconds: float = 0.0

    def as_dict(self):
        """The JSON form (``--json``'s ``scanned``)."""
        return {"files": self.files, "files_skipped": self.files_skipped, "bytes": self.bytes,
                "transactions": self.transactions, "matches": self.matches,
                "seconds": round(self.seconds, 3)}

    def line(self):
        """One line for stderr: what was searched, how fast."""
        rate = self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0
        skipped = f" ({self.files_skipped} outside the time range not read)" \
            if self.files_skipped else ""
        return (f"find: {self.matches} matching of {self.transactions} transactions in "
                f"{self.files} files{skipped}, {self.bytes / 1e6:.1f} MB in "
                f"{self.seconds:.1f} s ({rate:.0f} MB/s)")


def plan_search(archive_url, archive_options, source_name, keyring):
    """(source, units) of the search: what a replay of the whole archive would read."""
    opts = ReplayOptions(archive_url, archive_options or {}, source_name, allow_gaps=True,
                         keyring=keyring)
    source, units, _ = units_to_read(opts)
    return source, units


def find(archive_url, archive_options, source_name, criteria, on_match, keyring=None,
         on_plan=None):
    """Search the archive; ``on_match(summary, hits)`` for each match, in commit order
    (``on_plan(source)`` first, once the source is known); returns a ``Scanned``."""
    started = time.monotonic()
    source, units = plan_search(archive_url, archive_options, source_name, keyring)
    scanned = Scanned(source=source)
    if on_plan is not None:
        on_plan(source)

    def matched(summary):
        scanned.matches += 1
        on_match(summary, criteria.hits(summary.changes))
    for unit in units:
        if criteria.outside(unit.index):
            scanned.files_skipped += 1
            continue
        scan = FileScan(unit.name, matched, criteria.keep, newest=unit.partial,
                        epoch=unit.epoch, skip=_gtids(unit.skip),
                        wants=criteria.wants)
        _read(unit, archive_url, archive_options or {}, scan, keyring)
        scanned.files += 1
        scanned.bytes += scan.size
        scanned.transactions += scan.transactions
    scanned.seconds = time.monotonic() - started
    return scanned


def _read(unit, url, options, scan, keyring):
    """Stream one unit through its scan; a damaged object named with its offset."""
    try:
        stream_unit(unit, url, options, scan.feed, keyring)
        scan.finish()
    except CorruptBinlog as e:
        key = e.file if e.file and e.file != unit.name else object_at(unit, e.offset)
        raise CorruptBinlog(e.detail, key, e.offset) from None
    except FileNotFoundError as e:  # the newest file's segments go once it is sealed
        raise MysqlBackupError(f"the archive changed during the search: {mask_url(e)} is "
                               f"gone (the newest file {unit.name} was sealed meanwhile?); "
                               "run it again") from None


def _gtids(text):
    """The GTID set ``text`` (None for none)."""
    return parse_gtid_set(text, guess_flavor(text)) if text else None
