"""The ``mysqlbackup undo`` command (click), registered under the ``mysqlbackup.commands``
entry-point group like ``replay`` (setup.cfg)."""

import click

from mysqlbackup.archive.names import check_source_name
from mysqlbackup.cli.options import (archive_options, example, handle_errors, identity_option,
                                     source_name_option, target_options)
from mysqlbackup.config import TARGET_PASSWORD_ENV
from mysqlbackup.source.spec import source_from_options


@click.command(epilog=example(
    "mysqlbackup undo --archive s3://backups/mysql --gtid 0-1-4711 --target "
    "mysql://admin@db1:3306 --dry-run"))
@archive_options
@source_name_option("one")
@click.option("--gtid", "gtids", multiple=True, metavar="GTID",
              help="A transaction to undo (MariaDB D-S-N, MySQL UUID[:TAG]:N; repeatable: "
              "undone newest first). archive find shows them.")
@click.option("--at", "positions", multiple=True, metavar="FILE:POS",
              help="A transaction to undo by where it starts (archive find's FILE:START), for "
              "a source without GTIDs (MySQL's gtid_mode=OFF); repeatable, with --gtid too.")
@target_options("Undo on this server (normally the source itself, or its new primary): "
                "in one transaction, every row checked first. The user needs SELECT and "
                "the tables' write privileges, and BINLOG REPLAY or SUPER (MariaDB), "
                "BINLOG_ADMIN or SUPER (MySQL).")
@click.option("--sql", "sql_path", type=click.Path(dir_okay=False),
              help="Write the reversal as a SQL script instead (for review, or for a server "
              "this tool cannot reach); it carries no conflict check.")
@click.option("--table", "tables", multiple=True, metavar="DB.TABLE",
              help="Undo only this table's rows of the transactions (repeatable).")
@click.option("--lock-timeout", type=click.IntRange(1, 3600), default=10, show_default=True,
              metavar="SECONDS", help="How long to wait for a row another session holds "
              "locked; then the undo fails (exit 1) and changes nothing.")
@click.option("--dry-run", is_flag=True, help="With --target: check every row and apply "
              "the reversal, then roll it back; says whether the undo would go through.")
@identity_option
@handle_errors
def undo(archive_url, archive_option, source_name, gtids, positions, target,
         target_password_file,
         target_tls, sql_path, tables, lock_timeout, dry_run, identity):
    """Undo transactions without a restore: their row changes reversed (a DELETE's rows
    inserted back, an INSERT's deleted, an UPDATE's rows set back), in one new transaction
    of the target, and only if every row it touches is still exactly as the transactions
    left it; else nothing changes and the command exits 12 naming the rows that differ.

    Refused, saying why: DDL and TRUNCATE, statement-based DML, row images that are not
    FULL, a table with triggers, not InnoDB, or changed since; foreign keys that cascade
    (MariaDB, MySQL 8: their binlog lacks the cascaded rows). Restore --table is the way
    for those."""
    if not gtids and not positions:
        raise click.UsageError("name the transactions to undo: --gtid GTID or --at FILE:POS")
    if bool(target) == bool(sql_path):
        raise click.UsageError("give exactly one of --target and --sql")
    if dry_run and not target:
        raise click.UsageError("--dry-run checks on a server: give --target")
    if not archive_url:
        raise click.UsageError("--archive is required")
    if source_name:
        check_source_name(source_name)
    from mysqlbackup.archive.codec import keyring_from
    from mysqlbackup.archive.options import parse_options
    from replay.undo.run import UndoOptions, run_undo
    for table in tables:
        if table.count(".") != 1 or not all(table.split(".")):
            raise click.UsageError(f"--table takes DB.TABLE, got {table!r}")
    spec = source_from_options(target, target_password_file, TARGET_PASSWORD_ENV,
                               target_tls) if target else None
    opts = UndoOptions(archive_url, parse_options(archive_option), source_name, tuple(gtids),
                       tuple(positions), spec, sql_path, tuple(t.lower() for t in tables), dry_run,
                       keyring_from(identity), lock_timeout)
    click.echo(run_undo(opts).line())
