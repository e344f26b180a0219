"""The replay entry point under spark-submit, with the package shipped as a zip."""

import os
import shutil
import subprocess
import sys

import pyspark
import pytest

from mysqlbackup.stream.archiver import Archiver
from mysqlbackup.archive.store import ArchiveStore
from tests.helpers import REPO, backup_dir


@pytest.mark.server
def test_spark_submit_with_py_files_zip(tmp_path, shared_binlog):
    local = backup_dir([shared_binlog("rust_mysql_common/mariadb-bin.000001")],
                       tmp_path / "local", "demo")
    Archiver(str(local), ArchiveStore(f"file://{tmp_path / 'archive'}")).run_once()
    staging = tmp_path / "pkg"
    for name in ("mysqlbackup", "replay"):
        shutil.copytree(os.path.join(REPO, name), staging / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    package = shutil.make_archive(str(tmp_path / "mysqlbackup"), "zip", staging)
    submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
    # the driver and workers run this interpreter (its packages), whatever ran before
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("PYTHONPATH", None)  # the code must come from the zip
    result = subprocess.run(
        [submit, "--master", "local[2]", "--py-files", package,
         os.path.join(REPO, "replay", "spark_main.py"), "replay", "--archive",
         f"file://{tmp_path / 'archive'}", "--sql", str(tmp_path / "out.sql")],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 applied, 0 skipped, 0 incomplete dropped, 1 files in 1 Spark tasks" in \
        result.stdout
    sql = (tmp_path / "out.sql").read_text()
    assert sql.count("COMMIT\n/*!*/;") == 2 and "gtid_seq_no=2" in sql
