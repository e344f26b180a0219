"""The primary's purge horizon: how close its oldest binlog is to the daemon's position.

A primary purges its binlogs by age (``binlog_expire_logs_seconds``, MariaDB's
``expire_logs_days``) and, from MariaDB 11.4, by total size (``max_binlog_total_size``);
no server keeps a file for a replica that is away. While the daemon is down or behind,
the primary may purge a file it has not read: the next connect then fails (1236, exit 7)
and the archive has a hole. The daemon records what the primary holds
(``HORIZON_FILE``: its binlog files and sizes, its purge settings, when) at each connect
and every ``RECORD_EVERY`` seconds while it streams (``stream.horizon``); ``margin`` (pure) says from that
record how close the purge is to the daemon's durable file: the files and bytes the
primary holds before it, and how long at least before age alone can purge it (the file
is at least as new as the record: its clock starts no earlier). ``status``, ``status
--check``, ``check`` and the metrics read it.
"""

import json
import os

from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.durable import write_bytes
from mysqlbackup.localdir.state import HORIZON_FILE
RECORD_EVERY = 60.0          # seconds between records while streaming
DEFAULT_MIN_HORIZON = 3600.0  # status --check / check: warn under this many seconds left
# the server variables a record keeps (absent ones are left out: another engine, version)
PURGE_VARIABLES = ("binlog_expire_logs_seconds", "expire_logs_days", "max_binlog_total_size",
                   "slave_connections_needed_for_purge", "binlog_expire_logs_auto_purge")


def save_record(directory, record):
    """Write the record durably (tmp, fsync, rename)."""
    write_bytes(os.path.join(directory, HORIZON_FILE),
                json.dumps(record, sort_keys=True).encode("utf-8"))


def load_record(directory):
    """The last record, or None (never recorded, or unreadable)."""
    try:
        with open(os.path.join(directory, HORIZON_FILE), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "files" in record else None


def expire_seconds(variables):
    """The age after which the primary purges a file (None: never by age)."""
    seconds = _number(variables.get("binlog_expire_logs_seconds"))
    days = _number(variables.get("expire_logs_days"))
    if variables.get("binlog_expire_logs_auto_purge", "ON").upper() == "OFF":
        return None
    if seconds:
        return seconds
    return days * 86400 if days else None


def _number(value):
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def margin(record, durable_file, now):
    """How close the purge is to ``durable_file`` by ``record`` (``load_record``'s), or
    None without a record: {"recorded_at", "oldest", "files_before", "bytes_before",
    "purged" (the primary no longer held the file), "seconds_left" (at least this long
    before age can purge it; None: no purge by age), "bytes_left" (what the primary may
    still write before its size limit purges its oldest file; None: no limit),
    "replicas_needed" (MariaDB 11.4+: no purge by age or size while fewer replicas are
    connected)}."""
    if not record or durable_file is None:
        return None
    files, variables = record["files"], record.get("variables") or {}
    names = [name for name, _ in files]
    total = sum(size for _, size in files)
    # a file newer than the record's newest is not purged: the primary made it since
    at = names.index(durable_file) if durable_file in names else (
        len(names) if not names or binlog_sort_key(durable_file) > binlog_sort_key(names[-1])
        else None)
    out = {"recorded_at": record.get("recorded_at"), "oldest": names[0] if names else None,
           "purged": at is None, "files_before": at,
           "bytes_before": None if at is None else sum(size for _, size in files[:at])}
    expire, limit = expire_seconds(variables), _number(variables.get("max_binlog_total_size"))
    recorded = record.get("recorded_at") or now
    out["seconds_left"] = None if expire is None else round(recorded + expire - now, 1)
    out["bytes_left"] = None if not limit else int(limit - total)
    needed = _number(variables.get("slave_connections_needed_for_purge"))
    out["replicas_needed"] = int(needed) if needed else None
    return out


def problem(found, min_seconds=DEFAULT_MIN_HORIZON):
    """The warning the margin ``found`` gives (None: none): the daemon's file purged
    already, or purgeable by age within ``min_seconds``."""
    if not found:
        return None
    if found["purged"]:
        return (f"purge horizon: the primary no longer held our file when last seen (its "
                f"oldest was {found['oldest']}): the next connect fails (1236); a new base "
                "is needed")
    left = found["seconds_left"]
    if left is not None and left < min_seconds:
        return (f"purge horizon: the primary may purge our file by age in {max(0, left):.0f} s "
                f"(limit {min_seconds:g} s), {found['files_before']} files "
                f"({found['bytes_before']} bytes) before it")
    return None


def describe(found):
    """One line for ``status``."""
    if not found:
        return "purge horizon: not recorded yet"
    if found["purged"]:
        return problem(found)
    parts = [f"{found['files_before']} files ({found['bytes_before']} bytes) on the primary "
             f"before ours"]
    if found["seconds_left"] is not None:
        parts.append(f"at least {max(0, found['seconds_left']):.0f} s before age can purge it")
    if found["bytes_left"] is not None:
        parts.append(f"{found['bytes_left']} bytes to its size limit")
    if found["replicas_needed"]:
        parts.append(f"purges wait for {found['replicas_needed']} connected replica(s)")
    return "purge horizon: " + ", ".join(parts)
