"""``archive rekey``: every encrypted object of a source re-encrypted to new recipients,
in place, through the same writes as every archive object, resumable after kill -9.

One object at a time (``Rekey.one``), in four steps, so that at every moment the
object is whole and one of the stored forms its index (a base's manifest) names:

1. the new form is written beside it, under ``{source}/rekey/...`` (``staging_key``),
   through ``store.open_write`` (file://: fsynced and renamed into place), while the
   old one is decrypted and its stored and raw digests checked against the index:
   nothing is written from an object that is not what was archived; the new object is
   then read back and its size and sha256 compared;
2. the index is rewritten with the new form and, in ``rekey_from``, the old one: every
   reader takes either (``archive.objects``);
3. the new object takes the old one's place (``store.move``: a rename, or a copy and a
   delete), but not while another process holds a lease (a restore that may have read
   the index before step 2): the run stops there, the archive as it was;
4. the index is rewritten without ``rekey_from``.

A second run finds any object where the first stopped (``rekey_from`` present: which
form the object has now says which step comes next) and finishes it; objects already
encrypted to exactly the new recipients are skipped. The run holds a lease of its own,
so that retention deletes nothing meanwhile. An object under S3 Object Lock until a
later date is refused with its date (its locked version keeps the old key until then),
a damaged one is named: both are left as they are, and the run exits 1 after the rest.
"""

import time
from dataclasses import dataclass

from mysqlbackup.archive.codec import codec_of
from mysqlbackup.archive.index import parse_index
from mysqlbackup.archive.manifest import format_manifest, parse_manifest
from mysqlbackup.archive.names import BASE_INDEX, base_key, format_key, parse_key
from mysqlbackup.archive.objects import (REKEY_FROM, Promise, previous_form, problem,
                                         rekey_from)
from mysqlbackup.archive.upload import UploadMismatch
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError
from mysqlbackup.guard.lease import Lease, SourceLeases, held_by_dead_process, live_leases
from mysqlbackup.rekey.recode import recode
from mysqlbackup.utc import iso

STAGING = "rekey"          # {source}/rekey/...: new forms before they take their place
PROGRESS_EVERY = 10.0      # seconds between progress lines


class RekeyStopped(MysqlBackupError):
    """The rekey stopped before swapping an object: another process holds a lease."""


@dataclass(frozen=True)
class Item:
    """One archived object and the index (manifest) that describes it."""

    key: str            # the object
    doc_key: str        # its index, or its base's manifest
    source: str         # the source (not the epoch's key source)

    @property
    def is_base(self):
        return self.doc_key.endswith("/" + BASE_INDEX)


@dataclass
class Tally:
    """What a run did: counts, bytes, the objects it left and why."""

    rekeyed: int = 0
    finished: int = 0          # left halfway by an earlier run, finished now
    current: int = 0           # encrypted to exactly the new recipients already
    plain: int = 0             # not encrypted: nothing to rekey
    gone: int = 0              # removed meanwhile (retention, a sealed file's segments)
    unindexed: int = 0         # objects without an index or manifest: not rekeyed
    stored_bytes: int = 0
    raw_bytes: int = 0
    locked: list = None        # [(key, retain-until epoch seconds)]
    damaged: list = None       # [message]

    def __post_init__(self):
        self.locked, self.damaged = [], []


def staging_key(item):
    """Where an object's new form waits: ``{source}/rekey/`` and its key past the source."""
    return f"{item.source}/{STAGING}/{item.key[len(item.source) + 1:]}"


def items(listing, source, damaged=None):
    """Every indexed object of ``source`` (its epochs' sealed files and segments, its
    bases with a manifest), oldest epoch first; a base whose manifest does not read is
    left out, its error appended to ``damaged`` (a list) when given, else raised."""
    found = []
    for _, key_source, _ in listing.epochs(source):
        for name in listing.sealed_names(key_source):
            slots = listing.sealed[key_source][name]
            if "index" in slots and "data" in slots:
                found.append(Item(slots["data"], slots["index"], source))
        for name, segments in sorted(listing.segments[key_source].items()):
            for _, slots in sorted(segments.items()):
                if "index" in slots and "data" in slots:
                    found.append(Item(slots["data"], slots["index"], source))
    for base_id in listing.base_ids(source):
        members = listing.bases[source][base_id]
        try:
            manifest = listing.base_manifest(source, base_id)
        except CorruptBinlog as e:
            if damaged is None:
                raise
            damaged.append(str(e))
            continue
        key = format_key(base_key(source, base_id, manifest["member"]))
        if key in members.values():
            found.append(Item(key, members[BASE_INDEX], source))
    return found


def unindexed(listing, source):
    """How many objects of ``source`` have no index (manifest): uploads in flight, or
    left by a run cut short (``retain`` removes those); nothing names their keys."""
    count = 0
    for _, key_source, _ in listing.epochs(source):
        groups = list(listing.sealed[key_source].values()) + [
            slots for segments in listing.segments[key_source].values()
            for slots in segments.values()]
        count += sum("data" in slots and "index" not in slots for slots in groups)
    return count + sum(BASE_INDEX not in members and len(members) > 0
                       for members in listing.bases[source].values())


class Rekey:
    """One run over a source: ``store``, ``keyring`` (opens the old objects), ``codec``
    (the new recipients), ``lease`` (this run's, not a reason to stop)."""

    def __init__(self, store, keyring, codec, echo=print, clock=time.time):
        self.store, self.keyring, self.codec = store, keyring, codec
        self.staging = store.unlocked()  # a staged copy is deleted: never locked
        self.echo, self.clock = echo, clock
        self.lease_id = None
        self.tally = Tally()

    def run(self, listing, source):
        """Rekey every object of ``source``; returns the Tally."""
        todo = items(listing, source, self.tally.damaged)
        self.tally.unindexed = unindexed(listing, source)
        with Lease(self.store, source, purpose="rekey") as lease:
            self.lease_id = lease.id
            self._check_leases(source, "not started")
            started = last = self.clock()
            for done, item in enumerate(todo):
                self.one(item)
                if self.clock() - last >= PROGRESS_EVERY:
                    last = self.clock()
                    self.echo(self._progress(done + 1, len(todo), last - started))
            self._sweep(source)
        return self.tally

    def one(self, item):
        """Rekey one object, counting what happened; a damaged object is noted."""
        try:
            self._one(item)
        except FileNotFoundError:
            self.tally.gone += 1
            self._drop_staging(item)
        except (CorruptBinlog, UploadMismatch) as e:
            self.tally.damaged.append(str(e))
            self._drop_staging(item)

    def _one(self, item):
        doc = self._read_doc(item)
        if "age" not in self._codec_name(item, doc):
            self.tally.plain += 1
            return
        resumed = previous_form(doc) is not None and self._resume(item, doc)
        if resumed:  # before the lock is asked: the new form may be locked by this rekey
            self.tally.finished += 1
            doc = self._read_doc(item)
        if previous_form(doc) is None and set(doc.get("key_ids") or ()) == set(
                self.codec.key_ids):
            self.tally.current += not resumed
            return
        locked = self.store.lock_of(item.key)
        if locked and locked[1] > self.clock():
            self.tally.locked.append((item.key, locked[1]))
            return
        doc = self._stage(item, doc)
        self._swap(item, doc)
        self.tally.rekeyed += 1

    def _resume(self, item, doc):
        """Finish an object an earlier run left with ``rekey_from``: True when done here;
        False when its new form must be made again (the object has its old form and no
        whole staged copy)."""
        now = self.store.sha256(item.key)
        promise = self._promise(item, doc)
        if now == promise.stored:
            self.store.lock_now(item.key)  # a run killed between its copy and its lock
            self._finish(item, doc)
            return True
        if now != promise.previous:
            raise CorruptBinlog(f"stored as {now[0]} bytes sha256 {now[1][:16]}...: neither "
                                f"form its {promise.by} names (damaged or replaced)", item.key)
        staged = staging_key(item)
        if self.store.exists(staged) and self.store.sha256(staged) == promise.stored:
            self._swap(item, doc)
            return True
        return False

    def _stage(self, item, doc):
        """Step 1 and 2: the new form written and read back, the index naming both;
        returns the index as written."""
        promise, staged = self._promise(item, doc), staging_key(item)
        with self.staging.open_write(staged) as out:
            old, new = recode(self.store.reader(item.key, self.store.info_size(item.key)),
                              out.write, promise.codec, self.keyring, self.codec.recipients,
                              item.key, promise.key_ids)
            why = problem(promise, old)
            if why:
                raise CorruptBinlog(why + ": not rekeyed", item.key)
        if self.staging.sha256(staged) != new:
            raise UploadMismatch(f"{staged}: the new form did not read back as written")
        was = (old.stored_size, old.stored_sha256)
        ids = (doc.get("key_ids") or []) if was == promise.stored else previous_form(doc)[2]
        doc = self._with_form(item, doc, new)
        doc[REKEY_FROM] = rekey_from(*was, ids)
        self._write_doc(item, doc)
        self.tally.stored_bytes += new[0]
        self.tally.raw_bytes += old.raw_size
        return doc

    def _swap(self, item, doc):
        """Step 3 and 4, unless another process holds a lease now."""
        self._check_leases(item.source, f"stopped before {item.key}")
        if not self.store.exists(item.key):  # removed meanwhile: not brought back
            raise FileNotFoundError(item.key)
        self.store.move(staging_key(item), item.key)
        self._finish(item, doc)

    def _finish(self, item, doc):
        """Step 4: on a versioned bucket, the old form's version goes (it would stay
        readable with the old key), then the index names the new form alone (a run
        stopped between the two does both again); the staged copy goes, every version."""
        self.store.drop_old_versions(item.key)
        self._write_doc(item, _without_previous(doc))
        self._drop_staging(item)

    def _check_leases(self, source, what):
        """RekeyStopped when a process other than this run holds a live lease: a restore
        (which may read an index before it names the new form), another rekey. A lease
        of a process of this host that is gone (a rekey killed with kill -9) is not one."""
        holder = next((b for b in live_leases(SourceLeases(self.store, source), source,
                                              self.clock())
                       if b.get("id") != self.lease_id and not held_by_dead_process(b)),
                      None)
        if holder is not None:
            raise RekeyStopped(
                f"{what}: {holder.get('purpose') or 'restore'} lease {holder.get('id')} "
                f"(pid {(holder.get('holder') or {}).get('pid', '?')}) is live; the archive "
                "reads as before; run archive rekey again once it ends")

    def _codec_name(self, item, doc):
        return doc.get("codec", "zstd") if item.is_base else codec_of(doc)

    def _promise(self, item, doc):
        return (Promise.of_manifest(item.key, doc) if item.is_base
                else Promise.of_index(item.key, doc))

    def _with_form(self, item, doc, form):
        size, sha256 = form
        digest_field = "sha256" if item.is_base else "stored_sha256"
        return dict(doc, stored_size=size, **{digest_field: sha256},
                    key_ids=list(self.codec.key_ids))

    def _read_doc(self, item):
        """The object's index or manifest as it is now, validated (as written: not
        ``listing.read_index``, which adds the epoch it reads from the key)."""
        key, raw = parse_key(item.doc_key), self.store.read(item.doc_key)
        if item.is_base:
            return parse_manifest(raw, item.doc_key, item.source, key.name)
        return parse_index(raw, item.doc_key, key.name, key.start, key.end)

    def _write_doc(self, item, doc):
        """Rewrite an index (manifest) that is still there (retention or the daemon may
        have removed the object since: it is not brought back)."""
        if not self.store.exists(item.doc_key):
            raise FileNotFoundError(item.doc_key)
        if item.is_base:
            self.store.put_bytes(item.doc_key, format_manifest(doc))
        else:
            self.store.put_json(item.doc_key, doc)

    def _drop_staging(self, item):
        try:
            self.staging.remove(staging_key(item))
        except FileNotFoundError:
            pass
        self.staging.drop_old_versions(staging_key(item), every=True)

    def _sweep(self, source):
        """Remove staged copies nothing needs any more (an object gone meanwhile, a run
        stopped before its own went), every version of them."""
        for relative in self.staging.list(f"{source}/{STAGING}"):
            if relative.startswith(f"{source}/{STAGING}/"):
                self.staging.remove(relative)
        self.staging.drop_old_versions(f"{source}/{STAGING}/", every=True, under=True)
        self.store.remove_empty_folder(f"{source}/{STAGING}")

    def _progress(self, done, total, elapsed):
        rate = self.tally.raw_bytes / elapsed / 1e6 if elapsed else 0.0
        return (f"rekey: {done} of {total} objects, {self.tally.rekeyed} rekeyed, "
                f"{self.tally.raw_bytes / 1e6:.1f} MB, {rate:.1f} MB/s")


def _without_previous(doc):
    return {k: v for k, v in doc.items() if k != REKEY_FROM}


def summary(source, tally, elapsed):
    """The lines a run ends with: what was done, then each object left and why."""
    rate = tally.raw_bytes / elapsed / 1e6 if elapsed else 0.0
    lines = [f"{source}: {tally.rekeyed} objects rekeyed ({tally.raw_bytes / 1e6:.1f} MB raw, "
             f"{tally.stored_bytes / 1e6:.1f} MB stored, {rate:.1f} MB/s), {tally.finished} "
             f"finished from an earlier run, {tally.current} on the new keys already, "
             f"{tally.plain} not encrypted, {tally.gone} removed meanwhile"]
    lines += [f"{key}: locked until {iso(until)} (S3 Object Lock): its locked version keeps "
              "the old key until then; not rekeyed" for key, until in tally.locked]
    lines += [f"not rekeyed: {why}" for why in tally.damaged]
    if tally.unindexed:
        lines.append(f"{source}: {tally.unindexed} objects without an index are not rekeyed "
                     "(uploads in flight, or left by a run cut short: retain removes those)")
    return lines


def run_rekey(listing, sources, keyring, codec, echo=print, clock=time.time):
    """Rekey every source of ``sources`` (from ``listing``); returns True when every
    encrypted object is on the new recipients (False: some were locked or damaged,
    each named in the lines echoed)."""
    whole = True
    for source in sources:
        started = clock()
        tally = Rekey(listing.store, keyring, codec, echo, clock).run(listing, source)
        for line in summary(source, tally, clock() - started):
            echo(line)
        whole = whole and not tally.locked and not tally.damaged
    return whole
