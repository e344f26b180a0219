"""Durable replacement of a local file: the one place that renames files into place.

Every writer of a local file (the checkpoint, the archiver's report, a ``file://``
archive object, a Parquet part) goes through here: write to a temporary name in the
same directory -> fsync -> close -> rename over the final name -> fsync the
directory. After a crash the final name holds the old bytes or the new ones, never
a mix. Errors stay OSError: callers turn them into their own errors.
"""

import contextlib
import os

TMP_SUFFIX = ".tmp"


def fsync_dir(directory, fsync=os.fsync):
    """fsync a directory so that created, renamed or removed names are durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def replace(tmp, final, fsync=os.fsync):
    """Rename ``tmp`` over ``final`` (same directory) and make the rename durable."""
    os.replace(tmp, final)
    fsync_dir(os.path.dirname(os.path.abspath(final)), fsync)


@contextlib.contextmanager
def open_durably(path, tmp=None, mode=0o666, fsync=os.fsync):
    """A binary file that replaces ``path`` durably when the block ends without error.

    The bytes go to ``tmp`` (default ``path + ".tmp"``; it must be in the same
    directory), which is fsynced and renamed over ``path``. On an error the old
    ``path`` stays as it was and ``tmp`` is removed (best effort).
    """
    tmp = tmp or path + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with open(fd, "wb") as f:
            yield f
            f.flush()
            fsync(f.fileno())
        replace(tmp, path, fsync)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path, data, tmp=None, mode=0o666, fsync=os.fsync):
    """Replace ``path`` with ``data`` durably (see ``open_durably``)."""
    with open_durably(path, tmp, mode, fsync) as f:
        f.write(data)
