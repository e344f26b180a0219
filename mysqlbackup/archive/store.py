"""Object storage through fsspec (the only module that talks to the archive).

``file://`` (the embedded default), ``s3://`` via s3fs, and any other installed
fsspec protocol, with no code of ours per backend. Writes are whole-object and
atomic: object stores publish an object only when its upload completes, and on
``file://`` the bytes go to a ``.tmp-`` name that is renamed into place, so a
crash mid-upload never leaves a half object under a real name.
"""

import contextlib
import copy
import functools
import gc
import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from datetime import datetime, timezone

import fsspec

from mysqlbackup.archive.names import TMP_MARK
from mysqlbackup.archive.options import (KEYED_PROTOCOLS, S3_FS_RETRIES, call_time, pop_lock,
                                         s3_client_options, with_timeouts)
from mysqlbackup.durable import fsync_dir, open_durably
from mysqlbackup.durable import replace as durable_replace
from mysqlbackup.errors import (ArchiveNotFound, MysqlBackupError, StoreError, UsageError,
                                mask_url)

CHUNK = 4 << 20
MIN_RATE = 1 << 20          # bytes/s an upload or read may not fall below
ASYNC_CALL_TIME = 120.0     # the time limit of one call on an async store other than s3


_BUGS = (TypeError, AttributeError, NameError, KeyError, IndexError, AssertionError)


def _request(method):
    """Turn a failed store request into one StoreError line naming the object (masked);
    a missing object stays FileNotFoundError, our own errors and bugs pass unchanged."""
    @functools.wraps(method)
    def wrapper(self, relative="", *args, **kwargs):
        try:
            return method(self, relative, *args, **kwargs)
        except (FileNotFoundError, MysqlBackupError, *_BUGS):
            raise
        except Exception as e:  # noqa: BLE001 - every transport's errors differ
            raise StoreError(f"archive {self.url}: {method.__name__} {relative or '/'} "
                             f"failed: {self._describe(e)}") from e
    return wrapper


class ArchiveStore:
    """The archive root: put, read, list and remove objects by relative name.

    ``url`` is the masked URL (no credentials), safe to print and store. A bad URL or
    option raises UsageError; a store that cannot be reached now (an FTP server that
    refuses the connection) is connected again on the next request.
    """

    def __init__(self, url, options=None):
        options = dict(options or {})
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        self.lock = pop_lock(options, protocol)  # S3 Object Lock of new objects, or None
        if protocol in KEYED_PROTOCOLS and mask_url(url) != url:
            raise UsageError(f"archive {mask_url(url)}: credentials do not go in the URL (a "
                             "store's error may quote them): use the store's environment "
                             "variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...) or "
                             "a role")
        if protocol in ("s3", "s3a"):
            options = with_timeouts(s3_client_options(options))
        self.url, self._versioning = mask_url(url), None
        self._raw_url, self._options, self._fs, self.root = url, options, None, None
        self._call_time = call_time(options) if protocol in ("s3", "s3a") else ASYNC_CALL_TIME
        self.problem = None
        try:
            self._connect()
        except UsageError:
            raise
        except Exception as e:  # noqa: BLE001 - refused, timed out, login refused: retried
            self.problem = self._describe(e)
        self.local = protocol == "file" or (self._fs is not None and
                                           "file" in _protocols(self._fs))

    def _connect(self):
        with _quiet_partial_init():
            try:
                fs, root = fsspec.core.url_to_fs(self._raw_url, **self._options)
            except (ImportError, ValueError, TypeError) as e:
                raise UsageError(f"cannot use archive {self.url}: {self._describe(e)}"
                                 f"{' (check --archive-option)' if self._options else ''}") \
                    from None
        if "s3" in _protocols(fs):
            fs.retries = S3_FS_RETRIES  # s3fs's own retry loop, on top of botocore's
        self._fs, self.root = fs, root.rstrip("/")

    @property
    def fs(self):
        """The fsspec file system, connected again if the store was down at start-up."""
        if self._fs is None:
            self._connect()
        return self._fs

    def _describe(self, error):
        text = str(error) or ("no answer within the time limit"
                              if isinstance(error, TimeoutError) else "failed")
        return mask_url(f"{type(error).__name__}: {text}")

    def probe(self):
        """One cheap request at start-up: a bad option fails now, an outage only warns.

        Returns None when the store answered, else the error text, masked (the caller
        goes on: streaming never waits for the archive). Raises only UsageError.
        """
        if self._fs is None and self.problem:
            return self.problem  # the constructor just tried: no second wait
        try:
            self.fs.exists(self.root, **self._limit())
        except UsageError:
            raise
        except (TypeError, ValueError) as e:
            raise UsageError(f"cannot use archive {self.url}: {self._describe(e)} (check "
                             f"--archive-option)") from None
        except Exception as e:  # noqa: BLE001 - any transport error means "not reachable now"
            return self._describe(e)
        return None

    def _limit(self, size=0):
        """The time limit of one call on an async store (s3, gcs, ...): its requests'
        timeouts and retries, plus time to move ``size`` bytes at MIN_RATE. A request
        that hangs anyway (s3's 'Expect: 100-continue' waits with no timeout) is then
        cancelled. Sync stores (file://, ftp://) take no such argument."""
        if not getattr(self._fs, "async_impl", False):
            return {}
        return {"timeout": self._call_time + size / MIN_RATE}

    def path(self, relative):
        return f"{self.root}/{relative}"

    def root_problem(self, listed):
        """Why the root is not an archive, as an ArchiveNotFound (None: it is one, maybe
        empty), given what ``list`` found there. A file:// root must be a directory; on
        a bucket store (s3, gcs, azure) an empty listing is an empty archive when the
        bucket exists (a prefix exists only through its objects); elsewhere the root
        must exist as a directory. A non-empty listing costs no request; a failed
        request raises StoreError."""
        if "" in listed:  # the root itself is an object
            return self._not_archive("a file, not a directory" if self.local
                                     else "an object, not a prefix")
        if listed:
            return None
        bucket = self._bucket()
        where = bucket if bucket is not None else self.root
        try:
            self.fs.invalidate_cache(where)
            info = self.fs.info(where, **self._limit())
        except (FileNotFoundError, NotADirectoryError):
            return self._not_archive(f"no such bucket {bucket!r}" if bucket is not None
                                     else "no such directory")
        except Exception as e:  # noqa: BLE001 - refused, unreachable, timed out
            raise StoreError(f"archive {self.url}: cannot read it: {self._describe(e)}") \
                from e
        if info.get("type") != "directory":
            return self._not_archive("a file, not a directory")
        return None

    def check_writable(self):
        """A writer's check before it starts (base, archive import): a missing file://
        root is fine (its first write creates it, nothing is made before), a root or a
        folder above it that is a file, or a bucket the store does not have, raises
        ArchiveNotFound before anything runs (a failed request: StoreError)."""
        if self.local:
            path = self.root or "/"
            while not os.path.lexists(path) and os.path.dirname(path) != path:
                path = os.path.dirname(path)
            if os.path.exists(path) and not os.path.isdir(path):
                raise self._not_archive("a file, not a directory" if path == self.root
                                        else f"{path} is a file")
        elif self._bucket() is not None:
            problem = self.root_problem({})
            if problem is not None:
                raise problem

    def _bucket(self):
        """The bucket of the root on a bucket store (s3, gcs, azure), else None."""
        if self.local or not _protocols(self.fs) & set(KEYED_PROTOCOLS):
            return None
        return self.root.split("/", 1)[0]

    def _not_archive(self, why):
        return ArchiveNotFound(f"archive {self.url}: not an archive: {why}")

    @_request
    def put_bytes(self, relative, data):
        """Store ``data`` under ``relative`` as one whole object."""
        target = self.path(relative)
        if self.local:
            with self._open_local(target) as f:
                f.write(data)
        else:
            self.fs.pipe_file(target, data, **self._limit(len(data)), **self._locked())

    @_request
    def put_file(self, relative, local_path):
        """Upload a local file under ``relative`` without holding it in memory."""
        target = self.path(relative)
        if self.local:
            with open(local_path, "rb") as src, self._open_local(target) as dst:
                shutil.copyfileobj(src, dst, CHUNK)
        else:
            self.fs.put_file(local_path, target, **self._limit(os.path.getsize(local_path)),
                             **self._locked())

    @contextlib.contextmanager
    def open_write(self, relative):
        """A binary file whose bytes become the object ``relative`` when the block ends
        without error, streamed (never held whole in memory or staged on disk).

        On ``file://`` the bytes go to a ``.tmp-`` name, fsynced and renamed into place;
        on an object store, fsspec's streaming (multipart) upload, aborted on an error.
        Either way an error leaves no object under ``relative``. Failed writes raise
        StoreError naming the object."""
        writer = _StoreWriter(self, relative, None)
        if self.local:
            opener = writer.call(self._open_local, self.path(relative))
            writer.file = writer.call(opener.__enter__)
            try:
                yield writer
            except BaseException:
                opener.__exit__(*sys.exc_info())  # removes the .tmp- file
                raise
            writer.call(opener.__exit__, None, None, None)
            return
        locked = self._locked()
        writer.file = writer.call(lambda: self.fs.open(self.path(relative), "wb", STREAM_BLOCK,
                                                       **locked))
        self._bound_requests(writer.file)
        try:
            yield writer
        except BaseException:
            _discard(writer.file)
            raise
        writer.call(writer.file.close)

    def unlocked(self):
        """This store, writing without Object Lock: for a staged copy that goes again once
        it took its place (a locked version could not be deleted before its date)."""
        other = copy.copy(self)
        other.lock = None
        return other

    def _locked(self):
        """The Object Lock arguments of a write now (none without ``lock``)."""
        return self.lock.write_kwargs(time.time()) if self.lock else {}

    def retain_until(self, relative):
        """Epoch seconds until which the store keeps object ``relative`` locked (S3
        Object Lock), or None: not locked, or a store without locks."""
        found = self.lock_of(relative)
        return found[1] if found else None

    @_request
    def lock_of(self, relative):
        """(mode, retain-until epoch seconds) of object ``relative``'s S3 Object Lock, or
        None: not locked, or a store without locks."""
        if "s3" not in _protocols(self.fs):
            return None
        head = self.fs.call_s3("head_object", **self._bucket_key(relative))
        until = head.get("ObjectLockRetainUntilDate")
        if until is None:
            return None
        return (head.get("ObjectLockMode") or "").lower(), until.timestamp()

    def _versioned(self):
        """Whether the bucket keeps versions (versioning enabled or suspended), asked once."""
        if self._versioning is None:
            got = self.fs.call_s3("get_bucket_versioning", Bucket=self._bucket_key("")["Bucket"])
            self._versioning = got.get("Status") or ""
        return bool(self._versioning)

    def _bucket_key(self, relative):
        bucket, _, key = self.path(relative).partition("/")
        return {"Bucket": bucket, "Key": key}

    def _bound_requests(self, f):
        """Give each request of a streamed upload to s3 (a part of up to STREAM_BLOCK
        bytes, the commit) the time limit ``put_file``'s have (``_limit`` of the bytes
        it sends): s3fs's file sends them without one, and a store that hangs would
        hold the archiver (or a base upload) for ever."""
        call = getattr(f, "_call_s3", None)
        if call is None or not getattr(self._fs, "async_impl", False):
            return
        def bounded(method, *args, **kwargs):
            body = kwargs.get("Body")
            size = len(body) if isinstance(body, (bytes, bytearray, memoryview)) else 0
            return call(method, *args, **self._limit(size), **kwargs)
        f._call_s3 = bounded

    def _write_error(self, relative, error):
        return StoreError(f"archive {self.url}: write {relative} failed: "
                          f"{self._describe(error)}")

    def _open_local(self, target):
        """On file://, a durable write of ``target`` through a ``.tmp-`` name beside it."""
        os.makedirs(os.path.dirname(target), exist_ok=True)
        return open_durably(target, tmp=f"{target}{TMP_MARK}{uuid.uuid4().hex}")

    @_request
    def info_size(self, relative):
        """Size of an object from its metadata (no read; asks the store, not a cache)."""
        self.fs.invalidate_cache(self.path(relative))
        return self.fs.info(self.path(relative), **self._limit())["size"]

    @_request
    def modified(self, relative):
        """When an object was last written (epoch seconds), None if the store does not say."""
        self.fs.invalidate_cache(self.path(relative))
        info = self.fs.info(self.path(relative), **self._limit())
        for field in ("mtime", "LastModified", "last_modified", "updated", "created"):
            value = info.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, datetime):
                return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
            if isinstance(value, str):
                try:
                    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
                except ValueError:
                    continue
        return None

    def put_json(self, relative, obj):
        self.put_bytes(relative, json.dumps(obj, indent=1, sort_keys=True).encode("utf-8"))

    @_request
    def read(self, relative, start=None, end=None):
        """Bytes of an object (or of [start, end))."""
        return self.fs.cat_file(self.path(relative), start=start, end=end,
                                **self._limit(CHUNK if end is None else end - (start or 0)))

    def reader(self, relative, total):
        """A ``read(n)`` over the first ``total`` bytes of an object, in ranged reads (of
        at least CHUNK bytes): what ``codec.decode`` streams from; b"" at the end (or
        where a shorter object ends)."""
        pos = [0]

        def read(n):
            if pos[0] >= total:
                return b""
            chunk = self.read(relative, pos[0], min(total, pos[0] + max(n, CHUNK)))
            pos[0] += len(chunk)
            return chunk
        return read

    def read_json(self, relative):
        return json.loads(self.read(relative))

    @_request
    def sha256(self, relative):
        """(size, sha256 hex) of an object, read back in chunks."""
        digest, size, path = hashlib.sha256(), 0, self.path(relative)
        if self.local:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(CHUNK), b""):
                    digest.update(chunk)
                    size += len(chunk)
            return size, digest.hexdigest()
        self.fs.invalidate_cache(path)
        total = self.fs.info(path, **self._limit())["size"]
        while size < total:  # ranged reads, each with its time limit
            chunk = self.fs.cat_file(path, start=size, end=min(total, size + CHUNK),
                                     **self._limit(CHUNK))
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
        return size, digest.hexdigest()

    @_request
    def list(self, prefix="", sizes=False):
        """Relative names of every object under ``prefix`` (recursive), sorted; with
        ``sizes``, a dict of name -> size as the listing reports it (no extra request)."""
        base = self.path(prefix).rstrip("/")
        self.fs.invalidate_cache()  # another process may have written since (s3fs would
        # otherwise keep the listings below ``base``: it clears only a path and its parents)
        if not self.fs.exists(base, **self._limit()):
            return {} if sizes else []
        found = self.fs.find(base, detail=True, **self._limit())
        strip = len(self.root) + 1
        if sizes:
            return {p[strip:]: found[p].get("size") for p in sorted(found)}
        return sorted(p[strip:] for p in found)

    @_request
    def exists(self, relative):
        """Whether the object is there now (asks the store, not a cached listing)."""
        self.fs.invalidate_cache(self.path(relative))
        return self.fs.exists(self.path(relative), **self._limit())

    @_request
    def move(self, relative, to):
        """Put object ``relative`` in the place of ``to`` (always one whole object, the old
        or the new), then remove it: a durable rename, or a server-side copy (then locked
        as a new object is) and a delete."""
        source, target = self.path(relative), self.path(to)
        if self.local:
            durable_replace(source, target)
            return fsync_dir(os.path.dirname(source))
        self.fs.copy(source, target, **self._limit(self.info_size(relative)))
        self.lock_now(to)
        self.fs.rm_file(source, **self._limit())

    @_request
    def lock_now(self, relative):
        """Give object ``relative`` the lock a new object gets (none without ``lock``):
        what a copy does not carry (S3 wants a checksum on a locked PUT, not a copy)."""
        if self.lock:
            lock = self._locked()
            self.fs.call_s3("put_object_retention", **self._bucket_key(relative), Retention={
                "Mode": lock["ObjectLockMode"],
                "RetainUntilDate": lock["ObjectLockRetainUntilDate"]})

    @_request
    def drop_old_versions(self, relative, every=False, under=False):
        """Delete every version of ``relative`` but its current one (``every``: all; with
        ``under``, of every object under that folder) where the store keeps what a write
        replaced (a versioned S3 bucket); returns how many."""
        if "s3" not in _protocols(self.fs) or not self._versioned():
            return 0
        where = self._bucket_key(relative)
        listed = self.fs.call_s3("list_object_versions", Bucket=where["Bucket"],
                                 Prefix=where["Key"])
        old = [(v["Key"], v["VersionId"]) for v in listed.get("Versions", []) + listed.get(
            "DeleteMarkers", []) if (v["Key"] == where["Key"] or under) and (
                every or not v["IsLatest"])]
        for key, version in old:
            self.fs.call_s3("delete_object", Bucket=where["Bucket"], Key=key,
                            VersionId=version)
        return len(old)

    @_request
    def remove(self, relative):
        self.fs.rm_file(self.path(relative), **self._limit())

    def remove_empty_folder(self, relative):
        """On file://, remove the folder ``relative`` if it is empty (object stores have
        no folders); a folder that is not empty or already gone stays as it is."""
        if self.local:
            try:
                os.rmdir(self.path(relative))
            except OSError:
                pass

    def invalidate(self):
        """Forget cached listings (s3fs caches them)."""
        self.fs.invalidate_cache()


STREAM_BLOCK = 16 << 20    # part size of a streamed upload to an object store


class _StoreWriter:
    """The file ``ArchiveStore.open_write`` yields: ``write`` only, errors as StoreError."""

    def __init__(self, store, relative, f):
        self._store, self._relative, self.file = store, relative, f

    def write(self, data):
        return self.call(self.file.write, data)

    def call(self, func, *args):
        try:
            return func(*args)
        except (FileNotFoundError, MysqlBackupError, *_BUGS):
            raise
        except Exception as e:  # noqa: BLE001 - every transport's errors differ
            raise self._store._write_error(self._relative, e) from e


def _discard(f):
    """Abandon a streamed upload: abort its multipart upload (nothing is published),
    and mark it closed so that neither we nor its finaliser commit it later."""
    with contextlib.suppress(Exception):
        f.discard()
    f.closed = True


@contextlib.contextmanager
def _quiet_partial_init():
    """Silence the 'Exception ignored in __del__' an fsspec file system prints when its
    constructor failed half way (FTPFileSystem on a refused connection)."""
    previous = sys.unraisablehook

    def hook(args):
        if "FileSystem.__del__" in repr(getattr(args, "object", None)):
            return
        previous(args)
    sys.unraisablehook = hook
    try:
        yield
    except BaseException:
        gc.collect()  # the half-made one goes now, under the hook (a success leaves none:
        raise         # no full collection, 80 ms in a large process, for every store)
    finally:
        sys.unraisablehook = previous


def _protocols(fs):
    proto = fs.protocol
    return set(proto) if isinstance(proto, (tuple, list)) else {proto}
