"""The click options every ``mysqlbackup`` command shares (sqlite-utils style: one
decorator per option, the same name, meaning and default everywhere), the one-line
error handling, renamed options kept as hidden deprecated aliases, and the
``Example:`` paragraph that ends every command's help."""

import functools
import logging
import sys

import click

from mysqlbackup import logs
from mysqlbackup.archive.codec import DEFAULT_LEVEL
from mysqlbackup.archive.stop import STOP_OPTIONS, parse_stop
from mysqlbackup.config import TARGET_PASSWORD_ENV
from mysqlbackup.errors import MysqlBackupError, UsageError, mask_url
from mysqlbackup.source.spec import PASSWORD_ENV
from mysqlbackup.source.tls import DEFAULT_MODE, MODES, TlsSettings

log = logging.getLogger("mysqlbackup.cli")

# --source-name: what the name means to a command (one option, three meanings)
SOURCE_NAME_HELP = {
    "write": "Name of the source in the archive (default: its server_uuid, or server-id-N).",
    "every": "Only this source (default: every source).",
    "one": "The source to read (default: the only one; required when the archive holds "
           "several).",
}
HELP_OPTIONS = ("-h", "--help")


def fail(error):
    """Print a MysqlBackupError as one line on stderr (a JSON line under --log-format
    json) and exit with its code."""
    if logs.json_lines():
        logs.log_error(error)
    else:
        click.echo(f"mysqlbackup: error: {mask_url(error)}", err=True)
    sys.exit(error.exit_code)


def handle_errors(func):
    """Turn a MysqlBackupError into one line on stderr and its exit code."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except MysqlBackupError as e:
            fail(e)
    return wrapper


def example(*commands, width=78):
    """The help paragraph that ends a command's --help: ``Example:`` and each command,
    broken before an option where it would pass ``width`` (a ``\\`` ends the line)."""
    lines = ["\b", "Example:"]
    for command in commands:
        units = command.replace(" --", "\n--").split("\n")
        line = "  " + units[0]
        for unit in units[1:]:
            if len(line) + 1 + len(unit) > width - 2:
                lines.append(line + " \\")
                line = "      " + unit
            else:
                line += " " + unit
        lines.append(line)
    return "\n".join(lines)


def json_option(what):
    """--json: one JSON document on stdout (``what`` it holds); errors stay one line on
    stderr, with the same exit codes."""
    return click.option("--json", "as_json", is_flag=True,
                        help=f"Print one JSON document on stdout: {what}.")


def yes_option(what):
    """--yes: do what the command would only show otherwise."""
    return click.option("--yes", is_flag=True, help=f"{what}.")


def source_options(server_help, required=True):
    """--source and --password-file (the password itself never goes on the command line);
    ``server_help``: which server it is and what its user needs."""
    def decorate(func):
        func = click.option("--password-file", type=click.Path(dir_okay=False),
                            help=f"File whose first line is the --source user's password "
                                 f"(else ${PASSWORD_ENV}).")(func)
        return click.option("--source", metavar="mysql://USER@HOST:PORT", help=server_help,
                            required=required)(func)
    return decorate


def target_options(target_help):
    """--target, --target-password-file and --target-ssl-* (replay, restore): the server
    the binlogs are applied to; ``target_help``: what it is to the command."""
    def decorate(func):
        func = ssl_options("target-")(func)
        func = click.option("--target-password-file", type=click.Path(dir_okay=False),
                            help="File whose first line is the --target user's password "
                                 f"(else ${TARGET_PASSWORD_ENV[0]}, else "
                                 f"${TARGET_PASSWORD_ENV[1]}).")(func)
        return click.option("--target", metavar="mysql://USER@HOST:PORT",
                            help=target_help)(func)
    return decorate


def archive_options(func):
    """--archive URL and repeatable --archive-option KEY=VALUE (fsspec storage options)."""
    func = click.option("--archive-option", "archive_option", multiple=True,
                        metavar="KEY=VALUE",
                        help="fsspec storage option, repeatable (e.g. endpoint_url=http://"
                             "127.0.0.1:9000 for MinIO); AWS credentials come from the usual "
                             "AWS environment variables.")(func)
    return click.option("--archive", "archive_url", metavar="URL",
                        help="Object storage root: file:///path, s3://bucket/prefix, or any "
                             "installed fsspec protocol.")(func)


def spark_options(func):
    """The Spark job's --master, --conf (repeatable), --driver-host and --python (replay,
    restore): the values ``replay.spark.context.SparkSetup.of`` takes."""
    for decorator in reversed((
        click.option("--master", help="Spark master (default local[*]); spark-submit "
                     "works too."),
        click.option("--conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
                     help="A Spark setting (repeatable), such as spark.archives=ENV.tar.gz"
                     "#environment or spark.executor.memory=1g; spark.mysqlbackup."
                     "registrationTimeout=SECONDS bounds the wait for the master and the "
                     "first executor (30). Credentials do not go here: the driver's AWS_* "
                     "variables reach the tasks inside them."),
        click.option("--driver-host", metavar="ADDRESS", help="With a spark:// master: the "
                     "address of this machine the executors connect to (default: the one on "
                     "the route to the master)."),
        click.option("--python", "executor_python", metavar="PATH", help="The executors' "
                     "Python (PYSPARK_PYTHON), a path on the workers, e.g. ./environment/bin/"
                     "python of an environment packed by scripts/pack_replay_env.py and "
                     "shipped with --conf spark.archives=replay-env.tar.gz#environment."))):
        func = decorator(func)
    return func


def source_name_option(meaning="one", required=False, help=None):
    """--source-name with the help of its ``meaning`` (SOURCE_NAME_HELP): ``write``
    (stream, base, archive import), ``every`` (readers of every source: verify,
    archive ls, retain, base list) or ``one`` (readers of one source: replay, restore,
    serve, drill, archive find). Used bare (``@source_name_option``): ``one``."""
    if callable(meaning):
        return source_name_option()(meaning)

    def decorate(func):
        return click.option("--source-name", required=required,
                            help=help or SOURCE_NAME_HELP[meaning])(func)
    return decorate


def dir_option(func):
    """--dir: the daemon's local directory."""
    return click.option("--dir", "directory", required=True, type=click.Path(file_okay=False),
                        help="Local directory for the binlog files and the checkpoint.")(func)


def codec_options(func):
    """--compress and --encrypt-to: how new archive objects are stored (archive.codec;
    the default level is codec.DEFAULT_LEVEL, chosen by measurement: see there)."""
    func = click.option("--encrypt-to", "encrypt_to", multiple=True, metavar="FILE",
                        type=click.Path(dir_okay=False),
                        help="Encrypt new archive objects (age, X25519) to the public "
                        "keys (age1...) in FILE; repeatable (an offline recovery key "
                        "beside the everyday one). Only public keys are needed here.")(func)
    return click.option("--compress", default=f"zstd:{DEFAULT_LEVEL}", show_default=True,
                        metavar="zstd[:LEVEL]|none",
                        help="Compression of new archive objects (local files stay "
                        "byte-identical).")(func)


def identity_option(func):
    """--identity: the age identity file that opens encrypted archive objects."""
    return click.option("--identity", metavar="FILE", type=click.Path(dir_okay=False),
                        help="age identity file (AGE-SECRET-KEY-1...) to read encrypted "
                        "archive objects (default: the file $MYSQLBACKUP_IDENTITY names).")(func)


def ssl_options(prefix=""):
    """--PREFIXssl-mode, -ssl-ca, -ssl-cert, -ssl-key of one server connection (the
    MySQL client's names and meanings), handed to the command as one TlsSettings:
    the parameter ``tls`` (prefix ``target-``: ``target_tls``)."""
    flag, param = f"--{prefix}ssl", prefix.replace("-", "_")
    parts = ("mode", "ca", "cert", "key")

    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            values = {part: kwargs.pop(f"{param}ssl_{part}") for part in parts}
            try:
                kwargs[f"{param}tls"] = TlsSettings(option=flag, **values)
            except MysqlBackupError as e:
                raise click.UsageError(str(e)) from None
            return func(*args, **kwargs)
        pem = click.Path(exists=True, dir_okay=False)
        for option in (
                click.option(f"{flag}-key", type=pem, help="Its private key (PEM)."),
                click.option(f"{flag}-cert", type=pem, help="Client certificate (PEM), for a "
                             "user REQUIRE X509."),
                click.option(f"{flag}-ca", type=pem, help="CA certificate(s) (PEM) the "
                             "server's certificate must chain to (verify-ca, verify-identity)."),
                click.option(f"{flag}-mode", default=DEFAULT_MODE, show_default=True,
                             metavar="|".join(MODES), callback=_ssl_mode,
                             help="disabled: clear text; preferred: TLS when the server "
                             "offers it; required: TLS, no certificate check; verify-ca: and "
                             "the chain checked; verify-identity: and the host name.")):
            wrapper = option(wrapper)
        return wrapper
    return decorate


# what each stop option does, as replay and restore say it; serve and drill say it
# their own way (stop_options' ``helps``)
STOP_HELP = {
    "--stop-datetime": "Stop before the first transaction committed at or after it; UTC "
                       "unless it names a zone (never local time).",
    "--stop-before-gtid": "Stop before this transaction.",
    "--stop-position": "Stop before a transaction ending past it.",
}
STOP_METAVARS = {"--stop-datetime": "ISO8601", "--stop-before-gtid": "GTID",
                 "--stop-position": "FILE:POS"}
_STOP_PARAMS = [option[2:].replace("-", "_") for option in STOP_OPTIONS]  # parse_stop's


def stop_options(helps=None):
    """--stop-datetime, --stop-before-gtid and --stop-position, handed to the command as
    one ``stop`` parameter (a ``mysqlbackup.archive.stop.Stop``; END when none is
    given). Two at once, an empty or a malformed value: one line, exit 2, before the
    command runs. ``helps``: the command's own words for an option (else STOP_HELP)."""
    words = dict(STOP_HELP, **(helps or {}))

    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            values = {name: kwargs.pop(name) for name in _STOP_PARAMS}
            try:
                kwargs["stop"] = parse_stop(**values)
            except UsageError as e:
                fail(e)
            return func(*args, **kwargs)
        last = " At most one stop option; none: the archive's end."
        for option in reversed(STOP_OPTIONS):
            text = words[option] + (last if option == STOP_OPTIONS[-1] else "")
            wrapper = click.option(option, metavar=STOP_METAVARS[option], help=text)(wrapper)
        return wrapper
    return decorate


def _ssl_mode(ctx, param, value):
    """The mode as MODES spells it (VERIFY_CA, as the MySQL client takes it, too)."""
    mode = value.lower().replace("_", "-")
    if mode not in MODES:
        raise click.BadParameter(f"{value!r} is not one of {', '.join(MODES)}")
    return mode


def deprecated_alias(old, new, **attrs):
    """A hidden option ``old`` that stands for ``new`` (a renamed option: scripts and
    units keep working). Its value, from the command line, the environment or the
    command's own table of a config file, goes to ``new``'s parameter with one warning
    line; both given with different values is refused. ``attrs``: click.option's."""
    old_param, new_param = (o.lstrip("-").replace("-", "_") for o in (old, new))

    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            value = kwargs.pop(old_param)
            if value in (None, False, ()):
                return func(*args, **kwargs)
            log.warning("%s is deprecated: use %s (the same setting)", old, new)
            if kwargs.get(new_param) not in (None, False, (), value):
                fail(UsageError(f"{old} (deprecated) and {new} name different values: "
                                f"give {new} only"))
            kwargs[new_param] = value
            return func(*args, **kwargs)
        wrapper = click.option(old, old_param, hidden=True, **attrs)(wrapper)
        wrapper.__click_params__[-1].alias_of = new
        return wrapper
    return decorate


def metrics_file_option(func):
    """--metrics-file (restore, drill): the restore's progress for node_exporter's
    textfile collector (``replay.job.progress.ProgressFile``)."""
    return click.option("--metrics-file", type=click.Path(dir_okay=False), metavar="PATH",
                        help="Keep mysqlbackup_restore_progress_ratio (0 to 1, never going "
                        "back; 1 when it ends well) in this file for node_exporter's "
                        "textfile collector (e.g. /var/lib/node_exporter/textfile/"
                        "restore.prom), replaced whole at most once a second.")(func)


def read_path_or_url(path):
    """Bytes of a local file or of an fsspec URL; UsageError when it cannot be read."""
    try:
        if "://" in path:
            import fsspec  # loads only when a URL is given
            with fsspec.open(path, "rb") as f:
                return f.read()
        with open(path, "rb") as f:
            return f.read()
    except (OSError, ValueError, ImportError) as e:
        raise UsageError(f"cannot read {mask_url(path)}: {mask_url(e)}") from None
