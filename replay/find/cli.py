"""The ``mysqlbackup archive find`` command (click), defined by the replay package and
registered under the ``mysqlbackup.archive_commands`` entry-point group (setup.cfg),
which ``mysqlbackup.cli.ArchiveGroup`` loads."""

import sys

import click

from mysqlbackup.cli import archive_options, handle_errors, identity_option, source_name_option
from mysqlbackup.cli.options import example
from replay.find.criteria import KINDS


@click.command("find", epilog=example(
    "mysqlbackup archive find --archive s3://backups/mysql --table shop.orders --type delete "
    "--type ddl --min-rows 100 --since 2026-11-26T09:00:00Z"))
@archive_options
@source_name_option
@click.option("--table", "tables", multiple=True, metavar="DB.TABLE",
              help="Only transactions that change this table (repeatable; shell wildcards: "
              "shop.*). A statement on its whole schema (DROP DATABASE) counts.")
@click.option("--type", "kinds", multiple=True, type=click.Choice(KINDS), metavar="|".join(KINDS),
              help="Only changes of this kind (repeatable). ddl: any statement that is not "
              "DML (DROP, ALTER, TRUNCATE, RENAME, CREATE, GRANT, ...).")
@click.option("--since", metavar="ISO8601", help="Only transactions committed at or after "
              "it; UTC unless it names a zone.")
@click.option("--until", metavar="ISO8601", help="Only transactions committed at or before "
              "it; UTC unless it names a zone.")
@click.option("--min-rows", type=click.IntRange(1), metavar="N", help="Only transactions "
              "that change at least N rows (of the tables and kinds asked for); DDL and "
              "statement-based DML, whose rows the binlog does not tell, are kept.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document: source, "
              "matches (gtid, commit_time, epoch, file, start, end, rows, changes, matched, "
              "statement, statement_from), scanned.")
@identity_option
@handle_errors
def find(archive_url, archive_option, source_name, tables, kinds, since, until, min_rows,
         as_json, identity):
    """List the archived transactions that match, oldest first: one line each with
    GTID, commit time (UTC), FILE:START-END, the tables changed with kind and rows,
    and the statement (DDL, statement-based DML, or the query the rows were annotated
    with: MariaDB's ANNOTATE_ROWS, MySQL's ROWS_QUERY) after ' -- '.

    Exits 0 when something matched, 1 when nothing did (as grep does), 2 on bad
    usage. A summary line (transactions and MB read, MB/s) goes to stderr. No Spark:
    the files are streamed one after the other; those the time range excludes (by
    their index) are not read.

    \b
    The last bad DELETE of shop.orders, and its GTID for restore --stop-before-gtid:
      mysqlbackup archive find --archive s3://bucket/prefix --table shop.orders \\
          --type delete --min-rows 100 --since 2026-11-26T09:00:00Z
      mysqlbackup archive find --archive URL --table shop.orders --type delete \\
          --type ddl | tail -1 | cut -d' ' -f1
    """
    from mysqlbackup.archive.codec import keyring_from
    from mysqlbackup.archive.options import parse_options
    from replay.find.criteria import Criteria
    from replay.find.output import JsonWriter, match_line
    from replay.find.run import find as run_find
    if not archive_url:
        raise click.UsageError("--archive URL is required")
    criteria = Criteria.parse(tables, kinds, since, until, min_rows)
    write = sys.stdout.write
    if as_json:
        writer = JsonWriter(write)
        scanned = run_find(archive_url, parse_options(archive_option), source_name, criteria,
                           writer.match, keyring_from(identity), on_plan=writer.begin)
        writer.end(scanned.as_dict())
    else:
        scanned = run_find(archive_url, parse_options(archive_option), source_name, criteria,
                           lambda summary, hits: write(match_line(summary, hits) + "\n"),
                           keyring_from(identity))
    sys.stdout.flush()
    click.echo(scanned.line(), err=True)
    sys.exit(0 if scanned.matches else 1)
