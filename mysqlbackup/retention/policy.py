"""What ``mysqlbackup retain`` may delete (pure: the archive's facts in, a plan out).

The rule, per source: the oldest promised moment is ``now - window``. The *anchor*
is the newest base backup whose ``end_time`` is before it and that sits in
the archived binlogs (window.locate); it stays, with every binlog file from the
first one a restore from it reads (a file holding the cut point is kept whole).
Older bases go, except the ``keep_base`` newest of them, kept without their
binlogs (tiered retention). Binlog files before the anchor's first file go, and
so do objects left without their index or manifest by an earlier run that
stopped midway (never indexed, they never counted as archived).

Nothing that a live lease names is deleted: its base and every binlog file from
the first its restore reads; a lease whose base is unknown (damaged, or a base
this listing does not hold) keeps everything. Without an anchor (no base old
enough, or none in the binlogs) nothing is deleted. The newest base and the
binlogs after it are never deleted: the anchor is at most the newest base.
"""

import math
from dataclasses import dataclass, field, replace
from typing import Optional

from mysqlbackup.archive.window import build_runs, locate, recovery_windows
from mysqlbackup.utc import epoch, iso
from mysqlbackup.binlog.gtid import shown
from mysqlbackup.binlog.names import binlog_sort_key


@dataclass(frozen=True)
class Facts:
    """What the archive holds for one source, as retention needs it."""

    source: str
    sealed: tuple                  # index dicts of the sealed files with an index, oldest first
    manifests: tuple               # sound base manifests
    partial: Optional[dict] = None  # the active file's merged index
    unindexed: tuple = ()          # sealed binlog objects without an index (names)
    loose_bases: tuple = ()        # base ids with objects but no manifest
    leases: tuple = ()             # live lease bodies
    later: tuple = ()              # EpochFacts of each later epoch (failovers), in order
    damaged_bases: tuple = ()      # base ids whose object is missing or not its manifest's


@dataclass(frozen=True)
class EpochFacts:
    """The binlogs of one later epoch of the source's history (after a failover)."""

    history: object                # archive.window.EpochHistory
    sealed: tuple                  # index dicts of its sealed files with an index
    partial: Optional[dict] = None  # its newest file's merged index
    unindexed: tuple = ()          # its sealed binlog objects without an index (names)


@dataclass(frozen=True)
class Item:
    """One binlog file or base backup, and why it goes or stays."""

    kind: str     # "binlog", "binlog segments" (the last file of an earlier epoch: its
    # server failed before sealing it), "base", "orphan binlog" (no index), "orphan base",
    # "damaged base" (its object missing or not its manifest's size)
    name: str     # binlog file name or base id
    reason: str
    epoch: int = 1  # a binlog's epoch of the source's history

    def describe(self):
        label = self.name if self.epoch == 1 else f"{self.name} (epoch {self.epoch})"
        return f"{self.kind} {label}: {self.reason}"


@dataclass(frozen=True)
class RetentionPlan:
    """What goes, what stays among the bases, and the windows before and after."""

    source: str
    promised: float                # epoch: every moment from here on stays restorable
    anchor: Optional[dict]         # manifest of the base the window starts from
    deletions: tuple               # Items, oldest binlog first, then bases, then orphans
    kept: tuple                    # Items: the bases kept, and why
    before: tuple                  # window.Window list, now
    after: tuple                   # window.Window list once the deletions are done
    lease_ids: tuple               # the live leases the plan honoured
    note: Optional[str] = None     # why nothing may go (no anchor, an unknown lease)


@dataclass
class _Protect:
    everything: Optional[str] = None         # why nothing may go
    bases: dict = field(default_factory=dict)  # base id -> reason
    from_position: Optional[int] = None      # binlogs at or after it stay (global order)


def plan_retention(facts, now, window, keep_base=0):
    """The RetentionPlan of ``facts`` at ``now`` (epoch) for a window of ``window``
    seconds and ``keep_base`` older bases kept (without binlogs)."""
    promised = math.floor(now - window)  # a whole second: what is printed is what holds
    runs = _runs(facts)
    before = recovery_windows(facts.source, runs, list(facts.manifests))
    order = {(n, index["name"]): i for i, (n, index, _) in enumerate(_timeline(facts))}
    anchor = _anchor(runs, facts.manifests, promised)
    protect = _leased(facts, runs, order)
    if anchor is None:
        protect.everything = protect.everything or (
            f"no base backup in the archived binlogs ended before {iso(promised)}: "
            "nothing is deleted (every base and binlog may be needed)")
    base_items, kept = _bases(facts, anchor, keep_base, protect, promised)
    binlogs = _binlogs(facts, anchor, runs, order, protect)
    deletions = () if protect.everything else tuple(binlogs + base_items)
    return RetentionPlan(facts.source, promised, anchor, deletions, tuple(kept),
                         tuple(before), tuple(windows_after(facts, deletions)),
                         tuple(str(lease.get("id")) for lease in facts.leases),
                         protect.everything)


def _runs(facts):
    """The runs of ``facts``' binlogs, epoch after epoch (window.build_runs)."""
    later = [(e.history, list(e.sealed), e.partial) for e in facts.later]
    return build_runs(facts.source, list(facts.sealed), facts.partial, later)[0]


def _timeline(facts):
    """[(epoch, index, sealed)] of every archived file of the source in history order:
    each epoch's sealed files, then its newest file (segments: never deleted here)."""
    every = [(1, facts.sealed, facts.partial)] + [
        (e.history.epoch, e.sealed, e.partial) for e in facts.later]
    timeline = []
    for number, sealed, partial in every:
        timeline += [(number, index, True) for index in sealed]
        timeline += [(number, partial, False)] if partial else []
    return timeline


def _anchor(runs, manifests, promised):
    """The newest base ended before ``promised`` that sits in a run, or None (a restore
    to a moment takes a base ended before it: window.choose_base)."""
    old = [m for m in manifests if epoch(m["end_time"]) < promised]
    placed = [m for m in old if any(locate(run, m) is not None for run in runs)]
    return max(placed, key=lambda m: m["id"]) if placed else None


def _first_position(runs, manifest, order):
    """Position in the history (``order``: (epoch, name) -> position, ``_timeline``) of
    the first file a restore from ``manifest`` reads; None when the base sits in no run."""
    for run in reversed(runs):
        at = locate(run, manifest)
        if at is not None:
            return order[run.spans[at].key]
    return None


def _holder(lease):
    """Who holds a lease: "a restore" (leases written before ``purpose``), "archive rekey"."""
    purpose = lease.get("purpose") or "restore"
    return "a restore" if purpose == "restore" else f"archive {purpose}"


def _leased(facts, runs, order):
    """What the live leases keep: their bases, and binlogs from the first they read."""
    protect = _Protect()
    by_id = {m["id"]: m for m in facts.manifests}
    for lease in facts.leases:
        lease_id, base_id = lease.get("id"), lease.get("base")
        first = _first_position(runs, by_id[base_id], order) if base_id in by_id else None
        if first is None:
            protect.everything = (f"{_holder(lease)} holds lease {lease_id} (base "
                                  f"{base_id or '?'} not found in the binlogs): nothing is "
                                  "deleted")
            continue
        protect.bases[base_id] = f"a restore holds lease {lease_id} on it"
        if protect.from_position is None or first < protect.from_position:
            protect.from_position = first
    return protect


def _bases(facts, anchor, keep_base, protect, promised):
    """(deletions, kept) among the bases: the anchor and newer stay, ``keep_base`` older
    ones stay without binlogs, leased ones stay, the rest go; abandoned uploads (no
    manifest) older than the anchor go too."""
    kept, gone = [], []
    if anchor is None:
        return [], [Item("base", m["id"], "kept: no base is old enough to start the window")
                    for m in sorted(facts.manifests, key=lambda m: m["id"])]
    tiers = 0
    for m in sorted(facts.manifests, key=lambda m: m["id"], reverse=True):
        if m["id"] > anchor["id"]:
            kept.append(Item("base", m["id"], f"kept: newer than base {anchor['id']} (in the "
                             "window)"))
        elif m["id"] == anchor["id"]:
            kept.append(Item("base", m["id"], f"kept: the newest base ended before "
                             f"{iso(promised)}: the window starts from it"))
        elif tiers < keep_base:
            tiers += 1
            kept.append(Item("base", m["id"], f"kept: --keep-base {keep_base} (its own moment "
                             f"{m['end_time']} only, loaded by hand; its binlogs go)"))
        elif m["id"] in protect.bases:
            kept.append(Item("base", m["id"], "kept: " + protect.bases[m["id"]]))
        else:
            gone.append(Item("base", m["id"], f"older than base {anchor['id']}, where the "
                             f"window starts, and beyond --keep-base {keep_base}"))
    gone += [Item("orphan base", b, f"no manifest (an upload abandoned, or a deletion cut "
                  f"short), older than base {anchor['id']}")
             for b in sorted(facts.loose_bases) if b < anchor["id"]
             and b not in protect.bases]
    gone += [Item("damaged base", b, f"its object is missing or not the size its manifest "
                  f"names (no restore can start from it), older than base {anchor['id']}")
             for b in sorted(facts.damaged_bases) if b < anchor["id"]
             and b not in protect.bases]
    return gone, sorted(kept, key=lambda item: item.name)


def _binlogs(facts, anchor, runs, order, protect):
    """Sealed files before the anchor's first file (and before any leased base's), and
    unindexed objects that sort before that file."""
    if anchor is None:
        return []
    timeline = _timeline(facts)
    start = _first_position(runs, anchor, order)
    first = _label(*timeline[start][:2])
    limit = start if protect.from_position is None else min(start, protect.from_position)
    items = [Item("binlog" if sealed else "binlog segments", index["name"],
                  f"before {first}, the first file a restore from base {anchor['id']} reads",
                  number) for number, index, sealed in timeline[:limit]]
    kept_epoch, kept = timeline[limit][0], timeline[limit][1]["name"]
    unindexed = [(1, facts.unindexed)] + [(e.history.epoch, e.unindexed) for e in facts.later]
    for number, names in unindexed:
        items += [Item("orphan binlog", name, f"no index (a deletion cut short, or never "
                       f"verified), before {_label(kept_epoch, {'name': kept})}", number)
                  for name in sorted(names, key=binlog_sort_key)
                  if number < kept_epoch or number == kept_epoch
                  and binlog_sort_key(name) < binlog_sort_key(kept)]
    return items


def _label(epoch, index):
    return index["name"] if epoch == 1 else f"{index['name']} (epoch {epoch})"


def windows_after(facts, deletions):
    """The recovery windows once ``deletions`` are done."""
    gone = {(item.kind, item.epoch, item.name) for item in deletions}
    kept = lambda number, sealed: tuple(  # noqa: E731
        i for i in sealed if ("binlog", number, i["name"]) not in gone)
    last = lambda number, partial: None if partial and (  # noqa: E731
        "binlog segments", number, partial["name"]) in gone else partial
    manifests = [m for m in facts.manifests if ("base", 1, m["id"]) not in gone]
    left = replace(facts, sealed=kept(1, facts.sealed), partial=last(1, facts.partial),
                   later=tuple(replace(e, sealed=kept(e.history.epoch, e.sealed),
                                       partial=last(e.history.epoch, e.partial))
                               for e in facts.later))
    return recovery_windows(facts.source, _runs(left), manifests)


def format_window(window):
    """One line of a window.Window, as ``archive ls`` words it."""
    return (f"restorable from {window.start} to {window.end} (base {window.base_id}, up to "
            f"GTID {shown(window.end_gtid)}, {window.first_file} .. {window.last_file})")


def describe_plan(plan, keep_base=0):
    """The lines ``retain`` prints before deleting (or instead, with --dry-run)."""
    lines = [f"retain {plan.source}: every moment from {iso(plan.promised)} on is to stay "
             "restorable"]
    lines += [f"window before: {format_window(w)}" for w in plan.before] or [
        "window before: none (no base backup sits in the archived binlogs)"]
    if plan.note:
        lines.append(f"note: {plan.note}")
    lines += [item.describe() for item in plan.kept]
    return lines
