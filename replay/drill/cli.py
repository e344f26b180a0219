"""The ``mysqlbackup drill`` command (click), registered under the
``mysqlbackup.commands`` entry-point group (setup.cfg)."""

import sys

import click

from mysqlbackup.errors import ExitCode

from mysqlbackup.archive.names import check_source_name
from mysqlbackup.cli import archive_options, handle_errors, identity_option, source_name_option


@click.command()
@archive_options
@source_name_option
@click.option("--stop-datetime", metavar="ISO8601", help="Restore to just before this moment "
              "(UTC unless it names a zone); default: everything archived.")
@click.option("--workdir", type=click.Path(file_okay=False, exists=True), help="Where the "
              "scratch server's throwaway directory goes (default: $TMPDIR); it needs room "
              "for the restored data.")
@click.option("--keep", is_flag=True, help="Keep the scratch server's directory (stopped) "
              "afterwards, to look at.")
@click.option("--master", help="Spark master for the replay (default local[*]).")
@identity_option
@handle_errors
def drill(archive_url, archive_option, source_name, stop_datetime, workdir, keep, master,
          identity):
    """Restore drill: restore the archive into a scratch server started for it (a
    throwaway datadir on a free loopback port), then check that every transaction the
    indexes list up to the stop point was applied exactly once and that every table
    answers CHECKSUM TABLE. Prints the RTO (the restore's wall time). Exits 0 when all
    holds, 1 naming what failed (e.g. the base whose stored dump is not its manifest's):
    fit for a monthly timer. An archive that cannot be read (no archive there, no such
    source, the store failing) or bad input exits with its own code, as every
    command does (mysqlbackup --help)."""
    from mysqlbackup.archive.codec import keyring_from
    from mysqlbackup.archive.store import parse_options
    from replay.drill.run import DrillOptions, run_drill
    from replay.planning.options import build_selection
    from replay.restore.run import RestoreOptions
    if not archive_url:
        raise click.UsageError("--archive is required")
    if source_name:
        check_source_name(source_name)  # before the store is asked
    restore = RestoreOptions(archive_url, None, parse_options(archive_option), source_name,
                             build_selection(stop_datetime=stop_datetime), master=master,
                             stop_text=f"--stop-datetime {stop_datetime}" if stop_datetime
                             else "", keyring=keyring_from(identity))
    report = run_drill(DrillOptions(restore, workdir, keep),
                       progress=lambda line: click.echo(line, err=True))
    for line in report.lines:
        click.echo(line)
    for problem in report.problems:
        click.echo(f"FAILED {problem}")
    click.echo("drill FAILED" if report.problems else "drill passed")
    sys.exit(ExitCode.FAILED if report.problems else ExitCode.OK)
