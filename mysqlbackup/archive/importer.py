"""``mysqlbackup archive import``: binlog files copied off a server, into the archive.

The files are taken in the order of the server's index file (``*.index``: one path
per line, often absolute paths of the server's machine; their base names count)
when the directory has one, else by name. Each file gets what the daemon gives a file
it archives: magic, every event and CRC checked and the index built (``scan_file``:
one pass in chunks, ``index.IndexBuilder``), the link to the file before it checked
(``check_chain``: the ROTATE names it, the GTID sets continue), then the upload (a
second pass in chunks: encoded, uploaded and hashed at once, refused if the bytes are
not the ones indexed), read back and only then indexed (``index_if_whole``). No file
is held in memory, whatever its size. The last file, when no ROTATE ends it (the server's
active file, or the last file of a crashed server), is archived as the daemon
archives an active file: a partial segment from offset 0 to its last transaction
boundary, so replay and restore take it as the newest partial file.

The first broken file (bad magic, a torn event, a CRC mismatch, a chain break) stops
the import with its name, offset and reason; every file before it is archived whole,
verified and indexed. A torn last file (a copy off a crashed server) is refused the
same way unless ``torn_tail="truncate"``: its complete transactions are then archived
as a partial file and the rest is named and left out.

Objects are stored in the given ``codec`` (archive.codec: zstd, age), as the daemon
stores them; the summary counts the bytes stored.

Running the same import again is idempotent: a file archived already with the same
size and sha256 and a sound index is skipped; another object under the same name is
refused by name and never overwritten. What is compared is the raw size and sha256
the archive's index says (whatever the codec), and the stored object's size and
sha256 against the index's stored ones (no key needed); only a sealed object longer
than the local file is decoded to compare its start (an encrypted one: with the
``keyring``). An import must continue what the archive
holds for the source (its newest file, or the file after it), unless the source is new.
"""

import os
from dataclasses import dataclass, field

from mysqlbackup.archive.codec import PLAIN, Digest, check_keys
from mysqlbackup.archive.objects import Promise, read_object, stored_forms
from mysqlbackup.archive.index import IndexBuilder, check_chain, compare_index
from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.names import binlog_key, format_key, segment_key
from mysqlbackup.archive.upload import (FileRange, UploadMismatch, chain_end, index_if_whole,
                                        index_range, put_object, remove_segments)
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.names import binlog_sort_key, parse_binlog_name
from mysqlbackup.binlog.scan import check_magic, iter_events
from mysqlbackup.binlog.transactions import TrxTracker
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError, ResyncRequired, UsageError

TORN_TAIL = ("refuse", "truncate")
INDEX_SUFFIX = ".index"


# -- which files, in which order (pure) ----------------------------------------------------

@dataclass
class FileOrder:
    """The binlog files of a directory in the server's order, and what was left aside."""

    names: list
    ignored: list = field(default_factory=list)   # files that are not part of it
    missing: list = field(default_factory=list)   # named by the index, not in the directory
    index_name: str = None                        # the server's index file, if any


def order_files(entries, index_name=None, index_text=None):
    """The FileOrder of a directory holding the files ``entries``.

    With the server's index file (``index_name``, its text ``index_text``), its lines
    give the order (base names of the paths); else the files named like binlogs
    (``BASE.NNNNNN``) sorted by number, which must then share one base.
    """
    if index_text is not None:
        listed = _index_names(index_text)
        names = [n for n in listed if n in entries]
        ignored = sorted(set(entries) - set(names) - {index_name})
        return FileOrder(names, ignored, [n for n in listed if n not in entries], index_name)
    names = sorted((n for n in entries if parse_binlog_name(n)), key=binlog_sort_key)
    bases = sorted({parse_binlog_name(n)[0] for n in names})
    if len(bases) > 1:
        raise UsageError(f"binlog files of {len(bases)} bases ({', '.join(bases)}) and no "
                         f"server index file: keep one server's files, or its {INDEX_SUFFIX}")
    return FileOrder(names, sorted(set(entries) - set(names)))


def _index_names(text):
    """Base names of the paths in a server's index file, in order, each once."""
    seen = []
    for line in text.splitlines():
        name = os.path.basename(line.strip().replace("\\", "/"))
        if name and name not in seen:
            seen.append(name)
    return seen


def read_order(directory):
    """The FileOrder of ``directory`` (reads its listing and the server's index file)."""
    try:
        entries = sorted(e for e in os.listdir(directory)
                         if os.path.isfile(os.path.join(directory, e)))
    except OSError as e:
        raise UsageError(f"cannot read {directory}: {e.strerror}") from None
    indexes = [e for e in entries if e.endswith(INDEX_SUFFIX)]
    if len(indexes) > 1:
        raise UsageError(f"{directory} holds {len(indexes)} index files ({', '.join(indexes)}):"
                         " keep the one of the server whose files these are")
    if not indexes:
        return order_files(entries)
    with open(os.path.join(directory, indexes[0]), "rb") as f:
        text = f.read().decode("utf-8", "surrogateescape")
    return order_files(entries, indexes[0], text)


# -- the bytes of one file --------------------------------------------------------------------

def scan_file(path, name, size, predecessor=None, source=None):
    """(index or None, cut, torn) of the first ``size`` bytes of a local binlog file, read
    once in chunks: magic, every event's framing and CRC checked, the index built;
    ``cut``: the end of the last complete transaction; ``torn``: the CorruptBinlog of
    an event cut off by the end of the bytes (the index is then None). Other damage (a
    CRC mismatch, a bad length) raises CorruptBinlog."""
    with open(path, "rb") as f:
        check_magic(f.read(len(ev.MAGIC)), path)
    builder = IndexBuilder(name, predecessor, source=source, where=path, end=size)
    try:
        return index_range(path, builder, 0, size), builder.boundary, None
    except CorruptBinlog as e:
        if e.offset is None or not _torn_at(path, e.offset, size):
            raise
        return None, builder.boundary, e


def _torn_at(path, offset, size):
    """True when the event at ``offset`` runs past ``size`` (cut off)."""
    left = size - offset
    if left < ev.HEADER_LEN:
        return True
    with open(path, "rb") as f:
        f.seek(offset)
        length = ev.parse_header(f.read(ev.HEADER_LEN)).size
    return length >= ev.HEADER_LEN and length > left


def file_sha256(path, start, stop):
    """sha256 hex of the bytes [start, stop) of a local file, read in chunks."""
    digest = Digest()
    with FileRange(path, start, stop - start) as raw:
        for chunk in iter(raw.read, b""):
            digest.update(chunk)
    return digest.sha256


def gtid_state_offset(head):
    """Offset of the event that states the GTID set before the file (or 4), from the
    first bytes of the file (``head``: a megabyte is plenty)."""
    try:
        for off, event in iter_events(head, 4, False, check_log_pos=False):
            if event[4] in (ev.MARIA_GTID_LIST, ev.PREVIOUS_GTIDS):
                return off
            if event[4] not in (ev.FORMAT_DESCRIPTION, ev.MARIA_START_ENCRYPTION):
                break
    except CorruptBinlog:
        pass
    return 4


# -- the import (I/O) -------------------------------------------------------------------------

@dataclass
class ImportSummary:
    """What one import did."""

    imported: list = field(default_factory=list)   # names archived by this run
    partial: str = None                            # the one archived as a partial file
    skipped: list = field(default_factory=list)    # archived already, same bytes
    bytes: int = 0                                 # uploaded (as stored)
    first_gtid: str = None
    last_gtid: str = None

    def line(self):
        """One summary line."""
        part = f" ({self.partial} partial)" if self.partial in self.imported else ""
        gtids = f"{self.first_gtid} .. {self.last_gtid}" if self.first_gtid else "none"
        return (f"{_files(self.imported)} imported{part}, {len(self.skipped)} skipped, "
                f"{self.bytes} bytes uploaded, GTIDs {gtids}")

    def account(self, index):
        self.first_gtid = self.first_gtid or index["first_gtid"]
        self.last_gtid = index["last_gtid"] or self.last_gtid


def import_directory(store, directory, source, torn_tail="refuse", echo=print, codec=PLAIN,
                     keyring=None):
    """Import the binlog files of ``directory`` into ``store`` under ``source``.

    Prints a line per file and a summary through ``echo``; returns the ImportSummary.
    New objects are stored in ``codec``; ``keyring`` opens encrypted archived objects
    when one must be compared by its raw bytes (a sealed file longer than the copy).
    Raises CorruptBinlog (a damaged file: name, offset, reason) or ResyncRequired (a
    chain break, an import that does not continue the archive, another object under
    the same name) once every file before the one at fault is archived.
    """
    if torn_tail not in TORN_TAIL:
        raise UsageError(f"bad torn tail {torn_tail!r}: one of {', '.join(TORN_TAIL)}")
    order = read_order(directory)
    _report_order(order, directory, echo)
    if not order.names:
        raise UsageError(f"no binlog files in {directory}" + (
            f" named by {order.index_name}" if order.index_name else ""))
    run = _Import(store, directory, source, torn_tail, echo, codec, keyring)
    try:
        for i, name in enumerate(order.names):
            run.one(name, i == len(order.names) - 1)
    except MysqlBackupError:
        echo(f"stopped: {run.summary.line()}")
        raise
    echo(run.summary.line())
    return run.summary


def _report_order(order, directory, echo):
    if order.index_name:
        echo(f"order: {order.index_name} ({len(order.names)} files)")
    if order.missing:
        echo(f"named by {order.index_name}, not in {directory}: {', '.join(order.missing)}")
    if order.ignored:
        echo(f"ignored (not binlog files of this server): {', '.join(order.ignored)}")


class _Import:
    """One import run: what the archive holds for the source, and the file before."""

    def __init__(self, store, directory, source, torn_tail, echo, codec=PLAIN, keyring=None):
        self.store, self.directory, self.source = store, directory, source
        self.torn_tail, self.echo = torn_tail, echo
        self.codec, self.keyring = codec, keyring
        self.listing = ArchiveListing(store)
        self.sealed = self.listing.sealed[source]             # name -> {"data", "index"}
        self.partial = _newest_partial(self.listing, source)  # unsealed name or None
        self.prev = self._last_sealed_index()                 # index of the file before
        self.summary = ImportSummary()

    def _last_sealed_index(self):
        names = [n for n in self.listing.sealed_names(self.source) if "index" in
                 self.sealed[n]]
        return self.listing.index(self.source, names[-1]) if names else None

    def one(self, name, last):
        """Check and archive one file (skip it when archived already)."""
        where = os.path.join(self.directory, name)
        size = os.path.getsize(where)
        predecessor = self.prev and self.prev["name"]
        index, cut, torn = scan_file(where, name, size, predecessor, self.source)
        if torn is not None and not (last and self.torn_tail == "truncate"):
            if last:
                self.echo(f"{name}: refused, cut inside an event (a copy off a crashed "
                          "server?); --torn-tail truncate archives its complete transactions")
            raise torn
        if torn is not None:
            index = index_range(where, IndexBuilder(name, predecessor, source=self.source,
                                                    where=where, end=cut), 0, cut)
        if last and not index["next_file"]:
            self._partial_file(name, where, size, cut, torn, index)
        else:
            self._sealed_file(name, where, size, index)

    # -- sealed files ----------------------------------------------------------------------

    def _sealed_file(self, name, where, size, index):
        if not index["complete_transactions"]:
            raise ResyncRequired(f"{name} ends inside a transaction but the file after it "
                                 "follows it (or its ROTATE closes it)", where, size)
        if self._archived_sealed(name, where, index):
            return self._done(name, index, skipped=True)
        if "index" not in self.sealed.get(name, {}):  # else: its index (the same file's)
            self._check_continues(name, where, index)  # placed it in the chain
        if self.partial == name:
            self._check_held_segments(name, where, size, sealed=True)
        index, stored = self._put(binlog_key(self.source, name), where, 0, size,
                                  _Same(index, where), f"copy of {name}")
        if self.partial == name:
            remove_segments(self.store, self.source, name)
            self.partial = None
        self.echo(f"{name}: archived {format_key(binlog_key(self.source, name))} "
                  f"({size} bytes{_stored(index)}, {_describe(index)})")
        self._done(name, index, uploaded=stored)

    def _put(self, key, where, start, end, builder, what):
        """Store the bytes [start, end) of the local file ``where`` as ``key`` in the run's
        codec, in one pass through ``builder`` (an IndexBuilder, or ``_Same``: the index
        a first pass built), read it back, then write its index; returns (the index with
        the stored fields, the stored size)."""
        with FileRange(where, start, end - start) as raw:
            index = put_object(self.store, format_key(key), raw.read, self.codec, builder)
        return index, index_if_whole(self.store, key, index, what)

    def _archived_sealed(self, name, where, index):
        """True when the archive holds this very file (size, sha256, a sound index);
        ResyncRequired when it holds another under the name."""
        slots = self.sealed.get(name, {})
        if "index" not in slots:
            return False
        held = self.listing.read_index(slots["index"])
        self._same_or_refuse(name, where, held, index)
        problems = compare_index(slots["index"], held, index)
        if problems:
            raise CorruptBinlog(f"{problems[0]} (fix the archive first: mysqlbackup verify)")
        data_key = format_key(binlog_key(self.source, name))
        forms = stored_forms(held)
        if self.listing.sizes.get(slots.get("data")) not in [size for size, _ in forms]:
            self.echo(f"{name}: {data_key} is missing or cut in the archive; uploading it "
                      "again")
            return False
        if self.store.sha256(slots["data"]) not in forms:
            self.echo(f"{name}: {data_key} is damaged in the archive (not the stored sha256 "
                      "its index says); uploading it again")
            return False
        self.echo(f"{name}: skipped, archived already (same sha256 {index['sha256'][:16]}...)")
        return True

    def _same_or_refuse(self, name, where, held, index):
        if (held["size"], held["sha256"]) != (index["size"], index["sha256"]):
            key = format_key(binlog_key(self.source, name))
            raise ResyncRequired(
                f"the archive holds another {key} ({held['size']} bytes, sha256 "
                f"{held['sha256'][:16]}...; {where} has {index['size']} bytes, sha256 "
                f"{index['sha256'][:16]}...): never overwritten (another server's files? "
                "import them under another --source-name)")

    # -- the last file, without a ROTATE ---------------------------------------------------

    def _partial_file(self, name, where, size, cut, torn, index):
        if torn is not None:
            self.echo(f"{name}: torn at offset {torn.offset} ({torn.detail}); "
                      f"{size - cut} bytes from offset {cut} left out (--torn-tail "
                      "truncate)")
        elif cut < size:
            self.echo(f"{name}: {size - cut} bytes from offset {cut} left out: a "
                      "transaction not complete in this copy (import again once it is)")
        if cut <= len(ev.MAGIC):
            return self.echo(f"{name}: not one complete event; nothing archived")
        whole = index if index["size"] == cut else index_range(
            where, IndexBuilder(name, source=self.source, end=cut), 0, cut)
        if self._sealed_holds_prefix(name, where, whole):
            return self._done(name, whole, skipped=True)
        self._check_continues(name, where, whole)
        held = self._check_held_segments(name, where, cut) if self.partial == name else 0
        if held >= cut:
            self.echo(f"{name}: skipped, archived already up to offset {held}")
            return self._done(name, whole, skipped=True)
        stored = self._upload_segment(name, where, held, cut)
        self._done(name, whole, uploaded=stored, partial=True)

    def _sealed_holds_prefix(self, name, where, whole):
        """True when the archive holds ``name`` sealed and the local bytes ``whole``
        indexes (from offset 0) are its start."""
        slots = self.sealed.get(name, {})
        if "index" not in slots:
            return False
        held = self.listing.read_index(slots["index"])
        if ("data" not in slots or held["size"] < whole["size"]
                or not self._starts_with(slots["data"], held, where, 0, whole["size"])):
            self._same_or_refuse(name, where, held, whole)
        self.echo(f"{name}: skipped, archived already as a sealed file ({held['size']} bytes)")
        return True

    def _upload_segment(self, name, where, start, end):
        tracker = TrxTracker()
        if start:
            index_range(where, IndexBuilder(name, tracker=tracker, where=where, end=start), 0,
                        start)
        builder = IndexBuilder(name, start=start, tracker=tracker, source=self.source,
                               where=where, end=end)
        key = segment_key(self.source, name, start, end)
        index, stored = self._put(key, where, start, end, builder,
                                  f"segment {name}:{start}-{end}")
        self.partial = name
        self.echo(f"{name}: archived {format_key(key)} (the active file: {end - start} bytes"
                  f"{_stored(index)}, {_describe(index)})")
        return stored

    def _check_held_segments(self, name, where, size, sealed=False):
        """The end of the archive's segments of ``name``, once proven to be the start
        of the local file's first ``size`` bytes; ResyncRequired when they are other
        bytes (or, for a sealed file, longer than it)."""
        segs = self.listing.segments[self.source][name]
        end, stale = chain_end([k for slots in segs.values() for k in slots.values()])
        for (start, stop), slots in sorted(segs.items()):
            if slots.get("index") in (None, *stale) or stop > end or start >= size:
                continue
            if not self._segment_matches(slots, where, size, start, stop) or (
                    sealed and stop > size):
                raise ResyncRequired(
                    f"the archive holds {format_key(segment_key(self.source, name, start, stop))}"
                    f", which is not the bytes of {where} at {start}-{stop}: never overwritten "
                    "(another server's files? import them under another --source-name)")
        return end

    def _segment_matches(self, slots, where, size, start, stop):
        held = self.listing.read_index(slots["index"])
        if stop <= size:
            return file_sha256(where, start, stop) == held["sha256"]
        return self._starts_with(slots["data"], held, where, start, size)

    def _starts_with(self, data_key, held, where, start, stop):
        """True when the archived object ``data_key`` (index ``held``) begins with the
        raw bytes [start, stop) of the local file ``where``: by the index's raw sha256
        when they are as long, else by decoding the object's start as far as that
        takes, compared a chunk at a time (IdentityError naming it when it is encrypted
        and no identity was given)."""
        if held["size"] == stop - start:
            return file_sha256(where, start, stop) == held["sha256"]
        promise = Promise.of_index(data_key, held)
        check_keys(data_key, promise.codec, promise.key_ids, self.keyring)
        with FileRange(where, start, stop - start) as local:
            compare = _Compare(local)
            try:
                read_object(self.store, promise, compare.write, self.keyring)
            except _Enough:
                return True
            except _Differs:
                return False
        return False  # the object is shorter

    # -- continuity ----------------------------------------------------------------------

    def _check_continues(self, name, where, index):
        """Refuse a file that does not continue the archive, or the file before it."""
        later = [n for n, slots in self.sealed.items()
                 if "index" in slots and binlog_sort_key(n) > binlog_sort_key(name)]
        if later:
            newest = max(later, key=binlog_sort_key)
            raise ResyncRequired(f"the archive holds {self.source}'s files up to {newest}: "
                                 f"{name} is older and not archived, so the import would not "
                                 "continue the archive", where, 0)
        if self.partial not in (None, name):
            raise ResyncRequired(f"the archive's newest file for {self.source} is "
                                 f"{self.partial} (partial): the import must go on from it, "
                                 f"not from {name}", where, 0)
        problems = check_chain(self.source, [self.prev, index]) if self.prev else []
        if problems:
            with open(where, "rb") as f:
                head = f.read(1 << 20)
            raise ResyncRequired(f"{name} does not continue {self.prev['name']}: "
                                 f"{problems[0]}", where, gtid_state_offset(head))

    def _done(self, name, index, uploaded=None, skipped=False, partial=False):
        if skipped:
            self.summary.skipped.append(name)
        else:
            self.summary.imported.append(name)
            self.summary.bytes += uploaded
        if partial:
            self.summary.partial = name
        self.summary.account(index)
        self.prev = index


class _Same(Digest):
    """The digest of the upload's read of a file a first read indexed: ``finish`` returns
    that index, or raises UploadMismatch when the bytes are not the ones indexed (the
    file changed between the two reads): nothing is then published or indexed."""

    def __init__(self, index, where):
        super().__init__()
        self.index, self.where = index, where

    def finish(self):
        if not self.matches(self.index["size"], self.index["sha256"]):
            raise UploadMismatch(f"{self.where} changed while it was imported: {self.size} "
                                 f"bytes sha256 {self.sha256[:16]}... read for the upload, "
                                 f"{self.index['size']} bytes sha256 "
                                 f"{self.index['sha256'][:16]}... indexed")
        return dict(self.index)


class _Enough(Exception):
    """The decoded object matched the local bytes as far as they go."""


class _Differs(Exception):
    """The decoded object is not the local bytes."""


class _Compare:
    """A ``write`` for ``objects.read_object`` that compares what comes out with a local
    ``FileRange``: _Differs at the first other byte, _Enough once the range is
    matched to its end."""

    def __init__(self, local):
        self.local = local

    def write(self, data):
        data = memoryview(data)[:self.local.left]
        while data:
            piece = self.local.read(len(data))
            if piece != data[:len(piece)]:
                raise _Differs
            data = data[len(piece):]
        if not self.local.left:
            raise _Enough


def _newest_partial(listing, source):
    """The binlog name whose segments the archive holds and that is not sealed, or None."""
    names = [n for n in listing.segments[source] if "index" not in listing.sealed[source]
             .get(n, {})]
    return max(names, key=binlog_sort_key) if names else None


def _stored(index):
    """``, stored CODEC N bytes`` for an encoded object; empty for a plain one."""
    if index.get("codec", "none") == "none":
        return ""
    return f", stored {index['codec']} {index['stored_size']} bytes"


def _files(names):
    return f"{len(names)} file{'' if len(names) == 1 else 's'}"


def _describe(index):
    gtids = (f", GTIDs {index['first_gtid']} .. {index['last_gtid']}" if index["first_gtid"]
             else "")
    return f"{index['transactions']} transactions{gtids}"
