"""The one text of a moment in the archive, indexes, manifests, leases and reports: ISO
8601 in UTC with a Z (``2026-11-23T09:41:00Z``; a lease's renewal with milliseconds, a
base's start and end with microseconds), and back to epoch seconds. Pure."""

from datetime import datetime, timezone

from mysqlbackup.errors import UsageError


def iso(epoch, digits=0):
    """``epoch`` seconds as ISO 8601 UTC text with ``digits`` (0, 3 or 6) of the
    second's fraction."""
    moment = datetime.fromtimestamp(epoch, timezone.utc)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        text += "." + f"{moment.microsecond:06d}"[:digits]
    return text + "Z"


def epoch(text):
    """Epoch seconds of an ISO 8601 text (Z or an offset; none is UTC), with or without
    a fraction."""
    value = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def parse_datetime(text, option="--stop-datetime"):
    """Epoch seconds of an option's ISO 8601 datetime; without a zone it is UTC (never
    local time); a UsageError naming ``option`` for anything else."""
    try:
        value = datetime.fromisoformat(text.strip().replace(" ", "T", 1))
    except ValueError:
        raise UsageError(f"bad {option} {text!r}: use ISO 8601, e.g. "
                         f"2026-11-21T09:30:00Z or 2026-11-21 10:30:00+01:00 (UTC unless a zone is "
                         "named)") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()
