"""What runs in the Spark tasks: one file of the archive read, checked and decoded.

``decode_unit`` (one task per file) streams a unit's objects through the one reader of
archived objects (``mysqlbackup.archive.objects.read_object``) into the transaction
assembler and hands back the transactions without their bytes, the digests and the
chain facts; ``digest_unit`` only measures the stored objects. ``stream_unit`` is the
same reading for the driver, ``serve`` and ``archive find``.
"""

from mysqlbackup.errors import CorruptBinlog


def decode_unit(unit, url, options, keyring=None):
    """Spark task: read one file from the archive and assemble its transactions.

    What comes back to the driver is the transactions without their bytes (event
    lengths instead), the object's size and CRC32 (``fingerprint``), the size and
    sha256 of each object read (``digests``, to compare with their indexes) and what
    the bytes say of their place in the chain (``facts``): the driver checks those
    (``plan.check_decoded``), then reads the object itself and attaches the bytes
    (``attach_unit``), so the binlog does not pass through the JVM. A failure comes
    back as ``error`` (kind, message, offset) instead of an exception, which Spark
    would wrap into its own: the driver raises it with the object named.
    A compressed or encrypted object is decoded as it is read (``keyring`` opens it);
    ``digests`` are then those of its raw bytes, compared with the index's raw ones.
    The file streams through (``StreamAssembly``): the task holds one event and a
    read chunk at a time, never the file."""
    import traceback

    from mysqlbackup.archive.codec import IdentityError
    from replay.job.decoding.assemble import StreamAssembly
    out = {"name": unit["name"], "partial": unit["partial"], "error": None,
           "digests": [], "facts": {}, "transactions": [], "incomplete": None}
    facts = {}
    walk = StreamAssembly(unit["name"], newest=unit["partial"], facts=facts)
    try:
        digests = stream_unit(unit, url, options, walk.feed, keyring)
    except IdentityError as e:
        return dict(out, error={"kind": "identity", "message": str(e)})
    except CorruptBinlog as e:  # the stored form does not decode: names its object
        return dict(out, error={"kind": "corrupt", "message": bare_message(e),
                                "offset": e.offset, "object": e.file})
    except FileNotFoundError as e:
        return dict(out, error={"kind": "missing", "message": str(e)})
    except Exception as e:  # noqa: BLE001 - a store error of any kind, named by the driver
        return dict(out, error={"kind": "unreadable", "message": f"{type(e).__name__}: {e}"})
    out.update(digests=digests, facts=facts)
    try:
        transactions, incomplete, fde, fingerprint = walk.finish()
    except CorruptBinlog as e:
        return dict(out, error={"kind": "corrupt", "message": bare_message(e),
                                "offset": e.offset})
    except Exception:  # noqa: BLE001 - the driver tells a damaged object from a bug
        return dict(out, error={"kind": "failed", "message": traceback.format_exc()})
    return dict(out, transactions=transactions, incomplete=incomplete, fde=fde,
                fingerprint=fingerprint)


def digest_unit(unit, url, options):
    """Spark task: the (size, sha256) of each object of one unit, read in chunks (never
    whole in memory), or an error record as ``decode_unit`` returns it. An object that
    is not its index's and is a sealed file is scanned, so that a damaged event comes back
    with its offset (not the newest file: the newest file's tail may be short, see
    ``plan.check_digests``)."""
    from mysqlbackup.archive.objects import Promise
    from mysqlbackup.archive.store import ArchiveStore
    try:
        store = ArchiveStore(url, options)
        promises = [Promise.of_index(obj["key"], obj["index"]) for obj in unit["objects"]]
        digests = [store.sha256(promise.key) for promise in promises]
        for promise, got in zip(promises, digests):
            if got != promise.stored and not unit["partial"] and promise.codec == "none":
                _scan_object(store, promise.key, unit["name"])
        return {"error": None, "digests": digests}
    except CorruptBinlog as e:
        return {"error": {"kind": "corrupt", "message": bare_message(e), "offset": e.offset}}
    except FileNotFoundError as e:
        return {"error": {"kind": "missing", "message": str(e)}}
    except Exception as e:  # noqa: BLE001 - a store error of any kind, named by the driver
        return {"error": {"kind": "unreadable", "message": f"{type(e).__name__}: {e}"}}


def _scan_object(store, key, name):
    """Raise CorruptBinlog at the first damaged event of a plain object (magic, framing,
    CRC32), read in chunks; a whole tail event that is merely missing is not found here."""
    from mysqlbackup.archive.objects import Promise, read_object
    from mysqlbackup.binlog.scan import EventStream
    events = EventStream(lambda off, event: None, file=name)
    read_object(store, Promise(key), events.feed)
    events.close()


def bare_message(error):
    """The text of a CorruptBinlog without its 'FILE at offset N: ' prefix."""
    text = str(error)
    if error.file is not None:
        where = f"{error.file}" + (f" at offset {error.offset}"
                                   if error.offset is not None else "") + ": "
        if text.startswith(where):
            return text[len(where):]
    return text


def stream_unit(unit, url, options, feed, keyring=None):
    """Hand the raw bytes of one unit (a sealed file, or the newest one's segments, in
    order) to ``feed`` a chunk at a time; returns the (raw size, raw sha256) of each
    object. A compressed or encrypted object is decoded as it streams in."""
    from mysqlbackup.archive.store import ArchiveStore
    store = ArchiveStore(url, options)
    return [stream_object(store, key, obj["index"], feed, keyring)
            for key, obj in zip(unit["keys"], unit["objects"])]


def stream_object(store, key, index, feed, keyring=None):
    """Hand the raw bytes of one object to ``feed`` a chunk at a time
    (``objects.read_object``: ranged reads, decoded on the way); returns (raw size, raw
    sha256), which the driver compares with its index."""
    from mysqlbackup.archive.objects import Promise, read_object
    digests = read_object(store, Promise.of_index(key, index), feed, keyring)
    return digests.raw_size, digests.raw_sha256
