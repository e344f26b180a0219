"""One consistent command line (issue 28, item 4), through click's CliRunner with exact
output and no database server: one --compress default, serve's options named as
mysqld names them (the old spellings kept as deprecated aliases), --json wherever a
command reports, an example at the end of every --help, --source-name's help by what
the name means to the command, --config after the command name, a mistyped
MYSQLBACKUP_<COMMAND>_<X> refused, retain deleting only with --yes, base list (and
archive ls) with age, size and status, restore --base latest.

The archive: one real MariaDB binlog (../shared/binlogs) imported with ``archive
import``, and base manifests written beside it (their objects made up: nothing here
reads them)."""

import json
import re
from datetime import datetime, timezone
from types import SimpleNamespace

import click
import pytest
from click.testing import CliRunner

from mysqlbackup.archive import manifest as base_listing
from mysqlbackup.archive.codec import DEFAULT_LEVEL
from mysqlbackup.archive.manifest import build_manifest, format_manifest
from mysqlbackup.archive.names import base_key, binlog_key, format_key
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.cli import main
from mysqlbackup.cli.options import SOURCE_NAME_HELP
from mysqlbackup.retention import prune

BINLOG = "rust_mysql_common/mariadb-bin.000001"  # GTIDs 0-1-1 (22:18:04Z), 0-1-2 (22:19:55Z)
NOW = datetime(2022, 4, 22, 4, 30, tzinfo=timezone.utc).timestamp()
A, B, C, D = (f"20220420T22{m}00.000Z" for m in ("18", "19", "20", "21"))
ENV = {"MYSQLBACKUP_SERVE_PASSWORD": "x", "MYSQLBACKUP_PASSWORD": "x"}


def invoke(*args, env=None):
    return CliRunner().invoke(main, list(args), env={**ENV, **(env or {})})


def outcome(result):
    return result.exit_code, result.stdout, result.stderr


def error(text):
    return f"mysqlbackup: error: {text}\n"


def add_base(store, base_id, end, gtid, size=10, object_size=None, manifest=True):
    """A base backup of db1 as ``base`` leaves it: its object, then its manifest."""
    store.put_bytes(format_key(base_key("db1", base_id, "dump.sql.zst")),
                    b"x" * (size if object_size is None else object_size))
    if manifest:
        store.put_bytes(format_key(base_key("db1", base_id)), format_manifest(build_manifest(
            id=base_id, source="db1", method="dump", member="dump.sql.zst",
            compression="zstd", start_time=end[:-3] + "00Z", end_time=end, gtid=gtid,
            gtid_flavor="mariadb", binlog_file="mariadb-bin.000001", binlog_pos=700,
            server_uuid=None, server_id=1, server_version="10.5.15-MariaDB",
            raw_size=100, stored_size=size, sha256="0" * 64, raw_sha256="0" * 64,
            tool_version="test")))


@pytest.fixture
def binlogs(tmp_path, copy_binlog):
    """A file:// archive holding db1's one binlog file (skips without ../shared)."""
    (tmp_path / "binlogs").mkdir()
    copy_binlog(BINLOG, "binlogs/mariadb-bin.000001")
    url = f"file://{tmp_path / 'archive'}"
    result = invoke("archive", "import", str(tmp_path / "binlogs"), "--archive", url,
                    "--source-name", "db1")
    assert result.exit_code == 0, result.output
    return url


@pytest.fixture
def bases(binlogs, monkeypatch):
    """The binlog archive with bases A (sound, 0-1-1), B (its object one byte short),
    C (sound, 0-1-2, the newest with a manifest) and D (no manifest yet); the clock
    of base list and retain at NOW."""
    store = ArchiveStore(binlogs)
    add_base(store, A, "2022-04-20T22:18:30Z", "0-1-1")
    add_base(store, B, "2022-04-20T22:19:58Z", "0-1-2", size=12, object_size=11)
    add_base(store, C, "2022-04-20T22:20:05Z", "0-1-2")
    add_base(store, D, "2022-04-20T22:21:05Z", "0-1-2", manifest=False)
    clock = SimpleNamespace(time=lambda: NOW)
    monkeypatch.setattr(base_listing, "time", clock)
    monkeypatch.setattr(prune, "time", clock)
    return binlogs


def commands():
    """{path: command} of every command and group under mysqlbackup (plugins too)."""
    found = {}

    def walk(command, ctx, path):
        found[path] = command
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                walk(sub, click.Context(sub, info_name=name, parent=ctx),
                     f"{path} {name}".strip())
    walk(main, click.Context(main, info_name="mysqlbackup", auto_envvar_prefix="MYSQLBACKUP"),
         "")
    return found


def option(command, name):
    return next(p for p in command.params if f"--{name}" in p.opts)


# -- one name, one meaning, one default -------------------------------------------------

def test_compress_has_the_codecs_default_everywhere():
    found = {path: option(c, "compress").default for path, c in commands().items()
             if any("--compress" in p.opts for p in c.params)}
    assert found == {"stream": f"zstd:{DEFAULT_LEVEL}", "base": f"zstd:{DEFAULT_LEVEL}",
                     "archive import": f"zstd:{DEFAULT_LEVEL}"}
    assert DEFAULT_LEVEL == 1


MEANINGS = {"stream": "write", "base": "write", "verify": "every", "archive ls": "every",
            "retain": "every", "base list": "every", "replay": "one", "restore": "one",
            "serve": "one", "drill": "one", "archive find": "one"}


def test_source_name_help_says_what_the_name_means_to_the_command():
    every = commands()
    for path, meaning in MEANINGS.items():
        assert option(every[path], "source-name").help == SOURCE_NAME_HELP[meaning], path
    assert SOURCE_NAME_HELP == {
        "write": "Name of the source in the archive (default: its server_uuid, or "
                 "server-id-N).",
        "every": "Only this source (default: every source).",
        "one": "The source to read (default: the only one; required when the archive "
               "holds several)."}
    imported = option(every["archive import"], "source-name")
    assert imported.required and imported.help.startswith(
        "Name of the source in the archive (required: the files do not say it)")


def test_base_help_names_the_privileges_once_for_both_products():
    text = " ".join(invoke("base", "--help").stdout.split())
    assert ("The --source user needs these global privileges (ON *.*), checked before "
            "anything runs, on MariaDB and MySQL alike: dump: SELECT (the accounts are read "
            "from the mysql schema too), SHOW VIEW, TRIGGER, EVENT and REPLICATION CLIENT "
            "(MariaDB 10.5+ shows it as BINLOG MONITOR; SUPER will do), and on MySQL also "
            "RELOAD or FLUSH_TABLES; physical: RELOAD, PROCESS, LOCK TABLES and REPLICATION "
            "CLIENT (BINLOG MONITOR); clone (MySQL): BACKUP_ADMIN and REPLICATION CLIENT, and "
            "INSERT on mysql.plugin when the clone plugin is not loaded.") in text
    assert "REPLICATION SLAVE" not in text  # the stream's privilege, not the base's


def test_every_help_ends_with_an_example():
    for path in commands():
        text = invoke(*path.split(), "--help").stdout
        last = text.rstrip("\n").split("\n\n")[-1].splitlines()
        assert last[0].startswith("  Example"), (path, last)
        assert last[1].startswith(f"    mysqlbackup {path}".rstrip()) or path == "", (path, last)
    assert invoke("retain", "--help").stdout.endswith(
        "\n  Example:\n"
        "    mysqlbackup retain --archive s3://backups/mysql --window 14d --keep-base 3\n"
        "    mysqlbackup retain --archive s3://backups/mysql --window 14d --keep-base 3 \\\n"
        "        --yes\n")


# -- serve: mysqld's names, the old ones as deprecated aliases ---------------------------

WARNING = re.compile(r"^\S+ \S+ WARNING mysqlbackup\.cli: (.*)$")


def warnings_and_rest(stderr):
    lines = stderr.splitlines()
    found = [WARNING.match(line) for line in lines]
    return [m[1] for m in found if m], [line for line, m in zip(lines, found) if not m]


def test_serve_takes_mysqld_names_and_hides_the_old_ones(tmp_path):
    text = invoke("serve", "--help").stdout
    for name in ("--replica-password-file", "--ssl-cert", "--ssl-key",
                 "--require-secure-transport"):
        assert f"  {name} " in text or f"  {name}\n" in text, name
    for old in ("--password-file", "--tls-cert", "--tls-key", "--require-tls"):
        assert f"  {old}" not in text, old
    result = invoke("serve", "--archive", f"file://{tmp_path}", "--require-secure-transport")
    assert outcome(result) == (2, "", error("--require-secure-transport needs --ssl-cert (and "
                                            "--ssl-key)"))
    result = invoke("serve", "--archive", f"file://{tmp_path}",
                    env={"MYSQLBACKUP_SERVE_PASSWORD": None})
    assert outcome(result) == (2, "", error("no password for mysqlbackup_serve: set "
                                            "$MYSQLBACKUP_SERVE_PASSWORD or "
                                            "--replica-password-file"))


@pytest.mark.parametrize("args, env, warned, line", [
    (["--require-tls"], {}, ["--require-tls is deprecated: use --require-secure-transport "
                             "(the same setting)"],
     "--require-secure-transport needs --ssl-cert (and --ssl-key)"),
    ([], {"MYSQLBACKUP_SERVE_REQUIRE_TLS": "1"},
     ["--require-tls is deprecated: use --require-secure-transport (the same setting)"],
     "--require-secure-transport needs --ssl-cert (and --ssl-key)"),
    (["--password-file", "/nonexistent/pw"], {"MYSQLBACKUP_SERVE_PASSWORD": None},
     ["--password-file is deprecated: use --replica-password-file (the same setting)"],
     "cannot read password file /nonexistent/pw: No such file or directory"),
    (["--tls-cert", "a.pem", "--ssl-cert", "b.pem"], {},
     ["--tls-cert is deprecated: use --ssl-cert (the same setting)"],
     "--tls-cert (deprecated) and --ssl-cert name different values: give --ssl-cert only"),
])
def test_serve_old_spellings_still_work_with_one_warning(tmp_path, args, env, warned, line):
    result = invoke("serve", "--archive", f"file://{tmp_path}", *args, env=env)
    assert (result.exit_code, result.stdout) == (2, "")
    assert warnings_and_rest(result.stderr) == (warned, [error(line).rstrip("\n")])


def test_a_config_files_shared_password_file_is_not_serves_replica_login(tmp_path):
    shared = tmp_path / "shared.toml"
    shared.write_text('password-file = "/etc/mysqlbackup/db1.password"\n')
    rows = json.loads(invoke("config", "show", "--json", "--config", str(shared),
                             "serve").stdout)["serve"]
    assert "password-file" not in rows
    assert rows["replica-password-file"] == {"value": None, "from": "default"}
    own = tmp_path / "own.toml"
    own.write_text('[serve]\npassword-file = "/etc/mysqlbackup/serve.password"\n')
    rows = json.loads(invoke("config", "show", "--json", "--config", str(own),
                             "serve").stdout)["serve"]
    assert rows["password-file"] == {
        "value": "/etc/mysqlbackup/serve.password",
        "from": f"file {own} (deprecated: use --replica-password-file)"}
    refused = tmp_path / "refused.toml"
    refused.write_text('[serve]\nreplica-password = "x"\n')
    result = invoke("--config", str(refused), "status", "--dir", str(tmp_path))
    assert outcome(result) == (2, "", error(
        f"config file {refused}: [serve] 'replica-password': a config file must not hold a "
        "password: name a replica-password-file there, or set MYSQLBACKUP_SERVE_PASSWORD in "
        "the environment"))


# -- --config after the command name ------------------------------------------------------

def test_config_after_the_command_name(tmp_path):
    config = tmp_path / "db1.toml"
    config.write_text(f'[status]\ndir = "{tmp_path}/file"\n')
    for args in (["--config", str(config), "status"], ["status", "--config", str(config)],
                 ["status", f"--config={config}"]):
        assert outcome(invoke(*args)) == (1, f"{tmp_path}/file: no such directory\n", ""), args
    result = invoke("status", "--config", str(config), "--dir", f"{tmp_path}/cli")
    assert result.stdout == f"{tmp_path}/cli: no such directory\n"
    result = invoke("status", "--config", str(config),
                    env={"MYSQLBACKUP_CONFIG": str(tmp_path / "other.toml")})
    assert result.stdout == f"{tmp_path}/file: no such directory\n"  # the command line wins
    result = invoke("--config", str(config), "status", "--config", str(config))
    assert outcome(result) == (2, "", error("--config given both before and after the "
                                            "command name: give it once"))
    bad = tmp_path / "bad.toml"
    bad.write_text('[status]\ndri = "x"\n')
    result = invoke("status", "--config", str(bad))
    assert outcome(result) == (2, "", error(f"config file {bad}: [status] 'dri': unknown key: "
                                            "status has no option --dri"))
    logged = tmp_path / "json.toml"
    logged.write_text(f'log-format = "json"\n[status]\ndir = "{tmp_path}/file"\n')
    result = invoke("archive", "ls", "--config", str(logged), "--archive", "file:///nonexistent")
    assert json.loads(result.stderr)["event"] == ("archive file:///nonexistent: not an "
                                                  "archive: no such directory")


# -- a mistyped variable is refused, as a mistyped key of the file is ---------------------

@pytest.mark.parametrize("args, name, message", [
    (["status"], "MYSQLBACKUP_STATUS_DIRR",
     "status has no option --dirr (did you mean MYSQLBACKUP_STATUS_DIR?)"),
    (["archive", "ls"], "MYSQLBACKUP_ARCHIVE_LS_ARCHVE",
     "archive ls has no option --archve (did you mean MYSQLBACKUP_ARCHIVE_LS_ARCHIVE?)"),
    (["restore"], "MYSQLBACKUP_RESTORE_STOP_DATE",
     "restore has no option --stop-date (did you mean MYSQLBACKUP_RESTORE_STOP_DATETIME?)"),
    (["base"], "MYSQLBACKUP_BASE_METOD",
     "base has no option --metod (did you mean MYSQLBACKUP_BASE_METHOD?)"),
    (["base", "list"], "MYSQLBACKUP_BASE_LIST_SOURCE",
     "base list has no option --source (did you mean MYSQLBACKUP_BASE_LIST_SOURCE_NAME?)"),
])
def test_a_mistyped_variable_is_refused_when_its_command_runs(args, name, message):
    result = invoke(*args, env={name: "x"})
    assert outcome(result) == (2, "", error(f"env {name}: unknown variable: {message}"))
    assert invoke(*args, "--help", env={name: "x"}).exit_code == 0  # help still shows


def test_variables_of_other_commands_and_secrets_are_not_judged(tmp_path):
    env = {"MYSQLBACKUP_PASSWORD": "x", "MYSQLBACKUP_TARGET_PASSWORD": "x",
           "MYSQLBACKUP_SERVE_PASSWORD": "x", "MYSQLBACKUP_IDENTITY": "/k",
           "MYSQLBACKUP_PURE_PYTHON": "1", "MYSQLBACKUP_SPARK_DRIVER_MEMORY": "2g",
           "MYSQLBACKUP_STREAM_SORCE": "x", "MYSQLBACKUP_BASE_LIST_ARCHIVE": "x",
           "MYSQLBACKUP_SERVE_TLS_CERT": "old.pem", "MYSQLBACKUP_STATUS_ARCHIVE_URL": None}
    result = invoke("status", "--dir", str(tmp_path / "none"), env=env)
    assert outcome(result) == (1, f"{tmp_path}/none: no such directory\n", "")
    result = invoke("base", env=env)  # base's own: base list's variables are not judged
    assert result.exit_code == 2 and "Missing option '--source'." in result.stderr


# -- --json wherever a command reports ----------------------------------------------------

def test_verify_json(binlogs):
    result = invoke("verify", "--archive", binlogs, "--json")
    assert outcome(result) == (0, '{\n "objects_checked": 1,\n "problems": [],\n "notes": []\n}\n',
                               "")


def test_drill_json_of_a_drill_that_cannot_plan(tmp_path):
    ArchiveStore(f"file://{tmp_path}").put_bytes(format_key(binlog_key("db1", "b.000001")), b"x")
    result = invoke("drill", "--archive", f"file://{tmp_path}", "--json")
    assert (result.exit_code, json.loads(result.stdout)) == (1, {
        "passed": False, "base": None, "rto_seconds": None, "lines": [],
        "problems": ["no restore can be planned: db1: the archive holds no binlog files"]})


def test_restore_dry_run_json(bases):
    result = invoke("restore", "--archive", bases, "--dry-run", "--json",
                    "--stop-before-gtid", "0-1-2")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["base"] == {"id": A, "method": "dump", "gtid": "0-1-1", "gtid_flavor": "mariadb",
                            "binlog_file": "mariadb-bin.000001", "binlog_pos": 700,
                            "start_time": "2022-04-20T22:18:00Z",
                            "end_time": "2022-04-20T22:18:30Z", "stored_size": 10}
    assert plan["binlog_files"] == [{
        "name": "mariadb-bin.000001", "epoch": 1, "partial": True, "size": 1074,
        "first_gtid": "0-1-1", "last_gtid": "0-1-2", "last_commit": "2022-04-20T22:19:55Z"}]
    assert (plan["source"], plan["stop"], plan["bytes_to_read"]) == (
        "db1", "--stop-before-gtid 0-1-2", 1084)
    assert plan["lines"][:2] == ["restore plan for db1", f"base: {A} (dump), taken "
                                 "2022-04-20T22:18:00Z to 2022-04-20T22:18:30Z, at GTID 0-1-1, "
                                 "mariadb-bin.000001:700"]
    result = invoke("restore", "--archive", bases, "--json", "--target", "mysql://r@h:1")
    assert outcome(result) == (2, "", error("--json prints the plan: give --dry-run too"))


# -- the stop point: one option group, at most one stop -------------------------------------

STOPS = [("--stop-datetime", "2022-04-20T22:19:00Z"), ("--stop-before-gtid", "0-1-2"),
         ("--stop-position", "mariadb-bin.000001:900")]


@pytest.mark.parametrize("command", ["replay", "restore", "serve", "drill"])
@pytest.mark.parametrize("first,second", [(0, 1), (0, 2), (1, 2)])
def test_two_stop_points_are_refused_in_one_line(tmp_path, command, first, second):
    """Every command with stop options refuses two at once in one line, exit 2, before it
    reads anything (the archive named here does not exist); replay ran such a pair."""
    result = invoke(command, "--archive", f"file://{tmp_path}/none", "--sql",
                    str(tmp_path / "out.sql"), *STOPS[first], *STOPS[second]) \
        if command == "replay" else invoke(command, "--archive", f"file://{tmp_path}/none",
                                           *STOPS[first], *STOPS[second])
    assert outcome(result) == (2, "", error(
        "give at most one of --stop-datetime, --stop-before-gtid and --stop-position "
        f"(got {STOPS[first][0]} and {STOPS[second][0]})"))


@pytest.mark.parametrize("option,value,text", [
    ("--stop-datetime", "2022-04-21 00:19:00+02:00", "--stop-datetime 2022-04-20T22:19:00Z"),
    ("--stop-position", "mariadb-bin.000001:900", "--stop-position mariadb-bin.000001:900")])
def test_the_plan_names_the_stop_as_its_option_says_it(bases, option, value, text):
    result = invoke("restore", "--archive", bases, "--dry-run", "--json", option, value)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stop"] == text


@pytest.mark.parametrize("command", ["replay", "restore"])
@pytest.mark.parametrize("spark,named", [
    (("--master", "local[2]"), "--master local[2]"),
    (("--conf", "spark.executor.memory=1g", "--python", "/usr/bin/python3"),
     "--conf, --python")])
def test_the_local_engine_refuses_spark_options(tmp_path, command, spark, named):
    """--engine local with a Spark option: refused in one line, never ignored."""
    result = invoke(command, "--archive", f"file://{tmp_path}/none", "--sql",
                    str(tmp_path / "out.sql"), "--engine", "local", *spark) \
        if command == "replay" else invoke(command, "--archive", f"file://{tmp_path}/none",
                                           "--dry-run", "--engine", "local", *spark)
    assert outcome(result) == (2, "", error(
        f"--engine local decodes in this process, without Spark: {named} would be ignored "
        "(give --engine spark or auto)"))


# -- retain: the plan, and deletions only with --yes ---------------------------------------

def plan_lines(verb):
    return [
        "retain db1: every moment from 2022-04-21T04:30:00Z on is to stay restorable",
        f"window before: restorable from 2022-04-20T22:18:30Z to 2022-04-20T22:19:55Z (base {A}, "
        "up to GTID 0-1-2, mariadb-bin.000001 .. mariadb-bin.000001)",
        f"base {C}: kept: the newest base ended before 2022-04-21T04:30:00Z: the window "
        "starts from it",
        f"{verb} base {A}: older than base {C}, where the window starts, and beyond "
        "--keep-base 0",
        f"{verb} damaged base {B}: its object is missing or not the size its manifest names "
        f"(no restore can start from it), older than base {C}"]


WINDOW_AFTER = (f"window after: restorable from 2022-04-20T22:20:05Z to 2022-04-20T22:19:55Z "
                f"(base {C}, up to GTID 0-1-2, mariadb-bin.000001 .. mariadb-bin.000001)")


def test_retain_without_yes_prints_the_plan_and_deletes_nothing(bases):
    before = set(ArchiveStore(bases).list())
    result = invoke("retain", "--archive", bases, "--window", "1d")
    assert outcome(result) == (0, "\n".join(plan_lines("would delete") + [
        WINDOW_AFTER, "nothing deleted: add --yes to delete the 2 items listed above"]) + "\n",
        "")
    result = invoke("retain", "--archive", bases, "--window", "1d", "--dry-run")
    assert outcome(result) == (0, "\n".join(plan_lines("would delete") + [WINDOW_AFTER]) + "\n",
                               "")
    plan = json.loads(invoke("retain", "--archive", bases, "--window", "1d", "--json").stdout)
    assert plan["deleting"] is False and plan["sources"][0]["deleted"] is None
    assert [(d["kind"], d["name"]) for d in plan["sources"][0]["deletions"]] == [
        ("base", A), ("damaged base", B)]
    assert set(ArchiveStore(bases).list()) == before
    result = invoke("retain", "--archive", bases, "--window", "1d", "--yes", "--dry-run")
    assert outcome(result) == (2, "", error("--yes and --dry-run exclude each other"))


def test_retain_with_yes_deletes(bases):
    result = invoke("retain", "--archive", bases, "--window", "1d", "--yes", "--json")
    assert result.exit_code == 0, result.output
    done = json.loads(result.stdout)
    assert done["deleting"] is True
    assert [(d["kind"], d["name"]) for d in done["sources"][0]["deleted"]] == [
        ("base", A), ("damaged base", B)]
    assert [w["base_id"] for w in done["sources"][0]["window_after"]] == [C]
    assert [b["id"] for b in json.loads(invoke("base", "list", "--archive", bases,
                                               "--json").stdout)["bases"]] == [C, D]


# -- base list, archive ls: age, size, status ----------------------------------------------

BASE_LINES = [
    f"db1  base {A}  dump  ended 2022-04-20T22:18:30Z (1d 6h ago)  10 bytes stored  "
    "gtid 0-1-1  sound",
    f"db1  base {B}  dump  ended 2022-04-20T22:19:58Z (1d 6h ago)  12 bytes stored  "
    "gtid 0-1-2  damaged: its object dump.sql.zst is 11 bytes, the manifest says 12",
    f"db1  base {C}  dump  ended 2022-04-20T22:20:05Z (1d 6h ago)  10 bytes stored  "
    "gtid 0-1-2  sound",
    f"db1  base {D}  damaged: no manifest (an upload in progress or abandoned)"]


def test_base_list(bases):
    result = invoke("base", "list", "--archive", bases)
    assert outcome(result) == (0, "\n".join(BASE_LINES) + "\n", "")
    rows = json.loads(invoke("base", "list", "--archive", bases, "--source-name", "db1",
                             "--json").stdout)["bases"]
    assert [(r["id"], r["status"], r["age_seconds"]) for r in rows] == [
        (A, "sound", 108690), (B, "damaged", 108602), (C, "sound", 108595),
        (D, "damaged", None)]
    assert rows[0] == {
        "source": "db1", "id": A, "method": "dump", "gtid": "0-1-1",
        "binlog_file": "mariadb-bin.000001", "binlog_pos": 700,
        "start_time": "2022-04-20T22:18:00Z", "end_time": "2022-04-20T22:18:30Z",
        "raw_size": 100, "stored_size": 10, "server_version": "10.5.15-MariaDB",
        "age_seconds": 108690, "status": "sound", "problem": None}
    result = invoke("base", "list", "--archive", bases, "--source-name", "db2")
    assert outcome(result) == (10, "", error(f"archive {bases}: no source 'db2' in it (it "
                                             "holds: db1)"))


def test_base_list_of_an_archive_without_bases(binlogs):
    result = invoke("base", "list", "--archive", binlogs)
    assert outcome(result) == (0, f"no base backup in archive {binlogs} (mysqlbackup base)\n",
                               "")


def test_archive_ls_shows_the_bases_as_base_list_does(bases):
    result = invoke("archive", "ls", "--archive", bases)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1:5] == BASE_LINES
    listed = json.loads(invoke("archive", "ls", "--archive", bases, "--json").stdout)
    assert listed["bases"] == json.loads(invoke("base", "list", "--archive", bases,
                                                "--json").stdout)["bases"]


def test_age_format():
    assert [base_listing.format_age(s) for s in (0, 40, 725, 7200, 7260, 90061, 3 * 86400)] == [
        "0s", "40s", "12m 5s", "2h", "2h 1m", "1d 1h", "3d"]


# -- restore --base latest -----------------------------------------------------------------

def test_base_latest_is_the_default_choice_said_explicitly(bases):
    default = invoke("restore", "--archive", bases, "--dry-run")
    assert default.exit_code == 0, default.output
    assert default.stdout.splitlines()[1].startswith(f"base: {C} (dump)")
    assert default.stderr.endswith(f"WARNING replay.restore.run: base {B} skipped: its "
                                   "object dump.sql.zst is 11 bytes, the manifest says 12\n")
    for spelling in ("latest", "LATEST", "Latest"):
        result = invoke("restore", "--archive", bases, "--dry-run", "--base", spelling)
        assert (result.exit_code, result.stdout) == (0, default.stdout), spelling
    # before 0-1-2: C holds it, so does B; the newest that can reach the stop point is A
    result = invoke("restore", "--archive", bases, "--dry-run", "--base", "latest",
                    "--stop-before-gtid", "0-1-2")
    assert result.stdout.splitlines()[1].startswith(f"base: {A} (dump)"), result.output
    result = invoke("restore", "--archive", bases, "--dry-run", "--base", "newest")
    assert outcome(result) == (2, "", error("bad base id 'newest': expected e.g. "
                                            "20261123T094100.123Z"))
