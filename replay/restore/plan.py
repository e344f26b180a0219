"""The plan of a restore (pure): which base, which binlog files, where the replay
starts and stops, and what ``--dry-run`` prints.

The base is window.choose_base's (the newest one, of those whose manifest reads,
whose GTID position is within the stop point's, or ``--base ID``; ``--base latest``
names that default), proved contiguous to the stop point by the indexes. The
replay then reads from the first file holding a transaction the base lacks to the
file of the stop point, and skips what the base holds: by its GTID position
(MariaDB) or its binlog file:position (otherwise).
"""

from dataclasses import dataclass, replace

from mysqlbackup.archive.names import BASE_MEMBERS, base_key, format_key
from mysqlbackup.archive.window import choose_base
from mysqlbackup.binlog.gtid import parse_gtid_set
from mysqlbackup.binlog.position import Position
from mysqlbackup.errors import CorruptBinlog

LATEST = "latest"  # --base latest: the default choice, said explicitly


def base_wanted(text):
    """The base id ``--base`` asks for: None for the default choice (no --base, or
    ``latest`` in any case: choose_base takes the newest base that fits), else ``text``."""
    return None if not text or text.lower() == LATEST else text


@dataclass(frozen=True)
class RestorePlan:
    """A restore's base (window.Choice) and the binlog files read after it."""

    source: str
    choice: object   # window.Choice

    @property
    def manifest(self):
        return self.choice.manifest

    @property
    def stop(self):
        return self.choice.stop

    @property
    def files(self):
        return self.choice.files

    @property
    def spans(self):
        """The window.Spans of the binlog files read after the base."""
        return self.choice.spans

    @property
    def base_object(self):
        """The archive key of the base's object (its dump or physical stream)."""
        return format_key(base_key(self.source, self.manifest["id"], self.manifest["member"]))

    @property
    def binlog_bytes(self):
        return sum(span.size or 0 for span in self.choice.spans)

    @property
    def bytes_to_read(self):
        return self.manifest["stored_size"] + self.binlog_bytes

    def replay_selection(self, selection):
        """``selection`` starting where the base is: its GTID position, else (a source
        without GTIDs: the base has none) its binlog file:position."""
        m = self.manifest
        if m.get("gtid_flavor") in ("mariadb", "mysql") and m.get("gtid") is not None:
            return replace(selection, start_gtids=parse_gtid_set(m["gtid"], m["gtid_flavor"]),
                           start_position=None)
        return replace(selection, start_gtids=None,
                       start_position=Position(m["binlog_file"], m["binlog_pos"]))


def make_plan(source, runs, holes, manifests, stop, base_id=None):
    """The RestorePlan to ``stop``: raises ResyncRequired naming the hole in the way, or
    NoBaseError (window.choose_base), or CorruptBinlog for a base whose member is not
    its method's."""
    choice = choose_base(source, runs, holes, manifests, stop, base_id)
    m = choice.manifest
    if m["member"] != BASE_MEMBERS.get(m["method"]):
        raise CorruptBinlog(f"bad base manifest: member {m['member']!r} for method "
                            f"{m['method']!r}", format_key(base_key(source, m["id"])))
    return RestorePlan(source, choice)


def describe(plan):
    """The lines ``--dry-run`` prints (and a restore logs): base, files, GTIDs, bytes,
    and the moment the target will be at."""
    m, spans = plan.manifest, plan.choice.spans
    at = f"GTID {m['gtid']}" if m.get("gtid") else "no GTID"
    where = f", {m['binlog_file']}:{m['binlog_pos']}" if m.get("binlog_file") else ""
    files = (f"{len(spans)} ({spans[0].label} to {spans[-1].label}"
             + (", the last one partial)" if spans[-1].partial else ")"))
    if spans[0].epoch != spans[-1].epoch:
        files += (f", across {spans[-1].epoch - spans[0].epoch} failover(s): the new "
                  "server's transactions the old one archived are skipped as duplicates")
    return [
        f"restore plan for {plan.source}",
        f"base: {m['id']} ({m['method']}), taken {m['start_time']} to {m['end_time']}, "
        f"at {at}{where}",
        f"binlog files: {files}",
        _gtid_line(plan),
        f"bytes to read: {plan.bytes_to_read} (base {m['stored_size']} stored, binlogs "
        f"{plan.binlog_bytes})",
        f"target at: {_target_at(plan)}",
    ]


def _gtid_line(plan):
    """The GTIDs the replay applies; for a source that keeps no GTIDs (its base has
    none), the stop points such an archive offers instead."""
    m = plan.manifest
    if m.get("gtid") is None:
        return ("GTIDs: none (the source keeps no GTIDs: a restore starts at the base's "
                "binlog position and stops with --stop-datetime or --stop-position; "
                "--apply native needs GTIDs)")
    return f"GTIDs: after {m.get('gtid') or '(none)'}, {_gtid_end(plan)}"


def _last_with_transactions(plan):
    """The newest file of the plan that holds a transaction (a file just rotated to, or
    left by a stopped server, holds none), else the newest file."""
    spans = plan.choice.spans
    return next((s for s in reversed(spans) if s.last_gtid or s.last_commit), spans[-1])


def _reaches_end(plan):
    """True when the replay goes through the last file's last transaction."""
    return plan.stop.passes(_last_with_transactions(plan))


def _gtid_end(plan):
    if _reaches_end(plan):
        return f"through {_last_with_transactions(plan).last_gtid or '(none)'}"
    return plan.stop.through()


def _target_at(plan):
    last = _last_with_transactions(plan)
    if _reaches_end(plan):
        gtid = last.last_gtid or plan.manifest.get("gtid")
        return (f"{last.last_commit or plan.manifest['end_time']}"
                + (f", GTID {gtid or '(none)'}" if gtid is not None else "")
                + f" (the last commit archived in {last.label})")
    return plan.stop.target_at()
