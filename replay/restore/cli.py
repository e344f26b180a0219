"""The ``mysqlbackup restore`` command (click), registered under the
``mysqlbackup.commands`` entry-point group like ``replay`` (setup.cfg);
spark-submit adds it in ``replay/spark_main.py``."""

import click

from mysqlbackup.archive.names import check_source_name
from mysqlbackup.cli import (archive_options, handle_errors, identity_option, source_name_option,
                             ssl_options)
from mysqlbackup.source.spec import PASSWORD_ENV, source_from_options
from replay.restore.run import APPLY_MODES, USERS_MODES

TARGET_PASSWORD_ENV = ("MYSQLBACKUP_TARGET_PASSWORD", PASSWORD_ENV)


@click.command()
@archive_options
@source_name_option
@click.option("--target", metavar="mysql://USER@HOST:PORT", help="The server to restore into "
              "(password: $MYSQLBACKUP_TARGET_PASSWORD, else $MYSQLBACKUP_PASSWORD, or "
              "--target-password-file). Not needed with --dry-run.")
@click.option("--target-password-file", type=click.Path(dir_okay=False))
@ssl_options("target-")
@click.option("--stop-datetime", metavar="ISO8601", help="Stop before the first transaction "
              "committed at or after it; UTC unless it names a zone (never local time).")
@click.option("--stop-before-gtid", metavar="GTID", help="Stop before this transaction.")
@click.option("--stop-position", metavar="FILE:POS", help="Stop before a transaction ending "
              "past it.")
@click.option("--base", "base_id", metavar="ID", help="Start from this base backup (default: "
              "the newest whose GTID position is within the stop point's).")
@click.option("--dry-run", is_flag=True, help="Print the plan (base, binlog files, GTIDs, "
              "bytes to read, the moment the target will be at) and touch nothing.")
@click.option("--into-nonempty", is_flag=True, help="Load into a target that already holds "
              "schemas (the dump drops and recreates the tables it holds).")
@click.option("--datadir", type=click.Path(file_okay=False), help="Physical bases: a new "
              "directory to restore into; a server is started on it at the --target "
              "host:port (the target user must be one of the source's users).")
@click.option("--table", "tables", multiple=True, metavar="DB.TABLE", help="Restore only "
              "this table (repeatable): its part of the base, then its row changes; with "
              "--rewrite-db into another schema of a live server (--into-nonempty implied).")
@click.option("--rewrite-db", "rewrites", multiple=True, metavar="FROM:TO",
              help="With --table: restore schema FROM's tables into schema TO (repeatable).")
@click.option("--apply", "apply_mode", type=click.Choice(APPLY_MODES),
              default="statements", show_default=True, help="How the binlogs are applied: "
              "statements (the replay job: Spark decodes, workers apply) or native (the "
              "target's own replication applier, fed by mysqlbackup serve on loopback; "
              "a MariaDB target on this machine with a server_id other than the source's, "
              "a dump base, no --table).")
@click.option("--users", type=click.Choice(USERS_MODES), default="apply", show_default=True,
              help="A dump base's accounts and grants: apply (created on the target after "
              "the data; before anything is loaded, the target user is checked for what "
              "they need: CREATE USER, the privileges granted with GRANT OPTION, PROXY ON "
              "''@'%' WITH GRANT OPTION) or skip (data, routines and events only). No effect "
              "on a physical base (its accounts come with its datadir) nor with --table.")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Replay connections on a target with a binlog (see replay --help); "
              "with --apply native the target's slave_parallel_threads for the run.")
@click.option("--merge", type=click.IntRange(1, 10000), default=100, show_default=True,
              help="Source transactions per target commit on a target without a binlog.")
@click.option("--master", help="Spark master (default local[*]); spark-submit works too.")
@identity_option
@handle_errors
def restore(archive_url, archive_option, source_name, target, target_password_file, target_tls,
            stop_datetime, stop_before_gtid, stop_position, base_id, dry_run, into_nonempty,
            datadir, tables, rewrites, apply_mode, users, workers, merge, master, identity):
    """Restore a source to a point in time: its base backup (chosen by GTID), then its
    binlogs up to the stop point, exactly once; run again after an interruption, it
    resumes. No stop: everything archived."""
    from mysqlbackup.archive.codec import keyring_from
    from mysqlbackup.archive.names import parse_base_id
    from mysqlbackup.archive.store import parse_options
    from replay.planning.options import build_selection
    from replay.progress import reporter
    from replay.restore.run import RestoreOptions, run_restore
    if not archive_url:
        raise click.UsageError("--archive is required")
    if not target and not dry_run:
        raise click.UsageError("--target is required (or --dry-run)")
    if source_name:
        check_source_name(source_name)  # before the store is asked
    stops = [(o, v) for o, v in (("--stop-datetime", stop_datetime), ("--stop-before-gtid",
             stop_before_gtid), ("--stop-position", stop_position)) if v]
    if len(stops) > 1:
        raise click.UsageError("give at most one of --stop-datetime, --stop-before-gtid and "
                               "--stop-position")
    if base_id:
        parse_base_id(base_id)
    if rewrites and not tables:
        raise click.UsageError("--rewrite-db needs --table (restore is of the whole source "
                               "otherwise)")
    selection = build_selection(stop_datetime=stop_datetime, stop_before_gtid=stop_before_gtid,
                                stop_position=stop_position, tables=tables, rewrites=rewrites)
    if apply_mode == "native" and tables:
        raise click.UsageError("--apply native applies whole binlogs: --table needs --apply "
                               "statements")
    if datadir and target_tls.required:
        raise click.UsageError("--datadir starts a server of its own, without TLS: "
                               "--target-ssl-mode must be preferred or disabled")
    spec = source_from_options(target, target_password_file, TARGET_PASSWORD_ENV,
                               target_tls) if target else None
    opts = RestoreOptions(archive_url, spec, parse_options(archive_option), source_name,
                          selection, base_id, dry_run, into_nonempty, workers, merge, master,
                          " ".join(f"{o} {v}" for o, v in stops), datadir,
                          keyring_from(identity), apply=apply_mode, users=users)
    progress = reporter(lambda line: click.echo(line, err=True))  # a bar on a terminal
    try:
        run_restore(opts, echo=click.echo, progress=progress)
    finally:
        progress.close()
