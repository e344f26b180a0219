"""``mysqlbackup verify`` and ``mysqlbackup archive ls``: read the archive and report.

verify checks every binlog object (magic, CRCs, index, chain) and every base backup
(manifest, object size and sha256; with an identity also decoded, streaming, against the
manifest's raw size and sha256); ``archive ls`` adds the recovery windows. Every object
is read once, decoded and checked as it streams (``_read_object``, over the one reader
``objects.read_object``): nothing is held whole in memory."""

import time

from mysqlbackup.archive.codec import IdentityError, check_keys, codec_of, sniff
from mysqlbackup.archive.objects import (Promise, manifest_forms, problem, read_object,
                                         stored_problem)
from mysqlbackup.archive.index import IndexBuilder, check_chain, check_segments, compare_index
from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.names import (BASE_INDEX, base_key, base_prefix, binlog_key, format_key,
                                       partial_prefix, segment_key)
from mysqlbackup.archive.window import locate, recovery_windows
from mysqlbackup.utc import iso
from mysqlbackup.binlog.gtid import shown
from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.binlog.transactions import TrxTracker
from mysqlbackup.errors import CorruptBinlog

UNOPENED_NAMED = 3     # objects an identity does not open named one by one, up to this
IN_FLIGHT_AGE = 600.0  # an unindexed object older than this is no upload in flight


class _Run:
    """One verify run: the listing, what counts as in flight, notes and problems."""

    def __init__(self, listing, notes, in_flight_age, now, keyring=None):
        self.listing, self.store = listing, listing.store
        self.notes, self.in_flight_age, self.now = notes, in_flight_age, now
        self.keyring, self.sealed_only = keyring, 0  # encrypted objects seen from outside
        self.unopened = {}  # key ids -> [why] of the objects the identity does not open

    def opens(self, where, codec, key_ids):
        """Whether the identity given opens an object (False without one); an encrypted
        object it does not open (by its key ids) is noted in ``unopened``."""
        if self.keyring is None:
            return False
        try:
            check_keys(where, codec, key_ids, self.keyring)
        except IdentityError as e:
            self.unopened.setdefault(", ".join(key_ids or ()), []).append(str(e))
            return False
        return True

    def unopened_problems(self):
        """A line an object the identity does not open; one a key id past a few."""
        lines = []
        for ids, whys in sorted(self.unopened.items()):
            lines += whys if len(whys) <= UNOPENED_NAMED else [
                f"{len(whys)} encrypted objects do not open with the identity "
                f"{self.keyring.origin or ''} (it holds key id "
                f"{', '.join(self.keyring.key_ids)}; they are encrypted to key id {ids}): "
                "checked by stored size and sha256 only"]
        return lines

    def newest(self, source):
        """The newest binlog name the listing holds for ``source`` (sealed or partial)."""
        names = set(self.listing.sealed[source]) | set(self.listing.segments[source])
        return max(names, key=binlog_sort_key) if names else None

    def in_flight(self, relative, newest):
        """True when the unindexed ``relative`` may still be uploading: it belongs to the
        newest file of its source and was written less than ``in_flight_age`` ago."""
        if not newest:
            return False
        try:
            when = self.store.modified(relative)
        except FileNotFoundError:
            return True  # gone meanwhile: the archiver replaced it or moved on
        age = None if when is None else self.now - when
        if age is not None and age > self.in_flight_age:
            return False
        self.notes.append(f"{relative}: upload in flight (no index yet, written "
                          f"{'?' if age is None else f'{max(age, 0):.0f}s'} ago; a problem once "
                          f"older than {self.in_flight_age:.0f}s)")
        return True

    def sealed_now(self, source, name):
        """True when the sealed copy of ``name`` has its index now (after the listing)."""
        return bool(name) and self.store.exists(format_key(binlog_key(source, name, True)))


def verify_archive(store, source=None, notes=None, in_flight_age=IN_FLIGHT_AGE, now=None,
                   keyring=None):
    """(number of objects checked, list of problems) for the whole archive or one source.

    Compressed objects are decompressed and checked as plain ones. Encrypted ones are
    opened with ``keyring`` (codec.Keyring); without it, only their stored size and
    sha256 are checked against their index (and the chain by the indexes).

    Safe on a live archive: an object removed after the listing because its file got
    sealed, or an unindexed object of the newest file younger than ``in_flight_age``
    seconds, is no problem; such facts are appended to ``notes`` (a list) if given.
    """
    run = _Run(ArchiveListing(store), [] if notes is None else notes, in_flight_age,
               time.time() if now is None else now, keyring)
    sources = [source] if source else run.listing.sources()
    checked, problems = 0, []
    for src in sources:
        n, found = _verify_source_history(run, src)
        checked += n
        problems += found
    if run.sealed_only:
        run.notes.append(f"{run.sealed_only} encrypted objects checked by stored size and "
                         f"sha256 only (--deep --identity FILE looks inside)")
    problems += run.unopened_problems()
    if not sources or not checked:
        problems.append(f"{store.url}: no archived binlog found" + (f" for {source}"
                                                                      if source else ""))
    return checked, problems


def _verify_source_history(run, source):
    """(objects checked, problems) of a source: each epoch's binlogs (``_verify_source``),
    the switches between epochs (a failover), and the base backups."""
    try:
        epochs = run.listing.epochs(source)
    except CorruptBinlog as e:
        return 0, [str(e)]
    checked, problems = 0, []
    for _, key_source, _ in epochs:
        n, found = _verify_source(run, key_source)
        checked, problems = checked + n, problems + found
    if len(epochs) > 1:
        try:
            problems += [h.description for h in run.listing.chain(source)[1] if h.switch]
        except (CorruptBinlog, FileNotFoundError) as e:
            problems.append(str(e))
    for base_id in sorted(run.listing.bases[source]):
        problems += _verify_base(run, source, base_id)
        checked += 1
    return checked, problems


def _verify_source(run, source):
    """(objects checked, problems) of the binlogs of one key source (an epoch)."""
    listing, problems, indexes = run.listing, [], []
    newest = run.newest(source)
    for name in listing.sealed_names(source):
        found, index = _verify_sealed(run, source, name, name == newest)
        problems += found
        if index is not None:
            indexes.append(index)
    problems += check_chain(source, indexes)
    checked = len(listing.sealed[source])
    last = indexes[-1] if indexes else None
    for name, segs in listing.segments[source].items():
        if name in listing.sealed[source]:
            continue  # sealed copy exists; leftover segments are harmless
        problems += _verify_segments(run, source, name, segs, last, name == newest)
        checked += len(segs)
    return checked, problems


def _verify_base(run, source, base_id):
    """Problems of one base backup: its manifest, and its object's size and sha256."""
    members = run.listing.bases[source][base_id]
    if BASE_INDEX not in members:
        run.notes.append(f"{base_prefix(source, base_id)}: no manifest (an upload in flight "
                         f"or abandoned): not used by restore")
        return []
    try:
        manifest = run.listing.base_manifest(source, base_id)
    except CorruptBinlog as e:
        return [str(e)]
    except FileNotFoundError:
        return [f"{members[BASE_INDEX]}: removed since the listing"]
    key = format_key(base_key(source, base_id, manifest["member"]))
    size = run.listing.sizes.get(key)
    if size is None:
        return [f"{key}: missing (its manifest is there)"]
    forms = manifest_forms(manifest)
    if size not in [form[0] for form in forms]:
        return [f"{key}: {size} bytes, the manifest says {manifest['stored_size']}"]
    if run.opens(key, manifest.get("codec", "zstd"), Promise.of_manifest(key, manifest).key_ids):
        return _decode_base(run, key, manifest)
    digest = run.store.sha256(key)[1]
    if (size, digest) not in forms:
        return [f"{key}: sha256 {digest}, the manifest says {manifest['sha256']}"]
    return []


def _decode_base(run, key, manifest):
    """Problems of a base object read once, streaming: decrypted (its manifest's codec)
    and decompressed, its stored and raw size and sha256 against the manifest's."""
    promise = Promise.of_manifest(key, manifest)
    try:
        got = read_object(run.store, promise, _discard, run.keyring)
    except (CorruptBinlog, IdentityError) as e:
        return [str(e)]
    why = problem(promise, got)
    return [f"{key}: {why}"] if why else []


def _discard(data):
    """A sink for bytes that are only measured."""


def _verify_sealed(run, source, name, newest):
    """(problems, index for the chain or None) of one sealed file."""
    slots = run.listing.sealed[source][name]
    where = format_key(binlog_key(source, name))
    index_key = slots.get("index")
    if index_key is None and run.sealed_now(source, name):
        index_key = format_key(binlog_key(source, name, True))  # written since the listing
    if index_key is None and _before_every_indexed(run.listing, source, name):
        run.notes.append(f"{where}: no index, older than every indexed file: left by a retain "
                         "run cut short, not archived (mysqlbackup retain removes it)")
        return [], None
    problems, index = [], None
    if index_key:
        try:
            index = run.listing.read_index(index_key)
        except CorruptBinlog as e:
            problems.append(str(e))
        except FileNotFoundError:
            problems.append(f"{index_key}: removed since the listing")
    data_key = slots.get("data")
    if data_key is None and run.store.exists(where):
        data_key = where  # listed between the two pages that held it and its index
    if data_key is None:
        problems.append(f"{where}: index without the binlog object (file deleted)")
        return problems, index  # the index still tells where the file sat in the chain
    try:
        state, found, fresh = _read_object(run, where, data_key, index,
                                           IndexBuilder(name, source=source, where=where))
    except FileNotFoundError:
        return problems + [f"{where}: removed since the listing"], index
    if state == BLIND and index is not None:
        return problems, index  # encrypted, no identity: its stored form matches its index
    if state != DAMAGED:
        found = [f"{where}: no index (upload not finished or not verified)"] if index is None \
            else compare_index(where, index, fresh)
    unindexed = index is None and len(found) == 1 and "no index" in found[0]
    if unindexed and (index_key or run.in_flight(data_key, newest)):
        found = []  # a bad index is the problem already, or the index is on its way
    if index is None and state == WHOLE:
        index = fresh  # whole: still in the chain
    return problems + found, index


def _before_every_indexed(listing, source, name):
    """True when the sealed file ``name`` is one retention was deleting: it has a retired
    mark (written before its index goes, then its object: a run cut short leaves this)
    and sorts before every sealed file with an index. An index lost otherwise stays a
    problem."""
    indexed = [n for n, slots in listing.sealed[source].items() if slots.get("index")]
    return (name in listing.retired[source] and bool(indexed)
            and binlog_sort_key(name) < min(map(binlog_sort_key, indexed)))


WHOLE, BLIND, DAMAGED = "whole", "blind", "damaged"


def _read_object(run, where, data_key, index, builder):
    """(state, problems, fresh index) of one stored object, read once in ranged reads:
    decoded (its index's codec; unindexed: what its first bytes show) into ``builder``
    (an IndexBuilder: magic, every event and CRC, the index of the raw bytes; None:
    only decoded), its stored size and sha256 against its index (encoded objects).

    WHOLE: every byte read and walked without fault (fresh: the builder's index);
    BLIND: encrypted and no identity given, the stored form matches its index (counted
    in ``run.sealed_only``), or a plain object not walked (``builder`` None); DAMAGED:
    the problems say why (the stored size and sha256 first, as they need no decoding).
    FileNotFoundError when the object went meanwhile."""
    name = codec_of(index) if index is not None else _sniffed(run, data_key)
    if name == "none" and builder is None:
        return BLIND, [], None
    if "age" in name and not run.opens(where, name, Promise.of_index(data_key, index).key_ids
                                       if index is not None else None):
        found = _stored_problem(run, where, data_key, index) if index is not None else []
        run.sealed_only += not found and run.keyring is None
        return (DAMAGED if found else BLIND), found, None
    promise = Promise.of_index(data_key, index) if index is not None else Promise(data_key,
                                                                                 name)
    try:
        got = read_object(run.store, promise, _discard, run.keyring, raw=builder, where=where)
        fresh = builder.finish() if builder is not None else None
    except (CorruptBinlog, IdentityError) as e:
        found = (_stored_problem(run, where, data_key, index)
                 if index is not None and name != "none" else [])
        return DAMAGED, found or [str(e)], None
    if index is not None and name != "none":
        found = _stored_text(where, (got.stored_size, got.stored_sha256), index)
        if found:
            return DAMAGED, found, None
    return (WHOLE if builder is not None else BLIND), [], fresh


def _sniffed(run, data_key):
    """The codec an unindexed object's first bytes show ("none" when they show none)."""
    return sniff(run.store.read(data_key, 0, 32)) or "none"


def _stored_problem(run, where, data_key, index):
    """[problem] when the stored object's size and sha256 (read back in chunks) are not
    what its index says, else []."""
    return _stored_text(where, run.store.sha256(data_key), index)


def _stored_text(where, got, index):
    why = stored_problem(Promise.of_index(where, index), got)
    return [f"{where}: {why}"] if why else []


def _verify_segments(run, source, name, segs, last, newest):
    """Problems of the segments of one active file (none if it got sealed meanwhile)."""
    if run.sealed_now(source, name):
        run.notes.append(f"{partial_prefix(source, name)}: sealed since the listing "
                         f"(segments skipped)")
        return []
    expected = last.get("next_file") if last else None
    if expected not in (None, name) and run.sealed_now(source, expected):
        run.notes.append(f"{format_key(binlog_key(source, expected))}: sealed since the "
                         f"listing (the archive moved on while it was read)")
        last = None
    ordered = sorted(segs.items())
    in_flight = {s for (s, e), slots in ordered[-1:]
                 if "index" not in slots and "data" in slots
                 and run.in_flight(slots["data"], newest)}
    problems = check_segments(source, name, [(s, e, slots.get("index"))
                                             for (s, e), slots in ordered], last, in_flight)
    try:
        return problems + _check_segment_objects(run, source, name, ordered)
    except _Gone as gone:
        if run.sealed_now(source, name):
            run.notes.append(f"{partial_prefix(source, name)}: gone since the listing "
                             f"(sealed since)")
            return []
        return problems + [f"{gone.key}: removed since the listing, and {name} is not sealed"]


class _Gone(Exception):
    """An object listed a moment ago is not there any more."""

    def __init__(self, key):
        super().__init__(key)
        self.key = key


def _read_index(run, key):
    """The validated index of ``key``; _Gone when it was removed meanwhile."""
    try:
        return run.listing.read_index(key)
    except FileNotFoundError:
        raise _Gone(key) from None


def _check_segment_objects(run, source, name, ordered):
    """Each segment from offset 0 on against its bytes (CRCs) and its index (every field
    that can be recomputed), each read once as it streams; stops at a gap or at damaged
    bytes. After an encrypted segment no identity opens, the rest are checked by their
    stored form only (the tracker cannot follow them)."""
    problems, tracker, pos, blind = [], TrxTracker(), 0, False
    for (start, end), slots in ordered:
        if start != pos or "data" not in slots:
            break
        where = format_key(segment_key(source, name, start, end))
        index = None
        if "index" in slots:
            try:
                index = _read_index(run, slots["index"])
            except CorruptBinlog as e:
                problems.append(str(e))
        builder = None if blind else IndexBuilder(name, start=start, tracker=tracker,
                                                  where=where)
        try:
            state, found, fresh = _read_object(run, where, slots["data"], index, builder)
        except FileNotFoundError:
            raise _Gone(slots["data"]) from None
        problems += found
        if state == DAMAGED:
            break  # the segments after it cannot be followed
        blind = state == BLIND
        if index is not None and not blind:
            problems += compare_index(where, index, fresh)
        pos = end
    return problems


def list_archive(store, source=None, listing=None):
    """Rows for ``archive ls``: one per sealed file or active file, with its ranges.

    A damaged index shows as kind "bad index"; an object gone since the listing is left out.
    """
    listing = listing or ArchiveListing(store)
    rows = []
    for top in ([source] if source else listing.sources()):
        try:
            epochs = listing.epochs(top)
        except CorruptBinlog:
            epochs = [(1, top, None)]  # recovery_summary names the problem
        for epoch, src, _ in epochs:
            rows += _epoch_rows(listing, top, epoch, src)
    return rows


def _epoch_rows(listing, top, epoch, src):
    """The rows of one epoch's files (key source ``src``) of source ``top``."""
    rows = []
    for name in listing.sealed_names(src):
        kind, index = _listed_index(listing, listing.sealed[src][name].get("index"))
        rows.append(_row(top, epoch, name, kind or ("sealed" if index else "unverified"),
                         index))
    for name, segs in sorted(listing.segments[src].items()):
        if name not in listing.sealed[src]:
            read = [_listed_index(listing, s.get("index")) for _, s in sorted(segs.items())]
            bad = any(kind for kind, _ in read)
            rows.append(_row(top, epoch, name, f"partial ({len(segs)} segments"
                             + (", a bad index)" if bad else ")"),
                             _merge([i for _, i in read if i])))
    return rows


def _listed_index(listing, key):
    """(None or "bad index", index or None) for ``archive ls``."""
    if not key:
        return None, None
    try:
        return None, listing.read_index(key)
    except CorruptBinlog:
        return "bad index", None
    except FileNotFoundError:
        return None, None


def _row(source, epoch, name, kind, index):
    index = index or {}
    fields = ("size", "transactions", "first_gtid", "last_gtid", "first_commit", "last_commit")
    return {"source": source, "epoch": epoch, "file": name, "kind": kind,
            **{f: index.get(f) for f in fields}}


def _merge(indexes):
    if not indexes:
        return {}
    first = next((i for i in indexes if i.get("first_gtid")), indexes[0])
    last = lambda field: next((i[field] for i in reversed(indexes) if i[field]), None)  # noqa
    return {"size": indexes[-1]["end"], "transactions": sum(i["transactions"] for i in indexes),
            "first_gtid": first.get("first_gtid"), "last_gtid": last("last_gtid"),
            "first_commit": next((i["first_commit"] for i in indexes if i["first_commit"]), None),
            "last_commit": last("last_commit")}


def recovery_summary(listing, source=None):
    """What ``archive ls`` says of restores, per source: the base backups, the windows in
    which any moment can be restored, the holes that split them, and damaged manifests."""
    out = {"bases": [], "windows": [], "holes": [], "unusable": [], "problems": [],
           "failovers": []}
    for src in ([source] if source else listing.sources()):
        manifests = listing.sound_manifests(src, out["problems"])
        try:
            runs, holes = listing.chain(src)
            out["failovers"] += [dict(history.to_dict(), source=src, started=iso(
                history.started_at), text=history.describe())
                for _, _, history in listing.epochs(src) if history]
        except (CorruptBinlog, FileNotFoundError) as e:
            out["problems"].append(str(e))
            runs, holes = [], []
        out["bases"] += [_base_row(m) for m in manifests]
        out["unusable"] += [{"source": src, "id": m["id"], "gtid": m["gtid"]} for m in manifests
                            if not any(locate(run, m) is not None for run in runs)]
        out["windows"] += [vars(w) for w in recovery_windows(src, runs, manifests)]
        out["holes"] += [{"source": src, "after": h.after, "before": h.before,
                          "description": h.description} for h in holes]
    return out


def _base_row(m):
    fields = ("source", "id", "method", "gtid", "binlog_file", "binlog_pos", "start_time",
              "end_time", "raw_size", "stored_size", "server_version")
    return {f: m[f] for f in fields}


def format_recovery(summary):
    """The text lines of ``recovery_summary`` for ``archive ls``."""
    lines = [f"{b['source']}  base {b['id']}  {b['method']}  gtid {shown(b['gtid'])}  "
             f"{b['binlog_file']}:{b['binlog_pos']}  {b['stored_size']} bytes stored  "
             f"{b['start_time']} .. {b['end_time']}" for b in summary["bases"]]
    lines += [f"{w['source']}  restorable from {w['start']} to {w['end']} (base {w['base_id']}, "
              f"up to GTID {shown(w['end_gtid'])}, {w['first_file']} .. {w['last_file']})"
              for w in summary["windows"]]
    lines += [f"{f['source']}  failover at {f['started']}: {f['text']}"
              for f in summary["failovers"]]
    lines += [f"{h['source']}  hole: {h['description']}" for h in summary["holes"]]
    lines += [f"{u['source']}  base {u['id']} not usable: its GTID {shown(u['gtid'])} is not in "
              f"the archived binlogs (a hole before it, or not archived yet)"
              for u in summary["unusable"]]
    lines += [f"PROBLEM {p}" for p in summary["problems"]]
    return lines


def lock_state(store, source=None):
    """What S3 Object Lock holds of the archive's objects (of ``source`` when given):
    {objects, locked, modes, earliest (the soonest retain-until, ISO), unlocked (the
    first few keys without a lock)}; None for a store without locks (file://)."""
    if store.local:
        return None
    keys = store.list(f"{source}/" if source else "")
    state = {"objects": len(keys), "locked": 0, "modes": [], "earliest": None,
             "unlocked": []}
    soonest = None
    for key in keys:
        found = store.lock_of(key)
        if found is None:
            if len(state["unlocked"]) < 5:
                state["unlocked"].append(key)
            continue
        state["locked"] += 1
        if found[0] not in state["modes"]:
            state["modes"].append(found[0])
        soonest = found[1] if soonest is None else min(soonest, found[1])
    state["earliest"] = iso(soonest) if soonest is not None else None
    return state


def format_lock(state):
    """One line of ``lock_state`` for ``verify``."""
    if not state["locked"]:
        return f"LOCK none of the {state['objects']} objects is locked (S3 Object Lock)"
    line = (f"LOCK {state['locked']} of {state['objects']} objects locked "
            f"({', '.join(state['modes'])}), the soonest until {state['earliest']}")
    if state["locked"] < state["objects"]:
        line += f"; not locked: {', '.join(state['unlocked'])}"
    return line

