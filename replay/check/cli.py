"""The ``mysqlbackup check`` command (click), registered under the
``mysqlbackup.commands`` entry-point group (setup.cfg).

A monitoring plugin: whatever goes wrong, it prints a ``CHECK STATE - ...`` line and
exits with a Nagios code; bad usage too (UNKNOWN, as the plugin guidelines ask)."""

import sys
import time
import traceback
from dataclasses import replace

import click

from mysqlbackup.errors import UsageError, mask_url
from mysqlbackup.localdir.health import DEFAULT_MAX_ARCHIVE_LAG
from mysqlbackup.localdir.horizon import DEFAULT_MIN_HORIZON
from replay.check.verdict import UNKNOWN, Limits, format_limit

EPILOG = """\b
Exit codes (Nagios's, not the table of mysqlbackup --help): 0 OK; 2 CRITICAL (a
check failed: one line each after the first; or the archive is empty); 3 UNKNOWN
(the archive cannot be read at all: no archive at that URL, the store unreachable
or refusing; or bad usage). 1 (WARNING) is not used.

\b
Example (cron, a systemd timer, or a Nagios/Icinga command):
  mysqlbackup check --archive s3://backups/mysql --source-name db1 \\
      --dir /var/lib/mysqlbackup/db1 --max-base-age 26h --max-archive-lag 5m
  CHECK OK - source db1: restorable to 2026-11-26T10:00:03Z (base 20261126T070012.345Z, 3h ago; archive 2 s behind the daemon)
"""


class NagiosCommand(click.Command):
    """A command whose usage errors exit 3 (UNKNOWN) with a ``CHECK UNKNOWN`` line."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            raise unknown_usage(e) from None


def unknown_usage(error):
    """``error`` (a click.UsageError) made to exit 3, its ``CHECK UNKNOWN`` line printed."""
    click.echo(f"CHECK UNKNOWN - bad usage: {error.format_message()}")
    error.exit_code = UNKNOWN
    return error


def _duration(ctx, param, value):
    """A duration option (``26h``, ``5m``, ``90s``, ``14d``) in seconds; None stays."""
    from mysqlbackup.archive.window import parse_duration
    if value is None:
        return None
    try:
        return float(parse_duration(value))
    except UsageError as e:
        raise click.BadParameter(str(e), ctx, param) from None


@click.command(cls=NagiosCommand, epilog=EPILOG)
@click.option("--archive", "archive_url", metavar="URL", help="The archive: file:///path, "
              "s3://bucket/prefix, or any installed fsspec protocol.")
@click.option("--archive-option", "archive_option", multiple=True, metavar="KEY=VALUE",
              help="fsspec storage option, repeatable (e.g. endpoint_url=http://"
              "127.0.0.1:9000).")
@click.option("--source-name", help="Check this source only (default: every source of the "
              "archive, and the one the --dir daemon archives).")
@click.option("--dir", "directory", type=click.Path(file_okay=False), help="The daemon's "
              "directory: enables the archive-lag check against its durable position "
              "(without it, the archive lag is not checked: the archive alone cannot tell "
              "an idle source from a stalled daemon).")
@click.option("--max-base-age", default="26h", show_default=True, callback=_duration,
              metavar="DURATION", help="Age allowed of the base a restore would start from "
              "(since it ended): 90s, 5m, 26h, 14d.")
@click.option("--max-archive-lag", callback=_duration, metavar="DURATION",
              help=f"With --dir: how far the archive may be behind the daemon (seconds since "
              f"the archiver's last successful pass while something durable is not archived, "
              f"as status --check reads it) [default: "
              f"{format_limit(DEFAULT_MAX_ARCHIVE_LAG)}].")
@click.option("--min-horizon", callback=_duration, metavar="DURATION",
              help=f"With --dir: the least time left before the primary's binlog expiry "
              f"could purge the file the daemon is in (its last record of the primary's "
              f"binlogs) [default: {format_limit(DEFAULT_MIN_HORIZON)}].")
@click.option("--retain-window", "lock_window", callback=_duration, metavar="DURATION",
              help="The retention window you promise (retain --window): fail when the "
              "newest base's manifest or binlog index is locked (S3 Object Lock) for less "
              "than it, or not at all.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document: the status, "
              "and per source each check's name, ok (true, false, or null when not "
              "checked) and detail.")
@click.option("--identity", metavar="FILE", type=click.Path(dir_okay=False), help="age "
              "identity file: also check that it opens every encrypted object of the plan "
              "(default: the file $MYSQLBACKUP_IDENTITY names; without one, the keys of an "
              "encrypted archive are not checked).")
def check(archive_url, archive_option, source_name, directory, max_base_age, max_archive_lag,
          min_horizon, lock_window, as_json, identity):
    """Can a restore to the newest archived moment be planned right now? Exit 0 only
    when, for every source checked, a base sits in the archived binlogs, the binlogs
    from it to the newest archived moment are contiguous (the restore's own plan: the
    one restore --dry-run prints), that base is younger than --max-base-age, and, with
    --dir, the archive is within --max-archive-lag of the daemon's durable position and
    the primary is not about to purge the binlog the daemon is in (--min-horizon).

    One Nagios-style line (CHECK OK / CHECK CRITICAL / CHECK UNKNOWN), then one line per
    failed check; --json for one JSON document. It reads the archive's listing,
    indexes and manifests only (no object is downloaded) and the daemon's directory:
    status --check watches the daemon, verify reads every byte, drill restores."""
    try:
        access, limits = _arguments(archive_url, archive_option, source_name, directory,
                                    max_base_age, max_archive_lag, identity, min_horizon)
        limits = replace(limits, lock_window=lock_window)
        report = _run(access, source_name, directory, limits)
    except click.UsageError as e:
        raise unknown_usage(e) from None
    click.echo(report.document() if as_json else "\n".join(report.lines()))
    sys.exit(report.code)


def _arguments(archive_url, archive_option, source_name, directory, max_base_age,
               max_archive_lag, identity, min_horizon=None):
    """(ArchiveAccess, Limits) of the options; click.UsageError."""
    from mysqlbackup.archive.codec import keyring_from
    from mysqlbackup.archive.names import check_source_name
    from mysqlbackup.archive.options import parse_options
    from replay.check.gather import ArchiveAccess
    if not archive_url:
        raise click.UsageError("--archive URL is required")
    for name, given, what in (("--max-archive-lag", max_archive_lag, "the archive lag"),
                              ("--min-horizon", min_horizon, "the purge horizon")):
        if given is not None and not directory:
            raise click.UsageError(f"{name} needs --dir (the daemon's directory): without it "
                                   f"{what} is not checked")
    try:
        if source_name:
            check_source_name(source_name)  # before the store is asked
        access = ArchiveAccess(archive_url, parse_options(archive_option),
                               keyring_from(identity))
    except UsageError as e:
        raise click.UsageError(mask_url(e)) from None
    lag = DEFAULT_MAX_ARCHIVE_LAG if max_archive_lag is None else max_archive_lag
    horizon = DEFAULT_MIN_HORIZON if min_horizon is None else min_horizon
    return access, Limits(max_base_age, lag, horizon)


def _run(access, source_name, directory, limits):
    """The Report; a bug prints its UNKNOWN line and traceback and exits 3."""
    from replay.check.gather import run_check
    try:
        return run_check(access, source_name, directory, limits, time.time())
    except Exception as e:  # noqa: BLE001 - a monitoring plugin never exits with a traceback alone
        click.echo(f"CHECK UNKNOWN - internal error: {type(e).__name__}: {mask_url(e)}")
        traceback.print_exc()
        sys.exit(UNKNOWN)
