"""Storing one binlog object: read a local file's bytes once, in chunks, index, encode and
upload them in that pass, read the stored object back, and only then write its index
(the mark that it is whole). The archiver and ``archive import`` store every binlog
object through here."""

import os
from dataclasses import asdict, replace

from mysqlbackup.archive.codec import CHUNK, encode, stored_fields, stored_of
from mysqlbackup.archive.index import IndexBuilder
from mysqlbackup.archive.names import (binlog_key, format_key, parse_key, partial_prefix,
                                       segment_key)
from mysqlbackup.errors import MysqlBackupError


class UploadMismatch(MysqlBackupError):
    """An uploaded object read back with another size or sha256 than the local bytes."""


class FileRange:
    """``read(n)`` over exactly ``length`` bytes of a local file from ``start`` (a sealed
    file up to its size when the pass began, a segment up to the durable end), a chunk
    at a time; UploadMismatch when the file holds fewer (it changed while it was read)
    instead of archiving fewer. A context manager (closes the file)."""

    def __init__(self, path, start, length):
        self.path, self.start, self.left = path, start, length
        self.file = open(path, "rb")
        self.file.seek(start)

    def read(self, n=CHUNK):
        n = min(n, self.left)
        if n <= 0:
            return b""
        data = self.file.read(n)
        if not data:
            raise UploadMismatch(f"{self.path} ends at offset {self.file.tell()}, before the "
                                 f"{self.left} bytes still to be read (changed while read)")
        self.left -= len(data)
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def index_range(path, builder, start, length):
    """Feed ``length`` bytes of a local file from ``start`` to ``builder`` (an
    IndexBuilder) a chunk at a time; returns its index."""
    with FileRange(path, start, length) as raw:
        for chunk in iter(raw.read, b""):
            builder.update(chunk)
    return builder.finish()


def put_object(store, relative, read, codec, builder):
    """Store the raw bytes ``read(n)`` gives (to their end) as ``relative`` in ``codec``'s
    form, in one pass a chunk at a time: each chunk goes to ``builder`` (an
    IndexBuilder: sha256 and index; or any digest with ``finish()``), through the codec
    (zstd, age; plain: as it is) and into ``store.open_write``. The object is
    published only when every byte was read, walked without fault (``finish()``:
    a torn last event aborts it) and written. Returns ``builder.finish()``'s index
    with the fields of the stored object (``codec.stored_fields``; ``lock``: the S3
    Object Lock it was written under, when the store sets one)."""
    with store.open_write(relative) as out:
        digests = encode(read, out.write, codec, builder)
        index = builder.finish()
    locked = {"lock": asdict(store.lock)} if store.lock else {}
    return dict(index, **stored_fields(codec, digests), **locked)


def upload_sealed(store, path, source, name, predecessor, codec):
    """Archive the sealed local file ``path`` as ``name`` of key source ``source``: read
    once in chunks up to its size now, indexed, encoded and uploaded in that pass, read
    back, then indexed (``index_if_whole``). Returns its index."""
    size = os.path.getsize(path)
    builder = IndexBuilder(name, predecessor, source=source, end=size)
    with FileRange(path, 0, size) as raw:
        index = put_object(store, format_key(binlog_key(source, name)), raw.read, codec,
                           builder)
    index_if_whole(store, binlog_key(source, name), index, f"copy of {name}")
    return index


def upload_segment(store, path, source, name, start, end, tracker, codec):
    """Archive bytes [start, end) of the local file ``path`` (a durable prefix's new
    part, ending on a transaction boundary) as a segment, its index written once it
    reads back whole; ``tracker`` (the TrxTracker up to ``start``) moves on to ``end``."""
    builder = IndexBuilder(name, start=start, tracker=tracker, source=source, end=end)
    with FileRange(path, start, end - start) as raw:
        index = put_object(store, format_key(segment_key(source, name, start, end)),
                           raw.read, codec, builder)
    index_if_whole(store, segment_key(source, name, start, end), index,
                   f"segment {name}:{start}-{end}")
    return index


def index_if_whole(store, key, index, what):
    """Read an uploaded object back and, only when its size and sha256 are the stored
    ones its index says (``codec.stored_of``: the raw ones for a plain object), write
    the index: the index is the mark that the object is whole and verified (the daemon
    and ``archive import`` archive every binlog object so). No identity is needed.

    ``key``: the object's ArchiveKey (uploaded already); ``what`` names it in the
    UploadMismatch raised otherwise. Returns the object's stored size.
    """
    data_key = format_key(key)
    size, digest = store.sha256(data_key)
    if (size, digest) != stored_of(index):
        want = stored_of(index)
        raise UploadMismatch(f"archived {what} does not match: {size} bytes sha256 {digest}, "
                             f"sent {want[0]} {want[1]}")
    store.put_json(format_key(replace(key, is_index=True)), index)
    return size


def remove_segments(store, source, name):
    """Remove the partial segments (and their folder on file://) of a sealed file."""
    folder = partial_prefix(source, name)
    for relative in store.list(folder):
        store.remove(relative)
    store.remove_empty_folder(folder)


def chain_end(relatives):
    """(end of the indexed segments contiguous from 0, the other segment objects)."""
    keys = [(parse_key(r), r) for r in relatives]
    indexed = {k.start: k.end for k, _ in keys if k and k.is_index}
    end, chain = 0, set()
    while end in indexed:
        chain.add((end, indexed[end]))
        end = indexed[end]
    stale = [r for k, r in keys if k is None or (k.start, k.end) not in chain]
    return end, stale
