"""Every command that reads an archive tells "not an archive", "no such source", "the
store fails" and a malformed source name apart from an empty archive: one line each on
stderr and the exit code of the one table (``mysqlbackup.errors.ExitCode``), the same
in every command. No database server: the commands stop before they would need one."""

import socket

import pytest
from click.testing import CliRunner

from mysqlbackup import errors
from mysqlbackup.archive.names import binlog_key, format_key
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.cli import main
from mysqlbackup.errors import EXIT_CODES, ExitCode, exit_code_rows

# every command that reads an archive, with what it needs besides --archive (serve's
# --listen is never bound: the archive is refused first)
READERS = {
    "archive ls": ["archive", "ls"],
    "archive ls --json": ["archive", "ls", "--json"],
    "verify": ["verify"],
    "retain": ["retain", "--window", "14d"],
    "restore --dry-run": ["restore", "--dry-run"],
    "replay": ["replay", "--sql", "{tmp}/out.sql"],
    "drill": ["drill"],
    "serve": ["serve", "--listen", "127.0.0.1:0"],
}
ENV = {"MYSQLBACKUP_SERVE_PASSWORD": "x", "MYSQLBACKUP_PASSWORD": "x"}
# botocore's "max_attempts" counts the retries after the first attempt (each after a random
# wait of up to a second): none here, the refusal is the answer
FAST = 'config_kwargs={"connect_timeout": 1, "read_timeout": 1, "retries": {"max_attempts": 0}}'


def run(command, tmp_path, *args, log_level=None):
    words = [w.replace("{tmp}", str(tmp_path)) for w in READERS[command]]
    options = ["--log-level", log_level] if log_level else []
    return CliRunner().invoke(main, options + words + list(args), env=ENV)


def error_line(text):
    return f"mysqlbackup: error: {text}\n"


@pytest.fixture
def populated(tmp_path):
    """A file:// archive holding source db1 (one sealed object: enough to name it)."""
    root = tmp_path / "archive"
    ArchiveStore(f"file://{root}").put_bytes(format_key(binlog_key("db1", "b.000001")), b"x")
    return f"file://{root}"


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_table_of_exit_codes():
    assert [c for c, _, _ in exit_code_rows()] == list(range(13))
    assert set(EXIT_CODES) == set(ExitCode)
    classes = [errors.UsageError, errors.SourceError, errors.ConnectionLost,
               errors.ProtocolError, errors.CorruptBinlog, errors.ResyncRequired,
               errors.LocalStateError, errors.ArchiveNotFound, errors.SourceNotFound,
               errors.StoreError, errors.ConflictError]
    assert [c.exit_code for c in classes] == list(range(2, 13))
    assert errors.MysqlBackupError.exit_code == ExitCode.FAILED == 1
    from mysqlbackup.archive.store import StoreError
    assert StoreError is errors.StoreError
    text = CliRunner().invoke(main, ["--help"]).output
    assert "Exit codes (the same for every command):" in text
    assert "     9  --archive is not an archive: no such directory, a file, a bucket that" \
        in text


@pytest.mark.parametrize("command", READERS)
def test_missing_path_is_not_an_archive(command, tmp_path):
    result = run(command, tmp_path, "--archive", f"file://{tmp_path}/nonexistent")
    assert (result.exit_code, result.stdout, result.stderr) == (9, "", error_line(
        f"archive file://{tmp_path}/nonexistent: not an archive: no such directory"))
    assert not (tmp_path / "nonexistent").exists()  # readers never create one


@pytest.mark.parametrize("command", READERS)
def test_a_file_is_not_an_archive(command, tmp_path):
    (tmp_path / "file").write_text("root:x:0:0\n")
    result = run(command, tmp_path, "--archive", f"file://{tmp_path}/file")
    assert (result.exit_code, result.stdout, result.stderr) == (9, "", error_line(
        f"archive file://{tmp_path}/file: not an archive: a file, not a directory"))


@pytest.mark.parametrize("command", READERS)
def test_a_source_the_archive_does_not_hold(command, tmp_path, populated):
    result = run(command, tmp_path, "--archive", populated, "--source-name", "nosuch")
    assert (result.exit_code, result.stdout, result.stderr) == (10, "", error_line(
        f"archive {populated}: no source 'nosuch' in it (it holds: db1)"))


@pytest.mark.parametrize("command", READERS)
def test_a_malformed_source_name_is_usage_before_the_store_is_asked(command, tmp_path):
    for archive in (f"file://{tmp_path}/nonexistent", "s3://b/p"):
        result = run(command, tmp_path, "--archive", archive, "--source-name", "../x",
                     "--archive-option", "endpoint_url=http://127.0.0.1:9")
        assert (result.exit_code, result.stdout, result.stderr) == (2, "", error_line(
            "bad source name '../x': use letters, digits, '.', '_' or '-'"))


EMPTY = {  # command -> (exit code, stdout, stderr) on an existing empty archive
    "archive ls": (0, "archive {url} is empty: nothing archived yet (stream --archive and "
                      "base write to it)\n", ""),
    "verify": (1, "PROBLEM {url}: no archived binlog found\n0 objects checked, 1 problems\n",
               ""),
    "retain": (0, "archive {url} is empty: nothing to delete\n", ""),
}
ONE_SOURCE = (10, "", error_line("archive {url} is empty: no source to read (nothing archived "
                                 "yet)"))


@pytest.mark.parametrize("command", READERS)
def test_an_empty_archive_says_so(command, tmp_path):
    url = f"file://{tmp_path}/empty"
    (tmp_path / "empty").mkdir()
    result = run(command, tmp_path, "--archive", url)
    if command == "archive ls --json":
        import json
        assert (result.exit_code, result.stderr) == (0, "")
        assert json.loads(result.stdout) == {
            "files": [], "sources": [], "bases": [], "windows": [], "holes": [],
            "unusable": [], "problems": [], "failovers": []}
        return
    expected = EMPTY.get(command, ONE_SOURCE)
    assert (result.exit_code, result.stdout, result.stderr) == (
        expected[0], expected[1].format(url=url), expected[2].format(url=url))


def test_drill_planning_problems_stay_drill_failures(tmp_path, populated):
    """What the archive lacks (here: any indexed binlog) is what a drill is for: exit 1."""
    result = run("drill", tmp_path, "--archive", populated)
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-2:] == [
        "FAILED no restore can be planned: db1: the archive holds no binlog files",
        "drill FAILED"]


@pytest.mark.parametrize("command", READERS)
def test_s3_bucket_that_does_not_exist(command, tmp_path, s3):
    result = run(command, tmp_path, "--archive", "s3://nosuch-bucket/backups",
                 "--archive-option", f"endpoint_url={s3.endpoint}", log_level="warning")
    assert (result.exit_code, result.stdout, result.stderr) == (9, "", error_line(
        "archive s3://nosuch-bucket/backups: not an archive: no such bucket 'nosuch-bucket'"))


@pytest.mark.parametrize("command", ["archive ls", "retain", "restore --dry-run"])
def test_s3_empty_bucket_is_an_empty_archive(command, tmp_path, s3):
    url = s3.bucket("empty-" + tmp_path.name.lower().replace("_", "-")[-40:])
    result = run(command, tmp_path, "--archive", url, "--archive-option",
                 f"endpoint_url={s3.endpoint}", log_level="warning")
    expected = EMPTY.get(command, ONE_SOURCE)
    assert (result.exit_code, result.stdout, result.stderr) == (
        expected[0], expected[1].format(url=url), expected[2].format(url=url))


@pytest.fixture(scope="module")
def unreachable():
    """One port nothing listens on, for every reader: the store's S3 client (fsspec
    keeps one per endpoint) is made once, the refused request is each command's own."""
    return closed_port()


@pytest.mark.parametrize("command", READERS)
def test_unreachable_store(command, tmp_path, unreachable):
    port = unreachable
    result = run(command, tmp_path, "--archive", "s3://b/p", "--archive-option",
                 f"endpoint_url=http://127.0.0.1:{port}", "--archive-option", FAST,
                 log_level="warning")
    assert (result.exit_code, result.stdout, result.stderr) == (11, "", error_line(
        "archive s3://b/p: list / failed: EndpointConnectionError: Could not connect to "
        f'the endpoint URL: "http://127.0.0.1:{port}/b/p"'))


@pytest.mark.parametrize("command", ["archive ls", "verify", "restore --dry-run"])
def test_a_store_that_refuses(command, tmp_path, monkeypatch):
    """A directory the store may not read (a refusal: the tests run as root, so the
    file system's answer is made here) is the store's failure, not an empty archive."""
    from fsspec.implementations.local import LocalFileSystem

    def refuse(self, path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(LocalFileSystem, "find", refuse)
    (tmp_path / "archive").mkdir()
    result = run(command, tmp_path, "--archive", f"file://{tmp_path}/archive")
    assert (result.exit_code, result.stdout, result.stderr) == (11, "", error_line(
        f"archive file://{tmp_path}/archive: list / failed: PermissionError: [Errno 13] "
        f"Permission denied: '{tmp_path}/archive'"))


# -- writers: a missing file:// root is made by the first write; a file or a missing --
# -- bucket is refused before anything runs --------------------------------------------

def write(tmp_path, *args, log_level=None):
    options = ["--log-level", log_level] if log_level else []
    return CliRunner().invoke(main, options + list(args), env=ENV)


def base_args(archive, *more):
    return ["base", "--source", f"mysql://r@127.0.0.1:{closed_port()}", "--archive",
            archive, *more]


def test_writers_take_a_missing_file_root(tmp_path, copy_binlog):
    result = write(tmp_path, *base_args(f"file://{tmp_path}/new"))
    assert result.exit_code == 3 and "cannot connect to" in result.stderr  # the source's
    assert not (tmp_path / "new").exists()  # nothing is made before the base runs
    binlogs = tmp_path / "binlogs"
    binlogs.mkdir()
    copy_binlog("rust_mysql_common/mariadb-bin.000001", "binlogs/mariadb-bin.000001")
    result = write(tmp_path, "archive", "import", str(binlogs), "--archive",
                   f"file://{tmp_path}/new/archive", "--source-name", "db1")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "new" / "archive" / "db1").is_dir()


def test_writers_refuse_a_file_and_a_missing_bucket(tmp_path, s3):
    (tmp_path / "file").write_text("x")
    (tmp_path / "binlogs").mkdir()
    file_line = error_line(f"archive file://{tmp_path}/file: not an archive: a file, not a "
                           "directory")
    below_line = error_line(f"archive file://{tmp_path}/file/a: not an archive: "
                            f"{tmp_path}/file is a file")
    bucket_line = error_line("archive s3://nosuch-bucket/p: not an archive: no such bucket "
                             "'nosuch-bucket'")
    option = ["--archive-option", f"endpoint_url={s3.endpoint}"]
    for args, line in [
            (base_args(f"file://{tmp_path}/file"), file_line),
            (base_args(f"file://{tmp_path}/file/a"), below_line),
            (base_args("s3://nosuch-bucket/p", *option), bucket_line),
            (["archive", "import", str(tmp_path / "binlogs"), "--archive",
              f"file://{tmp_path}/file", "--source-name", "db1"], file_line),
            (["archive", "import", str(tmp_path / "binlogs"), "--archive",
              "s3://nosuch-bucket/p", "--source-name", "db1", *option], bucket_line)]:
        result = write(tmp_path, *args, log_level="warning")
        assert (result.exit_code, result.stderr) == (9, line), args


def test_an_sql_file_in_a_missing_folder_is_refused_before_anything_runs(tmp_path, populated):
    out = tmp_path / "nowhere" / "out.sql"
    result = CliRunner().invoke(main, ["replay", "--archive", populated, "--sql", str(out)],
                                env=ENV)
    assert result.exit_code == ExitCode.USAGE
    assert result.output == error_line(f"--sql {out}: no folder {tmp_path / 'nowhere'}")
    assert not (tmp_path / "nowhere").exists()  # a replay never makes folders
