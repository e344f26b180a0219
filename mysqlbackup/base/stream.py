"""A base object read back from the archive as one decoded stream (I/O): decrypted
with the keyring when its manifest says age, decompressed, its stored and raw digests
checked against the manifest, a chunk at a time (never whole on disk or in memory).
A restore pipes it into the client (a dump) or into ``mbstream``/``tar`` (a physical
base); ``scan_dump`` reads a dump ahead of its load, and serve reads the tables a dump
creates from it (``replay.serve.catalog``)."""

import time

from mysqlbackup.archive.codec import Digest
from mysqlbackup.archive.objects import Promise, check, digests_of, read_object

PROGRESS_EVERY = 5.0      # seconds between progress lines


def stream_object(store, key, manifest, sink, digests, progress, transform, keyring=None,
                  watch=None, what="load"):
    """Write the base object ``key``, decoded (``objects.read_object``: decrypted with
    ``keyring`` when its manifest says age, decompressed; then ``transform``ed), to
    ``sink`` (a pipe); ``digests`` (stored, raw: Digest) see every byte on the way,
    ``watch`` (``feed``) every byte written. A stream that does not decode raises
    CorruptBinlog (IdentityError: no key opens it) naming the object. ``what`` names
    the reading in progress lines."""
    stored, raw = digests
    total = manifest["stored_size"]
    started, last_report = time.monotonic(), [time.monotonic()]

    def send(data):
        if watch is not None:
            watch.feed(data)
        sink.write(data)

    def write(data):
        send(transform.feed(data) if transform else data)
        if progress and time.monotonic() - last_report[0] >= PROGRESS_EVERY:
            last_report[0] = time.monotonic()
            progress(_progress_line(stored.size, total, raw.size, last_report[0] - started,
                                    what))
    read_object(store, Promise.of_manifest(key, manifest), write, keyring, raw=raw,
                stored=stored)
    if transform:
        send(transform.finish())


def scan_dump(store, key, manifest, scan, progress=None, keyring=None):
    """Read the base object ``key`` ahead of its load, its decoded stream fed to ``scan``
    (a ``UsersScan``) and dropped; returns ``scan``. The users section sits at the end of
    a dump, so knowing what it needs before anything is loaded reads the object twice
    (once here, once for the load): bounded memory, a chunk at a time. Its digests are
    checked too (CorruptBinlog before the target is touched)."""
    stored, raw = Digest(), Digest()
    stream_object(store, key, manifest, _Discard(), (stored, raw), progress, scan, keyring,
                  what="users check: reading ahead")
    check_digests(key, manifest, stored, raw)
    return scan


class _Discard:
    def write(self, data):
        pass


def _progress_line(done, total, raw, elapsed, what="load"):
    rate = raw / elapsed / 1e6 if elapsed else 0.0
    return (f"restore: {what}: {done / 1e6:.1f} of {total / 1e6:.1f} MB stored read, "
            f"{raw / 1e6:.1f} MB {'loaded' if what == 'load' else 'read'}, {rate:.1f} MB/s")


def check_digests(key, manifest, stored, raw):
    """CorruptBinlog naming the object when what streamed (``stored``, ``raw``: the
    Digests handed to ``stream_object``) is not the manifest's."""
    check(Promise.of_manifest(key, manifest), digests_of(raw, stored))
