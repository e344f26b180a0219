"""The ``mysqlbackup restore`` command (click), registered under the
``mysqlbackup.commands`` entry-point group like ``replay`` (setup.cfg);
spark-submit adds it in ``replay/spark_main.py``."""

import json

import click

from mysqlbackup.archive.names import check_source_name
from mysqlbackup.cli.options import (archive_options, example, handle_errors, identity_option,
                                     json_option, metrics_file_option, source_name_option,
                                     spark_options, stop_options, target_options)
from mysqlbackup.config import TARGET_PASSWORD_ENV
from mysqlbackup.errors import UsageError
from mysqlbackup.source.spec import source_from_options
from replay.restore.plan import LATEST, base_wanted
from replay.job.engines import ENGINES, check_engine
from replay.restore.run import APPLY_MODES, USERS_MODES


@click.command(epilog=example(
    "mysqlbackup restore --archive s3://backups/mysql --source-name db1 --stop-datetime "
    "2026-11-26T09:59:00Z --target mysql://admin@db2:3306 --dry-run"))
@archive_options
@source_name_option("one")
@target_options("The server to restore into. Not needed with --dry-run.")
@stop_options()
@click.option("--base", "base_id", metavar=f"ID|{LATEST}", help="Start from this base "
              f"backup (base list shows them). Default, or {LATEST} (any case) to say so: "
              "the newest base that can reach the stop point (its GTID position within "
              "the stop point's, the binlogs from it contiguous to it); a base whose "
              "manifest does not read is skipped.")
@click.option("--dry-run", is_flag=True, help="Print the plan (base, binlog files, GTIDs, "
              "bytes to read, the moment the target will be at) and touch nothing.")
@json_option("with --dry-run, the plan: source, base, binlog_files, stop, bytes_to_read, "
             "lines (the text it prints)")
@click.option("--into-nonempty", is_flag=True, help="Load into a target that already holds "
              "schemas (the dump drops and recreates the tables it holds).")
@click.option("--datadir", type=click.Path(file_okay=False), help="Physical bases: a new "
              "directory to restore into; a server is started on it at the --target "
              "host:port (the target user must be one of the source's users), with "
              "DIRECTORY.tmp beside it as its own tmpdir.")
@click.option("--table", "tables", multiple=True, metavar="DB.TABLE", help="Restore only "
              "this table (repeatable): its part of the base, then its row changes; with "
              "--rewrite-db into another schema of a live server (--into-nonempty implied).")
@click.option("--rewrite-db", "rewrites", multiple=True, metavar="FROM:TO",
              help="With --table: restore schema FROM's tables into schema TO (repeatable).")
@click.option("--apply", "apply_mode", type=click.Choice(APPLY_MODES),
              default="auto", show_default=True, help="How the binlogs are applied: "
              "statements (the replay job: the binlogs decoded, workers apply), native (the "
              "target's own replication applier, fed by mysqlbackup serve on loopback; "
              "a target on this machine with a server_id other than the source's, "
              "a dump base, no --table) or auto (native where the base and the target "
              "allow it, else statements; the plan says which and why).")
@click.option("--engine", type=click.Choice(ENGINES), default="auto", show_default=True,
              help="With statements, who decodes the binlogs: spark (one Spark task per "
              "file, in parallel), local (this process, one file after another: no Spark "
              "start-up) or auto (local under 256 MB to read without --table, --master, "
              "--conf, --driver-host or --python, else spark).")
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
@spark_options
@metrics_file_option
@identity_option
@handle_errors
def restore(archive_url, archive_option, source_name, target, target_password_file, target_tls,
            stop, base_id, dry_run, as_json,
            into_nonempty, datadir, tables, rewrites, apply_mode, engine, users, workers, merge,
            master, spark_conf, driver_host, executor_python, metrics_file, identity):
    """Restore a source to a point in time: its base backup (chosen by GTID), then its
    binlogs up to the stop point, exactly once; run again after an interruption, it
    resumes. No stop: everything archived."""
    from mysqlbackup.archive.codec import keyring_from
    from mysqlbackup.archive.names import parse_base_id
    from mysqlbackup.archive.options import parse_options
    from replay.planning.options import build_selection
    from replay.job.progress import ProgressFile, reporter
    from replay.spark.context import SparkSetup
    from replay.restore.run import RestoreOptions, run_restore
    spark_setup = SparkSetup.of(spark_conf, driver_host, executor_python)  # before the store
    check_engine(engine, master, spark_setup.given())
    if not archive_url:
        raise click.UsageError("--archive is required")
    if not target and not dry_run:
        raise click.UsageError("--target is required (or --dry-run)")
    if source_name:
        check_source_name(source_name)  # before the store is asked
    if as_json and not dry_run:
        raise UsageError("--json prints the plan: give --dry-run too")
    base_id = base_wanted(base_id)
    if base_id:
        parse_base_id(base_id)
    if rewrites and not tables:
        raise click.UsageError("--rewrite-db needs --table (restore is of the whole source "
                               "otherwise)")
    selection = build_selection(stop=stop, tables=tables, rewrites=rewrites)
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
                          datadir=datadir, keyring=keyring_from(identity), apply=apply_mode, users=users,
                          engine=engine, spark=spark_setup)
    progress = reporter(lambda line: click.echo(line, err=True))  # a bar on a terminal
    if metrics_file:
        progress = ProgressFile(progress, metrics_file, {"source": source_name or "",
                                                          "command": "restore"})
    lines = []
    try:
        report = run_restore(opts, echo=lines.append if as_json else click.echo,
                             progress=progress)
        if metrics_file and not dry_run:
            progress.done()
    finally:
        progress.close()
    if as_json:
        choice = report["apply"]
        click.echo(json.dumps(dict(plan_json(report["plan"]), stop=stop.option_text or None,
                                   apply={"mode": choice.mode, "why": choice.why,
                                          "engine": choice.engine},
                                   lines=lines), indent=1))


def plan_json(plan):
    """A RestorePlan as ``restore --dry-run --json`` prints it (with ``stop`` and the
    printed ``lines``, which say where the target will be)."""
    m = plan.manifest
    return {"source": plan.source,
            "base": {f: m.get(f) for f in ("id", "method", "gtid", "gtid_flavor",
                                           "binlog_file", "binlog_pos", "start_time",
                                           "end_time", "stored_size")},
            "binlog_files": [{"name": s.name, "epoch": s.epoch, "partial": s.partial,
                              "size": s.size, "first_gtid": s.first_gtid,
                              "last_gtid": s.last_gtid, "last_commit": s.last_commit}
                             for s in plan.choice.spans],
            "bytes_to_read": plan.bytes_to_read}
