"""``mysqlbackup verify`` and ``mysqlbackup archive ls``: read the archive and report."""

from collections import defaultdict

from .archive_index import build_index, parse_index
from .archive_check import check_chain, check_object, check_segments
from .archive_names import parse_key
from .names import binlog_sort_key


class ArchiveListing:
    """What the archive holds, grouped by source: sealed files and partial segments."""

    def __init__(self, store):
        self.store = store
        self.sealed = defaultdict(dict)     # source -> name -> {"data": key, "index": key}
        self.segments = defaultdict(dict)   # source -> name -> {(start, end): {...}}
        self.stray = []
        for relative in store.list():
            key = parse_key(relative)
            if key is None:
                self.stray.append(relative)
                continue
            slot = "index" if key.is_index else "data"
            if key.kind == "binlog":
                self.sealed[key.source].setdefault(key.name, {})[slot] = relative
            else:
                group = self.segments[key.source].setdefault(key.name, {})
                group.setdefault((key.start, key.end), {})[slot] = relative

    def sources(self):
        return sorted(set(self.sealed) | set(self.segments))

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
        return parse_index(raw, relative_key, key.name, key.start, key.end)


def verify_archive(store, source=None):
    """(number of objects checked, list of problems) for the whole archive or one source."""
    listing = ArchiveListing(store)
    sources = [source] if source else listing.sources()
    checked, problems = 0, []
    for src in sources:
        n, found = _verify_source(listing, src)
        checked += n
        problems += found
    if not sources or not checked:
        problems.append(f"{store.url}: no archived binlog found" + (f" for {source}"
                                                                      if source else ""))
    return checked, problems


def _verify_source(listing, source):
    problems, indexes = [], []
    for name in listing.sealed_names(source):
        slots = listing.sealed[source][name]
        where = f"{source}/binlog/{name}"
        index = listing.index(source, name)
        if "data" not in slots:
            problems.append(f"{where}: index without the binlog object (file deleted)")
            indexes.append(index)  # the index still tells where the file sat in the chain
            continue
        data = listing.store.read(slots["data"])
        found = check_object(where, data, index)
        problems += found
        if index is None and len(found) == 1:  # whole but unverified: still in the chain
            index = build_index(data, name, source=source)
        if index is not None:
            indexes.append(index)
    problems += check_chain(source, indexes)
    checked = len(listing.sealed[source])
    last = indexes[-1] if indexes else None
    for name, segs in listing.segments[source].items():
        if name in listing.sealed[source]:
            continue  # sealed copy exists; leftover segments are harmless
        problems += _verify_segments(listing, source, name, segs, last)
        checked += len(segs)
    return checked, problems


def _verify_segments(listing, source, name, segs, last):
    ordered = sorted(segs.items())
    problems = check_segments(source, name, [(s, e, slots.get("index"))
                                             for (s, e), slots in ordered], last)
    data = b"".join(listing.store.read(slots["data"]) for _, slots in ordered
                    if "data" in slots)
    if ordered and ordered[0][0][0] == 0:
        where = f"{source}/partial/{name}"
        problems += [p for p in check_object(where, data, None) if "no index" not in p]
    return problems


def list_archive(store, source=None):
    """Rows for ``archive ls``: one per sealed file or active file, with its ranges."""
    listing = ArchiveListing(store)
    rows = []
    for src in ([source] if source else listing.sources()):
        for name in listing.sealed_names(src):
            index = listing.index(src, name)
            rows.append(_row(src, name, "sealed" if index else "unverified", index))
        for name, segs in sorted(listing.segments[src].items()):
            if name not in listing.sealed[src]:
                indexes = [listing.store.read_json(s["index"]) for _, s in sorted(segs.items())
                           if "index" in s]
                rows.append(_row(src, name, f"partial ({len(segs)} segments)",
                                 _merge(indexes)))
    return rows


def _row(source, name, kind, index):
    index = index or {}
    fields = ("size", "transactions", "first_gtid", "last_gtid", "first_commit", "last_commit")
    return {"source": source, "file": name, "kind": kind, **{f: index.get(f) for f in fields}}


def _merge(indexes):
    if not indexes:
        return {}
    first = next((i for i in indexes if i.get("first_gtid")), indexes[0])
    last = lambda field: next((i[field] for i in reversed(indexes) if i[field]), None)  # noqa
    return {"size": indexes[-1]["end"], "transactions": sum(i["transactions"] for i in indexes),
            "first_gtid": first.get("first_gtid"), "last_gtid": last("last_gtid"),
            "first_commit": next((i["first_commit"] for i in indexes if i["first_commit"]), None),
            "last_commit": last("last_commit")}
