"""The one reader of archived objects: ranged reads, decoded as they stream, measured.

An object is read from the store (``ArchiveStore.reader``: ranged reads of
``store.CHUNK``), decoded on the way (its codec: zstd, age) and its raw bytes handed
to a ``write`` a bounded piece at a time; the size and sha256 of its stored and of its
raw form are measured as they pass (``codec.Digests``), and checked against what the
archive promises of it: its index (a binlog file or segment) or its manifest (a base).
Nothing is held whole.

Every reader of the archive goes through ``read_object``: the replay's Spark tasks and
its driver, ``serve``'s feed and ``archive find`` (``replay.job.tasks.stream_unit``), the
restore's load of a base and its extraction (``replay.restore.load``), ``archive verify``
and the importer's comparison with a local file. ``Promise`` says what the index or the
manifest promises; ``problem`` says why what was read is not that.

While ``archive rekey`` swaps an object for its copy encrypted to other keys, its index
(manifest) names both stored forms: the new one in its usual fields, the one before in
``rekey_from`` (``REKEY_FROM``). The object is whichever at every moment, and every
check here and of a listed size (``stored_forms``, ``manifest_forms``) takes either:
a rekey stopped anywhere (kill -9) leaves an archive every reader reads.
"""

from dataclasses import dataclass
from typing import Optional

from mysqlbackup.archive.codec import (Digests, HeaderNotOpened, IdentityError, codec_of,
                                       decode, stored_of)
from mysqlbackup.errors import CorruptBinlog

REKEY_FROM = "rekey_from"   # the stored form an object had before archive rekey swapped it
_HEX = frozenset("0123456789abcdef")


def previous_form(doc):
    """(stored size, stored sha256, key ids) of the form an index's or manifest's object
    had before a rekey that is under way (``rekey_from``), or None."""
    before = doc.get(REKEY_FROM)
    if not before:
        return None
    return before["stored_size"], before["stored_sha256"], tuple(before.get("key_ids") or ())


def rekey_from(size, sha256, key_ids):
    """The ``rekey_from`` value of a stored form."""
    return {"stored_size": size, "stored_sha256": sha256, "key_ids": list(key_ids)}


def form_problem(doc):
    """Why ``doc``'s ``rekey_from`` (an index's or manifest's) is malformed, or None."""
    if REKEY_FROM not in doc:
        return None
    before = doc[REKEY_FROM]
    ok = (isinstance(before, dict) and set(before) == {"stored_size", "stored_sha256",
                                                       "key_ids"}
          and isinstance(before["stored_size"], int) and before["stored_size"] >= 0
          and not isinstance(before["stored_size"], bool)
          and isinstance(before["stored_sha256"], str) and len(before["stored_sha256"]) == 64
          and set(before["stored_sha256"]) <= _HEX and isinstance(before["key_ids"], list)
          and all(isinstance(k, str) for k in before["key_ids"]))
    return None if ok else f"{REKEY_FROM} is {str(before)[:40]!r}"


@dataclass(frozen=True)
class Promise:
    """What the archive promises of one object: its key, its codec and key ids, the size
    and sha256 of its stored form and of its raw bytes, and who promises it (``by``:
    "index" or "manifest", for messages). A plain object's stored form is its raw one."""

    key: str
    codec: str = "none"
    stored_size: Optional[int] = None
    stored_sha256: Optional[str] = None
    raw_size: Optional[int] = None
    raw_sha256: Optional[str] = None
    key_ids: Optional[tuple] = None
    by: str = "index"
    previous: Optional[tuple] = None   # (size, sha256) before a rekey under way

    @classmethod
    def of_index(cls, key, index):
        """What an index says of the object ``key`` (an old index without codec: plain)."""
        stored_size, stored_sha = stored_of(index)
        ids, previous = _keys_and_previous(index)
        return cls(key, codec_of(index), stored_size, stored_sha, index.get("size"),
                   index.get("sha256"), ids, previous=previous)

    @classmethod
    def of_manifest(cls, key, manifest):
        """What a base's manifest says of its object ``key`` (an old manifest: zstd)."""
        ids, previous = _keys_and_previous(manifest)
        return cls(key, manifest.get("codec", "zstd"), manifest["stored_size"],
                   manifest["sha256"], manifest["raw_size"], manifest["raw_sha256"],
                   ids, "manifest", previous)

    @property
    def stored(self):
        return self.stored_size, self.stored_sha256

    @property
    def forms(self):
        """The stored (size, sha256) the object may have: one, two during a rekey."""
        return (self.stored,) + ((self.previous,) if self.previous else ())


def stored_forms(index):
    """Every (stored size, stored sha256) the object of ``index`` may have now: the
    index's, and while a rekey swaps it, the one before (``Promise.forms``)."""
    return list(Promise.of_index(None, index).forms)


def manifest_forms(manifest):
    """``stored_forms`` of a base's manifest."""
    return list(Promise.of_manifest(None, manifest).forms)


def _keys_and_previous(doc):
    """(key ids, previous form) of an index or manifest: the key ids of both forms while
    a rekey swaps the object (either may open it)."""
    ids, before = list(doc.get("key_ids") or ()), previous_form(doc)
    if before:
        ids += [k for k in before[2] if k not in ids]
    return (tuple(ids) if ids else None), (before[:2] if before else None)


def read_object(store, promise, write, keyring=None, raw=None, stored=None, length=None,
                where=None):
    """Hand the raw bytes of the object ``promise.key`` to ``write``, a bounded piece at a
    time, decoded as they stream in (``promise.codec``; ``keyring`` opens an encrypted
    one); returns the Digests of both forms (not checked: ``check``/``problem`` do).

    ``length``: the stored bytes to read (default: the object's size in the store now,
    so that bytes beyond what was promised are read and caught); ``raw`` measures the raw
    bytes (a Digest, or an ``index.IndexBuilder`` that walks and indexes them), ``stored``
    the stored ones (a Digest): given, the caller sees them grow (progress, and how far
    the stream went when ``write`` gave up). ``where`` names the object in errors
    (default its key). A stream that does not decode raises CorruptBinlog (IdentityError:
    no key opens it); a vanished object FileNotFoundError."""
    total = store.info_size(promise.key) if length is None else length
    try:
        return decode(store.reader(promise.key, total), write, promise.codec, keyring,
                      where or promise.key, promise.key_ids, raw=raw, stored=stored)
    except HeaderNotOpened:
        if promise.previous is None:
            raise
        raise IdentityError(
            f"{where or promise.key}: an archive rekey left it between two keys (key ids "
            f"{', '.join(promise.key_ids)}) and the identity opens only the form it does not "
            "have now: run archive rekey again, or give an identity holding both") from None


def digests_of(raw, stored):
    """The Digests of two meters (Digest) a caller handed to ``read_object``."""
    return Digests(raw.size, raw.sha256, stored.size, stored.sha256)


def problem(promise, got):
    """Why ``got`` (Digests) is not what ``promise`` says, or None: the stored form first
    (it needs no decoding), then the raw bytes (an encoded object)."""
    stored = stored_problem(promise, (got.stored_size, got.stored_sha256))
    if stored or promise.codec == "none":
        return stored
    return raw_problem(promise, (got.raw_size, got.raw_sha256))


def raw_problem(promise, got):
    """Why the raw bytes ``got`` ((size, sha256)) are not what ``promise`` says, or None
    (a plain object: as ``stored_problem``)."""
    if promise.codec == "none":
        return stored_problem(promise, got)
    if tuple(got) == (promise.raw_size, promise.raw_sha256):
        return None
    return (f"decodes to {_form(*got)}, its {promise.by} says "
            f"{_form(promise.raw_size, promise.raw_sha256)}: not what was archived")


def stored_problem(promise, got):
    """Why the stored form ``got`` ((size, sha256), e.g. ``ArchiveStore.sha256``) is not
    what ``promise`` says, or None."""
    if tuple(got) in promise.forms:
        return None
    before = f" (or {_form(*promise.previous)} before its rekey)" if promise.previous else ""
    return (f"stored as {_form(*got)}, its {promise.by} says {_form(*promise.stored)}"
            f"{before}: not the archived object (damaged, cut or replaced)")


def check(promise, got, suffix=""):
    """Raise CorruptBinlog naming the object when ``got`` is not what ``promise`` says
    (``suffix``: what the caller adds, e.g. that nothing was applied)."""
    why = problem(promise, got)
    if why:
        raise CorruptBinlog(why + suffix, promise.key)


def _form(size, sha256):
    return f"{size} bytes, sha256 {str(sha256)[:16]}..."
