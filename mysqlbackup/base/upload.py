"""A tool's output streamed into the archive: zstd (then age when recipients are
given: archive.codec), sha256 of the raw and of the stored bytes, one chunk at a
time (nothing staged whole on disk or in memory); then the stored object read back
and matched."""

import time
from dataclasses import dataclass

from mysqlbackup.archive.codec import Codec, encode
from mysqlbackup.archive.store import StoreError

CHUNK = 1 << 20
ZSTD_LEVEL = 1         # on dumps as small as level 3, three times as fast (measured)
BASE_CODEC = Codec("zstd", ZSTD_LEVEL)  # in this thread: the host runs the tool too
PROGRESS_EVERY = 5.0   # seconds between progress lines


@dataclass(frozen=True)
class Uploaded:
    """What went into the archive: the stream the tool wrote and the object stored."""

    raw_size: int
    raw_sha256: str
    stored_size: int
    sha256: str


class Progress:
    """Calls ``report(raw, stored)`` at most every PROGRESS_EVERY seconds."""

    def __init__(self, report=None, every=PROGRESS_EVERY, clock=time.monotonic):
        self.report, self.every, self.clock = report, every, clock
        self._next = clock() + every

    def tick(self, raw, stored):
        if self.report and self.clock() >= self._next:
            self._next = self.clock() + self.every
            self.report(raw, stored)


def upload_stream(read, store, relative, observe=None, before_commit=None, progress=None,
                  codec=BASE_CODEC):
    """Read ``read(n)`` to its end into the object ``relative`` stored as ``codec``
    (zstd, maybe encrypted); returns Uploaded.

    ``observe(chunk)`` sees every raw chunk (a parser); ``before_commit()`` runs
    after the end of the stream and before the object is published: an error it
    raises (the tool failed, the stream lacks its position) leaves no object."""
    sizes = [0, 0]
    progress = progress or Progress()

    def pull(n):
        chunk = read(CHUNK)
        sizes[0] += len(chunk)
        if chunk and observe:
            observe(chunk)
        progress.tick(*sizes)
        return chunk

    with store.open_write(relative) as out:
        def put(data):
            sizes[1] += len(data)
            out.write(data)
        digests = encode(pull, put, codec)
        if before_commit:
            before_commit()
    return Uploaded(digests.raw_size, digests.raw_sha256, digests.stored_size,
                    digests.stored_sha256)


def check_stored(store, relative, uploaded):
    """Read the object back: its size and sha256 must be what was sent, else
    StoreError (the object is removed, best effort)."""
    size, digest = store.sha256(relative)
    if (size, digest) != (uploaded.stored_size, uploaded.sha256):
        remove_quietly(store, relative)
        raise StoreError(f"archive {store.url}: {relative} read back as {size} bytes sha256 "
                         f"{digest[:12]}..., sent {uploaded.stored_size} bytes sha256 "
                         f"{uploaded.sha256[:12]}...: removed, nothing indexed")


def remove_quietly(store, relative):
    """Remove an object that must not stay (best effort: the store may be the fault)."""
    try:
        store.remove(relative)
    except (FileNotFoundError, StoreError):
        pass
