"""S3 Object Lock on the archive's new objects (pure: values and parsing, no I/O).

``--archive-option lock_mode=governance|compliance`` and ``lock_days=N`` (both, on an
``s3://`` archive whose bucket was created with Object Lock) give every object the store
writes a retain-until date N days after it is written: binlog files and segments, their
indexes, bases and their manifests. The store cannot delete such an object before that
date (a delete without a version only hides it behind a delete marker), so ``retain``
asks it first (``ArchiveStore.retain_until``) and keeps what is locked, saying so.
"""

import datetime
from dataclasses import dataclass

from mysqlbackup.errors import UsageError

MODES = ("governance", "compliance")
OPTIONS = ("lock_mode", "lock_days")
LOCKABLE = ("s3", "s3a")


@dataclass(frozen=True)
class ObjectLock:
    """The lock new objects get: its mode and how many days it holds them."""

    mode: str
    days: int

    def write_kwargs(self, now):
        """The PutObject/CreateMultipartUpload arguments of an object written at ``now``
        (epoch seconds)."""
        until = datetime.datetime.fromtimestamp(now + self.days * 86400, datetime.timezone.utc)
        return {"ObjectLockMode": self.mode.upper(), "ObjectLockRetainUntilDate": until}

    def describe(self):
        """'governance, 30 days'."""
        return f"{self.mode}, {self.days} days"


def pop_lock(options, protocol):
    """The ObjectLock that ``options`` (fsspec options, a dict: the two lock options are
    taken out of it) ask for, or None; UsageError for a bad value, one without the
    other, or a store that is not S3."""
    mode, days = (options.pop(key, None) for key in OPTIONS)
    if mode is None and days is None:
        return None
    if mode is None or days is None:
        raise UsageError("--archive-option lock_mode and lock_days go together "
                         "(e.g. lock_mode=governance lock_days=30)")
    if str(mode).lower() not in MODES:
        raise UsageError(f"bad --archive-option lock_mode={mode}: governance or compliance")
    try:
        days = int(days)
    except (TypeError, ValueError):
        days = 0
    if days < 1:
        raise UsageError(f"bad --archive-option lock_days={options.get('lock_days', days)}: "
                         "a whole number of days, at least 1")
    if protocol not in LOCKABLE:
        raise UsageError(f"--archive-option lock_mode/lock_days need an s3:// archive "
                         f"(S3 Object Lock), not {protocol}://")
    return ObjectLock(str(mode).lower(), days)
