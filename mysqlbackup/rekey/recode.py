"""One encrypted object re-encrypted to other recipients, streaming (``recode``).

The stored form is an age file, of one zstd frame (codec ``zstd+age``) or of the raw
bytes (``age``). Its payload is decrypted with the old identity and encrypted to the new
recipients with a new file key, so that nothing of the old encryption survives; the
zstd frame in between is kept as it is (not recompressed) and inflated only to be
measured: the raw bytes' size and sha256 are checked against the index (manifest)
before the new object may replace the old one.

pyrage decrypts into a writer and encrypts from a reader: the two run as two threads
joined by a bounded queue (``_Pipe``), so memory holds a few 64 KiB pieces whatever the
object's size, and a failure on either side stops both.
"""

import queue
import threading

from mysqlbackup.archive.codec import (Codec, Digest, Digests, Inflate, codec_parts, decode,
                                       encode)
from mysqlbackup.errors import CorruptBinlog

DEPTH = 16        # pieces the pipe holds at most
_WAIT = 0.5       # seconds between looks at the other side while the pipe is full


class _Abandoned(Exception):
    """The reading side gave up: the writing side stops."""


class _Pipe:
    """``write`` (the decrypting thread) to ``read`` (the encrypting one), bounded."""

    def __init__(self):
        self.queue = queue.Queue(DEPTH)
        self.pending, self.done, self.error, self.abandoned = b"", False, None, False

    def write(self, data):
        piece = bytes(data)
        while True:
            if self.abandoned:
                raise _Abandoned()
            try:
                self.queue.put(piece, timeout=_WAIT)
                return len(piece)
            except queue.Full:
                continue

    def finish(self, error=None):
        """The writing side ended (``error``: why, when it failed)."""
        self.error = error
        while True:
            try:
                self.queue.put(None, timeout=_WAIT)
                return
            except queue.Full:
                if self.abandoned:
                    return

    def read(self, n=-1):
        while not self.pending and not self.done:
            piece = self.queue.get()
            if piece is None:
                self.done = True
                if self.error is not None:
                    raise self.error
            else:
                self.pending = piece
        n = len(self.pending) if n is None or n < 0 else n
        out, self.pending = self.pending[:n], self.pending[n:]
        return out


class _Count:
    """A meter that counts bytes only (the payload is hashed as the raw bytes it inflates
    to, and the new object as it is stored: a third hash would add nothing)."""

    size, sha256 = 0, None

    def update(self, data):
        self.size += len(data)


class _Measure(_Count):
    """The decrypted payload's meter: its size, and the digest of the raw bytes it is
    (or, a zstd frame, inflates to, a bounded piece at a time)."""

    def __init__(self, compressed, where):
        self.raw = Digest()
        self.inflate = Inflate(self, where) if compressed else None

    def update(self, data):
        super().update(data)
        if self.inflate is not None:
            self.inflate.write(data)
        else:
            self.raw.update(data)

    def write(self, data):  # the inflater's sink
        self.raw.update(data)
        return len(data)

    def finish(self):
        if self.inflate is not None:
            self.inflate.finish()


def recode(read, write, name, keyring, recipients, where, key_ids=None):
    """Read an encrypted object (codec ``name``: ``age`` or ``zstd+age``) from
    ``read(n)`` and write it encrypted to ``recipients`` to ``write``, the same payload
    under a new file key. Returns (Digests of the old object: its raw and stored forms,
    (size, sha256) of the new stored form). CorruptBinlog/IdentityError as ``codec.decode``
    (``where``, ``key_ids``: for messages); an error of ``write`` passes unchanged."""
    pipe, measure = _Pipe(), _Measure(codec_parts(name)[0], where)
    got = {}

    def decrypt():
        try:
            got["old"] = decode(read, pipe.write, "age", keyring, where, key_ids, raw=measure)
            measure.finish()
        except BaseException as e:  # noqa: BLE001 - handed to the reading side
            pipe.finish(e)
            return
        pipe.finish()

    worker = threading.Thread(target=decrypt, name="rekey-decrypt", daemon=True)
    worker.start()
    try:
        new = encode(pipe.read, write, Codec(recipients=tuple(recipients)), _Count())
    finally:
        pipe.abandoned = True
        worker.join()
    if pipe.error is not None:
        raise pipe.error
    if new.raw_size != measure.size:
        raise CorruptBinlog(f"re-encrypted {new.raw_size} of the {measure.size} payload bytes "
                            "decrypted: not rewritten", where)
    old = got["old"]
    return (Digests(measure.raw.size, measure.raw.sha256, old.stored_size, old.stored_sha256),
            (new.stored_size, new.stored_sha256))
