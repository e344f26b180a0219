"""The JSON index kept beside each archived object (pure: built from bytes).

Replay picks files for a stop point from these without reading the files: size,
sha256, first/last GTID, first/last commit time (UTC), transaction count, the
GTID set before and after the file, the server that wrote it, its predecessor
and the file its ROTATE names.
"""

import hashlib
from datetime import datetime, timezone

from . import events as ev
from .scan import iter_events
from .transactions import TrxTracker

INDEX_VERSION = 1


def utc(ts):
    """ISO-8601 UTC text of a binlog header timestamp."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def gtid_text(gtid):
    """'0-1-5' / 'uuid:5' of a tracker's (flavor, ...) GTID tuple, or None."""
    if gtid is None:
        return None
    return "-".join(map(str, gtid[1:])) if gtid[0] == "mariadb" else f"{gtid[1]}:{gtid[2]}"


def build_index(data, name, predecessor=None, start=0, tracker=None, source=None):
    """Index of ``data``: a whole file (start 0) or a segment of one beginning at ``start``.

    A segment after the first needs the ``tracker`` that followed the bytes before
    it (its checksum setting and GTID state); the tracker is advanced through it.
    """
    tracker = tracker or TrxTracker()
    before = str(tracker.gtids) if tracker.gtids is not None else None
    info = {"first_gtid": None, "last_gtid": None, "first_commit": None,
            "last_commit": None, "transactions": 0, "next_file": None, "server_id": None}
    offset = 4 if start == 0 else 0
    checksum = None if start == 0 else tracker.checksum
    for off, event in iter_events(data, offset, checksum, file=name, base=start):
        _account(info, tracker, event, off == 4)
        if event[4] == ev.FORMAT_DESCRIPTION and start == 0:
            before = None
        if event[4] in (ev.MARIA_GTID_LIST, ev.PREVIOUS_GTIDS) and before is None:
            before = str(tracker.gtids)
    return {
        "version": INDEX_VERSION, "name": name, "source": source, "start": start,
        "end": start + len(data), "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(), "predecessor": predecessor,
        "gtid_before": before,
        "gtid_after": str(tracker.gtids) if tracker.gtids is not None else None,
        "complete_transactions": tracker.at_boundary, **info,
    }


def _account(info, tracker, event, is_first):
    header = ev.parse_header(event)
    if is_first:
        info["server_id"] = header.server_id
    count = tracker.transactions
    tracker.feed(event)
    if tracker.transactions > count:
        info["transactions"] += 1
        when = utc(header.timestamp)
        info["first_commit"] = info["first_commit"] or when
        info["last_commit"] = when
        gtid = gtid_text(tracker.last_gtid)
        if gtid:
            info["first_gtid"] = info["first_gtid"] or gtid
            info["last_gtid"] = gtid
    if header.type == ev.ROTATE and not ev.is_artificial(header):
        info["next_file"] = ev.parse_rotate(event, tracker.checksum)[1]
