"""``mysqlbackup retain``: read the archive's facts, plan (``retention``), delete.

Each deletion removes the index first, then the object (a base: its manifest, then
its members), so an object is never taken as whole once its deletion began: one
left behind by a run cut short has no index, counts as never archived
(``verify`` notes it, restore does not read it), and the next run removes it.
Just before each deletion the source's leases are read again: a restore that
started since the plan stops the run (nothing more is deleted; run it again).

The ``retain`` command deletes only with ``--yes`` (it passes ``dry_run`` otherwise);
the daemon's ``stream --retain-window`` calls ``retain`` itself and deletes.
"""

import time
from dataclasses import dataclass, replace
from typing import Optional

from mysqlbackup.archive.manifest import object_problem
from mysqlbackup.guard.lease import SourceLeases, live_leases
from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.names import (BASE_INDEX, base_prefix, epoch_source, format_key,
                                       partial_prefix, retired_key)
from mysqlbackup.archive.window import recovery_windows
from mysqlbackup.utc import iso
from mysqlbackup.retention.policy import (EpochFacts, Facts, describe_plan, format_window,
                                          plan_retention, windows_after)


def read_facts(listing, source, now):
    """The retention Facts of ``source`` from an ArchiveListing (indexes and manifests
    read and validated; a damaged one raises CorruptBinlog: retention stops), epoch
    after epoch of its history. A base whose object is missing or of another size than
    its manifest's is no base to keep a window by (``manifest.object_problem``): never
    an anchor; deleted once older than the anchor, as a base without manifest is."""
    epochs = [EpochFacts(history, *_binlog_facts(listing, key_source))
              for _, key_source, history in listing.epochs(source)]
    manifests, damaged = [], []
    for base_id in listing.base_ids(source):
        manifest = listing.base_manifest(source, base_id)
        sound = object_problem(listing, listing.bases[source][base_id], manifest) is None
        (manifests if sound else damaged).append(manifest if sound else base_id)
    loose = [b for b, members in listing.bases[source].items() if BASE_INDEX not in members]
    first = epochs[0]
    return Facts(source, first.sealed, tuple(manifests), first.partial, first.unindexed,
                 tuple(sorted(loose)), tuple(live_leases(listing, source, now)),
                 tuple(epochs[1:]), damaged_bases=tuple(damaged))


def _binlog_facts(listing, key_source):
    """(sealed indexes, merged partial index, unindexed names) of one epoch's files."""
    sealed, unindexed = [], []
    for name in listing.sealed_names(key_source):
        slots = listing.sealed[key_source][name]
        if slots.get("index"):
            sealed.append(listing.index(key_source, name))
        elif slots.get("data"):
            unindexed.append(name)
    return tuple(sealed), listing.partial_index(key_source), tuple(unindexed)


def new_lease(store, plan, now=None):
    """The id of a live lease of the plan's source that the plan did not honour, or None."""
    fresh = live_leases(SourceLeases(store, plan.source), plan.source, now)
    return next((str(b.get("id")) for b in fresh if str(b.get("id")) not in plan.lease_ids),
                None)


def object_keys(listing, source, item):
    """The objects of one deletion, in the order they go: index (manifest) first."""
    if item.kind in ("binlog", "orphan binlog"):
        slots = listing.sealed[source][item.name]
        return [k for k in (slots.get("index"), slots.get("data")) if k]
    if item.kind == "binlog segments":  # every index first: the file leaves the chain
        segments = [slots for _, slots in sorted(listing.segments[source][item.name].items())]
        return [s["index"] for s in segments if "index" in s] + [
            s["data"] for s in segments if "data" in s]
    members = listing.bases[source][item.name]
    return ([members[BASE_INDEX]] if BASE_INDEX in members else []) + sorted(
        key for member, key in members.items() if member != BASE_INDEX)


def unlocked(listing, plan, now):
    """(the plan less the deletions the store keeps locked (S3 Object Lock) past ``now``,
    [(item, its objects' latest retain-until)] of those): retain never asks to delete
    a locked object. Keeping more than the plan deletes keeps every promised moment."""
    if listing.store.lock is None and listing.store.local:
        return plan, []
    deletions, locked = [], []
    for item in plan.deletions:
        where = epoch_source(plan.source, item.epoch)
        untils = [listing.store.retain_until(key) for key in object_keys(listing, where, item)]
        until = max((u for u in untils if u is not None), default=None)
        if until is not None and until > now:
            locked.append((item, until))
        else:
            deletions.append(item)
    if not locked:
        return plan, []
    return replace(plan, deletions=tuple(deletions)), locked


def retire(listing, source, item, now):
    """Mark a sealed binlog file as deleted by retention, before its index goes: the
    daemon's archiver, which uploads again what the store lost, leaves a local file
    with this size and sha256 alone (``Archiver._retired``)."""
    index = (listing.index(source, item.name) if item.kind == "binlog"
             else listing.partial_index(source))
    listing.store.put_json(format_key(retired_key(source, item.name)), {
        "kind": "retired", "source": source, "name": item.name, "size": index["size"],
        "sha256": index.get("sha256"), "retired_at": iso(now), "reason": item.reason,
        "segments": item.kind == "binlog segments"})


def execute(listing, plan, echo=print, clock=time.time):
    """Delete the plan's items, each index first (a binlog file's retired mark before
    it); returns (deleted items, the lease id
    that stopped the run or None)."""
    store, done = listing.store, []
    for item in plan.deletions:
        lease_id = new_lease(store, plan, clock())
        if lease_id:
            echo(f"stopped: a restore started (lease {lease_id}); nothing more is deleted "
                 "(run retain again)")
            return done, lease_id
        where = epoch_source(plan.source, item.epoch)  # a binlog's epoch; bases: epoch 1
        if item.kind in ("binlog", "binlog segments"):
            retire(listing, where, item, clock())
        for key in object_keys(listing, where, item):
            try:
                store.remove(key)
            except FileNotFoundError:
                pass  # gone already (another retain run)
        if item.kind in ("base", "orphan base", "damaged base"):
            store.remove_empty_folder(base_prefix(plan.source, item.name))
        if item.kind == "binlog segments":
            store.remove_empty_folder(partial_prefix(where, item.name))
        echo(f"deleted {item.describe()}")
        done.append(item)
    return done, None


@dataclass(frozen=True)
class Outcome:
    """What ``retain`` did for one source: its plan, the items it deleted (None: a dry
    run), the lease that stopped the deletions, and the recovery windows after."""

    plan: object                      # policy.RetentionPlan
    deleted: Optional[tuple] = None
    stopped_by: Optional[str] = None
    after: tuple = ()
    locked: tuple = ()                # (item, retain-until epoch): kept by Object Lock


def retain(store, window, keep_base=0, dry_run=False, source=None, echo=print, now=None,
           strict=False):
    """Plan and (unless ``dry_run``) apply retention to every source (or ``source``) of
    the archive; returns the Outcome of each. Prints the window before, each deletion
    (or would-be deletion) and why, and the window after (read again from the archive
    after a real run). ``strict`` (the ``retain`` command): a URL that is no archive
    and a ``source`` it does not hold are refused (``ArchiveListing.require``); the
    daemon's retention is not strict: nothing archived yet is nothing to do."""
    now = time.time() if now is None else now
    listing = ArchiveListing(store)
    sources = listing.require(source) if strict else [source] if source else listing.sources()
    if not sources:
        echo(f"archive {store.url} is empty: nothing to delete")
    outcomes = []
    for src in sources:
        facts = read_facts(listing, src, now)
        plan, locked = unlocked(listing, plan_retention(facts, now, window, keep_base), now)
        if locked:  # the window after: what the deletions left in the plan leave
            plan = replace(plan, after=tuple(windows_after(facts, plan.deletions)))
        for line in describe_plan(plan):
            echo(line)
        for item, until in locked:
            echo(f"kept by lock until {iso(until)}: {item.describe()}")
        if not plan.deletions:
            echo("nothing to delete")
        if dry_run:
            for item in plan.deletions:
                echo(f"would delete {item.describe()}")
            outcome = Outcome(plan, after=plan.after, locked=tuple(locked))
        else:
            done, stopped_by = execute(listing, plan, echo)
            outcome = Outcome(plan, tuple(done), stopped_by, tuple(windows_now(store, src)),
                              tuple(locked))
        _echo_windows("window after", outcome.after, echo)
        outcomes.append(outcome)
    return outcomes


def outcome_json(outcome):
    """An Outcome as ``retain --json`` prints it."""
    plan = outcome.plan
    return {"source": plan.source, "promised": iso(plan.promised), "note": plan.note,
            "window_before": [vars(w) for w in plan.before],
            "kept": [_item_json(i) for i in plan.kept],
            "deletions": [_item_json(i) for i in plan.deletions],
            "deleted": None if outcome.deleted is None else [
                _item_json(i) for i in outcome.deleted],
            "stopped_by_lease": outcome.stopped_by,
            "kept_by_lock": [dict(_item_json(i), until=iso(u)) for i, u in outcome.locked],
            "window_after": [vars(w) for w in outcome.after]}


def _item_json(item):
    return {"kind": item.kind, "name": item.name, "epoch": item.epoch, "reason": item.reason}


def windows_now(store, source):
    """The recovery windows of ``source`` as the archive holds them now."""
    listing = ArchiveListing(store)
    runs, _ = listing.chain(source)
    return recovery_windows(source, runs, listing.sound_manifests(source))


def _echo_windows(label, windows, echo):
    for w in windows:
        echo(f"{label}: {format_window(w)}")
    if not windows:
        echo(f"{label}: none")


def retainer(window, keep_base=0):
    """``retain`` over one source as the daemon's archiver runs it (``stream
    --retain-window``): a callable ``(store, source, now, echo)``. The command line hands
    it to the archiver, which never imports retention."""
    def run(store, source, now, echo):
        return retain(store, window, keep_base, source=source, now=now, echo=echo)
    return run
