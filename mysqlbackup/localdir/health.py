"""``mysqlbackup status --check``: healthy or not, from what ``collect_status`` reads.

``check_health`` is pure over ``collect_status``'s result: the daemon is down (no
process holds the directory's flock), stale (it holds the lock but has not rewritten
its checkpoint for ``max_stale`` seconds: a streaming daemon rewrites it at least
every 30 s, heartbeats included, so it is not streaming: source unreachable,
reconnecting, or hung), behind (``lag_s`` over ``max_lag``), or the archive is
behind (something durable not archived, and the last successful archive pass older
than ``max_archive_lag``), or the primary may purge the daemon's file soon (its last
record of the primary's binlogs: ``localdir.horizon``; named also while the daemon is
down, when it matters most). ``run_status`` is what the command prints and exits with.
"""

import json
import os
import time
from dataclasses import dataclass

from mysqlbackup.errors import MysqlBackupError, mask_url
from mysqlbackup.localdir.horizon import DEFAULT_MIN_HORIZON
from mysqlbackup.localdir.horizon import problem as horizon_problem
from mysqlbackup.localdir.state import LOCK_FILE
from mysqlbackup.localdir.status import collect_status, format_lock, format_status

DEFAULT_MAX_LAG = 60.0
DEFAULT_MAX_STALE = 120.0
DEFAULT_MAX_ARCHIVE_LAG = 300.0


@dataclass(frozen=True)
class Limits:
    """The thresholds of ``--check``, in seconds."""

    max_lag: float = DEFAULT_MAX_LAG
    max_stale: float = DEFAULT_MAX_STALE
    max_archive_lag: float = DEFAULT_MAX_ARCHIVE_LAG
    min_horizon: float = DEFAULT_MIN_HORIZON


def check_health(status, limits, now):
    """The problems of ``status`` under ``limits`` (an empty list: healthy).

    A daemon that is down is the one problem named (its lag and archive are
    frozen, not news); otherwise every limit exceeded is named."""
    if not status["exists"]:
        return [f"{status['directory']} does not exist"]
    lock = status["lock"]
    if not lock["held"]:
        last = format_lock(lock).replace("none holds the lock", "", 1)
        return [f"daemon down: no process holds {os.path.join(status['directory'], LOCK_FILE)}"
                + last] + [p for p in (horizon_problem(status.get("horizon"),
                                                       limits.min_horizon),) if p]
    problems = [p for p in (_stale(status, lock, limits, now), _behind(status, limits),
                            _archive_behind(status.get("archive"), limits),
                            horizon_problem(status.get("horizon"), limits.min_horizon)) if p]
    return problems


def _stale(status, lock, limits, now):
    st = status["state"]
    if st is None:
        age = now - lock["since"] if lock.get("since") else None
        if age is not None and age > limits.max_stale:
            return (f"stale: no checkpoint {age:.0f} s after the daemon started "
                    f"(limit {limits.max_stale:g} s)")
        return None
    age = st["checkpoint_age_s"]
    if age is None or age <= limits.max_stale:
        return None
    return (f"stale: the checkpoint is {age:.0f} s old (limit {limits.max_stale:g} s): the "
            f"daemon holds the lock but is not streaming (source unreachable, reconnecting, "
            f"or hung); durable {st['durable_file']}:{st['durable_pos']}")


def _behind(status, limits):
    st = status["state"]
    if st is None or st.get("lag_s") is None or st["lag_s"] <= limits.max_lag:
        return None
    return (f"behind: {st['lag_s']:.0f} s behind the source (limit {limits.max_lag:g} s); "
            f"durable {st['durable_file']}:{st['durable_pos']}")


def _archive_behind(report, limits):
    if not report or report.get("lag_s") is None or report["lag_s"] <= limits.max_archive_lag:
        return None
    backlog = report.get("backlog_files") or []
    text = (f"archive behind: {report['lag_s']:.0f} s since the last successful archive pass "
            f"(limit {limits.max_archive_lag:g} s) with {len(backlog)} sealed files and "
            f"{report.get('pending_bytes', 0)} bytes of the newest file not archived")
    if report.get("last_error"):
        text += f"; last error: {mask_url(report['last_error'])}"
    return text


def summary(status):
    """The healthy line's facts: holder, checkpoint age, lag, archive lag."""
    st, lock, report = status["state"] or {}, status["lock"], status.get("archive") or {}
    parts = [f"daemon {format_lock(lock)}"]
    if st.get("checkpoint_age_s") is not None:
        parts.append(f"checkpoint {st['checkpoint_age_s']:.1f} s old")
    if st.get("lag_s") is not None:
        parts.append(f"{st['lag_s']:.1f} s behind the source")
    if report.get("lag_s") is not None:
        parts.append(f"archive {report['lag_s']:.1f} s behind")
    return ", ".join(parts)


def run_status(directory, as_json=False, check=False, limits=Limits(), now=None):
    """(text, exit code) of ``mysqlbackup status``: without ``check`` the status
    (exit 1 only for a missing directory); with it, one line, ``OK DIR: ...`` (0) or
    ``UNHEALTHY DIR: why`` (1), or the JSON status with a ``health`` member."""
    now = time.time() if now is None else now
    try:
        status = collect_status(directory, now)
    except MysqlBackupError as e:
        if not check:
            raise
        status, problems = {"directory": directory, "error": mask_url(e)}, [mask_url(e)]
    else:
        problems = check_health(status, limits, now) if check else []
    code = 1 if problems or not status.get("exists", True) else 0
    if as_json:
        if check:
            status = dict(status, health={"ok": not problems, "problems": problems})
        return json.dumps(status, indent=1, sort_keys=True), code
    if not check:
        return "\n".join(format_status(status)), code
    if problems:
        return f"UNHEALTHY {directory}: " + "; ".join(problems), code
    return f"OK {directory}: {summary(status)}", code
