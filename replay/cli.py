"""The ``mysqlbackup replay`` command (click), defined by the replay package.

It registers under the ``mysqlbackup.commands`` entry-point group (setup.cfg), which
``mysqlbackup.cli`` loads: ``mysqlbackup`` never imports ``replay``. spark-submit
(no installed entry points) adds it in ``replay/spark_main.py``.
"""

import click

from mysqlbackup.archive.names import check_source_name
from mysqlbackup.cli.options import (archive_options, example, handle_errors, identity_option,
                                     source_name_option, spark_options, stop_options,
                                     target_options)
from mysqlbackup.config import TARGET_PASSWORD_ENV
from mysqlbackup.errors import mask_url
from mysqlbackup.source.spec import source_from_options
from replay.job.engines import ENGINES, LOCAL_MAX_BYTES, check_engine
from replay.restore.run import APPLY_WAYS


@click.command(epilog=example(
    "mysqlbackup replay --archive s3://backups/mysql --source-name db1 --start-gtid 0-1-4200 "
    "--stop-datetime 2026-11-26T09:59:00Z --sql /tmp/db1-replay.sql"))
@archive_options
@source_name_option("one")
@target_options("Apply to this server. The user needs SUPER (MariaDB 10.5+: BINLOG REPLAY "
                "and REPLICATION SLAVE ADMIN) and write access to mysqlbackup_replay.")
@click.option("--apply", "apply_mode", type=click.Choice(APPLY_WAYS),
              default="statements", show_default=True, help="With --target: statements (this "
              "job applies them) or native (the target's own replication applier, fed by "
              "mysqlbackup serve on loopback, --workers parallel threads; a target "
              "on this machine, from --start-gtid or else from the GTID state before the "
              "archive's first file; no --database/--table/--rewrite-db or "
              "--start-position).")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Connections to the target where every transaction gets a commit of "
              "its own (a target with a binlog, or --merge 1). Transactions the binlog "
              "proves independent "
              "(one MariaDB group commit, or MySQL logical-clock overlap) run side by side, "
              "still committing in the original order; the rest run one by one.")
@click.option("--merge", type=click.IntRange(1, 10000), default=100, show_default=True,
              help="A target without a binlog keeps no GTIDs: up to N consecutive row-only "
              "transactions (committed by an XID) then share one target commit, the "
              "checkpoint row inside it, so the apply stays exactly-once. 1 turns it off.")
@click.option("--sql", "sql_path", type=click.Path(dir_okay=False),
              help="Write the statements to this file instead (dry run, for review).")
@click.option("--parquet", "parquet_url", metavar="URL", help="Write a change table instead: "
              "one row per row change (op, db, table, pk, before/after images as JSON, gtid, "
              "commit_time, file, position) as Parquet parts under URL, which must hold none "
              "yet (fsspec URL; the --archive-option values apply when it uses the archive's "
              "protocol). Needs binlog_row_metadata=FULL on the source (column names).")
@click.option("--typed", "typed_tables", is_flag=True, help="With --parquet: also write one "
              "dataset per source table under URL/_tables/<db>.<table>/<version>/ with typed "
              "columns (before/after as structs; DECIMAL, timestamps, binary...), "
              "partitioned by commit_date; an ALTER that changes a column's type starts "
              "another version; URL/_tables/_manifest.json lists versions and history.")
@click.option("--start-gtid", metavar="SET", help="GTID position the restored full backup "
              "already contains (mariadb-dump --gtid); transactions inside it are skipped.")
@click.option("--start-position", metavar="FILE:POS", help="Skip transactions before it.")
@stop_options()
@click.option("--exclude-gtids", metavar="GTID[,GTID...]", help="Skip these transactions "
              "(the bad DROP) and go on.")
@click.option("--database", "databases", multiple=True, help="Only this schema (repeatable).")
@click.option("--table", "tables", multiple=True, metavar="DB.TABLE",
              help="Only this table (repeatable).")
@click.option("--rewrite-db", "rewrites", multiple=True, metavar="FROM:TO",
              help="Apply schema FROM into schema TO (repeatable); names qualified inside "
                   "SQL text are not rewritten.")
@click.option("--allow-gaps", is_flag=True, help="Replay across holes in the archive chain.")
@click.option("--engine", type=click.Choice(ENGINES), default="auto", show_default=True,
              help="Who decodes the binlogs: spark (one Spark task per file, in parallel), "
              "local (this process, one file after another: no Spark start-up) or auto "
              f"(local under {LOCAL_MAX_BYTES // 1000000} MB to read without --database, "
              "--table, --rewrite-db, --master, --conf, --driver-host, --python or "
              "spark-submit, else spark). The output is the same either way.")
@spark_options
@identity_option
@handle_errors
def replay(archive_url, archive_option, source_name, target, target_password_file,
           target_tls, apply_mode, workers, merge, sql_path, parquet_url, typed_tables,
           start_gtid, start_position, stop, exclude_gtids, databases, tables, rewrites,
           allow_gaps, engine, master, spark_conf, driver_host, executor_python, identity):
    """Point-in-time replay of the archive with PySpark (one task per file; small files
    share one), applying only complete transactions in commit order, exactly once."""
    if [bool(target), bool(sql_path), bool(parquet_url)].count(True) != 1:
        raise click.UsageError("give exactly one of --target, --sql and --parquet")
    if typed_tables and not parquet_url:
        raise click.UsageError("--typed goes with --parquet")
    if apply_mode == "native" and not target:
        raise click.UsageError("--apply native applies to a server: give --target")
    if source_name:
        check_source_name(source_name)  # before the store is asked
    from mysqlbackup.archive.codec import keyring_from
    from mysqlbackup.archive.options import parse_options
    from replay.planning.plan import ReplayOptions
    from replay.job.run import run_replay
    from replay.planning.options import build_selection
    from replay.job.progress import reporter
    from replay.job.sinks.sqlfile import SqlFileSink
    from replay.job.sinks.target import TargetApplier
    from replay.spark.context import SparkSetup
    spark_setup = SparkSetup.of(spark_conf, driver_host, executor_python)  # a
    # malformed --conf pair fails before anything is read
    check_engine(engine, master, spark_setup.given())
    selection = build_selection(start_gtid, start_position, stop, exclude_gtids, databases,
                                tables, rewrites)
    opts = ReplayOptions(archive_url or _missing("--archive"), parse_options(archive_option),
                         source_name, selection, allow_gaps, master,
                         keyring=keyring_from(identity), engine=engine, spark=spark_setup)
    if target:
        spec = source_from_options(target, target_password_file, TARGET_PASSWORD_ENV,
                                   target_tls)
        if apply_mode == "native":
            return _replay_native(opts, spec, workers)
        sink = TargetApplier(spec, workers, merge, start=selection.start_gtids)
    elif sql_path:
        sink = SqlFileSink(sql_path).check()  # a bad path fails before Spark starts
    else:
        from replay.job.sinks.parquet import ParquetSink, options_for
        sink = ParquetSink(parquet_url, options_for(parquet_url, opts.archive_url,
                                                    opts.archive_options),
                           typed_tables=typed_tables)
        sink.open(None)  # a taken or unusable destination fails before Spark starts
    progress = reporter(lambda line: click.echo(line, err=True))  # a bar on a terminal
    try:
        summary = run_replay(opts, sink, progress=progress)
    finally:
        progress.close()
    if parquet_url:
        click.echo(f"parquet: {sink.rows} row changes in {len(sink.parts)} parts at "
                   f"{mask_url(parquet_url)}")
        if typed_tables:
            click.echo(f"parquet: {len(sink.history.spans)} typed tables in "
                       f"{len(sink.typed_parts)} parts at {mask_url(parquet_url)}/_tables")
        if sink.left_out:
            first = sink.left_out[0]
            click.echo(f"parquet: warning: {len(sink.left_out)} statement-based DML "
                       f"statements are not in the table (no row events; the first: "
                       f"{first['statement']} of {first['gtid'] or '-'} at {first['file']}:"
                       f"{first['position']}); _SUCCESS names them", err=True)
    where = (f"in {summary.tasks} Spark tasks" if summary.engine == "spark"
             else "decoded here, no Spark")
    click.echo(f"replay of {summary.source}: {summary.applied} applied, "
               f"{summary.skipped} skipped, {len(summary.dropped_incomplete)} incomplete "
               f"dropped, {summary.files} files {where}; stopped: {summary.stop_reason}")
    if target:
        click.echo(f"target: {summary.applied} transactions in "
                   f"{summary.target_commits} commits; workers: {summary.workers} "
                   f"connection(s) used, {summary.parallel_applied} transactions in "
                   f"parallel batches")


def _replay_native(opts, spec, workers):
    """``--apply native``: the target's replication applier, fed by serve."""
    from replay.job.progress import reporter
    from replay.restore.native import run_native
    progress = reporter(lambda line: click.echo(line, err=True))
    try:
        summary = run_native(opts, spec, workers, progress=progress)
    finally:
        progress.close()
    click.echo(f"replay of {summary.source}: {summary.applied} applied by the target's "
               f"replication applier (native), {summary.files} files; stopped: "
               f"{summary.stop_reason}")
    click.echo(f"target: at GTID {summary.gtid_pos}")


def _missing(option):
    raise click.UsageError(f"{option} is required")
