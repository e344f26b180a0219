"""What ``mysqlbackup check`` reads: the archive, through the restore's own planning
(``plan_restore`` to the newest archived moment, the dry run's plan: a base, the
binlogs from it proved contiguous by the indexes, every object there, the keys), and
the daemon's directory (``collect_status``: the durable position and the archive lag
``status --check`` judges). Facts out (``verdict``'s value types), no judgement."""

from dataclasses import dataclass, replace

from mysqlbackup.archive.codec import IdentityError
from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.names import BASE_INDEX, split_epoch
from mysqlbackup.archive.store import ArchiveStore, StoreError
from mysqlbackup.archive.stop import END
from mysqlbackup.archive.window import NoBaseError
from mysqlbackup.errors import (MysqlBackupError, ResyncRequired, SourceNotFound, UsageError,
                                mask_url)
from mysqlbackup.localdir.state import ARCHIVE_STATE_FILE
from mysqlbackup.localdir.status import collect_status
from replay.check.verdict import DaemonFacts, Planned, Report, SourceFacts, evaluate
from replay.restore.plan import make_plan
from replay.restore.run import RestoreOptions, plan_restore


class Unreadable(Exception):
    """The archive cannot be read at all (a wrong URL, the store unreachable)."""


@dataclass(frozen=True)
class ArchiveAccess:
    """The archive as the command was given it."""

    url: str
    options: dict
    keyring: object = None      # archive.codec.Keyring (``--identity``) or None


def read_archive(access, source_name=None, also=(), lock=False):
    """[SourceFacts] of ``source_name``, else of every source of the archive and of
    ``also`` (the source a daemon's directory names); [] for an empty archive.
    Unreadable when the URL is no archive (``ArchiveListing.require``: no such
    directory or bucket, a file) or the store fails."""
    try:
        store = ArchiveStore(access.url, access.options)
        listing = ArchiveListing(store)
        held = listing.require()
    except (UsageError, StoreError, OSError) as e:  # ArchiveNotFound is a UsageError
        raise Unreadable(f"the archive cannot be read: {mask_url(e)}") from None
    wanted = [source_name] if source_name else sorted(set(held) | {s for s in also if s})
    return [source_facts(access, store, listing, s, lock) for s in wanted]


def source_facts(access, store, listing, source, lock=False):
    """The SourceFacts of one source (``lock``: with the lock of its newest objects)."""
    try:
        listing.require(source)
    except SourceNotFound as e:
        return SourceFacts(source, refused=("base", mask_url(e)))
    manifests = listing.sound_manifests(source)
    newest = max(manifests, key=lambda m: m["id"], default=None)
    facts = SourceFacts(source, newest_base=newest and (newest["id"], newest["end_time"]))
    if lock:
        facts = replace(facts, lock=_lock_facts(store, listing, source, newest))
    try:
        runs, _ = listing.chain(source)
    except (MysqlBackupError, FileNotFoundError) as e:
        return replace(facts, refused=("binlogs", _text(e, source)))
    if runs:
        last = runs[-1].spans[-1]
        facts = replace(facts, archived_end=f"{last.label}:{last.size}")
    if not manifests:
        return replace(facts, refused=("base", "no base backup in the archive "
                                       "(mysqlbackup base takes one)"))
    if not runs:
        return replace(facts, refused=("binlogs", "no binlog file archived"))
    return _planned(facts, access, store, listing)


def _lock_facts(store, listing, source, newest):
    """(seconds locked, mode, key) of the newest base's manifest or newest binlog index,
    whichever is locked the least (seconds None: not locked), or None: neither exists."""
    keys = []
    if newest is not None:
        keys.append(listing.bases[source][newest["id"]].get(BASE_INDEX))
    names = listing.sealed_names(source)
    if names:
        keys.append(listing.sealed[source][names[-1]].get("index"))
    least = None
    for key in filter(None, keys):
        found, written = store.lock_of(key), store.modified(key)
        seconds = found[1] - written if found and written else None
        mode = found[0] if found else None
        if least is None or seconds is None or (least[0] is not None and seconds < least[0]):
            least = (seconds, mode, key)
            if seconds is None:
                break
    return least


def _planned(facts, access, store, listing):
    """``facts`` with the plan of a restore to the newest archived moment, or why none."""
    source = facts.source
    opts = RestoreOptions(access.url, None, access.options, source, dry_run=True,
                          keyring=access.keyring)
    try:
        plan, refused = _attempt(lambda: plan_restore(store, opts)[0], source)
        keys = "opened" if access.keyring else "plain"
    except IdentityError as e:  # the base and the chain were planned before the keys
        plan, refused = _attempt(lambda: _plan_from_indexes(listing, source), source)
        keys = "refused" if access.keyring else "unchecked"
        refused = refused or (("keys", _text(e, source)) if access.keyring else None)
    return replace(facts, planned=plan and planned_of(plan), refused=refused, keys=keys)


def _plan_from_indexes(listing, source):
    """The RestorePlan to the end from the indexes and manifests alone (no object's key
    checked): what ``plan_restore`` proves before it checks the keys."""
    runs, holes = listing.chain(source)
    return make_plan(source, runs, holes, listing.sound_manifests(source), END)


def _attempt(plan, source):
    """(RestorePlan, None) of ``plan()``, or (None, (check, why)) when it refuses;
    Unreadable when the store fails meanwhile; IdentityError passes."""
    try:
        return plan(), None
    except StoreError as e:
        raise Unreadable(f"the archive cannot be read: {mask_url(e)}") from None
    except NoBaseError as e:
        return None, ("base", _text(e, source))
    except ResyncRequired as e:
        return None, ("binlogs", _text(e.reason, source))
    except IdentityError:
        raise
    except (MysqlBackupError, FileNotFoundError) as e:
        return None, ("binlogs", _text(e, source))


def _text(error, source):
    """An error's text without a leading ``SOURCE: `` (the line names the source)."""
    text = mask_url(str(error))
    return text[len(source) + 2:] if text.startswith(f"{source}: ") else text


def planned_of(plan):
    """The Planned of a RestorePlan to the end of the archive."""
    m, spans = plan.manifest, plan.choice.spans
    last = next((s for s in reversed(spans) if s.last_commit), None)
    return Planned(m["id"], m["end_time"], last.last_commit if last else m["end_time"],
                   (last.last_gtid if last else None) or m.get("gtid"), len(spans),
                   spans[0].label, spans[-1].label)


def read_daemon(directory, archive_url, now):
    """The DaemonFacts of the daemon's ``directory`` as ``status`` reads it (``problem``:
    it does not exist, reads no archive report, or archives elsewhere)."""
    try:
        status = collect_status(directory, now)
    except MysqlBackupError as e:
        return DaemonFacts(directory, problem=f"{directory}: {mask_url(e)}")
    if not status["exists"]:
        return DaemonFacts(directory, problem=f"{directory} does not exist")
    report = status.get("archive")
    if not report:
        return DaemonFacts(directory, problem=f"{directory} holds no archive report "
                           f"({ARCHIVE_STATE_FILE}): is the daemon run with --archive?")
    state = status["state"] or {}
    facts = DaemonFacts(
        directory, split_epoch(report["source"])[0] if report.get("source") else None,
        report.get("lag_s"),
        f"{state['durable_file']}:{state['durable_pos']}" if state else None,
        len(report.get("backlog_files") or ()), report.get("pending_bytes") or 0,
        mask_url(report.get("last_error")), horizon=status.get("horizon"))
    if _same_url(report.get("url"), archive_url):
        return facts
    return replace(facts, problem=f"the daemon at {directory} archives to "
                   f"{report.get('url')}, not {mask_url(archive_url)}")


def _same_url(reported, given):
    """True when the daemon's (masked) archive URL is the one given."""
    return (reported or "").rstrip("/") == mask_url(given).rstrip("/")


def run_check(access, source_name, directory, limits, now):
    """The verdict.Report of the archive (and of the daemon's ``directory``, when given)."""
    daemon = read_daemon(directory, access.url, now) if directory else None
    also = [daemon.source] if daemon and not daemon.problem else ()  # its source, checked
    url = mask_url(access.url)
    try:
        facts = read_archive(access, source_name, also, lock=limits.lock_window is not None)
    except Unreadable as e:
        return Report(url, now, unknown=str(e))
    if not facts:
        return Report(url, now, critical=f"archive {url} is empty: nothing archived yet")
    return Report(url, now, tuple(evaluate(f, daemon, limits, now, named=bool(source_name))
                                  for f in facts))
