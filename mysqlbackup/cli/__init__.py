"""The ``mysqlbackup`` command line (click): thin wrappers around the library. The
options the commands share are in ``cli.options`` (one decorator each, the same name
and meaning everywhere), the groups (plugins, ``--config`` after the command name, the
environment checked) in ``cli.groups``."""

import json
import signal
import sys

import click

from mysqlbackup import config, logs
from mysqlbackup.archive.names import check_source_name
from mysqlbackup.binlog.gtid import guess_flavor, parse_gtid_set, shown
from mysqlbackup.cli.groups import ArchiveGroup, CommandGroup, CommandWithSubcommands, read_config
from mysqlbackup.cli.options import (archive_options, codec_options,  # noqa: F401 (plugins')
                                     dir_option, example, handle_errors, identity_option,
                                     json_option, source_name_option, source_options,
                                     ssl_options, yes_option)
from mysqlbackup.errors import ExitCode, UsageError, exit_code_rows
from mysqlbackup.localdir import health
from mysqlbackup.source.spec import source_from_options

ARCHIVE = "s3://backups/mysql"  # the archive of the help's examples
STREAM_SOURCE_HELP = ("The primary to back up; the user needs REPLICATION SLAVE, REPLICATION "
                      "CLIENT (MariaDB: BINLOG MONITOR too).")
BASE_SOURCE_HELP = ("The server to back up; its user needs the privileges listed in this "
                    "help. Required, except for base list.")


def _print_version(ctx, param, value):
    """--version: the version, and which stream path runs (compiled or pure Python)."""
    if not value or ctx.resilient_parsing:
        return
    from mysqlbackup import __version__, speedups
    click.echo(f"mysqlbackup {__version__}\n{speedups.describe()}")
    ctx.exit()


def exit_codes_help(width=78):
    """The exit-code table (``errors.EXIT_CODES``) as help text click prints unwrapped."""
    import textwrap
    lines = ["\b", "Exit codes (the same for every command):"]
    for code, _, meaning in exit_code_rows():
        lines += textwrap.wrap(meaning, width, initial_indent=f"  {code:>2}  ",
                               subsequent_indent=" " * 6)
    return "\n".join(lines)


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"],
                                                 "auto_envvar_prefix": config.ENV_PREFIX},
             epilog=exit_codes_help() + "\n\n" + example(
                 "mysqlbackup --config /etc/mysqlbackup/db1.toml stream",
                 "mysqlbackup stream --config /etc/mysqlbackup/db1.toml"))
@click.option("--config", "config_path", metavar="FILE", is_eager=True, callback=read_config,
              expose_value=False, type=click.Path(dir_okay=False), envvar="MYSQLBACKUP_CONFIG",
              help="TOML file of option values: top-level keys for every command that has "
                   "the option, a table per command ([stream], [\"archive ls\"]); before or "
                   "after the command name. Every option can also come from "
                   "MYSQLBACKUP_<COMMAND>_<OPTION> (a variable of the command that runs "
                   "naming none of its options is refused); the command line wins over the "
                   "environment, which wins over the file. No passwords in it.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--log-format", default="text", show_default=True,
              type=click.Choice(logs.FORMATS), help="json: one JSON object per line (time, "
              "level, logger, event, and fields such as file, position, gtid).")
@click.option("--version", is_flag=True, is_eager=True, expose_value=False,
              callback=_print_version, help="Print the version and which stream path runs "
              "(the compiled one, or pure Python and why), then exit.")
def main(log_level, log_format):
    """Back up MySQL/MariaDB binary logs as a semi-synchronous replica."""
    logs.configure(log_level, log_format)


@main.command(epilog=example(
    f"mysqlbackup stream --source mysql://repl@db1:3306 --server-id 901 --dir "
    f"/var/lib/mysqlbackup/db1 --archive {ARCHIVE} --source-name db1 --keep-local 36h"))
@source_options(STREAM_SOURCE_HELP)
@ssl_options()
@click.option("--server-id", type=click.IntRange(1, 2**32 - 1), required=True,
              help="Replica server_id; unique among the source's replicas.")
@dir_option
@click.option("--start-file", metavar="NAME", help="New directory: start at this binlog file "
              "(default: the oldest the source has).")
@click.option("--start-gtid", metavar="SET", help="New directory: start at the file holding "
              "the transactions after this GTID set.")
@click.option("--no-semi-sync", is_flag=True, help="Stream asynchronously (never ACK).")
@click.option("--heartbeat", type=click.FloatRange(0.1, 60), default=1.0, show_default=True,
              help="Seconds between source heartbeats when idle.")
@click.option("--follow-by-gtid", is_flag=True, help="Accept a new source (failover) under "
              "the same directory and continue from the durable GTID position.")
@archive_options
@source_name_option("write")
@click.option("--archive-interval", type=click.FloatRange(0.1, 3600), default=2.0,
              show_default=True, help="Seconds between uploads of the active file's durable "
              "prefix (RPO of the archive).")
@click.option("--keep-local", metavar="N|AGE", help="Remove local sealed files whose archived "
              "copy is verified, keeping the newest N (10) or those younger than AGE (36h, 7d). "
              "Default: keep all.")
@click.option("--retain-window", metavar="DURATION", help="Run archive retention (as "
              "'mysqlbackup retain --window DURATION --yes') at start and after each sealed file: "
              "every moment of the last DURATION (14d) stays restorable. Files it deletes are "
              "never uploaded again. Default: off.")
@click.option("--retain-keep-base", type=click.IntRange(0), default=0, show_default=True,
              help="With --retain-window: also keep the N newest older bases (as "
                   "'retain --keep-base').")
@click.option("--metrics-address", metavar="HOST:PORT", help="Serve Prometheus metrics at "
              "http://HOST:PORT/ (e.g. 127.0.0.1:9104). Default: off.")
@click.option("--window-interval", type=click.FloatRange(0, 86400), default=60.0,
              show_default=True, metavar="SECONDS", help="With --metrics-address and "
              "--archive: read the archive's recovery window (its indexes and manifests, "
              "no binlog) for the mysqlbackup_restorable_* metrics at most this often.")
@codec_options
@handle_errors
def stream(source, password_file, tls, server_id, directory, start_file, start_gtid, no_semi_sync,
           heartbeat, follow_by_gtid, archive_url, archive_option, source_name,
           archive_interval, keep_local, retain_window, retain_keep_base, metrics_address,
           window_interval, compress, encrypt_to):
    """Stream the source's binlogs into DIR, byte-identical, fsync before every ACK.

    Runs until SIGTERM/SIGINT. Restarting resumes where the files end (a torn
    event or an incomplete transaction at the end is cut and fetched again).
    A gap (INCIDENT event, purged binlog) stops it with "resync required".
    """
    if start_file and start_gtid:
        raise click.UsageError("--start-file and --start-gtid exclude each other")
    if start_gtid:
        parse_gtid_set(start_gtid, guess_flavor(start_gtid))  # refuse a bad set before connecting
    if keep_local and not archive_url:
        raise click.UsageError("--keep-local needs --archive: local files go only once archived")
    if retain_window and not archive_url:
        raise click.UsageError("--retain-window needs --archive")
    retain = None
    if retain_window:
        from mysqlbackup.archive.window import parse_duration
        from mysqlbackup.retention.prune import retainer
        retain = retainer(parse_duration(retain_window), retain_keep_base)
    storage_options = codec = keep = None
    if keep_local:
        from mysqlbackup.stream.archiver import Retention
        keep = Retention.parse(keep_local)
    if archive_url:
        from mysqlbackup.archive.codec import make_codec
        codec = make_codec(compress, encrypt_to)
        from mysqlbackup.archive.options import parse_options
        storage_options = parse_options(archive_option)
    from mysqlbackup.stream.daemon import StopRequest, StreamOptions, run_stream
    opts = StreamOptions(source_from_options(source, password_file, tls=tls), server_id, directory,
                         start_file, start_gtid, not no_semi_sync, heartbeat, follow_by_gtid,
                         archive_url=archive_url, archive_options=storage_options,
                         archive_interval=archive_interval,
                         source_name=source_name and check_source_name(source_name),
                         keep_local=keep,
                         metrics_address=metrics_address, codec=codec, retain=retain,
                         window_interval=window_interval)
    stop = StopRequest()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop.request)
    run_stream(opts, stop=stop)


@main.command(epilog=example("mysqlbackup status --dir /var/lib/mysqlbackup/db1 --check"))
@dir_option
@json_option("the files, the checkpoint, the lock holder, lag and archive backlog (with "
             "--check: and the health verdict)")
@click.option("--check", is_flag=True, help="Health check: print one line and exit 0 when "
              "healthy, 1 when the daemon is down (no process holds the lock), stale, behind, "
              "the archive is behind, or the primary may soon purge the binlog the daemon is "
              "in (the line says which).")
@click.option("--max-lag", type=click.FloatRange(0), default=health.DEFAULT_MAX_LAG,
              show_default=True, metavar="SECONDS", help="--check: seconds behind the source "
              "(event times, 0 once a heartbeat named the durable position) allowed.")
@click.option("--max-stale", type=click.FloatRange(0), default=health.DEFAULT_MAX_STALE,
              show_default=True, metavar="SECONDS", help="--check: age of the checkpoint "
              "allowed (a streaming daemon rewrites it at least every 30 s).")
@click.option("--max-archive-lag", type=click.FloatRange(0),
              default=health.DEFAULT_MAX_ARCHIVE_LAG, show_default=True, metavar="SECONDS",
              help="--check: seconds since the last successful archive pass allowed while "
              "something durable is not archived yet.")
@click.option("--min-horizon", type=click.FloatRange(0), default=health.DEFAULT_MIN_HORIZON,
              show_default=True, metavar="SECONDS", help="--check: the least time left before "
              "the primary's binlog expiry could purge the file the daemon is in (from the "
              "daemon's last record of the primary's binlogs; a file already purged always "
              "fails).")
@handle_errors
def status(directory, as_json, check, max_lag, max_stale, max_archive_lag, min_horizon):
    """Show DIR's files, durable position, GTID set, last ACK, lag, archive backlog, how
    close the primary's binlog purge is, and which process holds the lock since when;
    --check: healthy or not (exit 0 or 1)."""
    text, code = health.run_status(directory, as_json, check,
                                   health.Limits(max_lag, max_stale, max_archive_lag,
                                                 min_horizon))
    click.echo(text)
    sys.exit(code)


def open_store(archive_url, archive_option, write=False):
    """The ArchiveStore of --archive. A reader's store is checked where it is listed
    (``ArchiveListing.require``); a writer's (``write``: base, archive import) before
    it starts: a file or a missing bucket is refused, a missing file:// root is created
    by the first write."""
    from mysqlbackup.archive.options import parse_options
    from mysqlbackup.archive.store import ArchiveStore  # fsspec loads only when needed
    if not archive_url:
        raise click.UsageError("--archive URL is required")
    store = ArchiveStore(archive_url, parse_options(archive_option))
    if write:
        store.check_writable()
    return store


def read_listing(archive_url, archive_option, source_name):
    """(ArchiveListing, the sources to read) of a reading command: a malformed
    --source-name is refused before the store is asked, then the listing's refusals
    (no archive there, no such source, the store failing) in one line each."""
    from mysqlbackup.archive.listing import ArchiveListing
    if source_name:
        check_source_name(source_name)
    listing = ArchiveListing(open_store(archive_url, archive_option))
    return listing, listing.require(source_name)


@main.command(epilog=example(f"mysqlbackup verify --archive {ARCHIVE} --source-name db1"))
@archive_options
@source_name_option("every")
@identity_option
@click.option("--deep", is_flag=True, help="Also decrypt every encrypted object (needs "
              "--identity): without it, those are checked by stored size and sha256 only.")
@json_option("objects_checked, problems, notes")
@handle_errors
def verify(archive_url, archive_option, source_name, identity, deep, as_json):
    """Check everything archived: magic, every event's CRC32, the chain of files
    (each ROTATE names the next, GTID sets continue), and each index against its file.

    Exits 0 only when all holds; otherwise prints every problem with file and offset
    (exit 1; an empty archive is one). No archive at the URL, no such source, or a
    store that fails: one line and its own exit code (mysqlbackup --help).
    On a live archive, an upload still in flight (its index not written yet, younger
    than 10 minutes) or an object removed since the listing (its file was sealed) is
    a NOTE, not a problem. Encrypted objects: without an identity, their stored size
    and sha256 against the index (what a backup host can check without seeing data);
    with --identity (or $MYSQLBACKUP_IDENTITY), everything above.
    """
    from mysqlbackup.archive.codec import keyring_from
    from mysqlbackup.guard.verify import format_lock, lock_state, verify_archive
    keyring = keyring_from(identity)
    if deep and keyring is None:
        raise click.UsageError("--deep needs --identity FILE (or $MYSQLBACKUP_IDENTITY)")
    store = read_listing(archive_url, archive_option, source_name)[0].store
    notes = []
    checked, problems = verify_archive(store, source_name, notes=notes, keyring=keyring)
    lock = lock_state(store, source_name)
    if as_json:
        doc = {"objects_checked": checked, "problems": problems, "notes": notes}
        if lock is not None:  # an S3 archive: its Object Lock state
            doc["lock"] = lock
        click.echo(json.dumps(doc, indent=1))
        sys.exit(ExitCode.FAILED if problems else ExitCode.OK)
    for note in notes:
        click.echo(f"NOTE {note}")
    if lock is not None:
        click.echo(format_lock(lock))
    for problem in problems:
        click.echo(f"PROBLEM {problem}")
    click.echo(f"{checked} objects checked, {len(problems)} problems")
    sys.exit(ExitCode.FAILED if problems else ExitCode.OK)


@main.group(cls=ArchiveGroup, epilog=example(f"mysqlbackup archive ls --archive {ARCHIVE}"))
def archive():
    """Look at the archive."""


@archive.command("ls", epilog=example(
    f"mysqlbackup archive ls --archive {ARCHIVE} --source-name db1"))
@archive_options
@source_name_option("every")
@json_option("files, sources, bases (as base list --json), windows, holes, unusable, "
             "problems, failovers")
@handle_errors
def archive_ls(archive_url, archive_option, source_name, as_json):
    """List archived files with their GTID and time ranges, the base backups (as base
    list shows them: method, end time, age, stored size, GTID, sound or damaged), and
    per source the window in which any moment can be restored (a base backup, then
    every binlog after it without a hole), naming each hole that splits it."""
    from mysqlbackup.archive.manifest import base_rows, format_base
    from mysqlbackup.guard.verify import format_recovery, list_archive, recovery_summary
    listing, sources = read_listing(archive_url, archive_option, source_name)
    rows = list_archive(listing.store, source_name, listing)
    summary = dict(recovery_summary(listing, source_name), bases=base_rows(listing, sources))
    if as_json:
        click.echo(json.dumps({"files": rows, "sources": sources, **summary}, indent=1))
        return
    for r in rows:
        file = r["file"] if r["epoch"] == 1 else f"{r['file']} (epoch {r['epoch']})"
        click.echo(f"{r['source']}  {file}  {r['kind']}  {r['size']} bytes  "
                   f"{r['transactions']} trx  gtid {shown(r['first_gtid'], '-')} .. "
                   f"{shown(r['last_gtid'], '-')}  "
                   f"{r['first_commit']} .. {r['last_commit']}")
    for line in [format_base(b) for b in summary["bases"]] + format_recovery(
            dict(summary, bases=[])):
        click.echo(line)
    if not sources:
        click.echo(f"archive {listing.store.url} is empty: nothing archived yet (stream "
                   "--archive and base write to it)")
    elif not summary["windows"]:
        click.echo("no moment is restorable yet: no base backup sits in the archived "
                   "binlogs (mysqlbackup base)")


@main.command(epilog=example("mysqlbackup inspect /var/lib/mysqlbackup/db1/mariadb-bin.000042"))
@click.argument("paths", nargs=-1, required=True, metavar="FILE_OR_URL...")
@json_option("a list, one object a file")
@handle_errors
def inspect(paths, as_json):
    """A quick look at binlog files (local paths or fsspec URLs), without Spark.

    Per file: server version, checksum, GTID range, event counts by type,
    transactions, whether the last one is complete, and the first error with its
    offset. Exits 0 when every event is whole, every CRC matches and the decoded
    events are sound; 1 otherwise. An incomplete last transaction alone is no error.
    """
    from mysqlbackup.cli.options import read_path_or_url
    from mysqlbackup.binlog.inspect import format_report, inspect_bytes
    reports = [inspect_bytes(read_path_or_url(p), p) for p in paths]
    if as_json:
        click.echo(json.dumps(reports, indent=1))
    else:
        for report in reports:
            click.echo("\n".join(format_report(report)))
    sys.exit(ExitCode.FAILED if any(r["error"] for r in reports) else ExitCode.OK)


@main.group(cls=CommandWithSubcommands, subcommand_metavar="[list [OPTIONS]]",
            epilog=example(f"mysqlbackup base --source mysql://backup@db1:3306 --archive "
                           f"{ARCHIVE} --source-name db1"))
@source_options(BASE_SOURCE_HELP, required=False)
@ssl_options()
@archive_options
@source_name_option("write")
@click.option("--method", type=click.Choice(["dump", "physical", "clone"]), default="dump",
              show_default=True, help="dump: the server's dump client (mariadb-dump / "
              "mysqldump), from any host. physical: mariadb-backup --stream=xbstream, which "
              "copies the data files and so must run ON the database host. clone (MySQL): "
              "the server's clone plugin (installed when missing) copies its datadir into "
              "a new folder under --clone-dir, which this command streams as tar and "
              "removes; ON the database host, as root or the mysqld user, with MySQL's "
              "mysqld on PATH or in /usr/sbin.")
@click.option("--clone-dir", type=click.Path(file_okay=False), help="With --method clone: "
              "a folder on the database host, writable by mysqld, with room for a full copy "
              "of the datadir (default: TMPDIR).")
@codec_options
@click.pass_context
@handle_errors
def base(ctx, source, password_file, tls, archive_url, archive_option, source_name, method,
         clone_dir, compress, encrypt_to):
    """Take a base backup of the source into the archive: SOURCE/base/ID/ (base list:
    the bases the archive holds).

    A consistent snapshot (dump: --single-transaction, writers are not blocked)
    with its GTID and binlog file:position, streamed through zstd and sha256 into
    the archive; its manifest (index.json) is written only after the object was
    read back and matched.

    The --source user needs these global privileges (ON *.*), checked before
    anything runs, on MariaDB and MySQL alike: dump: SELECT (the accounts are read
    from the mysql schema too), SHOW VIEW, TRIGGER, EVENT and REPLICATION CLIENT
    (MariaDB 10.5+ shows it as BINLOG MONITOR; SUPER will do), and on MySQL also
    RELOAD or FLUSH_TABLES; physical: RELOAD, PROCESS, LOCK TABLES and REPLICATION
    CLIENT (BINLOG MONITOR); clone (MySQL): BACKUP_ADMIN and REPLICATION CLIENT, and
    INSERT on mysql.plugin when the clone plugin is not loaded.
    """
    if ctx.invoked_subcommand:
        return
    if not source:
        raise click.UsageError("Missing option '--source'.", ctx)
    if clone_dir and method != "clone":
        raise click.UsageError("--clone-dir is for --method clone", ctx)
    from mysqlbackup.archive.codec import make_codec
    from mysqlbackup.base.run import take_base
    codec = make_codec(compress, encrypt_to)
    if source_name:
        check_source_name(source_name)
    spec = source_from_options(source, password_file, tls=tls)
    store = open_store(archive_url, archive_option, write=True)

    def report(raw, stored):
        click.echo(f"base: {raw / 2**20:.1f} MiB read, {stored / 2**20:.1f} MiB stored",
                   err=True)
    m = take_base(spec, store, source_name and check_source_name(source_name), method, report,
                  codec, clone_dir=clone_dir)
    gtid = "(none: the source keeps no GTIDs)" if m["gtid"] is None else m["gtid"] or "(empty)"
    click.echo(f"base {m['id']} of {m['source']}: {m['method']}, gtid {gtid}, "
               f"binlog {m['binlog_file']}:{m['binlog_pos']}, {m['raw_size']} bytes raw, "
               f"{m['stored_size']} stored, {m['details']['elapsed']:.1f} s")


@base.command("list", epilog=example(
    f"mysqlbackup base list --archive {ARCHIVE} --source-name db1"))
@archive_options
@source_name_option("every")
@json_option("bases: each with source, id, method, gtid, binlog_file, binlog_pos, "
             "start_time, end_time, raw_size, stored_size, server_version, age_seconds, "
             "status (sound or damaged) and problem")
@handle_errors
def base_list(archive_url, archive_option, source_name, as_json):
    """List the base backups of the archive, oldest first per source: id, method, end
    time, age, stored size, GTID, and status: sound (manifest and object there, the
    object of the manifest's stored size) or damaged (and why). Reads the listing and
    the manifests only, never a base's object (verify reads those)."""
    from mysqlbackup.archive.manifest import base_rows, format_base
    listing, sources = read_listing(archive_url, archive_option, source_name)
    rows = base_rows(listing, sources)
    if as_json:
        click.echo(json.dumps({"bases": rows}, indent=1))
        return
    for row in rows:
        click.echo(format_base(row))
    if not rows:
        click.echo(f"no base backup in archive {listing.store.url}"
                   + (f" for {source_name}" if source_name else "") + " (mysqlbackup base)")


@main.command(epilog=example(
    f"mysqlbackup retain --archive {ARCHIVE} --window 14d --keep-base 3",
    f"mysqlbackup retain --archive {ARCHIVE} --window 14d --keep-base 3 --yes"))
@archive_options
@source_name_option("every")
@click.option("--window", required=True, metavar="DURATION", help="Keep every moment of the "
              "last DURATION restorable (14d, 12h, 30m, 2w): the newest base older than that, "
              "and every binlog file from it on.")
@click.option("--keep-base", type=click.IntRange(0), default=0, show_default=True,
              metavar="N", help="Also keep the N newest older bases, without their binlogs "
              "(each its own moment only; restore needs binlogs after a base: load such a "
              "dump by hand).")
@yes_option("Delete what the plan lists. Without it nothing is deleted: a cron job or "
            "timer must pass --yes")
@click.option("--dry-run", is_flag=True, help="Print the plan and delete nothing (what "
              "retain does without --yes, minus the line saying so).")
@json_option("sources, each with its window before, kept bases, deletions planned, what "
             "was deleted (null without --yes), the lease that stopped it, the window after")
@handle_errors
def retain(archive_url, archive_option, source_name, window, keep_base, yes, dry_run, as_json):
    """Delete what no promised moment needs: binlog files before the base the window
    starts from, older bases beyond --keep-base, and objects left without their index
    by a run cut short. Prints the recovery window before and after. Never deletes
    what a running restore's lease names; each index goes before its object.

    Deleting needs --yes: without it, retain prints the plan (what it would delete,
    and why), deletes nothing and exits 0 (a line says to add --yes)."""
    from mysqlbackup.archive.window import parse_duration
    from mysqlbackup.retention.prune import outcome_json
    from mysqlbackup.retention.prune import retain as run_retain
    if yes and dry_run:
        raise UsageError("--yes and --dry-run exclude each other")
    seconds = parse_duration(window)
    if source_name:
        check_source_name(source_name)
    outcomes = run_retain(open_store(archive_url, archive_option), seconds, keep_base, not yes,
                          source_name or None, strict=True,
                          echo=(lambda line: None) if as_json else click.echo)
    if as_json:
        click.echo(json.dumps({"deleting": yes, "sources": [outcome_json(o) for o in outcomes]},
                              indent=1))
        return
    planned = sum(len(o.plan.deletions) for o in outcomes)
    if planned and not yes and not dry_run:
        click.echo(f"nothing deleted: add --yes to delete the {planned} "
                   f"item{'s' if planned > 1 else ''} listed above")


@archive.command("import", epilog=example(
    f"mysqlbackup archive import /srv/db1-binlogs --archive {ARCHIVE} --source-name db1"))
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@archive_options
@source_name_option("write", required=True, help="Name of the source in the archive "
                    "(required: the files do not say it); an import must continue what the "
                    "archive holds for it.")
@click.option("--torn-tail", type=click.Choice(["refuse", "truncate"]), default="refuse",
              show_default=True, help="A last file cut inside an event (a copy off a crashed "
              "server): refuse it, or archive its complete transactions as a partial file.")
@codec_options
@identity_option
@handle_errors
def archive_import(directory, archive_url, archive_option, source_name, torn_tail, compress,
                   encrypt_to, identity):
    """Import DIR's binlog files (copied off a server, with or without its .index file)
    with the daemon's checks and indexes: magic, every CRC, the chain by ROTATE and GTID
    sets. The last file without a ROTATE becomes the newest partial file. A broken file
    is refused with its name, offset and reason, after the files before it are archived.
    Objects are stored as the daemon stores them (--compress, --encrypt-to). Running it
    again skips what is archived already (no identity needed, except to compare a copy
    with the start of a longer encrypted sealed file)."""
    from mysqlbackup.archive.codec import keyring_from, make_codec
    from mysqlbackup.archive.importer import import_directory
    check_source_name(source_name)
    import_directory(open_store(archive_url, archive_option, write=True), directory,
                     source_name, torn_tail, click.echo,
                     make_codec(compress, encrypt_to), keyring_from(identity))


@archive.command("rekey", epilog=example(
    f"mysqlbackup archive rekey --archive {ARCHIVE} --identity /root/old.key "
    "--recipient /etc/mysqlbackup/new.pub"))
@archive_options
@source_name_option("every")
@identity_option
@click.option("--recipient", "recipients", multiple=True, required=True, metavar="FILE",
              type=click.Path(dir_okay=False), help="The new public keys (age1...) in FILE; "
              "repeatable. Every encrypted object ends encrypted to exactly these.")
@handle_errors
def archive_rekey(archive_url, archive_option, source_name, identity, recipients):
    """Re-encrypt every encrypted object (binlogs, segments, bases) to the --recipient
    keys, with a new file key each, so that the old identity opens none of them. Each
    object is checked against its index, written beside, read back, then put in place
    (never half-written: a run killed anywhere leaves an archive every reader reads,
    and a second run finishes it). Objects on the new keys already are skipped. Give the
    daemon and base backups the new recipients first (--encrypt-to), then rekey.
    Exits 1 when an object is left: under S3 Object Lock (with its date), or damaged."""
    from mysqlbackup.archive.codec import IdentityError, keyring_from, make_codec
    from mysqlbackup.rekey.run import run_rekey
    keyring = keyring_from(identity)
    if keyring is None:
        raise IdentityError("archive rekey needs --identity FILE (or $MYSQLBACKUP_IDENTITY): "
                            "the key that opens the objects now")
    listing, sources = read_listing(archive_url, archive_option, source_name)
    if not run_rekey(listing, sources, keyring, make_codec("none", recipients), click.echo):
        sys.exit(1)


@main.group("config", epilog=example("mysqlbackup config show stream"))
def config_group():
    """Look at the settings (config file, environment, command line)."""


@config_group.command("show", context_settings={"ignore_unknown_options": True,
                                                "allow_interspersed_args": False},
                      epilog=example("mysqlbackup config show --config /etc/mysqlbackup/db1"
                                     ".toml stream"))
@click.option("--config", "config_path", metavar="FILE", type=click.Path(dir_okay=False),
              help="The config file (as mysqlbackup --config FILE).")
@json_option("per command, each option's value and where it comes from")
@click.argument("words", nargs=-1, type=click.UNPROCESSED, metavar="[COMMAND [ARGS]...]")
@click.pass_context
@handle_errors
def config_show(ctx, config_path, as_json, words):
    """Print the settings each command would run with (every command, or COMMAND
    with ARGS as given): each option's value and where it comes from (command line,
    env VARIABLE, file, default). Passwords show as *** with their file or variable;
    URLs without credentials."""
    root = ctx.find_root()
    if config_path:
        read_config(root, None, config_path)
    sections = config.show_sections(root, words, given=bool(config_path))
    if as_json:
        click.echo(json.dumps({t: config.rows_json(r) for t, r in sections}, indent=1))
        return
    click.echo("\n\n".join("\n".join(config.format_rows(t, r)) for t, r in sections))


@main.command(epilog=example("mysqlbackup keygen --identity /root/archive.key --recipient "
                             "/etc/mysqlbackup/archive.pub"))
@click.option("--identity", required=True, metavar="ID_FILE", type=click.Path(dir_okay=False),
              help="Where the secret key goes (mode 0600). Keep it off the backup host.")
@click.option("--recipient", required=True, metavar="RECIPIENT_FILE",
              type=click.Path(dir_okay=False), help="Where the public key goes: give it to "
              "stream and base --encrypt-to.")
@handle_errors
def keygen(identity, recipient):
    """Make an age key pair (X25519) for archive encryption; never overwrites a file.

    The identity opens objects (verify --deep, replay, restore, or ``age -d -i``);
    the recipient file is all a backup host needs."""
    from mysqlbackup.archive.codec import key_id
    from mysqlbackup.archive.codec import keygen as make_pair
    public = make_pair(identity, recipient)
    click.echo(f"identity {identity} (mode 0600), recipient {recipient}: {public} "
               f"(key id {key_id(public)})")
