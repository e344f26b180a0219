"""Every command once as a user runs it: ``python -m mysqlbackup ...`` as a child process
(its entry points, its exit code, its output streams), on an archive of real MariaDB
binlog files. Elsewhere the suite drives the CLI in process (``helpers.run_cli``), but
for ``stream`` and ``serve`` (always children); ``base`` and a real ``restore`` run as
children in tests/test_restore.py."""

import json

import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.server


def cli(*args, **kwargs):
    return run_cli(*args, process=True, timeout=300, **kwargs)


@pytest.fixture(scope="module")
def archive(source_files, tmp_path_factory):
    """An archive of the four files (no base), and where things go."""
    root = tmp_path_factory.mktemp("cli-process")
    url = f"file://{root / 'archive'}"
    folder = source_files[0].parent
    done = cli("archive", "import", str(folder), "--archive", url, "--source-name", "db1")
    assert done.returncode == 0, done.stderr
    return url, root, source_files


def test_reading_commands(archive):
    url, root, files = archive
    assert cli("--version").stdout.startswith("mysqlbackup ")
    verify = cli("verify", "--archive", url)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    listed = cli("archive", "ls", "--archive", url, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [f["file"] for f in json.loads(listed.stdout)["files"]] == [f.name for f in files]
    bases = cli("base", "list", "--archive", url)
    assert (bases.returncode, bases.stdout) == (0, f"no base backup in archive {url} "
                                                   "(mysqlbackup base)\n"), bases.stderr
    found = cli("archive", "find", "--archive", url, "--table", "a.t", "--type", "insert",
                "--min-rows", "1")
    assert found.returncode == 0, found.stderr
    assert len(found.stdout.splitlines()) == 160  # the inserts, one row each
    assert cli("inspect", str(files[0])).returncode == 0


def test_replay_writes_sql_in_its_own_jvm(archive):
    """Its stderr holds its own lines only (the progress lines): nothing the JVM, Spark or
    py4j said ("WARNING: Using incubator modules" among them), which ``--log-level
    debug`` shows, as debug records of ``pyspark.jvm``."""
    url, root, files = archive
    out = root / "all.sql"
    done = cli("replay", "--archive", url, "--sql", str(out), "--engine", "spark")
    assert done.returncode == 0, done.stderr
    assert out.read_text().count("\n### INSERT INTO `a`.`t`") == 160
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("replay: files ") for line in lines), done.stderr
    debug = cli("--log-level", "debug", "replay", "--archive", url, "--sql",
                str(root / "again.sql"), "--engine", "spark")
    assert debug.returncode == 0, debug.stderr
    assert " DEBUG pyspark.jvm: WARNING: Using incubator modules" in debug.stderr


def test_what_needs_a_base_says_so_with_its_code(archive):
    url, root, _ = archive
    plan = cli("restore", "--archive", url, "--dry-run")
    assert plan.returncode == 7 and "base" in plan.stderr, plan.stderr
    check = cli("check", "--archive", url)
    assert check.returncode == 2, check.stdout + check.stderr
    assert check.stdout.startswith("CHECK CRITICAL - source db1: base failed"), check.stdout
    drill = cli("drill", "--archive", url)
    assert drill.returncode == 1 and "no restore can be planned" in drill.stdout, drill.stdout
    retain = cli("retain", "--archive", url, "--window", "1d")
    assert retain.returncode == 0, retain.stderr


def test_keys_config_and_status(archive, tmp_path):
    url, root, _ = archive
    identity = tmp_path / "key.txt"
    made = cli("keygen", "--identity", str(identity), "--recipient", str(tmp_path / "key.pub"))
    assert made.returncode == 0, made.stderr
    assert "AGE-SECRET-KEY-1" in identity.read_text()
    assert "\nage1" in (tmp_path / "key.pub").read_text()
    shown = cli("config", "show", "verify")
    assert shown.returncode == 0, shown.stderr
    missing = cli("status", "--dir", str(tmp_path / "none"))
    assert (missing.returncode, missing.stdout) == (1, f"{tmp_path / 'none'}: no such "
                                                       "directory\n"), missing.stderr
