"""What ``mysqlbackup status`` reports about a backup directory (reads the directory)."""

import os
import time

import json

from .localdir import list_binlogs
from .state import ARCHIVE_STATE_FILE, load_state


def collect_status(directory, now=None):
    """A dict of the directory's files, durable position, GTID set, last ACK and lag."""
    now = time.time() if now is None else now
    if not os.path.isdir(directory):
        return {"directory": directory, "exists": False}
    names = list_binlogs(directory)
    files = [{"name": n, "size": os.path.getsize(os.path.join(directory, n))} for n in names]
    state = load_state(directory)
    result = {"directory": directory, "exists": True, "files": files,
              "total_bytes": sum(f["size"] for f in files), "state": None,
              "archive": _archive_report(directory)}
    if state is None:
        return result
    result["state"] = {
        "source": state.source_address, "source_identity": state.source_identity,
        "flavor": state.flavor, "durable_file": state.file, "durable_pos": state.pos,
        "gtid": state.gtid, "last_ack": state.last_ack, "source_position": state.source_position,
        "checkpoint_age_s": round(now - state.updated, 3) if state.updated else None,
        "lag_bytes": _lag_bytes(state),
    }
    return result


def _archive_report(directory):
    try:
        with open(os.path.join(directory, ARCHIVE_STATE_FILE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _lag_bytes(state):
    """Bytes between the source's position (last heartbeat) and ours, same file only."""
    src = state.source_position
    if not src or src.get("file") != state.file or not src.get("pos"):
        return None
    return max(0, src["pos"] - state.pos)


def format_status(status):
    """Human-readable lines for ``collect_status``'s result."""
    if not status["exists"]:
        return [f"{status['directory']}: no such directory"]
    files = status["files"]
    lines = [f"directory:        {status['directory']}",
             f"files:            {len(files)}" + (f" ({files[0]['name']} .. {files[-1]['name']}"
                                                   f", {status['total_bytes']} bytes)"
                                                   if files else "")]
    st = status["state"]
    if st is None:
        return lines + ["checkpoint:       none yet"]
    ack = st["last_ack"]
    lines += [
        f"source:           {st['source']} ({st['source_identity']}, {st['flavor']})",
        f"durable position: {st['durable_file']}:{st['durable_pos']}",
        f"gtid set:         {st['gtid'] or '-'}",
        f"last ack:         " + (f"{ack['file']}:{ack['pos']}" if ack else "none"),
        f"lag:              " + ("unknown" if st["lag_bytes"] is None
                                 else f"{st['lag_bytes']} bytes"),
        f"checkpoint age:   " + ("unknown" if st["checkpoint_age_s"] is None
                                 else f"{st['checkpoint_age_s']:.1f} s"),
    ]
    return lines + _format_archive(status.get("archive"))


def _format_archive(report):
    if not report:
        return []
    backlog = report.get("backlog_files")
    partial = report.get("partial")
    lines = [f"archive:          {report['url']} (source {report['source']})",
             "archive backlog:  " + ("unknown" if backlog is None else
                                     f"{len(backlog)} sealed files not yet archived"),
             "archive partial:  " + (f"{partial['file']} up to {partial['end']}"
                                     if partial else "none")]
    if report.get("last_error"):
        lines.append(f"archive error:    {report['last_error']}")
    return lines
