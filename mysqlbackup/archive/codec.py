"""The stored form of an archive object: compression (zstd) and encryption (age).

Every object (a sealed binlog, a segment of the active file, a base backup) is
encoded on its own: one zstd frame of its raw bytes, then, when recipients are
given, an age file (https://age-encryption.org/v1, X25519) of that frame. Any
object can so be read without any other, and by hand:
``age -d -i key.txt OBJECT | zstd -d`` (see docs/archive-format.md).

The codec's name says which steps apply: ``none``, ``zstd``, ``age``, ``zstd+age``.
``encode`` and ``decode`` stream (a chunk at a time) and measure both sides on
the way (``Digests``: raw and stored size and sha256), so that the caller can
compare them with an index or manifest. The backup host needs only recipients
(public keys, ``age1...``); identities (``AGE-SECRET-KEY-1...``) are read only by
the commands that look inside objects (``verify --deep``, ``replay``, ``restore``).
"""

import hashlib
import os
from dataclasses import dataclass, field

import zstandard

from mysqlbackup.durable import fsync_dir
from mysqlbackup.errors import CorruptBinlog, UsageError

CHUNK = 1 << 20
# zstd level of binlog objects when none is given (``stream``, ``archive import``; bases
# default to 1 too), chosen by measurement: level 1 compresses real binlogs nearly as
# well as level 3 at about twice its speed. Issue 26's figures on 103 real files from
# MySQL 5.1-9.1 and MariaDB servers: 4.66x against 4.78x. scripts/bench_archive.py here:
# 16.02x against 16.09x on the ../shared/binlogs corpus, 3.30x against 3.13x on a
# row-based OLTP binlog (level 1 smaller), and the whole upload path (read, index,
# compress, upload, read back) 245 against 152 MB of raw binlog per CPU second on that
# OLTP binlog: only level 1 meets the goal of 200, and the backup host's CPU is the
# database's.
DEFAULT_LEVEL = 1
AGE_MAGIC = b"age-encryption.org/v1\n"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BINLOG_MAGIC = b"\xfebin"
NAMES = ("none", "zstd", "age", "zstd+age")
IDENTITY_ENV = "MYSQLBACKUP_IDENTITY"


class IdentityError(UsageError):
    """No identity, or none that opens an object (encrypted to another key)."""


class HeaderNotOpened(CorruptBinlog):
    """An age header that none of the identity's keys opens, although the index names
    one of them: damaged, or (``objects.read_object`` tells) a rekey left halfway."""


@dataclass(frozen=True)
class Codec:
    """How new objects are stored: ``compression`` ("zstd" or "none") at ``level``,
    then encrypted to every recipient (``age1...`` texts) when there are any."""

    compression: str = "none"
    level: int = DEFAULT_LEVEL
    recipients: tuple = ()

    @property
    def name(self):
        """``none``, ``zstd``, ``age`` or ``zstd+age``."""
        parts = (["zstd"] if self.compression == "zstd" else []) + \
            (["age"] if self.recipients else [])
        return "+".join(parts) or "none"

    @property
    def key_ids(self):
        """The key id of each recipient, in order."""
        return [key_id(r) for r in self.recipients]

    @property
    def plain(self):
        return self.name == "none"


PLAIN = Codec()


def parse_compress(text):
    """``zstd``, ``zstd:LEVEL`` (1-22) or ``none`` -> (compression, level); UsageError."""
    kind, _, level = (text or "").partition(":")
    if kind == "none" and not level:
        return "none", DEFAULT_LEVEL
    if kind == "zstd" and (not level or (level.isdigit() and 1 <= int(level) <= 22)):
        return "zstd", int(level or DEFAULT_LEVEL)
    raise UsageError(f"bad --compress {text!r}: zstd, zstd:LEVEL (1-22) or none")


def make_codec(compress="zstd", recipient_files=()):
    """The Codec of ``--compress`` and ``--encrypt-to`` (files of recipients)."""
    compression, level = parse_compress(compress)
    recipients = tuple(r for path in recipient_files for r in read_recipients(path))
    return Codec(compression, level, recipients)


def key_id(recipient):
    """A short, stable id of a public key (``age1...``): 16 hex digits of its sha256."""
    return hashlib.sha256(recipient.strip().encode()).hexdigest()[:16]


# -- key files ------------------------------------------------------------------------

def _key_lines(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            lines = [ln.strip() for ln in f]
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {what} file {path}: {e}") from None
    return [ln for ln in lines if ln and not ln.startswith("#")]


def read_recipients(path):
    """The ``age1...`` recipients of a file (one a line, ``#`` comments); UsageError."""
    from pyrage import x25519
    found = []
    for line in _key_lines(path, "recipient"):
        try:
            x25519.Recipient.from_str(line)
        except Exception:  # noqa: BLE001 - pyrage's RecipientError and ValueError
            hint = " (that is a secret key: give the public age1... key)" \
                if line.upper().startswith("AGE-SECRET-KEY-") else ""
            raise UsageError(f"{path}: not an age recipient (age1...){hint}") from None
        found.append(line)
    if not found:
        raise UsageError(f"{path}: no recipient (age1...) in the file")
    return tuple(found)


@dataclass(frozen=True)
class Keyring:
    """Identities (secret keys) that may open objects; never shown in a repr."""

    secrets: tuple = field(default=(), repr=False)
    origin: str = None

    @property
    def key_ids(self):
        from pyrage import x25519
        return [key_id(str(x25519.Identity.from_str(s).to_public())) for s in self.secrets]

    def identities(self):
        from pyrage import x25519
        return [x25519.Identity.from_str(s) for s in self.secrets]


def read_identities(path):
    """The Keyring of an identity file (``AGE-SECRET-KEY-1...`` lines, ``#`` comments,
    as ``age-keygen`` writes it); UsageError."""
    from pyrage import x25519
    secrets = []
    for line in _key_lines(path, "identity"):
        try:
            x25519.Identity.from_str(line)
        except Exception:  # noqa: BLE001 - pyrage's IdentityError and ValueError
            raise UsageError(f"{path}: not an age identity (AGE-SECRET-KEY-1...)") from None
        secrets.append(line)
    if not secrets:
        raise UsageError(f"{path}: no identity (AGE-SECRET-KEY-1...) in the file")
    return Keyring(tuple(secrets), path)


def keyring_from(path=None, environ=os.environ):
    """The Keyring of ``--identity`` or of the file $MYSQLBACKUP_IDENTITY names; None."""
    path = path or environ.get(IDENTITY_ENV)
    return read_identities(path) if path else None


def keygen(identity_path, recipient_path, now=None):
    """Write a new X25519 key pair: the identity with mode 0600, the recipient beside;
    never overwrites (UsageError when either file exists). Returns the recipient."""
    from datetime import datetime, timezone

    from pyrage import x25519
    for path in (identity_path, recipient_path):
        if os.path.lexists(path):
            raise UsageError(f"{path} exists: keygen never overwrites a key file")
    identity = x25519.Identity.generate()
    public = str(identity.to_public())
    when = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _write_new(identity_path, f"# created: {when}\n# public key: {public}\n{identity}\n", 0o600)
    _write_new(recipient_path, f"# key id {key_id(public)}, created {when}\n{public}\n", 0o644)
    return public


def _write_new(path, text, mode):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


# -- streaming encode and decode ------------------------------------------------------

class Digest:
    """Size and sha256 of one stream, as it passes."""

    def __init__(self):
        self.size, self._sha = 0, hashlib.sha256()

    def update(self, data):
        self.size += len(data)
        self._sha.update(data)

    @property
    def sha256(self):
        return self._sha.hexdigest()

    def matches(self, size, sha256):
        """True when what passed is ``size`` bytes with that sha256."""
        return (self.size, self.sha256) == (size, sha256)


@dataclass(frozen=True)
class Digests:
    """What passed: the raw bytes and the stored ones."""

    raw_size: int
    raw_sha256: str
    stored_size: int
    stored_sha256: str


class _Reader:
    """A file-like ``read`` over ``read(n)`` (which may return more or fewer than n bytes:
    a ranged read of the store) that hands what passes to ``digest.update`` (a Digest,
    or an ``index.IndexBuilder`` that also walks the events) and keeps the first error
    either raised (pyrage wraps errors into its own). Never returns more than asked for."""

    def __init__(self, read, digest):
        self._read, self.digest, self.error = read, digest, None
        self._held = memoryview(b"")

    def read(self, n=-1):
        n = CHUNK if n is None or n < 0 else n
        if not self._held:
            try:
                data = self._read(n)
                self.digest.update(data)
            except BaseException as e:
                self.error = self.error or e
                raise
            if len(data) <= n:
                return data  # as it came: no copy
            self._held = memoryview(data)
        out, self._held = self._held[:n], self._held[n:]
        return out.tobytes()

    def readable(self):
        return True


class _Writer:
    """A file-like ``write`` over ``write(bytes)`` that measures what passes (unless
    ``digest`` is None) and keeps the first error it raised."""

    def __init__(self, write, digest):
        self._write, self.digest, self.error = write, digest, None

    def write(self, data):
        data = bytes(data)
        if self.digest is not None:
            self.digest.update(data)
        try:
            self._write(data)
        except BaseException as e:
            self.error = self.error or e
            raise
        return len(data)

    def writable(self):
        return True

    def flush(self):
        pass


def encode(read, write, codec, raw=None):
    """Read raw bytes from ``read(n)`` to their end, write the stored form to ``write``;
    returns Digests. ``raw``: what measures the raw bytes (default a new Digest; an
    ``index.IndexBuilder`` indexes them in the same pass). An error of ``read``,
    ``raw`` or ``write`` passes unchanged. A plain codec's stored digest is the raw one
    (the bytes are hashed once)."""
    raw = Digest() if raw is None else raw
    stored = raw if codec.plain else Digest()
    source = _Reader(read, raw)
    sink = _Writer(write, None if codec.plain else stored)
    readable = source
    if codec.compression == "zstd":
        readable = zstandard.ZstdCompressor(level=codec.level, write_checksum=True).stream_reader(
            source, read_size=CHUNK, closefd=False)
    if codec.recipients:
        _encrypt(readable, sink, codec.recipients, (source, sink))
    else:
        for chunk in iter(lambda: readable.read(CHUNK), b""):
            sink.write(chunk)
    return Digests(raw.size, raw.sha256, stored.size, stored.sha256)


def _encrypt(readable, sink, recipients, ends):
    import pyrage
    from pyrage import x25519
    try:
        pyrage.encrypt_io(readable, sink, [x25519.Recipient.from_str(r) for r in recipients])
    except Exception:
        for end in ends:
            if end.error is not None:
                raise end.error from None
        raise


def encode_bytes(data, codec):
    """(stored bytes, Digests) of ``data``."""
    out, pos = [], [0]

    def read(n):
        chunk = data[pos[0]:pos[0] + n]
        pos[0] += len(chunk)
        return chunk
    digests = encode(read, out.append, codec)
    return b"".join(out), digests


def codec_parts(name):
    """(compressed, encrypted) of a codec name; CorruptBinlog-free: ValueError if unknown."""
    if name not in NAMES:
        raise ValueError(f"unknown codec {name!r}")
    return "zstd" in name, "age" in name


def sniff(head):
    """The codec family the first bytes of an object show: "none" (a binlog), "zstd",
    "age", or None."""
    if head.startswith(AGE_MAGIC):
        return "age"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if head.startswith(BINLOG_MAGIC):
        return "none"
    return None


def decode(read, write, name, keyring=None, where=None, key_ids=None, raw=None,
           stored=None):
    """Read the stored form (codec ``name``) from ``read(n)``, write the raw bytes to
    ``write``; returns Digests. ``where`` names the object in errors: CorruptBinlog
    (damaged, truncated, not the codec's format), IdentityError (no identity, or
    none that opens it; ``key_ids``: the ids its index names, for the message).
    ``raw``: what measures the raw bytes (default a new Digest; an
    ``index.IndexBuilder`` checks and indexes them on the way); ``stored``: the Digest
    of the stored bytes (default a new one). A plain object with no ``raw`` given is
    hashed once: its raw digest is its stored one."""
    compressed, encrypted = codec_parts(name)
    stored = Digest() if stored is None else stored
    if raw is None and not (compressed or encrypted):
        source, sink = _Reader(read, stored), _Writer(write, None)
        for chunk in iter(lambda: source.read(CHUNK), b""):
            sink.write(chunk)
        return Digests(stored.size, stored.sha256, stored.size, stored.sha256)
    raw = Digest() if raw is None else raw
    source, sink = _Reader(read, stored), _Writer(write, raw)
    inflate = Inflate(sink, where) if compressed else sink
    if encrypted:
        _decrypt(source, inflate, keyring, where, key_ids, sink)
    else:
        for chunk in iter(lambda: source.read(CHUNK), b""):
            inflate.write(chunk)
    if compressed:
        inflate.finish()
    return Digests(raw.size, raw.sha256, stored.size, stored.sha256)


def decode_bytes(data, name, keyring=None, where=None, key_ids=None):
    """The raw bytes of the stored ``data`` (whole in memory: small objects, tests)."""
    if name == "none":
        return data
    out, pos = [], [0]

    def read(n):
        chunk = data[pos[0]:pos[0] + n]
        pos[0] += len(chunk)
        return chunk
    decode(read, out.append, name, keyring, where, key_ids)
    return b"".join(out)


class Inflate:
    """A writer that decompresses one zstd frame into ``sink``, a bounded piece at a
    time (``stream_writer``: at most CHUNK bytes a write, whatever the ratio of the
    input at hand), ``FrameEnd`` telling where the frame ends."""

    def __init__(self, sink, where):
        self.sink, self.where = sink, where
        self.frame = FrameEnd()
        self.out = zstandard.ZstdDecompressor().stream_writer(
            sink, write_size=CHUNK, write_return_read=True, closefd=False)
        self.error = None

    def write(self, data):
        try:
            return self._write(memoryview(data))
        except BaseException as e:
            self.error = self.error or e
            raise

    def _write(self, data):
        if self.frame.done:
            if data:
                raise CorruptBinlog("bytes after the end of its zstd frame", self.where)
            return len(data)
        take = self.frame.take(data)
        try:
            self.out.write(data[:take])
        except zstandard.ZstdError as e:
            raise CorruptBinlog(f"not a valid zstd stream ({e}): damaged", self.where) from None
        if take < len(data):
            raise CorruptBinlog("bytes after the end of its zstd frame", self.where)
        return len(data)

    def writable(self):
        return True

    def flush(self):
        pass

    def finish(self):
        if not self.frame.done:
            raise CorruptBinlog("its zstd frame ends early: the object is truncated",
                                self.where)


def check_keys(where, name, key_ids, keyring):
    """IdentityError naming ``where`` unless ``keyring`` may open an object stored as
    ``name`` (a codec name) encrypted to ``key_ids`` (what its index says, maybe none)."""
    if "age" not in name:
        return
    if not keyring:
        raise IdentityError(f"{where}: encrypted (age{_ids(key_ids)}): give --identity FILE "
                            f"(or ${IDENTITY_ENV}) to read it")
    held = keyring.key_ids
    if key_ids and not set(key_ids) & set(held):
        raise IdentityError(f"{where}: encrypted to key id {', '.join(key_ids)}; the identity "
                            f"{keyring.origin or ''} holds {', '.join(held)}: another key")


def _decrypt(source, sink, keyring, where, key_ids, raw_sink):
    import pyrage
    check_keys(where, "age", key_ids, keyring)
    try:
        pyrage.decrypt_io(source, sink, keyring.identities())
    except Exception as e:  # noqa: BLE001 - pyrage's DecryptError, OSError; ours below
        for end in (sink, raw_sink, source):
            if getattr(end, "error", None) is not None:
                raise end.error from None
        raise _decrypt_error(e, where, key_ids, keyring) from None


def _decrypt_error(error, where, key_ids, keyring):
    text = str(error)
    if "No matching keys" in text and not key_ids:
        return IdentityError(f"{where}: no identity in {keyring.origin or 'the keyring'} opens "
                             f"it (encrypted to another key, or its header is damaged)")
    if "No matching keys" in text:
        return HeaderNotOpened(f"its age header does not open with key id "
                             f"{', '.join(key_ids)}, which its index names: damaged", where)
    return CorruptBinlog(f"cannot decrypt ({type(error).__name__}: {text}): the object is "
                         f"damaged or truncated", where)


def _ids(key_ids):
    return f", key id {', '.join(key_ids)}" if key_ids else ""


# -- what an index or manifest says ---------------------------------------------------

def stored_of(index):
    """(stored size, stored sha256) an index says; a plain object's (codec "none", or an
    old index without codec): the raw ones."""
    if codec_of(index) == "none":
        return index.get("size"), index.get("sha256")
    return index.get("stored_size"), index.get("stored_sha256")


def codec_of(index):
    """The codec name an index says ("none" for an index written before codecs)."""
    return index.get("codec") or "none"


def stored_fields(codec, digests):
    """The index fields of an object stored with ``codec``: stored size and sha256,
    the codec's name, the key ids."""
    return {"codec": codec.name, "stored_size": digests.stored_size,
            "stored_sha256": digests.stored_sha256, "key_ids": codec.key_ids}


# -- where one zstd frame ends in a stream fed a chunk at a time (pure) -------------------
# A zstd frame (RFC 8878) is a header, then blocks, each behind a 3-byte header that says
# its type, its size and whether it is the last one, then the content checksum when the
# frame header asks for one. ``FrameEnd`` follows those headers alone (it decompresses
# nothing), so that a decompressor that writes its output a bounded piece at a time
# (python-zstandard's ``stream_writer``, which says neither where the frame ends nor
# whether it did) can be told a truncated frame and bytes after it: ``Inflate``.

_DICT_ID = (0, 1, 2, 4)    # Dictionary_ID sizes by flag
_CONTENT_SIZE = (0, 2, 4, 8)  # Frame_Content_Size sizes by flag (0: 1 byte if single segment)
_RLE, _RESERVED = 1, 3


class FrameEnd:
    """``take(data)``: how many bytes of ``data`` still belong to the frame; ``done``
    once its last byte went by. A stream that is no zstd frame (another magic, a
    reserved block type) is ``broken``: every byte is then taken, for the decompressor
    to refuse."""

    def __init__(self):
        self.done = self.broken = False
        self._head = bytearray()
        self._need, self._state = len(ZSTD_MAGIC) + 1, self._frame_header
        self._skip, self._last, self._checksum = 0, False, False

    def take(self, data):
        pos, size = 0, len(data)
        while pos < size and not self.done and not self.broken:
            if self._skip:
                step = min(self._skip, size - pos)
                self._skip -= step
                pos += step
                if not self._skip and self._last:
                    self.done = True
                continue
            piece = data[pos:pos + self._need - len(self._head)]
            self._head += piece
            pos += len(piece)
            if len(self._head) == self._need:
                head, self._head = bytes(self._head), bytearray()
                self._state(head)
        return size if self.broken else pos

    def _frame_header(self, head):
        if head[:4] != ZSTD_MAGIC:
            self.broken = True
            return
        descriptor = head[4]
        single = descriptor >> 5 & 1
        self._checksum = bool(descriptor >> 2 & 1)
        content_size = _CONTENT_SIZE[descriptor >> 6] or single
        rest = (0 if single else 1) + _DICT_ID[descriptor & 3] + content_size
        self._expect(rest, self._header_rest) if rest else self._expect(3, self._block)

    def _header_rest(self, head):
        self._expect(3, self._block)

    def _block(self, head):
        value = int.from_bytes(head, "little")
        kind, length = value >> 1 & 3, value >> 3
        if kind == _RESERVED:
            self.broken = True
            return
        self._last = bool(value & 1)
        self._skip = (1 if kind == _RLE else length) + (4 if self._last and self._checksum
                                                           else 0)
        if self._last and not self._skip:
            self.done = True
        self._expect(3, self._block)

    def _expect(self, need, state):
        self._need, self._state = need, state
