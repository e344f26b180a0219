"""The driver JVM's class-data archive (``replay.spark.jvm``): used only when it
matches its record, never at the cost of a replay (a JVM that cannot start with it is
started without), and the user's own JVM options win."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from replay.spark import jvm
from tests.helpers import cli_env


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder of this test's, tuning on."""
    monkeypatch.setenv(jvm.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(jvm.TUNING_ENV, raising=False)
    return tmp_path / "cache"


def _place(path, data):
    """An archive file and its record (as ``build`` writes them) at ``path``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    with open(path + ".json", "w") as f:
        json.dump({"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, f)


def _log(cache):
    return f"-Dlog4j2.configurationFile={cache}/{jvm.LOG_FILE}"


def test_without_an_archive_c1_and_the_quiet_log_are_asked(cache):
    assert jvm.usable_archive() is None
    assert jvm.driver_java_options() == f"{jvm.C1_ONLY} {_log(cache)}"
    assert (cache / jvm.LOG_FILE).read_text() == jvm.LOG_CONFIG
    (cache / jvm.LOG_FILE).write_text("rootLogger.level = info\n")  # not ours
    jvm.driver_java_options()
    assert (cache / jvm.LOG_FILE).read_text() == jvm.LOG_CONFIG


def test_a_log4j_configuration_of_the_users_wins(cache, tmp_path, monkeypatch):
    given = "-Dlog4j2.configurationFile=/etc/mine.properties"
    assert jvm.driver_java_options(given) == jvm.C1_ONLY
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert jvm.driver_java_options() == f"{jvm.C1_ONLY} {_log(cache)}"
    (conf / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert jvm.driver_java_options() == jvm.C1_ONLY


def test_a_cache_path_with_a_blank_gives_no_path_option(tmp_path, monkeypatch):
    monkeypatch.setenv(jvm.CACHE_ENV, str(tmp_path / "a cache"))
    monkeypatch.delenv(jvm.TUNING_ENV, raising=False)
    _place(jvm.archive_path(), b"x" * 10)
    assert jvm.usable_archive() is not None
    assert jvm.driver_java_options() == jvm.C1_ONLY


def test_an_archive_matching_its_record_is_used(cache):
    path = jvm.archive_path()
    assert path.startswith(str(cache)) and path.endswith(".jsa")
    _place(path, b"x" * 1000)
    assert jvm.usable_archive() == path
    options = jvm.driver_java_options()
    assert options == (f"-XX:SharedArchiveFile={path} {jvm.QUIET} "
                       f"-XX:ErrorFile={cache}/hs_err_pid%p.log {jvm.C1_ONLY} "
                       f"{_log(cache)}")


@pytest.mark.parametrize("damage", ["truncated", "flipped", "no record", "bad record"])
def test_an_archive_unlike_its_record_is_never_used(cache, damage):
    path = jvm.archive_path()
    _place(path, b"x" * 1000)
    if damage == "truncated":
        with open(path, "r+b") as f:
            f.truncate(999)
    elif damage == "flipped":
        with open(path, "r+b") as f:
            f.write(b"y")
    elif damage == "no record":
        os.remove(path + ".json")
    else:
        with open(path + ".json", "w") as f:
            f.write("{not json")
    assert jvm.usable_archive() is None
    assert jvm.driver_java_options() == f"{jvm.C1_ONLY} {_log(cache)}"


def test_the_users_knobs_and_the_switch_win(cache, monkeypatch):
    _place(jvm.archive_path(), b"x" * 10)
    assert jvm.driver_java_options("-XX:TieredStopAtLevel=4").startswith(
        "-XX:SharedArchiveFile=")
    assert jvm.driver_java_options("-XX:TieredStopAtLevel=4").count("Tiered") == 0
    assert (jvm.driver_java_options("-Xshare:off")
            == f"{jvm.C1_ONLY} {_log(cache)}")
    monkeypatch.setenv(jvm.TUNING_ENV, "off")
    assert jvm.driver_java_options() == ""


def test_each_java_has_its_own_archive(cache, tmp_path, monkeypatch):
    java = jvm.java_binary()
    if java is None:
        pytest.skip("no java on this machine")
    other = tmp_path / "jdk" / "bin" / "java"
    other.parent.mkdir(parents=True)
    shutil.copy(java, other)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert jvm.java_binary() == str(other)
    assert jvm.archive_path() != jvm.archive_path(java)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    assert jvm.java_binary() is None and jvm.archive_path() is None


@pytest.mark.server
def test_a_driver_that_cannot_start_with_the_archive_starts_without(source_files, tmp_path):
    """A damaged archive that still matches its record (the JVM dies mapping it): the
    replay says so in one line, starts the JVM again without it and gives the same SQL
    as a replay without tuning; the crash report stays out of the working folder."""
    folder = tmp_path / "cache"
    env = dict(cli_env(), **{jvm.CACHE_ENV: str(folder)})
    path = jvm.archive_path()
    made = jvm.usable_archive(path)
    if made is None:  # setup.sh builds the one in the default cache: else, here
        made = jvm.build(str(tmp_path / "built" / os.path.basename(path)))
    with open(made, "rb") as f:
        _place(str(folder / os.path.basename(path)), f.read(1 << 20))  # a torn copy
    url = f"file://{tmp_path / 'archive'}"
    imported = _cli(env, tmp_path, "archive", "import", str(source_files[0].parent),
                    "--archive", url, "--source-name", "db1")
    assert imported.returncode == 0, imported.stderr
    torn = _cli(env, tmp_path, "replay", "--archive", url, "--sql", str(tmp_path / "a.sql"),
                "--engine", "spark")
    assert torn.returncode == 0, torn.stderr
    assert "the Spark driver did not start with -XX:SharedArchiveFile=" in torn.stderr
    assert not list(tmp_path.glob("hs_err_pid*")) and list(folder.glob("hs_err_pid*"))
    plain = _cli(dict(env, **{jvm.TUNING_ENV: "off"}), tmp_path, "replay",
                 "--archive", url, "--sql", str(tmp_path / "b.sql"), "--engine", "spark")
    assert plain.returncode == 0, plain.stderr
    assert "did not start" not in plain.stderr
    assert (tmp_path / "a.sql").read_bytes() == (tmp_path / "b.sql").read_bytes()
    assert (tmp_path / "a.sql").read_text().count("\n### INSERT INTO `a`.`t`") == 160


def _cli(env, cwd, *args):
    return subprocess.run([sys.executable, "-m", "mysqlbackup", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)
