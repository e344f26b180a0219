"""What ``mysqlbackup status`` reports about a backup directory (reads the directory)."""

import json
import os
import time

from mysqlbackup.errors import mask_url
from mysqlbackup.localdir.files import epoch_dir, lock_holder, sized_binlogs
from mysqlbackup.localdir.horizon import describe as describe_horizon
from mysqlbackup.localdir.horizon import load_record, margin
from mysqlbackup.localdir.state import ARCHIVE_STATE_FILE, load_state


def collect_status(directory, now=None):
    """A dict of the directory's files, durable position, GTID set, last ACK and lag."""
    now = time.time() if now is None else now
    if not os.path.isdir(directory):
        return {"directory": directory, "exists": False}
    state = load_state(directory)
    folder = epoch_dir(directory, state and state.epoch)  # the current epoch's files
    files = [{"name": n, "size": size} for n, size in sized_binlogs(folder)]
    lock = lock_holder(directory)
    archive = archive_view(_archive_report(directory), files, now)
    result = {"directory": directory, "exists": True, "files": files, "lock": lock,
              "total_bytes": sum(f["size"] for f in files), "state": None,
              "archive": archive_lag(archive, files, state, now,
                                     lock["since"] if lock["held"] else None)}
    if state is None:
        return result
    result["horizon"] = margin(load_record(directory), state.file, now)
    result["state"] = {
        "source": state.source_address, "source_identity": state.source_identity,
        "flavor": state.flavor, "durable_file": state.file, "durable_pos": state.pos,
        "gtid": state.gtid, "last_ack": state.last_ack, "source_position": state.source_position,
        "checkpoint_age_s": round(now - state.updated, 3) if state.updated else None,
        "lag_bytes": _lag_bytes(state), "lag_s": seconds_behind(state),
        "epoch": state.epoch or 1,
        "failovers": [{k: h.get(k) for k in ("epoch", "identity", "first_file", "start_gtid",
                                              "started_at")} for h in state.epochs or ()],
    }
    return result


def seconds_behind(state):
    """Seconds the durable copy was behind the source when the checkpoint was written.

    0 when the source's last heartbeat named the durable position (a source sends
    heartbeats only when it has nothing more to send). Otherwise the time the newest
    durable event arrived (its ACK's time when it was ACKed, else the checkpoint's)
    minus that event's timestamp (the source's clock, whole seconds). None when
    unknown. A checkpoint that is not rewritten is ``checkpoint_age_s``'s business."""
    src, ack = state.source_position or {}, state.last_ack or {}
    if src.get("file") == state.file and src.get("pos") == state.pos:
        return 0.0
    if not state.last_event_time:
        return None
    arrived = state.updated
    if ack.get("file") == state.file and ack.get("pos") == state.pos and ack.get("time"):
        arrived = ack["time"]
    if arrived is None:
        return None
    return round(max(0.0, arrived - state.last_event_time), 3)


def archive_lag(report, files, state, now, since=None):
    """``report`` (``archive_view``'s) with ``pending_bytes`` (durable bytes of the
    newest file not archived yet) and ``lag_s``: 0 when nothing durable waits for the
    archive, else the seconds since the archiver's last successful pass (everything
    durable when a pass started was archived by its end), or since ``since`` (the
    daemon's start) when no pass succeeded yet; None when unknown."""
    if not report:
        return report
    newest = files[-1] if files else None
    durable = 0
    if newest and state is not None:
        durable = state.pos if state.file == newest["name"] else newest["size"]
    end = report.get("partial") or {}
    done = end.get("end", 0) if newest and end.get("file") == newest["name"] else 4
    pending = max(0, durable - done)
    backlog = report.get("backlog_files")
    waiting = pending > 0 or backlog is None or bool(backlog)
    last = report.get("last_success") or since
    lag = 0.0 if not waiting else (round(max(0.0, now - last), 3) if last else None)
    return dict(report, pending_bytes=pending, lag_s=lag)


def _archive_report(directory):
    try:
        with open(os.path.join(directory, ARCHIVE_STATE_FILE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


STALLED_AFTER = 60.0  # an upload running longer than this is shown as stalled


def archive_view(report, files, now):
    """The archiver's report with what ``status`` computes from the local files now.

    ``backlog_files``: the sealed local files (all but the newest) not in the report's
    ``archived`` set, so files sealed while the archiver hangs count at once;
    ``upload_in_progress`` gains its age in seconds; ``active_behind_bytes``: how much of
    the newest local file is not in the archive yet.
    """
    if not report:
        return report
    report = dict(report)
    names = [f["name"] for f in files]
    archived = report.get("archived")
    if archived is not None or "archived" in report:
        done = set(archived or ())
        report["backlog_files"] = [n for n in names[:-1] if n not in done]
        report["archive_listed"] = archived is not None
    upload = report.get("upload_in_progress")
    if upload and upload.get("since") is not None:
        report["upload_in_progress"] = dict(upload, age_s=round(max(0.0, now - upload["since"]),
                                                                 1))
    partial = report.get("partial")
    if files:
        newest = files[-1]
        end = partial["end"] if partial and partial.get("file") == newest["name"] else 0
        report["active_behind_bytes"] = max(0, newest["size"] - end)
    return report


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
    lines.append("daemon:           " + format_lock(status.get("lock")))
    st = status["state"]
    if st is None:  # an archive that fails from the start still says so
        return lines + ["checkpoint:       none yet"] + _format_archive(status.get("archive"))
    ack = st["last_ack"]
    lines += [
        f"source:           {st['source']} ({st['source_identity']}, {st['flavor']})",
        f"durable position: {st['durable_file']}:{st['durable_pos']}"
        + (f" (epoch {st['epoch']}: {len(st['failovers'])} failover(s) followed)"
           if st.get("failovers") else ""),
        f"gtid set:         {st['gtid'] or '-'}",
        "last ack:         " + (f"{ack['file']}:{ack['pos']}" if ack else "none"),
        "lag:              " + ("unknown" if st["lag_bytes"] is None
                                 else f"{st['lag_bytes']} bytes")
        + ("" if st.get("lag_s") is None else f", {st['lag_s']:.1f} s behind the source"),
        "checkpoint age:   " + ("unknown" if st["checkpoint_age_s"] is None
                                 else f"{st['checkpoint_age_s']:.1f} s"),
        "primary:          " + describe_horizon(status.get("horizon")),
    ]
    return lines + _format_archive(status.get("archive"))


def _format_archive(report):
    if not report:
        return []
    backlog = report.get("backlog_files")
    partial = report.get("partial")
    lines = [f"archive:          {mask_url(report['url'])} (source {report['source']})",
             "archive backlog:  " + _backlog_text(report, backlog)
             + ("" if report.get("lag_s") is None
                else f" (archive {report['lag_s']:.1f} s behind)"),
             "archive partial:  " + (f"{partial['file']} up to {partial['end']}"
                                     if partial else "none")
             + (f" ({report['active_behind_bytes']} bytes of the newest file not archived "
                f"yet)" if report.get("active_behind_bytes") else "")]
    upload = report.get("upload_in_progress")
    if upload:
        age = upload.get("age_s")
        stalled = age is not None and age > STALLED_AFTER
        lines.append(f"archive upload:   {upload['object']} in progress since "
                     f"{_clock(upload.get('since'))}" + (f" ({age:.0f} s" if age is not None
                                                         else " (")
                     + (", stalled?)" if stalled else ")"))
    if report.get("reuploaded"):
        lines.append(f"archive repair:   re-uploaded {report['reuploaded']} objects missing "
                     f"from the store (last: {', '.join(report.get('reuploaded_last') or [])})")
    if report.get("missing"):
        lines.append(f"archive missing:  {len(report['missing'])} objects lost by the store, "
                     f"uploading again: {', '.join(report['missing'])}")
    if report.get("lost"):
        lines.append(f"archive lost:     {', '.join(report['lost'])} missing from the store "
                     f"and no longer local")
    if report.get("last_error"):
        lines.append(f"archive error:    {mask_url(report['last_error'])} (at "
                     f"{_clock(report.get('last_error_time'))})")
    return lines


def format_lock(lock):
    """"pid N on HOST holds the lock since TIME", or who held it last."""
    if lock is None:
        return "unknown"
    who = (f"pid {lock['pid']} on {lock.get('host') or '?'}" if lock.get("pid") is not None
           else "pid unknown")
    if lock["held"]:
        return f"{who} holds the lock since {_clock(lock.get('since'))}"
    last = f" (last: {who}, started {_clock(lock.get('since'))})" if lock.get("pid") else ""
    return "none holds the lock" + last


def _backlog_text(report, backlog):
    if backlog is None:
        return "unknown"
    text = f"{len(backlog)} sealed files not yet archived"
    if report.get("archive_listed") is False:
        text += " (the archive was not listed yet)"
    return text


def _clock(ts):
    """Local wall-clock text of an epoch timestamp, or '?'."""
    if ts is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
