"""The Spark session of a replay and what it ships to the executors."""

import os
import shutil
import sys
import tempfile


def spark_session(master=None):
    """A SparkSession (local[*] unless told), with this package shipped to executors."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    builder = (SparkSession.builder.appName("mysqlbackup-replay")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               # what tasks hand back is small (no event bytes); room for big files
               .config("spark.driver.memory",
                       os.environ.get("MYSQLBACKUP_SPARK_DRIVER_MEMORY", "2g"))
               .config("spark.driver.maxResultSize", "0"))
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # under spark-submit: its master rules
    if master or not submitted:
        builder = builder.master(master or "local[*]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    context = spark.sparkContext
    if not getattr(context, "_mysqlbackup_shipped", False):  # once per context: a second
        package = _package_zip()  # mysqlbackup.zip of another path is refused there
        if package:
            context.addPyFile(package)
        context._mysqlbackup_shipped = True
    return spark


def _package_zip():
    """A zip of mysqlbackup/ and replay/ for the executors (as spark-submit --py-files)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isdir(os.path.join(root, "mysqlbackup")):
        return None  # imported from a zip (spark-submit --py-files): already shipped
    workdir = tempfile.mkdtemp(prefix="mysqlbackup-pyfiles-")
    staging = os.path.join(workdir, "pkg")
    for name in ("mysqlbackup", "replay"):
        shutil.copytree(os.path.join(root, name), os.path.join(staging, name),
                        ignore=shutil.ignore_patterns("__pycache__"))
    return shutil.make_archive(os.path.join(workdir, "mysqlbackup"), "zip", staging)
