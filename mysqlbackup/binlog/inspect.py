"""``mysqlbackup inspect``: a quick look at binlog files without Spark (pure over bytes).

Per file: server version, checksum, GTID range, event counts by type name,
transaction count, whether the last transaction is complete, and the first
error with its offset. Every event is checked: whole, CRC32 (when the file is
checksummed) and, for the events the backup decodes, structurally sound.
Compressed events (MySQL's TRANSACTION_PAYLOAD, MariaDB's compressed query and rows
events) count under their own names and are decompressed and checked as replay reads
them (``binlog.compressed``); ``compressed`` sums them up: how many, their bytes in the
file and as plain events, and the plain events' counts by type name.
"""

from collections import Counter

from mysqlbackup.binlog import compressed as cz
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import gtid_text
from mysqlbackup.binlog.scan import check_magic, iter_events
from mysqlbackup.binlog.transactions import TrxTracker
from mysqlbackup.errors import CorruptBinlog

_CHECKED = {
    ev.QUERY: lambda e, t: ev.parse_query(e, t.checksum, t.fde),
    ev.ROTATE: lambda e, t: ev.parse_rotate(e, t.checksum),
    ev.MARIA_GTID_LIST: lambda e, t: ev.parse_maria_gtid_list(e, t.checksum),
    ev.PREVIOUS_GTIDS: lambda e, t: ev.parse_previous_gtids(e, t.checksum),
    ev.INCIDENT: lambda e, t: ev.parse_incident(e, t.checksum),
}


def inspect_bytes(data, name):
    """A dict describing one binlog held in ``data`` (see the module docstring)."""
    report = {"file": name, "size": len(data), "server_version": None, "checksum": None,
              "events": 0, "event_types": {}, "transactions": 0, "first_gtid": None,
              "last_gtid": None, "last_transaction_complete": True, "compressed": None,
              "error": None}
    tracker, counts = TrxTracker(), Counter()
    packed = {"events": 0, "bytes": 0, "plain_bytes": 0, "plain_types": Counter()}
    try:
        check_magic(data, name)
        for off, event in iter_events(data, 4, None, file=name, check_log_pos=False):
            try:
                _account(report, tracker, counts, event, off, name, packed)
            except CorruptBinlog as e:  # framing intact: note it, keep walking the events
                report["error"] = report["error"] or {"offset": e.offset, "message": str(e)}
    except CorruptBinlog as e:  # torn, CRC mismatch, not a binlog: nothing after is trusted
        report["error"] = report["error"] or {"offset": e.offset, "message": str(e)}
    report["events"] = sum(counts.values())
    report["event_types"] = dict(counts.most_common())
    report["transactions"] = tracker.transactions
    report["last_transaction_complete"] = tracker.at_boundary
    if packed["events"]:
        report["compressed"] = {"events": packed["events"], "bytes": packed["bytes"],
                                "plain_bytes": packed["plain_bytes"],
                                "plain_types": dict(packed["plain_types"].most_common())}
    return report


def _account(report, tracker, counts, event, off, name, packed):
    etype = event[4]
    counts[ev.event_name(etype)] += 1
    fed = event
    if etype in cz.COMPRESSED:
        plain = list(cz.plain_events(event, off, tracker.checksum, tracker.fde, name))
        packed["events"] += 1
        packed["bytes"] += len(event)
        for inner in plain:
            packed["plain_bytes"] += len(inner)
            packed["plain_types"][ev.event_name(inner[4])] += 1
            _check(inner, tracker, off, name)
        if etype in cz.MARIA_COMPRESSED:  # the tracker reads the statement it holds
            fed = plain[0]
    else:
        _check(event, tracker, off, name)
    before = tracker.transactions
    tracker.feed(fed)
    if etype == ev.FORMAT_DESCRIPTION and report["server_version"] is None:
        report["server_version"] = tracker.fde.server_version
        alg = tracker.fde.checksum_alg
        report["checksum"] = {None: "none (pre-5.6)", 0: "OFF", 1: "CRC32"}.get(alg, str(alg))
    if tracker.transactions > before and tracker.last_gtid is not None:
        report["first_gtid"] = report["first_gtid"] or gtid_text(tracker.last_gtid)
        report["last_gtid"] = gtid_text(tracker.last_gtid)


def _check(event, tracker, off, name):
    etype = event[4]
    check = _CHECKED.get(etype)
    if check is not None and tracker.fde is not None:
        try:
            check(event, tracker)
        except CorruptBinlog as e:
            raise CorruptBinlog(str(e), name, off) from None
        except (ValueError, IndexError, UnicodeError) as e:
            raise CorruptBinlog(f"malformed {ev.event_name(etype)} event ({e})", name,
                                off) from None


def format_report(r):
    """Text lines for one report: a summary line, event counts, the first error."""
    if r["error"] and r["events"] == 0 and r["server_version"] is None:
        where = f" (at offset {r['error']['offset']})" if r["error"]["offset"] else ""
        return [f"{r['file']}: {r['error']['message'].split(': ', 1)[-1]}{where}"]
    gtids = f", GTID {r['first_gtid']} .. {r['last_gtid']}" if r["first_gtid"] else ""
    last = "complete" if r["last_transaction_complete"] else "INCOMPLETE"
    lines = [f"{r['file']}: {r['server_version']}, checksum {r['checksum']}, {r['size']} bytes, "
             f"{r['events']} events, {r['transactions']} transactions (last {last}){gtids}",
             "  " + ", ".join(f"{name}×{n}" for name, n in r["event_types"].items())]
    packed = r.get("compressed")
    if packed:
        lines.append(f"  compressed: {packed['events']} events, {packed['bytes']} bytes "
                     f"({packed['plain_bytes']} plain): " + ", ".join(
                         f"{name}×{n}" for name, n in packed["plain_types"].items()))
    if r["error"]:
        lines.append(f"  ERROR at offset {r['error']['offset']}: "
                     f"{r['error']['message'].split(': ', 1)[-1]}")
    return lines
