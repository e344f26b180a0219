"""A faster, quieter start for the driver JVM this process launches: a class-data
archive (CDS) of Spark's classes, C1 only, and a log configuration without Spark's
banner.

Half of a local replay's start-up is the JVM loading and verifying Spark's classes
(about 3 s of context and 1.5 s of first job on a 2-core machine). A dynamic CDS archive
made once by a training run (``build``: a context, a job, its JVM dumping the classes
it loaded at exit) maps them in ready-made; ``-XX:TieredStopAtLevel=1`` spares a short
job the optimizing compiler's warm-up. Together: a local ``replay --sql`` of 210 MB,
7.2-8.0 s -> 5.1-5.6 s.

Spark's own log4j defaults print a banner on every start (its default profile, "Setting
default log level", "For SparkR, use setLogLevel", Hadoop's native library warning):
``LOG_CONFIG``, written beside the archive, keeps warnings and errors only, unless the
user configures log4j (``log4j`` in the driver's options, or a ``log4j2.properties``
in ``$SPARK_CONF_DIR``).

The archive is a cache: ``~/.cache/mysqlbackup`` (``$XDG_CACHE_HOME``;
``MYSQLBACKUP_CACHE_DIR`` overrides), one file per JVM and PySpark (``archive_path``),
beside a record of its size and sha256 written only after a JVM started with it.
A file that does not match its record is never handed to a JVM (a truncated archive
crashes one); no archive, or ``MYSQLBACKUP_JVM_TUNING=off``: Spark starts as it always
did. A JVM that fails to start with these options is started again without them
(``replay.spark.context``). ``scripts/setup.sh`` builds it: ``python -m
replay.spark.jvm``.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys

from mysqlbackup.durable import replace, write_bytes

TUNING_ENV = "MYSQLBACKUP_JVM_TUNING"   # "off": no options of ours
CACHE_ENV = "MYSQLBACKUP_CACHE_DIR"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a stale archive is a warning on stdout
C1_ONLY = "-XX:TieredStopAtLevel=1"
# the Spark settings of every context replay starts (no UI, no progress bars on the
# console): the training run's context is started with them too, to load what it loads
NO_UI = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
LOG_FILE = "log4j2-driver.properties"
LOG_CONFIG = """\
# written by mysqlbackup (replay/spark/jvm.py): the Spark driver it starts logs
# warnings and errors only, without Spark's start-up banner
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
"""


def cache_dir():
    """Where the archive lives (not created here)."""
    if os.environ.get(CACHE_ENV):
        return os.environ[CACHE_ENV]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mysqlbackup")


def java_binary():
    """The java spark-submit runs (``$JAVA_HOME/bin/java``, else the PATH's), resolved;
    None when there is none."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def archive_path(java=None):
    """The archive's path for ``java`` and this PySpark (its version and place: the
    class path the archive was made with), or None without a java."""
    java = java or java_binary()
    if java is None:
        return None
    import pyspark
    key = hashlib.sha256()
    release = os.path.join(os.path.dirname(os.path.dirname(java)), "release")
    stat = os.stat(java)
    key.update(f"{java}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    if os.path.exists(release):
        with open(release, "rb") as f:
            key.update(f.read(65536))
    key.update(f"{pyspark.__version__}\0{os.path.realpath(pyspark.__file__)}".encode())
    return os.path.join(cache_dir(), f"spark-{key.hexdigest()[:16]}.jsa")


def _digest(path):
    """(size, sha256 hex) of a file, read in chunks."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def usable_archive(path=None):
    """``path`` (default ``archive_path()``) when it and its record exist and match:
    its size and sha256 as when a JVM started with it; else None."""
    path = path or archive_path()
    if path is None:
        return None
    try:
        with open(path + ".json", encoding="utf-8") as f:
            record = json.load(f)
        if os.path.getsize(path) != record["size"]:
            return None
        return path if _digest(path) == (record["size"], record["sha256"]) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def driver_java_options(given=""):
    """The JVM options of ours for a local driver this process launches (it runs the
    tasks' JVM side too), to go before ``given`` (the user's
    ``spark.driver.extraJavaOptions``, which wins a conflict): the archive when usable,
    C1 only. "" when ``MYSQLBACKUP_JVM_TUNING=off``; none of a knob the user set."""
    if os.environ.get(TUNING_ENV, "").lower() in ("off", "0", "no", "false"):
        return ""
    ours = []
    if "SharedArchiveFile" not in given and "-Xshare" not in given:
        archive = usable_archive()
        if archive and _plain(archive):
            crash = os.path.join(os.path.dirname(archive), "hs_err_pid%p.log")
            ours.append(f"-XX:SharedArchiveFile={archive} {QUIET} -XX:ErrorFile={crash}")
    if "TieredStopAtLevel" not in given:
        ours.append(C1_ONLY)
    if "log4j" not in given:
        ours.append(_log_config())
    return " ".join(o for o in ours if o)


def _log_config():
    """``-Dlog4j2.configurationFile=`` ``LOG_CONFIG``'s file (written in the cache
    folder when it is not there as it should be), or "" where the user has a log4j
    configuration of their own in ``$SPARK_CONF_DIR`` or the file cannot be written."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if conf_dir and os.path.exists(os.path.join(conf_dir, "log4j2.properties")):
        return ""
    path = os.path.join(cache_dir(), LOG_FILE)
    if not _plain(path):
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            current = f.read()
    except OSError:
        current = None
    if current != LOG_CONFIG:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_bytes(path, LOG_CONFIG.encode(), tmp=f"{path}.{os.getpid()}.tmp")
        except OSError:
            return ""
    return f"-Dlog4j2.configurationFile={path}"


def _plain(path):
    """True when ``path`` can stand in a JVM option string as it is (no blank, no
    quote: Spark splits the options string as a shell would)."""
    return not any(c.isspace() or c in "'\"\\" for c in path)


def _train(target):
    """The training run (a child process): a local context whose JVM dumps the classes
    it loaded into ``target`` as it exits; returns once it has."""
    from pyspark import SparkContext
    context = _context(f"-XX:ArchiveClassesAtExit={target} {QUIET}")
    rdd = context.parallelize([[b"x" * 100] * 10, [b"y"]], 2).map(lambda part: len(part))
    rdd.collect()
    context.runJob(rdd, lambda it: list(it), [0])
    process = SparkContext._gateway.proc
    context.stop()
    process.stdin.close()  # the JVM exits when its stdin closes: it dumps first
    process.wait(timeout=300)


def _check(path):
    """A child process: a local context started with the archive at ``path``."""
    context = _context(f"-XX:SharedArchiveFile={path} {QUIET}")
    assert context.parallelize([1, 2], 2).map(lambda x: x + 1).collect() == [2, 3]
    context.stop()


def _context(java_options):
    """The local context of a training or check run, started as replay starts its own
    (no UI, on loopback) with ``java_options`` alone for its JVM."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    conf = SparkConf().setMaster("local[*]").setAppName("mysqlbackup-replay").setAll(
        list(dict(NO_UI, **{"spark.driver.extraJavaOptions": java_options}).items()))
    return SparkContext(conf=conf)


def build(path=None, timeout=600):
    """Make the archive at ``path`` (default ``archive_path()``): a training run, then a
    context started with it, then its record, then the rename into place. Returns the
    path; RuntimeError saying why when it cannot."""
    path = path or archive_path()
    if path is None:
        raise RuntimeError("no java found ($JAVA_HOME/bin/java or java on PATH)")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        for step in ("_train", "_check"):
            run = subprocess.run(
                [sys.executable, "-c", f"from replay.spark.jvm import {step}; "
                 f"{step}({temp!r})"], capture_output=True, text=True, timeout=timeout)
            if run.returncode != 0 or not os.path.exists(temp):
                last = (run.stderr.strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"the {step[1:]} run failed (exit {run.returncode}): {last}")
        size, sha = _digest(temp)
        replace(temp, path)
        record = json.dumps({"size": size, "sha256": sha}).encode()
        write_bytes(path + ".json", record, tmp=temp + ".json")  # last: makes it usable
        return path
    finally:
        for leftover in (temp, temp + ".json"):
            if os.path.exists(leftover):
                os.remove(leftover)


def main():
    """``python -m replay.spark.jvm``: build the archive unless a usable one is
    there; one line saying which. Exit 1 (one line) when it cannot."""
    path = archive_path()
    if path and usable_archive(path):
        print(f"spark class cache: {path} (already there)")
        return 0
    try:
        built = build(path)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"spark class cache: not built: {e}", file=sys.stderr)
        return 1
    print(f"spark class cache: {built} ({os.path.getsize(built) / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
