"""``mysqlbackup restore``, phase by phase: plan, lease, check target, load base,
replay, report (each phase timed).

The replay applies the binlogs as statements (``apply='statements'``: the replay
job's sink, ``replay.job.sinks.target``) or through the target's own replication
applier fed by ``replay.serve`` (``apply='native'``: ``replay.restore.native``).

Nothing touches the target before the plan is proved from the archive's
indexes (a base, and contiguous binlogs from it to the stop point: else one
line naming the hole); ``--dry-run`` stops after the plan, without a lease. The
lease keeps retention off what the restore reads until it ends. The target's
progress marker (``target.RestoreTarget``) makes a restore killed at any point
resume when run again: the base is loaded once, the replay's checkpoint
applies every transaction once.
"""

import logging
import time
from dataclasses import dataclass, field, replace

from mysqlbackup.archive.manifest import checked_manifest
from mysqlbackup.archive.codec import check_keys
from mysqlbackup.guard.lease import Lease
from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog.gtid import shown
from mysqlbackup.utc import iso
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError, NativeRefused, UsageError
from replay.planning.selection import Selection
from replay.planning.units import pick_source
from replay.spark.context import SparkSetup
from replay.restore.nativeend import serial_reason
from replay.restore.plan import describe, make_plan

log = logging.getLogger(__name__)

APPLY_WAYS = ("statements", "native")   # replay --apply
APPLY_MODES = ("auto",) + APPLY_WAYS     # restore --apply: auto chooses one of the ways
USERS_MODES = ("apply", "skip")


@dataclass
class RestoreOptions:
    """What ``mysqlbackup restore`` was asked to do."""

    archive_url: str
    target: object = None                   # SourceSpec of the target (not for --dry-run)
    archive_options: dict = field(default_factory=dict)
    source_name: str = None
    selection: Selection = field(default_factory=Selection)  # stop and filters
    base_id: str = None
    dry_run: bool = False
    into_nonempty: bool = False
    workers: int = 4
    merge: int = 100
    master: str = None
    datadir: str = None                     # physical bases: the new datadir
    keyring: object = None                  # archive.codec.Keyring: opens encrypted objects
    apply: str = "auto"                     # APPLY_MODES: the replay job, or the target's
                                            # own replication applier fed by replay.serve;
                                            # auto: native where the target allows it
    engine: str = "auto"                    # engines.ENGINES: who decodes for statements
    spark: SparkSetup = field(default_factory=SparkSetup)  # --conf, --driver-host, --python
    users: str = "apply"                    # USERS_MODES: a dump base's accounts loaded
                                            # (the target user checked first) or left out

    @property
    def stop_text(self):
        """The stop as its option says it (kept in the lease and the target's marker)."""
        return self.selection.stop.option_text


class Phases:
    """Elapsed seconds per phase, in the order they ran."""

    def __init__(self):
        self.elapsed, self._started = {}, time.monotonic()

    def run(self, name, func, *args):
        started = time.monotonic()
        try:
            return func(*args)
        finally:
            self.elapsed[name] = self.elapsed.get(name, 0.0) + time.monotonic() - started

    @property
    def total(self):
        return time.monotonic() - self._started


def run_restore(opts, echo=print, progress=None, spark=None):
    """Restore ``opts``; returns the report dict. ``echo`` prints the plan (dry run)
    and the report lines, ``progress`` the lines along the way (stderr)."""
    progress = progress or (lambda line: None)
    phases = Phases()
    store = ArchiveStore(opts.archive_url, opts.archive_options)
    plan, replay_opts = phases.run("plan", plan_restore, store, opts)
    choice = choose_apply(opts, plan)
    if opts.dry_run:
        for line in describe(plan) + users_lines(opts, plan) + choice.lines(opts):
            echo(line)
        return {"plan": plan, "dry_run": True, "apply": choice}
    if plan.manifest["method"] in ("physical", "clone") and not opts.datadir:
        raise UsageError(f"base {plan.manifest['id']} is a physical backup: give --datadir "
                         "DIR (a new directory; the restored server is started on it at the "
                         "--target host:port)")
    for line in describe(plan) + choice.lines(opts):
        progress(line)
    with Lease(store, plan.source, base=plan.manifest["id"], stop=opts.stop_text) as lease:
        progress(f"restore: lease {lease.key} held")
        plan, replay_opts = phases.run("plan", replan, store, opts, plan)
        report = _restore(opts, plan, replay_opts, phases, progress, spark, choice)
    report["elapsed"] = dict(phases.elapsed, total=phases.total)
    for line in report_lines(report):
        echo(line)
    return report


def replan(store, opts, plan):
    """The plan made again under the lease: a ``retain`` that ran between the first
    plan and the lease may have deleted what it named (from the lease on, retain
    deletes nothing the restore reads). A plan that now takes another base stops."""
    again, replay_opts = plan_restore(store, opts)
    if again.manifest["id"] != plan.manifest["id"]:
        raise MysqlBackupError(f"the archive changed while the restore was planned (base "
                               f"{plan.manifest['id']}, planned first, is no longer the "
                               "one to use): run the restore again")
    return again, replay_opts


@dataclass(frozen=True)
class ApplyChoice:
    """How a restore applies the binlogs and why: ``mode`` "native" (the target's own
    applier fed by serve) or "statements" (the replay job, its tasks run by ``engine``,
    "spark" or "local"); ``auto``: chosen, not asked for (a target that refuses native
    at its check then gets statements)."""

    mode: str
    why: str
    engine: str = None
    engine_why: str = None
    auto: bool = False
    serial: str = None     # native: why it runs one thread (nativeend.serial_reason)

    def lines(self, opts):
        """The plan's line saying how the binlogs will be applied, and why."""
        if self.mode == "native":
            threads = f"{opts.workers} parallel threads"
            if opts.workers <= 1:
                threads = "one thread"
            elif self.serial:
                threads = f"one thread, not {opts.workers}: {self.serial}"
            return [f"apply: native ({self.why}; the target's replication applier, "
                    f"{threads}, fed by mysqlbackup serve on loopback)"]
        where = "Spark" if self.engine == "spark" else "this process, no Spark"
        return [f"apply: statements ({self.why}); decoded by {where} ({self.engine_why})"]


def choose_apply(opts, plan):
    """The ApplyChoice of ``opts.apply``: as asked, or for "auto" native where the archive,
    the base and the target (when given) allow it (``check_native``), else statements.
    Statements are decoded on Spark, or in this process for a small archive without
    filters (``engines.choose_engine``)."""
    serial = serial_reason([s.statements for s in plan.spans], plan.manifest.get("gtid"),
                           plan.spans[-1].gtid_after if plan.spans else None)
    if opts.apply == "native":
        return ApplyChoice("native", "asked for", serial=serial)
    if opts.apply == "auto":
        refusal = native_refusal(opts, plan)
        if refusal is None:
            return ApplyChoice("native", "auto: the target's own applier, nothing decoded "
                               "here", auto=True, serial=serial)
        return _statements(opts, plan, f"auto: not native, {refusal}", True)
    return _statements(opts, plan, "asked for", False)


def _statements(opts, plan, why, auto):
    from replay.job.engines import choose_engine
    filtered = bool(opts.selection.tables or opts.selection.rewrite)
    engine, engine_why = choose_engine(opts.engine, plan.bytes_to_read, filtered, opts.master,
                                       opts.spark.given())
    return ApplyChoice("statements", why, engine, engine_why, auto)


def native_refusal(opts, plan):
    """Why ``--apply native`` cannot restore this plan (the first line of its refusal,
    shortened), or None."""
    try:
        check_native(opts, plan)
    except NativeRefused as e:
        return e.reason
    return None


def users_lines(opts, plan):
    """The plan's line saying what becomes of a dump base's accounts (none for a
    physical base, whose mysql schema comes with its datadir, nor for --table)."""
    if plan.manifest["method"] != "dump" or opts.selection.tables:
        return []
    if opts.users == "skip":
        return ["users: skip (the base's data, routines and events are loaded, its accounts "
                "and grants are not)"]
    accounts, needs = manifest_users(plan.manifest)
    known = (f": {accounts} accounts, needing {', '.join(needs) or 'nothing'}"
             if needs is not None and accounts is not None else "")
    return [f"users: apply (the base's accounts and grants{known}; the target user's "
            "privileges for them are checked before anything is loaded)"]


def manifest_users(manifest):
    """(accounts, needs) a base manifest records of its users section (None when it
    does not: a base from before they were recorded)."""
    found = [None, None]
    for holder in (manifest.get("details") or {}, manifest):
        for i, (name, kind) in enumerate((("accounts", int), ("needs", list))):
            if isinstance(holder.get(name), kind) and not isinstance(holder[name], bool):
                found[i] = holder[name] if kind is int else [str(n) for n in holder[name]]
    return tuple(found)


def check_users(opts, plan, target, progress):
    """``--users apply`` of a whole dump base: UsersRefused (exit 2), before anything is
    loaded, when the target user lacks what the base's users section needs (creating
    users, granting what it grants, PROXY). What the base needs comes from its manifest,
    else from reading the base once ahead (only when the user does not hold it all)."""
    if opts.users != "apply" or opts.selection.tables or plan.manifest["method"] != "dump":
        return
    from mysqlbackup.base.userscan import TargetGrants, UsersRefused
    grants = TargetGrants(*target.grants())
    if grants.has_everything():
        return
    lacks = grants.missing(base_needs(opts, plan, grants, progress))
    if lacks:
        raise UsersRefused(grants.refusal(lacks))


def base_needs(opts, plan, grants, progress):
    """What the base's users section needs of the user loading it (users.UsersScan.needs):
    its manifest's ``needs``; none for a MySQL base (mysqldump is run without users:
    base.dump); else the base read once ahead (it is read again for the load)."""
    m = plan.manifest
    _, needs = manifest_users(m)
    if needs is not None:
        return needs
    if m.get("gtid_flavor") == "mysql":
        return []
    from mysqlbackup.base.stream import scan_dump
    from mysqlbackup.base.userscan import UsersScan
    progress(f"restore: users: the target user {grants.account} does not hold every "
             f"privilege an account may need; reading base {m['id']} once ahead for what "
             "its accounts need (its manifest does not say)")
    return scan_dump(ArchiveStore(opts.archive_url, opts.archive_options), plan.base_object,
                     m, UsersScan(), progress, opts.keyring).needs()


def check_native(opts, plan):
    """UsageError where ``--apply native`` cannot work: filters, a target on another
    machine (serve listens on loopback), a base without a GTID position (the
    target's applier starts from one), a physical base (the server it starts has the
    default server_id, most often the source's: untested)."""
    if opts.selection.tables or opts.selection.rewrite:
        raise NativeRefused("--apply native applies whole binlogs: --table and --rewrite-db "
                            "need --apply statements")
    if opts.target is not None:
        from replay.restore.native import check_local
        check_local(opts.target)
    m = plan.manifest
    if m["method"] in ("physical", "clone"):
        raise NativeRefused(f"base {m['id']} is a physical backup: --apply native is not "
                            "supported for it yet", " (use --apply statements)")
    if m.get("gtid_flavor") not in ("mariadb", "mysql") or not m.get("gtid"):
        raise NativeRefused(f"--apply native needs a source with GTIDs; base {m['id']} has no "
                            "GTID position", ": use --apply statements")


def table_selection(selection):
    """A ``--table`` restore's replay selection: the tables' row changes, and statements
    only when their default schema is one of the tables' (replay's filters)."""
    if not selection.tables:
        return selection
    return replace(selection, databases={t.split(".", 1)[0] for t in selection.tables})


def into_nonempty(opts):
    """``--into-nonempty``, or a ``--table`` restore whose every table goes to another
    schema (a live server is what it is for)."""
    schemas = {t.split(".", 1)[0] for t in opts.selection.tables}
    return opts.into_nonempty or bool(schemas) and all(
        opts.selection.rewrite.get(s, s) != s for s in schemas)


def plan_restore(store, opts):
    """(RestorePlan, ReplayOptions) from the archive's listing, indexes and manifests;
    the replay's own plan is made too, so that every check it makes (a file without
    its object, sizes as listed) fails now, before the target is touched."""
    from replay.planning.plan import ReplayOptions, units_to_read
    listing = ArchiveListing(store)
    source = pick_source(listing.sources(), opts.source_name)
    runs, holes = listing.chain(source)
    restore_plan = make_plan(source, runs, holes, _manifests(listing, source, opts.base_id),
                             opts.selection.stop, opts.base_id)
    replay_opts = ReplayOptions(opts.archive_url, opts.archive_options, source,
                                restore_plan.replay_selection(table_selection(opts.selection)),
                                False,
                                opts.master, first_file=restore_plan.choice.keys[0],
                                last_file=restore_plan.choice.keys[-1], keyring=opts.keyring,
                                spark=opts.spark)
    manifest = restore_plan.manifest
    check_keys(restore_plan.base_object, manifest.get("codec", "zstd"), manifest.get("key_ids"),
               opts.keyring)
    if opts.apply == "native":
        check_native(opts, restore_plan)
    units_to_read(replay_opts)
    return restore_plan, replay_opts


def _manifests(listing, source, base_id):
    """The source's sound base manifests (``manifest.checked_manifest``: the manifest
    reads, the object is listed at its size); a damaged one is skipped with a warning
    (refused when it is the one asked for), never chosen to fail at its load."""
    manifests = []
    for found in listing.base_ids(source):
        manifest, problem = checked_manifest(listing, source, found)
        if problem is None:
            manifests.append(manifest)
        elif found == base_id:
            raise CorruptBinlog(f"base {found} is damaged: {problem}")
        else:
            log.warning("base %s skipped: %s", found, problem)
    return manifests


def _restore(opts, plan, replay_opts, phases, progress, spark, choice):
    if plan.manifest["method"] in ("physical", "clone"):
        return _restore_physical(opts, plan, replay_opts, phases, progress, spark, choice)
    if choice.mode == "native":  # refused before anything is loaded
        choice = phases.run("check", _native_preflight, opts, plan, choice, progress)
    from replay.restore.target import RestoreTarget
    target = phases.run("check", RestoreTarget, opts.target)
    try:
        marker = phases.run("check", target.check, plan.source, plan.manifest["id"],
                            into_nonempty(opts))
        loaded = marker is not None and marker.state == "loaded"
        if marker:
            progress(f"restore: the target holds this restore in progress (base "
                     f"{marker.base_id}, {marker.state}, since {marker.started}): resuming")
        if loaded:
            choice = phases.run("check", _resumed_choice, opts, plan, target.conn, choice,
                                progress)
        else:
            phases.run("check", check_users, opts, plan, target, progress)
            left_out = phases.run("load", _load, opts, plan, target, progress)
    finally:
        target.close()
    summary = phases.run("replay", _replay, opts, replay_opts, progress, spark, not loaded,
                         choice)
    return {"plan": plan, "base_loaded": not loaded, "summary": summary,
            "users_left_out": None if loaded else left_out, "apply": choice}


def _native_preflight(opts, plan, choice, progress):
    """The choice once the target is checked for native apply (``native.preflight``): a
    target that refuses it gets statements when the choice was ``auto``."""
    from replay.restore.native import preflight
    try:
        preflight(opts.target, plan.manifest["gtid"], progress, plan.manifest.get("server_id"))
    except UsageError as e:
        if not choice.auto:
            raise
        choice = _statements(opts, plan, f"auto: the target refused native: {e}", True)
        for line in choice.lines(opts):
            progress(line)
    return choice


def _resumed_choice(opts, plan, conn, choice, progress):
    """A resumed restore goes on the way it began (``native.check_resume``: each way has
    its own exactly-once record); an ``auto`` choice follows the way the target shows."""
    from replay.restore.native import check_resume
    gtid = plan.manifest.get("gtid")
    try:
        check_resume(conn, plan.source, gtid, choice.mode)
        return choice
    except UsageError:
        if not choice.auto:
            raise
    other = "statements" if choice.mode == "native" else "native"
    check_resume(conn, plan.source, gtid, other)
    why = f"auto: resuming the {other} apply this restore began with"
    choice = (ApplyChoice("native", why, auto=True) if other == "native"
              else _statements(opts, plan, why, True))
    for line in choice.lines(opts):
        progress(line)
    return choice


def _restore_physical(opts, plan, replay_opts, phases, progress, spark, choice):
    """A physical base: extracted and prepared into ``--datadir`` (once: a re-run finds
    it prepared), a server started on it at the target's address, then the replay."""
    from replay.restore.clonedir import restore_clone
    from replay.restore.physical import START_TIMEOUT, restore_physical
    store = ArchiveStore(opts.archive_url, opts.archive_options)
    load = restore_clone if plan.manifest.get("method") == "clone" else restore_physical
    server = phases.run("load", load, store, plan.base_object, plan.manifest,
                        opts.datadir, opts.target, progress, START_TIMEOUT, opts.keyring)
    # fresh=False: a re-run finds the server it started, ahead of the base
    summary = phases.run("replay", _replay, opts, replay_opts, progress, spark, False, choice)
    return {"plan": plan, "base_loaded": True, "summary": summary, "server": server,
            "apply": choice}


def _load(opts, plan, target, progress):
    """The base into the target, between the marker's 'loading' and 'loaded'; with
    ``--users skip``, what was left out ('N accounts and R roles'), else None."""
    base_id = plan.manifest["id"]
    from replay.restore.dumpfilter import DumpFilter
    from replay.restore.load import load_dump
    from mysqlbackup.base.userscan import UsersFilter
    sel = opts.selection
    only = DumpFilter(sel.tables, sel.rewrite) if sel.tables else None
    no_users = UsersFilter() if opts.users == "skip" and not only else None
    target.mark(plan.source, base_id, "loading", opts.stop_text)
    progress(f"restore: loading base {base_id} ({plan.manifest['stored_size']} bytes stored, "
             f"{plan.manifest['raw_size']} raw) into {opts.target.address}"
             + (f", only {', '.join(sorted(sel.tables))}" if only else "")
             + (", without its accounts (--users skip)" if no_users else ""))
    # a --table restore goes into a live server: logged; a whole base, with or without
    # its accounts, into an empty one: unlogged
    load_dump(ArchiveStore(opts.archive_url, opts.archive_options), plan.base_object,
              plan.manifest, opts.target, progress, only or no_users, opts.keyring,
              logged=only is not None)
    if only and only.missing():
        progress(f"restore: the base holds no {', '.join(only.missing())}: only the binlogs "
                 "can bring it back (its CREATE TABLE must come after the base)")
    target.mark(plan.source, base_id, "loaded", opts.stop_text)
    return no_users.left_out() if no_users else None


def _replay(opts, replay_opts, progress, spark, fresh, choice):
    """The binlogs applied after the base (``fresh``: loaded by this run), as ``choice``
    (an ApplyChoice) says."""
    if choice.mode == "native":
        from replay.restore.native import run_native
        return run_native(replay_opts, opts.target, opts.workers, fresh, progress)
    from replay.job.run import run_replay
    from replay.job.sinks.target import TargetApplier

    # a --table restore goes into a live server: new GTIDs of its own, its GTID state
    # no measure of what this restore applied (the checkpoint rows are)
    sink = TargetApplier(opts.target, opts.workers, opts.merge,
                         keep_gtids=not opts.selection.tables,
                         start=replay_opts.selection.start_gtids)
    return run_replay(replace(replay_opts, engine=choice.engine), sink, spark=spark,
                      progress=progress)


def report_lines(report):
    """The restore's last lines (stable: tests and runbooks read them)."""
    plan, summary, elapsed = report["plan"], report["summary"], report["elapsed"]
    m = plan.manifest
    when = iso(summary.last_commit) if summary.last_commit else None
    last = (f"last applied: GTID {summary.last_gtid or '(none)'} committed {when}"
            if when else f"last applied: none after the base (GTID {shown(m.get('gtid'))})")
    server = report.get("server")
    return [
        f"restore of {plan.source}: base {m['id']} ({m['method']}, GTID {shown(m.get('gtid'))}) "
        + ("loaded" if report["base_loaded"] else "already loaded (resumed)"),
        *([f"server: {server.name} pid {server.pid} on {server.datadir} at "
           f"{server.spec.address} (it keeps running)"] if server else []),
        *([f"users: {report['users_left_out']} of the base left out (--users skip)"]
          if report.get("users_left_out") else []),
        f"applied: {summary.applied} transactions, {summary.skipped} skipped, "
        f"{len(summary.dropped_incomplete)} incomplete dropped; stopped: "
        f"{summary.stop_reason}",
        last,
        "elapsed: " + ", ".join(f"{name} {elapsed.get(name, 0.0):.1f}s"
                                for name in ("plan", "check", "load", "replay", "total")),
    ]

