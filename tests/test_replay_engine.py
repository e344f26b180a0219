"""``replay --engine``: the binlogs decoded by Spark or in this process give the same
output, byte for byte (``--sql``) and row for row (``--parquet``); ``auto`` decodes a
small archive here and names why. The archive: the project's own binlogs (MariaDB 10.11
and 11.8, MySQL 9.7, every column type), imported as they are."""

import shutil

import pytest

from tests.conftest import OWN_BINLOGS
from tests.helpers import change_table_rows, run_cli

pytestmark = pytest.mark.spark  # the spark engine's runs start the run's Spark session

FILES = ["mariadb-10.11.000001", "types-mariadb-11.8.000001", "types-mysql-9.7.000001"]


@pytest.fixture(scope="module", params=FILES)
def archive(request, tmp_path_factory):
    """A file:// archive of one of the project's binlog files."""
    return archive_of(request.param, tmp_path_factory)


def archive_of(file, tmp_path_factory):
    """A file:// archive of the project's binlog ``file`` (source db1)."""
    folder = tmp_path_factory.mktemp("engine")
    (folder / "binlogs").mkdir()
    name = file.split(".")[0].replace("types-", "") + "-bin.000001"
    shutil.copyfile(f"{OWN_BINLOGS}/{file}", folder / "binlogs" / name)
    url = f"file://{folder / 'archive'}"
    done = run_cli("archive", "import", folder / "binlogs", "--archive", url,
                   "--source-name", "db1")
    assert done.returncode == 0, done.stderr
    return url


def replay(archive, *args):
    done = run_cli("replay", "--archive", archive, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_sql_is_the_same_from_either_engine(archive, tmp_path):
    said = {engine: replay(archive, "--sql", tmp_path / f"{engine}.sql", "--engine", engine)
            for engine in ("local", "spark", "auto")}
    text = (tmp_path / "spark.sql").read_bytes()
    assert text.count(b"COMMIT") >= 1
    assert (tmp_path / "local.sql").read_bytes() == text == (tmp_path / "auto.sql").read_bytes()
    assert "1 files in 1 Spark tasks; stopped: end of the archive" in said["spark"]
    assert "1 files decoded here, no Spark; stopped: end of the archive" in said["local"]
    assert said["auto"] == said["local"]  # a small archive: decoded here


def test_parquet_is_the_same_from_either_engine(tmp_path_factory, tmp_path):
    archive = archive_of(FILES[0], tmp_path_factory)  # the types' files have no column names
    for engine in ("local", "spark"):
        replay(archive, "--parquet", f"file://{tmp_path / engine}", "--engine", engine)
    rows = change_table_rows(tmp_path / "spark")
    assert rows and change_table_rows(tmp_path / "local") == rows


def test_auto_takes_spark_where_spark_is_asked_for(archive, tmp_path):
    out = replay(archive, "--sql", tmp_path / "master.sql", "--master", "local[2]")
    assert "in 1 Spark tasks" in out
    out = replay(archive, "--sql", tmp_path / "filtered.sql", "--database", "nothing")
    assert "in 1 Spark tasks" in out
