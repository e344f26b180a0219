"""The ``mysqlbackup drill`` command (click), registered under the
``mysqlbackup.commands`` entry-point group (setup.cfg)."""

import json
import sys

import click

from mysqlbackup.archive.names import check_source_name
from mysqlbackup.cli.options import (archive_options, example, handle_errors, identity_option,
                                     json_option, metrics_file_option, source_name_option,
                                     stop_options)
from mysqlbackup.errors import ExitCode


@click.command(epilog=example(
    "mysqlbackup drill --archive s3://backups/mysql --source-name db1 --workdir /var/tmp"))
@archive_options
@source_name_option("one")
@stop_options(helps={
    "--stop-datetime": "Restore to just before this moment (UTC unless it names a zone).",
    "--stop-before-gtid": "Restore to just before this transaction.",
    "--stop-position": "Restore to just before a transaction ending past it."})
@click.option("--workdir", type=click.Path(file_okay=False, exists=True), help="Where the "
              "scratch server's throwaway directory goes (default: $TMPDIR); it needs room "
              "for the restored data.")
@click.option("--keep", is_flag=True, help="Keep the scratch server's directory (stopped) "
              "afterwards, to look at.")
@click.option("--master", help="Spark master for the replay (default local[*]).")
@metrics_file_option
@identity_option
@json_option("passed, base, rto_seconds, lines, problems")
@handle_errors
def drill(archive_url, archive_option, source_name, stop, workdir, keep, master,
          metrics_file, identity, as_json):
    """Restore drill: restore the archive into a scratch server started for it (the
    first mariadbd and mariadb-install-db on PATH for a MariaDB source, MySQL's own
    mysqld and mysql client for a MySQL one, its GTID mode as the source's; a throwaway
    datadir on a free loopback port; one of an older series than the base's source is
    refused before any restore: exit 2, naming both versions), then check that every
    transaction the indexes list up to the stop point was applied exactly once (by GTID;
    by count for a source that keeps no GTIDs) and that every table answers CHECKSUM
    TABLE. Prints the RTO (the restore's wall time). Exits 0 when all
    holds, 1 naming what failed (e.g. the base whose stored dump is not its manifest's):
    fit for a monthly timer. An archive that cannot be read (no archive there, no such
    source, the store failing) or bad input exits with its own code, as every
    command does (mysqlbackup --help)."""
    from mysqlbackup.archive.codec import keyring_from
    from mysqlbackup.archive.options import parse_options
    from replay.drill.run import DrillOptions, run_drill
    from replay.planning.options import build_selection
    from replay.job.progress import ProgressFile, reporter
    from replay.restore.run import RestoreOptions
    if not archive_url:
        raise click.UsageError("--archive is required")
    if source_name:
        check_source_name(source_name)  # before the store is asked
    restore = RestoreOptions(archive_url, None, parse_options(archive_option), source_name,
                             build_selection(stop=stop), master=master,
                             keyring=keyring_from(identity),
                             apply="statements")  # its check reads what the scratch logged
    progress = reporter(lambda line: click.echo(line, err=True))  # a bar on a terminal
    if metrics_file:
        progress = ProgressFile(progress, metrics_file, {"source": source_name or "",
                                                          "command": "drill"})
    try:
        report = run_drill(DrillOptions(restore, workdir, keep), progress=progress)
        if metrics_file:
            progress.done()
    finally:
        progress.close()
    code = ExitCode.FAILED if report.problems else ExitCode.OK
    if as_json:
        click.echo(json.dumps({"passed": not report.problems, "base": report.base_id,
                               "rto_seconds": report.rto, "lines": report.lines,
                               "problems": report.problems}, indent=1))
        sys.exit(code)
    for line in report.lines:
        click.echo(line)
    for problem in report.problems:
        click.echo(f"FAILED {problem}")
    click.echo("drill FAILED" if report.problems else "drill passed")
    sys.exit(code)
