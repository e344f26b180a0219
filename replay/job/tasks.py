"""What runs in the Spark tasks: one file of the archive read, checked and decoded.

``decode_unit`` (one task per file) streams a unit's objects through the one reader of
archived objects (``mysqlbackup.archive.objects.read_object``) into the transaction
assembler and hands back the transactions without their bytes, the digests and the
chain facts; ``digest_unit`` only measures the stored objects. ``stream_unit`` is the
same reading for the driver, ``serve`` and ``archive find``.

Given ``keep`` (what the replay's selection wants of the unit: ``keep_spec``),
``decode_unit`` also hands back the bytes of the transactions the driver will apply,
and of no other: the object's bytes are spooled to the executor's local disk as they
stream into the assembler, and cut from there (``assemble.StreamAttach``) once the
transactions are known; the driver then reads no object at all. With a sink whose tasks
write (``keep.write``: --sql's text, --parquet's parts), each transaction goes to the
task's writer as it ends in the stream (``_Writing``): the bytes are read once and
spooled nowhere, and what was written is the driver's only once the whole file checked
out (``finish``, the digests, ``check_decoded``).
"""

import os
import tempfile
from dataclasses import dataclass, field, replace

from mysqlbackup.archive.stop import END
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError
from replay.job.decoding.transaction import rewrite_transaction

SPOOL_CHUNK = 1 << 20  # the spool read back a MiB at a time
# a task hands back at most this many bytes of events: the results of a window of tasks
# sit in the driver's JVM at once; above it the driver reads the file itself (attach_unit)
ATTACH_MAX = 256 << 20


@dataclass(frozen=True)
class TaskError:
    """Why a task could not do its work, handed back instead of raised (Spark would wrap
    an exception into its own): ``kind`` corrupt (``offset``, and ``object`` when the
    stored form does not decode), identity (no key opens it), missing (an object gone),
    unreadable (the store failed), sink (the task could not write) or failed (a bug:
    ``message`` is the traceback)."""

    kind: str
    message: str
    offset: int = None
    object: str = None


@dataclass(frozen=True)
class KeepSpec:
    """What ``decode_unit`` keeps of a unit for the driver (``keep_spec``): the bytes of
    the transactions ``selection`` applies (the unit's, ``unit_selection``; None: a stop
    before it) less those of the GTID state ``skip`` (a later epoch's duplicates), up to
    ``max_bytes``; or, with ``write`` (a sink's ``TaskWriter`` at the unit's place), those
    transactions written by the task itself."""

    selection: object = None
    skip: str = None
    write: object = None
    max_bytes: int = ATTACH_MAX


@dataclass
class TaskResult:
    """What a task hands back for one unit (``decode_unit``; ``digest_unit`` fills
    ``digests`` and ``error`` only): the transactions without their bytes unless
    ``attached``, the (size, sha256) of each object read, the chain facts the bytes
    gave, the newest file's incomplete tail, the format description event, the object's
    ``fingerprint`` (size and CRC32), and what the task wrote itself (``written``, a
    sink's parts; None when it wrote nothing)."""

    name: str
    partial: bool
    error: TaskError = None
    digests: list = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    transactions: list = field(default_factory=list)
    incomplete: dict = None
    fde: bytes = None
    fingerprint: object = None
    attached: bool = False
    written: object = None


def decode_unit(unit, url, options, keyring=None, keep=None):
    """Spark task: read one file from the archive and assemble its transactions.

    What comes back to the driver is the transactions without their bytes (event
    lengths instead), the object's size and CRC32 (``fingerprint``), the size and
    sha256 of each object read (``digests``, to compare with their indexes) and what
    the bytes say of their place in the chain (``facts``): the driver checks those
    (``planning.units.check_decoded``), then (without ``keep``) reads the object itself and
    attaches the bytes (``run.attach_unit``). A failure comes
    back as ``error`` (kind, message, offset) instead of an exception, which Spark
    would wrap into its own: the driver raises it with the object named.
    A compressed or encrypted object is decoded as it is read (``keyring`` opens it);
    ``digests`` are then those of its raw bytes, compared with the index's raw ones.
    The file streams through (``StreamAssembly``): the task holds one event and a
    read chunk at a time, never the file.

    ``keep`` (``keep_spec``): the transactions ``wanted`` names come back with their
    events (``attached`` True), cut from a spool of the bytes on local disk; the
    driver then reads nothing of the object. Above ``keep.max_bytes`` (ATTACH_MAX)
    of events they come back without (``attached`` False), as without ``keep``."""
    from replay.job.decoding.assemble import StreamAssembly
    out = TaskResult(unit.name, unit.partial)
    facts = {}
    writing = None if keep is None or keep.write is None else _Writing(keep, unit.where)
    walk = StreamAssembly(unit.name, newest=unit.partial, facts=facts,
                          each=None if writing is None else writing.take)
    if writing is not None:
        writing.source = walk.assembler
    spool = None if keep is None or writing is not None else _Spool(walk.feed)
    result = None
    try:
        result = _decode(unit, url, options, keyring, keep, out, facts, walk, spool, writing)
        return result
    finally:
        if spool is not None:
            spool.close()
        if writing is not None and (result is None or result.written is None):
            writing.discard()  # nothing of it is the driver's


def _decode(unit, url, options, keyring, keep, out, facts, walk, spool, writing):
    """``decode_unit``'s body (``spool``: None, or the tee that keeps the bytes;
    ``writing``: None, or the task's writer the transactions went to as they ended)."""
    import traceback

    from mysqlbackup.archive.codec import IdentityError
    try:
        digests = stream_unit(unit, url, options, walk.feed if spool is None else spool.feed,
                              keyring)
    except IdentityError as e:
        return replace(out, error=TaskError("identity", str(e)))
    except CorruptBinlog as e:  # the stored form does not decode: names its object
        return replace(out, error=TaskError("corrupt", e.detail, e.offset, e.file))
    except FileNotFoundError as e:
        return replace(out, error=TaskError("missing", str(e)))
    except Exception as e:  # noqa: BLE001 - a store error of any kind, named by the driver
        return replace(out, error=TaskError("unreadable", f"{type(e).__name__}: {e}"))
    out = replace(out, digests=digests, facts=facts)
    try:
        transactions, incomplete, fde, fingerprint = walk.finish()
    except CorruptBinlog as e:
        return replace(out, error=TaskError("corrupt", e.detail, e.offset))
    except Exception:  # noqa: BLE001 - the driver tells a damaged object from a bug
        return replace(out, error=TaskError("failed", traceback.format_exc()))
    attached = False
    if writing is not None:
        written, error = writing.close(fde)
        if error:
            return replace(out, error=error)
        # (None: the writer declined (--sql: a LOAD DATA, or too much text to hand
        # back): the driver reads the file again for their bytes, ``run.attach_unit``)
        return replace(out, transactions=transactions, incomplete=incomplete, fde=fde,
                       fingerprint=fingerprint, attached=False, written=written)
    if spool is not None:
        chosen = wanted(transactions, keep)
        if sum(sum(t.event_lengths) for t in chosen) <= keep.max_bytes:
            try:
                spool.attach(chosen, unit.where, fingerprint)
            except Exception:  # noqa: BLE001 - the spool is the task's own: a bug or a disk
                return replace(out, error=TaskError("failed", traceback.format_exc()))
            attached = True
    return replace(out, transactions=transactions, incomplete=incomplete, fde=fde,
                   fingerprint=fingerprint, attached=attached)


class _Writing:
    """A task's writer (``keep.write``: --sql's text, --parquet's parts) fed each
    transaction as it ends in the stream (``StreamAssembly``'s ``each``): those the
    selection applies (``_Choice``, as ``wanted``), filtered and rewritten, so that
    the file's bytes are read once and never spooled. A failure is kept and handed back
    by ``close`` as a TaskError, never raised into the stream (whose own faults
    ``finish`` raises); ``discard`` removes what was written. ``where``: the unit's
    place, for messages; ``source``: the stream's ``Assembler`` (its format
    description, seen before any transaction). A writer may decline a file on the way
    (--sql: a LOAD DATA, or more text than a task hands back): the driver writes it."""

    def __init__(self, keep, where):
        self.keep, self.where, self.choice = keep, where, _Choice(keep)
        self.writer = self.fde = self.checksum = self.error = self.source = None
        try:
            self.writes = writer_of(keep.write)
        except ImportError as e:  # the probe names it first on a cluster
            self.writes = None
            self.error = TaskError("sink", f"the task's Python has no module {e.name!r}, "
                                           f"which {keep.write.option} needs")

    def take(self, trx):
        """One transaction of the stream, with its events."""
        if self.error is not None or not self.choice.wants(trx):
            return
        selection = self.keep.selection
        try:
            self._open(self.source.fde_event)
            kept = selection.filter_events(trx, self.fde, self.checksum)
            self.writer.apply(rewrite_transaction(kept, selection.rewrite, self.checksum),
                              self.fde, self.checksum)
        except Exception as e:  # noqa: BLE001 - handed back by close (``_failure``)
            self.error = e

    def _open(self, fde_event):
        """The writer, made at the first transaction (or at ``close``) with the file's
        format description."""
        if self.writer is None:
            from mysqlbackup.binlog import events as ev
            self.fde = ev.parse_format_description(fde_event)
            self.checksum = self.fde.checksum_alg == ev.CHECKSUM_CRC32
            self.writer = self.writes(self.keep.write, fde_event)

    def close(self, fde_event):
        """(what was written, None), (None, a TaskError), or (None, None) when the writer
        declined (``sqlfile.Declined``: the driver writes that file itself)."""
        try:
            if self.error is None:
                self._open(fde_event)  # (a file of which nothing applies: written empty)
                return self.writer.close(), None
        except Exception as e:  # noqa: BLE001 - as a write's
            self.error = e
        return None, _failure(self.error, self.writes, self.keep.write, self.where)

    def discard(self):
        """Remove what the writer wrote (a file that failed, declined or was refused):
        --sql's task file; --parquet's parts the sink removes, being adopted by none."""
        if self.writer is not None and hasattr(self.writer, "discard"):
            self.writer.discard()


def _failure(error, writes, spec, where):
    """The TaskError of a task writer's failure, or None: it declined."""
    import traceback

    if isinstance(error, TaskError):
        return error
    if writes is not None and writes.declined and isinstance(error, writes.declined):
        return None
    if isinstance(error, CorruptBinlog):
        return TaskError("corrupt", error.detail, error.offset)
    if isinstance(error, MysqlBackupError):  # a row change the table cannot hold, named
        return TaskError("sink", str(error))
    if isinstance(error, OSError):
        return TaskError("sink", spec.failure(where, error))
    return TaskError("failed", "".join(traceback.format_exception(error)))


def writer_of(spec):
    """The class that writes a ``TaskWriter`` ``spec`` in a task, its module imported now
    (ImportError where the task's Python lacks what it needs: pyarrow)."""
    from replay.job.sinks.writers import SqlTaskWriter
    if isinstance(spec, SqlTaskWriter):
        from replay.job.sinks.sqlfile import SqlChunk
        return SqlChunk
    from replay.job.sinks.parquet import PartWriter
    return PartWriter


def unit_selection(selection, unit):
    """The selection as it applies to ``unit``, or None when a stop position in an
    earlier epoch ends the replay before it. A file position names a file of one epoch
    (``unit.position``: the unit's epoch against the start's and the stop's, -1
    before, 0 same, 1 after)."""
    start, stop = unit.position
    if stop > 0:
        return None
    changes = {}
    if stop < 0:
        changes["stop"] = END  # its stop position is in a later epoch
    if start > 0:
        changes["start_position"] = None
    return replace(selection, **changes) if changes else selection


def gtid_state(text):
    """The GTID state ``text`` (None for none)."""
    if not text:
        return None
    from mysqlbackup.binlog.gtid import guess_flavor, parse_gtid_set
    return parse_gtid_set(text, guess_flavor(text))


def keep_spec(selection, unit, write=None, seq=0):
    """The KeepSpec of ``unit`` under ``selection``: the unit's selection
    (``unit_selection``) and the GTIDs a later epoch repeats. ``write`` (a sink's
    ``task_spec``, or None): the task writes those transactions itself, as the replay's
    file number ``seq``, instead of handing their bytes back."""
    return KeepSpec(unit_selection(selection, unit), unit.skip,
                    None if write is None else write.at(seq))


def wanted(transactions, keep):
    """The transactions the driver may apply (``_Choice``), which it checks it got the
    bytes of."""
    choice = _Choice(keep)
    return [trx for trx in transactions if choice.wants(trx)]


class _Choice:
    """The driver's choice of a unit's transactions (``run._in_epoch``, ``run._choose``),
    one at a time in file order: those ``Selection.decide`` says apply, before the first
    one where it says stop, less those of ``keep.skip``."""

    def __init__(self, keep):
        self.selection, self.skip = keep.selection, gtid_state(keep.skip)
        self.done = self.selection is None  # a stop before this unit: none

    def wants(self, trx):
        """Whether the driver applies ``trx`` (the next transaction of the unit)."""
        if self.done:
            return False
        if self.skip is not None and trx.gtid_key and self.skip.contains(*trx.gtid_key):
            return False
        decision, _reason = self.selection.decide(trx)
        if decision in ("stop", "gap"):  # the driver raises at a gap
            self.done = True
            return False
        return decision == "apply"


class _Spool:
    """A tee: the bytes fed go on to ``feed`` and into a temporary file on the
    executor's local disk (Spark's local dirs), from which ``attach`` cuts the wanted
    transactions' events a chunk at a time; removed by ``close``."""

    def __init__(self, feed):
        local = (os.environ.get("SPARK_LOCAL_DIRS") or "").split(",")[0] or None
        self.next, self.file = feed, tempfile.TemporaryFile(prefix="mysqlbackup-spool-",
                                                            dir=local)

    def feed(self, data):
        """The next bytes of the unit."""
        self.file.write(data)
        self.next(data)

    def attach(self, transactions, where, fingerprint):
        """Give ``transactions`` (detached) their events from the spooled bytes."""
        if not transactions:
            return
        from replay.job.decoding.assemble import StreamAttach
        cut = StreamAttach(transactions)
        for chunk in self._chunks():
            cut.feed(chunk)
        cut.finish(where, fingerprint)

    def _chunks(self):
        self.file.seek(0)
        while True:
            chunk = self.file.read(SPOOL_CHUNK)
            if not chunk:
                return
            yield chunk

    def close(self):
        self.file.close()


def digest_unit(unit, url, options):
    """Spark task: the (size, sha256) of each object of one unit, read in chunks (never
    whole in memory), or an error record as ``decode_unit`` returns it. An object that
    is not its index's and is a sealed file is scanned, so that a damaged event comes back
    with its offset (not the newest file: the newest file's tail may be short, see
    ``planning.units.check_digests``)."""
    from mysqlbackup.archive.objects import Promise
    from mysqlbackup.archive.store import ArchiveStore
    try:
        store = ArchiveStore(url, options)
        promises = [Promise.of_index(obj.key, obj.index) for obj in unit.objects]
        digests = [store.sha256(promise.key) for promise in promises]
        for promise, got in zip(promises, digests):
            if got != promise.stored and not unit.partial and promise.codec == "none":
                _scan_object(store, promise.key, unit.name)
        return TaskResult(unit.name, unit.partial, digests=digests)
    except CorruptBinlog as e:
        return TaskResult(unit.name, unit.partial, TaskError("corrupt", e.detail, e.offset))
    except FileNotFoundError as e:
        return TaskResult(unit.name, unit.partial, TaskError("missing", str(e)))
    except Exception as e:  # noqa: BLE001 - a store error of any kind, named by the driver
        return TaskResult(unit.name, unit.partial,
                          TaskError("unreadable", f"{type(e).__name__}: {e}"))


def _scan_object(store, key, name):
    """Raise CorruptBinlog at the first damaged event of a plain object (magic, framing,
    CRC32), read in chunks; a whole tail event that is merely missing is not found here."""
    from mysqlbackup.archive.objects import Promise, read_object
    from mysqlbackup.binlog.scan import EventStream
    events = EventStream(lambda off, event: None, file=name)
    read_object(store, Promise(key), events.feed)
    events.close()


def stream_unit(unit, url, options, feed, keyring=None):
    """Hand the raw bytes of one unit (a sealed file, or the newest one's segments, in
    order) to ``feed`` a chunk at a time; returns the (raw size, raw sha256) of each
    object. A compressed or encrypted object is decoded as it streams in."""
    from mysqlbackup.archive.store import ArchiveStore
    store = ArchiveStore(url, options)
    return [stream_object(store, key, obj.index, feed, keyring)
            for key, obj in zip(unit.keys, unit.objects)]


def stream_object(store, key, index, feed, keyring=None):
    """Hand the raw bytes of one object to ``feed`` a chunk at a time
    (``objects.read_object``: ranged reads, decoded on the way); returns (raw size, raw
    sha256), which the driver compares with its index."""
    from mysqlbackup.archive.objects import Promise, read_object
    digests = read_object(store, Promise.of_index(key, index), feed, keyring)
    return digests.raw_size, digests.raw_sha256
