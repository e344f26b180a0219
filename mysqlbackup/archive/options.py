"""The archive's options (pure: no I/O): ``--archive-option KEY=VALUE`` to fsspec storage
options, s3fs's client options with bounded request times, and S3 Object Lock of new
objects (``lock_mode``/``lock_days``, taken out of the options: ``pop_lock``).
``store.ArchiveStore`` is what uses them."""

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from mysqlbackup.errors import UsageError


def parse_options(pairs):
    """``KEY=VALUE`` strings -> storage options; 'true'/'false'/numbers are converted."""
    options = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"bad --archive-option {pair!r}: expected KEY=VALUE")
        options[key] = _convert(value)
    return options


def _convert(value):
    if value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            raise UsageError(f"bad JSON in --archive-option value {value!r}") from None
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(value)
    except ValueError:
        return value


def s3_client_options(options):
    """s3fs wants endpoint_url (and region) under client_kwargs; accept them at top level."""
    options = dict(options)
    client = dict(options.pop("client_kwargs", {}) or {})
    for key in ("endpoint_url", "region_name"):
        if key in options:
            client[key] = options.pop(key)
    if client:
        options["client_kwargs"] = client
    return options


# every S3 request gets bounded time: a hung endpoint becomes an error and a retry
S3_DEFAULTS = {"connect_timeout": 5, "read_timeout": 10, "retries": {"max_attempts": 2}}
S3_FS_RETRIES = 2


def with_timeouts(options):
    """s3fs options with request timeouts and bounded retries unless the user chose them."""
    options = dict(options)
    config = dict(options.get("config_kwargs") or {})
    for key, value in S3_DEFAULTS.items():
        config.setdefault(key, value)
    options["config_kwargs"] = config
    return options


def call_time(options):
    """Seconds one s3 call may take: every attempt timing out, and a margin."""
    config = options.get("config_kwargs") or {}
    try:
        attempts = int((config.get("retries") or {}).get("max_attempts", 3)) or 1
        per_try = float(config.get("connect_timeout", 60)) + float(config.get("read_timeout", 60))
    except (TypeError, ValueError, AttributeError):
        raise UsageError(f"bad config_kwargs {config!r}: timeouts are numbers, retries is "
                         f"{{\"max_attempts\": N}}") from None
    return per_try * attempts * S3_FS_RETRIES + 5.0


# object stores that authenticate with keys: a key in the URL is refused, because the
# store's own errors quote the bucket part of it where mask_url cannot see a URL
KEYED_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl")


# -- S3 Object Lock of new objects -------------------------------------------------------
# ``--archive-option lock_mode=governance|compliance`` and ``lock_days=N`` (both, on an
# ``s3://`` archive whose bucket was created with Object Lock) give every object the store
# writes a retain-until date N days after it is written: binlog files and segments, their
# indexes, bases and their manifests. The store cannot delete such an object before that
# date (a delete without a version only hides it behind a delete marker), so ``retain``
# asks it first (``ArchiveStore.retain_until``) and keeps what is locked, saying so.

LOCK_MODES = ("governance", "compliance")
LOCK_OPTIONS = ("lock_mode", "lock_days")
LOCKABLE = ("s3", "s3a")


@dataclass(frozen=True)
class ObjectLock:
    """The lock new objects get: its mode and how many days it holds them."""

    mode: str
    days: int

    def write_kwargs(self, now):
        """The PutObject/CreateMultipartUpload arguments of an object written at ``now``
        (epoch seconds)."""
        until = datetime.fromtimestamp(now + self.days * 86400, timezone.utc)
        return {"ObjectLockMode": self.mode.upper(), "ObjectLockRetainUntilDate": until}


def pop_lock(options, protocol):
    """The ObjectLock that ``options`` (fsspec options, a dict: the two lock options are
    taken out of it) ask for, or None; UsageError for a bad value, one without the
    other, or a store that is not S3."""
    mode, given = (options.pop(key, None) for key in LOCK_OPTIONS)
    if mode is None and given is None:
        return None
    if mode is None or given is None:
        raise UsageError("--archive-option lock_mode and lock_days go together "
                         "(e.g. lock_mode=governance lock_days=30)")
    if str(mode).lower() not in LOCK_MODES:
        raise UsageError(f"bad --archive-option lock_mode={mode}: governance or compliance")
    try:
        days = int(given)
    except (TypeError, ValueError):
        days = 0
    if days < 1:
        raise UsageError(f"bad --archive-option lock_days={given}: a whole number of days, "
                         "at least 1")
    if protocol not in LOCKABLE:
        raise UsageError(f"--archive-option lock_mode/lock_days need an s3:// archive "
                         f"(S3 Object Lock), not {protocol}://")
    return ObjectLock(str(mode).lower(), days)
