"""The one text of a moment in the archive, indexes, manifests, leases and reports: ISO
8601 in UTC with a Z (``2026-11-23T09:41:00Z``; a lease's renewal with milliseconds, a
base's start and end with microseconds), and back to epoch seconds. Pure."""

from datetime import datetime, timezone


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
