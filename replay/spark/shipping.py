"""What a replay ships to its Spark executors, and how it finds out that they can run it.

* the code: ``package_zip`` zips ``mysqlbackup/`` and ``replay/`` (Python sources
  only: no ``__pycache__``, no compiled ``_speedups*.so``, no generated ``.c``) into a
  temporary folder removed when the process exits; ``SparkContext.addPyFile`` ships it
  (spark-submit: ``--py-files``, ``scripts/pack_replay_env.py`` writes it);
* the requirements: not shipped here. The executors' Python (``--python``) must have
  them: a packed virtualenv (``scripts/pack_replay_env.py``, ``spark.archives``), see
  docs/cluster.md;
* the credentials: ``executor_options`` adds the driver's S3 credentials and endpoint
  (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
  ``AWS_ENDPOINT_URL``, ``AWS_REGION``) to the storage options the tasks' closure
  carries, so that an executor started without them reads the archive. The closure
  travels inside the task, never on a command line, in the environment of a process,
  in the Spark UI or in its event log (``spark.executorEnv.*`` would be all of those);
* the check: ``check_executors`` runs ``replay.spark.probe.probe`` (pickled by value)
  on the executors before the first task, and ``explain_failure`` turns a failed Spark
  job into one line (a missing module, a Python of another version or none at all).
"""

import atexit
import logging
import os
import re
import shutil
import sys
import tempfile

from mysqlbackup.errors import MysqlBackupError

# what the tasks import (the units they get are planning.units.Unit, unpickled there);
# the probe tries each on the executors
TASK_MODULES = ("mysqlbackup", "replay.job.tasks", "replay.job.decoding.assemble",
                "replay.planning.units", "mysqlbackup.archive.objects",
                "mysqlbackup.archive.codec")
SOURCE_PACKAGES = ("mysqlbackup", "replay")
# compiled or generated files that never go into the zip: an executor's Python may not
# be the one they were built for, and the pure Python twin (speedups.fusedloop) is there
LEFT_OUT = ("__pycache__", "*.pyc", "*.so", "*.pyd", "*.c", "*.html")
# the driver's environment -> s3fs storage options of the tasks
AWS_OPTIONS = (("AWS_ACCESS_KEY_ID", "key"), ("AWS_SECRET_ACCESS_KEY", "secret"),
               ("AWS_SESSION_TOKEN", "token"))
AWS_ENDPOINT = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
AWS_REGION = ("AWS_REGION", "AWS_DEFAULT_REGION")
log = logging.getLogger(__name__)
HINT = "see docs/cluster.md: scripts/pack_replay_env.py, --python"


def source_root():
    """The folder holding ``mysqlbackup/`` and ``replay/``, or None when they are
    imported from a zip (spark-submit --py-files: already shipped)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return root if os.path.isdir(os.path.join(root, "mysqlbackup")) else None


def write_zip(path, root=None):
    """Write the zip of the two packages' sources at ``path`` (``.zip``); returns it."""
    root = root or source_root()
    if root is None:
        raise MysqlBackupError("the mysqlbackup package is not a folder here: nothing to zip")
    staging = tempfile.mkdtemp(prefix="mysqlbackup-pyfiles-")
    try:
        for name in SOURCE_PACKAGES:
            shutil.copytree(os.path.join(root, name), os.path.join(staging, name),
                            ignore=shutil.ignore_patterns(*LEFT_OUT))
        base = path[:-len(".zip")] if path.endswith(".zip") else path
        return shutil.make_archive(base, "zip", staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def package_zip():
    """The zip for ``addPyFile``, in a temporary folder removed at exit; None when the
    package is already a zip (spark-submit --py-files)."""
    if source_root() is None:
        return None
    workdir = tempfile.mkdtemp(prefix="mysqlbackup-pyfiles-")
    atexit.register(shutil.rmtree, workdir, True)
    return write_zip(os.path.join(workdir, "mysqlbackup.zip"))


def executor_options(url, options, environ=None):
    """The storage options the tasks get: ``options`` plus, for an S3 archive, the
    driver's credentials, endpoint and region from ``environ`` where ``options`` does
    not name them already (nor ``anon`` or ``profile``, which choose other credentials)."""
    environ = os.environ if environ is None else environ
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    options = dict(options or {})
    if protocol not in ("s3", "s3a") or "anon" in options or "profile" in options:
        return options
    client = options.get("client_kwargs") or {}
    for variable, key in AWS_OPTIONS:
        if environ.get(variable) and key not in options:
            options[key] = environ[variable]
    for key, variables in (("endpoint_url", AWS_ENDPOINT), ("region_name", AWS_REGION)):
        value = next((environ[v] for v in variables if environ.get(v)), None)
        if value and key not in options and key not in client:
            options[key] = value
    return options


def check_executors(context, url, extra_modules=()):
    """Run the probe once on each executor (as far as the scheduler spreads one task
    per executor); raise one line naming the first missing module or the mismatch.
    ``extra_modules``: what this run's tasks import besides TASK_MODULES (the Parquet
    writer for ``--parquet``)."""
    from pyspark import cloudpickle

    from replay.spark import probe as probe_module
    cloudpickle.register_pickle_by_value(probe_module)
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    executors = max(1, len(context._jsc.sc().statusTracker().getExecutorInfos()) - 1)
    modules, probe = TASK_MODULES + tuple(extra_modules), probe_module.probe
    rdd = context.parallelize(range(executors), executors)
    try:
        answers = rdd.map(lambda _: probe(modules, protocol)).collect()
    except Exception as e:  # noqa: BLE001 - a Py4JJavaError: the Python worker failed
        raise explain_failure(e) from None
    driver = "%d.%d" % sys.version_info[:2]
    for answer in answers:
        where = f"the executor at {answer['where']} (Python {answer['python']})"
        if answer["version"] != driver:
            raise MysqlBackupError(f"{where} is Python {answer['version']}, the driver "
                                   f"{driver}: they must match ({HINT})")
        if answer["missing"]:
            asked, missing, _message = answer["missing"]
            raise MysqlBackupError(f"{where} has no module {missing!r} (needed for "
                                   f"{asked}): its Python lacks the job's requirements "
                                   f"({HINT})")
    slow = sorted({(a["where"], a["decoding"][1]) for a in answers
                   if a.get("decoding") and not a["decoding"][0]})
    for where, decoding in slow:  # it works, several times slower: said, not refused
        log.warning("the executor at %s runs %s: several times slower than compiled; pack "
                    "its environment with scripts/pack_replay_env.py on a machine where "
                    "the package is built (docs/cluster.md)", where, decoding)


_PATTERNS = (
    (re.compile(r"No module named '([^']+)'"),
     "a Spark executor's Python has no module {0!r} ({hint})"),
    (re.compile(r"Python in worker has different version:? \(?(\d+\.\d+)\)?.*?driver:? "
                r"\(?(\d+\.\d+)"),
     "the executors' Python is {0}, the driver's {1}: they must match ({hint})"),
    (re.compile(r'Cannot run program "([^"]+)"'),
     "the Spark executors cannot run the Python {0!r} (--python names it on the "
     "workers; {hint})"),
)


def explain_failure(error):
    """A failed Spark job (usually a Py4JJavaError whose text holds the executor's
    traceback) as a MysqlBackupError of one line."""
    text = str(error)
    for pattern, line in _PATTERNS:
        found = pattern.search(text)
        if found:
            return MysqlBackupError(line.format(*found.groups(), hint=HINT))
    cause = re.search(r"^(?:pyspark\.\S+|\w+(?:\.\w+)*)?(?:Error|Exception): .+$", text,
                      re.MULTILINE)
    reason = re.search(r"Job aborted due to stage failure: (.+)", text)
    detail = (reason.group(1) if reason else cause.group(0) if cause
              else text.strip().splitlines()[0] if text.strip() else type(error).__name__)
    return MysqlBackupError(f"the Spark job failed: {detail[:500]}")
