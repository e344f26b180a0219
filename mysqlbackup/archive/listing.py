"""What the archive holds, read from one listing (the only reader of a whole archive's
names): sealed files and partial segments per source, their sizes as listed, and
their indexes validated on the way in. ``verify`` and the replay's plan start here.

The binlogs of a source are grouped by *key source*: the source itself for epoch 1,
``{source}/epoch/{N}`` for a later epoch (``names.epoch_source``); ``epochs`` lists a
source's epochs with their histories, and ``chain`` follows them in order. Every index
the listing hands out carries its epoch (``index["epoch"]``, not stored).

A reader asks for its sources through ``require`` (or ``sources`` and
``select_sources``): a URL that is no archive (ArchiveNotFound), a source it does not
hold (SourceNotFound) and a malformed source name (UsageError) are refused there, in
one line naming the archive; an existing empty archive lists no source. A writer
(``archive import``, the daemon's retention) takes the listing as it is: nothing is
refused until something asks for the sources."""

from collections import defaultdict

from mysqlbackup.archive.manifest import checked_manifest
from mysqlbackup.archive.index import parse_index
from mysqlbackup.archive.manifest import parse_manifest
from mysqlbackup.archive.names import (BASE_INDEX, binlog_key, check_source_name, epoch_source,
                                       format_key, history_key, parse_key, partial_prefix,
                                       split_epoch)
from mysqlbackup.archive.window import build_runs, parse_history
from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.errors import CorruptBinlog, SourceNotFound, UsageError


class SourceList(list):
    """The sources of an archive, oldest name first, with what a reader must know of it:
    ``url`` (masked) and ``problem``, the ArchiveNotFound to raise when the URL is no
    archive (None when it is one)."""

    def __init__(self, names, url=None, problem=None):
        super().__init__(names)
        self.url, self.problem = url, problem


def select_sources(sources, wanted=None):
    """The sources a reader reads: ``[wanted]``, or all of ``sources`` (a SourceList; a
    plain list stands for an archive not named). Raises ArchiveNotFound when the URL is
    no archive, UsageError for a malformed name (``../x``), SourceNotFound when the
    archive does not hold ``wanted``; an empty archive and no ``wanted``: []."""
    if wanted:
        check_source_name(wanted)
    problem = getattr(sources, "problem", None)
    if problem is not None:
        raise problem
    if not wanted:
        return list(sources)
    if wanted not in sources:
        raise SourceNotFound(f"{_archive(sources)}: no source {wanted!r} in it ("
                             + (f"it holds: {', '.join(sources)})" if sources
                                else "it is empty: nothing archived yet)"))
    return [wanted]


def one_source(sources, wanted=None):
    """The one source a reader reads (replay, restore, serve, drill): ``wanted``, or the
    only one of the archive. Besides ``select_sources``' refusals: SourceNotFound for an
    empty archive, UsageError when it holds several and none was named."""
    found = select_sources(sources, wanted)
    if not found:
        raise SourceNotFound(f"{_archive(sources)} is empty: no source to read (nothing "
                             "archived yet)")
    if len(found) != 1:
        raise UsageError(f"{_archive(sources)} holds {len(found)} sources ("
                         f"{', '.join(found)}): name one with --source-name")
    return found[0]


def _archive(sources):
    url = getattr(sources, "url", None)
    return f"archive {url}" if url else "the archive"


class ArchiveListing:
    """What the archive holds, grouped by source: sealed files and partial segments."""

    def __init__(self, store):
        self.store = store
        self.sealed = defaultdict(dict)     # source -> name -> {"data": key, "index": key}
        self.segments = defaultdict(dict)   # source -> name -> {(start, end): {...}}
        self.bases = defaultdict(dict)      # source -> base id -> {member: key}
        self.leases = defaultdict(dict)     # source -> lease id -> key
        self.retired = defaultdict(dict)    # source -> binlog name -> key of its mark
        self.histories = {}                 # key source of an epoch > 1 -> its history key
        self._history = {}                  # key source -> EpochHistory, as read
        self.stray = []
        self.sizes = store.list(sizes=True)  # object -> size, as listed
        self.problem = store.root_problem(self.sizes)  # ArchiveNotFound: no archive there
        for relative in self.sizes:
            key = parse_key(relative)
            if key is None:
                self.stray.append(relative)
                continue
            slot = "index" if key.is_index else "data"
            if key.kind == "base":
                self.bases[key.source].setdefault(key.name, {})[key.member] = relative
            elif key.kind == "lease":
                self.leases[key.source][key.name] = relative
            elif key.kind == "retired":
                self.retired[key.source][key.name] = relative
            elif key.kind == "history":
                self.histories[key.source] = relative
            elif key.kind == "binlog":
                self.sealed[key.source].setdefault(key.name, {})[slot] = relative
            else:
                group = self.segments[key.source].setdefault(key.name, {})
                group.setdefault((key.start, key.end), {})[slot] = relative

    def sources(self):
        """The sources of the archive (a later epoch's key source is its source's), as a
        SourceList: what ``select_sources`` and ``one_source`` take."""
        return SourceList(sorted({split_epoch(s)[0] for s in set(self.sealed)
                                  | set(self.segments)} | set(self.bases)),
                          self.store.url, self.problem)

    def require(self, wanted=None):
        """The sources a reader reads (``select_sources``): ``[wanted]`` or all of them;
        the shared refusals (no archive there, no such source, a malformed name)."""
        return select_sources(self.sources(), wanted)

    def epochs(self, source):
        """[(epoch, key source, EpochHistory or None for epoch 1)] of ``source``, oldest
        first. A later epoch with files but no history object (or a history that does
        not read) raises CorruptBinlog naming it: its place in the history is unknown."""
        numbers = {1} | {split_epoch(s)[1] for s in set(self.sealed) | set(self.segments)
                         | set(self.histories) if split_epoch(s)[0] == source}
        return [(n, epoch_source(source, n), self.history(source, n) if n > 1 else None)
                for n in sorted(numbers)]

    def history(self, source, epoch):
        """The EpochHistory of a later epoch (read once)."""
        key_source = epoch_source(source, epoch)
        if key_source not in self._history:
            relative = self.histories.get(key_source) or format_key(history_key(source, epoch))
            if key_source not in self.histories:
                raise CorruptBinlog(f"epoch {epoch} of {source} has binlogs but no history "
                                    "object: where it takes over is unknown", relative)
            history = parse_history(self.store.read(relative), relative)
            if history.epoch != epoch:
                raise CorruptBinlog(f"the history says epoch {history.epoch}", relative)
            self._history[key_source] = history
        return self._history[key_source]

    def base_ids(self, source):
        """Ids of the source's base backups whose manifest is written, oldest first."""
        return sorted(i for i, members in self.bases[source].items() if BASE_INDEX in members)

    def base_manifest(self, source, base_id):
        """The validated manifest of a base backup (CorruptBinlog when it is damaged)."""
        key = self.bases[source][base_id][BASE_INDEX]
        return parse_manifest(self.store.read(key), key, source, base_id)

    def sound_manifests(self, source, problems=None):
        """The manifests of the source's sound bases (``manifest.checked_manifest``: the
        manifest reads and validates and the object is listed at the size it names); a
        damaged or vanished one is left out, its error appended to ``problems`` when
        given: no restore is promised from it."""
        manifests = []
        for base_id in self.base_ids(source):
            manifest, problem = checked_manifest(self, source, base_id)
            if problem is None:
                manifests.append(manifest)
            elif problems is not None:
                problems.append(problem if manifest is None
                                else f"base {source}/{base_id}: {problem}")
        return manifests

    def sealed_names(self, source):
        return sorted(self.sealed[source], key=binlog_sort_key)

    def index(self, source, name):
        """The validated index of a sealed file, None when it has none (see read_index)."""
        key = self.sealed[source][name].get("index")
        return self.read_index(key) if key else None

    def read_index(self, relative_key):
        """The index object ``relative_key`` (a sealed file's or a segment's), validated.

        Raises CorruptBinlog (exit 6) naming the object when it is not JSON, not an
        index dict, misses fields, has fields of the wrong type, or does not describe
        the object its key names (binlog name, segment bounds). A missing object
        raises FileNotFoundError (removed since the listing).
        """
        key = parse_key(relative_key)
        raw = self.store.read(relative_key)
        if key is None:
            return parse_index(raw, relative_key)
        index = parse_index(raw, relative_key, key.name, key.start, key.end)
        index["epoch"] = split_epoch(key.source)[1]
        return index

    def chain(self, source):
        """(runs, holes) of the source's binlogs (window.build_runs) from their indexes,
        epoch after epoch: the sealed files with an index, then the epoch's newest
        file's segments merged (contiguous from offset 0, up to the first without an
        index)."""
        epochs = [(history, self.indexed(key_source), self.partial_index(key_source))
                  for _, key_source, history in self.epochs(source)]
        (_, sealed, partial), later = epochs[0], epochs[1:]
        return build_runs(source, sealed, partial, later)

    def indexed(self, key_source):
        """The indexes of a key source's sealed files that have one, oldest first."""
        return [self.index(key_source, n) for n in self.sealed_names(key_source)
                if self.sealed[key_source][n].get("index")]

    def partial_index(self, source):
        """One index for the newest active file's segments (None when it has none)."""
        names = [n for n in self.segments[source] if n not in self.sealed[source]]
        if not names:
            return None
        name = max(names, key=binlog_sort_key)
        indexes, pos = [], 0
        for (start, end), slots in sorted(self.segments[source][name].items()):
            if start != pos or "index" not in slots:
                break
            indexes.append(self.read_index(slots["index"]))
            pos = end
        return merge_segment_indexes(name, indexes) if indexes else None


def merge_segment_indexes(name, indexes):
    """The index of a whole active file from its segments' indexes, in order."""
    def last(field):
        return next((i[field] for i in reversed(indexes) if i.get(field)), None)

    def first(field):
        return next((i[field] for i in indexes if i.get(field)), None)
    return {"name": name, "gtid_before": indexes[0].get("gtid_before"),
            "gtid_after": indexes[-1].get("gtid_after"), "next_file": None,
            "first_commit": first("first_commit"), "last_commit": last("last_commit"),
            "first_gtid": first("first_gtid"), "last_gtid": last("last_gtid"),
            "transactions": sum(i["transactions"] for i in indexes),
            "statements": (None if any("statements" not in i for i in indexes)
                           else sum(i["statements"] for i in indexes)),
            "size": indexes[-1]["end"], "partial": True, "epoch": indexes[0].get("epoch", 1)}


def archived_server_id(store, source, name):
    """The server_id (of its format description) of the archived ``name`` of ``source``:
    its sealed copy's index, else the index of its first segment (offset 0); None when
    the archive holds neither. One listing of the file's keys and one index read."""
    sealed = format_key(binlog_key(source, name, index=True))
    if store.exists(sealed):
        return parse_index(store.read(sealed), sealed, name).get("server_id")
    for relative in store.list(partial_prefix(source, name)):
        key = parse_key(relative)
        if key is not None and key.is_index and key.start == 0:
            return parse_index(store.read(relative), relative, name).get("server_id")
    return None
