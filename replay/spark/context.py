"""The Spark context of a replay: where the driver listens, what it is told, and the
proof that executors reach it before any task is sent.

``local[*]`` (the default) runs everything on loopback. A standalone cluster
(``spark://HOST:PORT``) needs the driver at an address its executors can connect to:
``driver_address`` takes the one this machine would use to reach the master
(``--driver-host`` overrides it), binds there and advertises it. The master accepting
the application and the first executor registering are each awaited for at most
``spark.mysqlbackup.registrationTimeout`` seconds (``--conf``; 30 by default; the
master's answer, 60 more for the context's own set-up): a driver
they cannot reach fails with one line, never a silent wait while the master starts
executor after executor. The package's code is shipped by ``replay.spark.shipping``.
"""

import collections
import ipaddress
import logging
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

from mysqlbackup.errors import MysqlBackupError, UsageError
from replay.spark.jvm import NO_UI, driver_java_options
from replay.spark.shipping import package_zip, source_root

WAIT_KEY = "spark.mysqlbackup.registrationTimeout"
DEFAULT_WAIT = 30.0
# the context's own set-up before it asks the master (spark.archives unpacked on the
# driver too: seconds for a packed environment) is not the master's to answer for
SETUP_ALLOWANCE = 60.0
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
log = logging.getLogger(__name__)
_SHARED = [None]  # the gateway (JVM) started with this package first on PYTHONPATH


@dataclass(frozen=True)
class SparkSetup:
    """How a job's Spark context is made beyond its master (``replay`` and ``restore``:
    --conf, --driver-host, --python); ``context`` makes it (``spark_context``)."""

    conf: dict = field(default_factory=dict)  # parsed --conf (parse_conf)
    driver_host: str = None
    python: str = None                        # the executors' interpreter

    @classmethod
    def of(cls, conf_pairs=(), driver_host=None, python=None):
        """From the command line's values; UsageError naming a malformed --conf pair."""
        return cls(parse_conf(conf_pairs), driver_host, python)

    def given(self):
        """The names of the options given (``--conf``, ``--driver-host``, ``--python``),
        in that order: what makes ``restore --engine auto`` choose Spark."""
        return tuple(name for name, value in (("--conf", self.conf), ("--driver-host",
                     self.driver_host), ("--python", self.python)) if value)

    def context(self, master=None):
        """The SparkContext of ``master`` (``spark_context`` with these settings)."""
        return spark_context(master, self.conf, self.driver_host, self.python)


def parse_conf(pairs):
    """``--conf KEY=VALUE`` strings -> a dict; UsageError naming a malformed one."""
    conf = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"bad --conf {pair!r}: expected KEY=VALUE (a Spark setting)")
        conf[key.strip()] = value
    return conf


def master_endpoint(master):
    """(host, port) of the first master of a ``spark://H1:P1[,H2:P2]`` URL, or None for
    another kind of master."""
    if not master or not master.startswith("spark://"):
        return None
    first = master[len("spark://"):].split(",")[0].rstrip("/")
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"bad --master {master!r}: expected spark://HOST:PORT")
    return host.strip("[]"), int(port)


def driver_address(master, asked=None):
    """The address executors should reach the driver at: ``asked``, else the local
    address of the route to the master (a UDP socket's connect: no packet is sent)."""
    if asked:
        return asked
    host, port = master_endpoint(master)
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(info[0], socket.SOCK_DGRAM) as probe:
            probe.connect(info[4])
            return probe.getsockname()[0]
    except OSError as e:
        raise MysqlBackupError(f"no route to the Spark master {host}:{port} ({e.strerror or e}):"
                               " give --driver-host, an address of this machine the "
                               "workers reach") from None


def is_local_address(address):
    """True when this machine can bind ``address`` (one of its own)."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 \
            else socket.AF_INET
    except ValueError:  # a host name: what it resolves to
        try:
            family, *_rest, sockaddr = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)[0]
            address = sockaddr[0]
        except OSError:
            return False
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, 0))
            return True
        except OSError:
            return False


def cluster_settings(master, driver_host=None, conf=None):
    """The settings a standalone master needs of the driver: where it binds and what it
    advertises. An address that is not this machine's is refused unless
    ``spark.driver.bindAddress`` says where to bind (a NAT in between)."""
    conf = conf or {}
    host = driver_address(master, driver_host)
    settings = {"spark.driver.host": host}
    if "spark.driver.bindAddress" in conf:
        return settings
    if not is_local_address(host):
        raise UsageError(f"--driver-host {host} is not an address of this machine: give one "
                         "the workers reach, or --conf spark.driver.bindAddress=ADDR when a "
                         "NAT forwards that address here")
    settings["spark.driver.bindAddress"] = host
    return settings


def spark_context(master=None, conf=None, driver_host=None, python=None):
    """A SparkContext (local[*] unless told) with this package shipped to executors. No
    SparkSession: the job's tasks are plain RDD tasks, and Spark SQL's set-up costs
    seconds of start-up (3.6 s of 8.2 on a 2-core machine).

    ``conf``: Spark settings (``--conf``), applied last; ``driver_host``: the address
    executors reach the driver at (a ``spark://`` master: the route to it by default);
    ``python``: the executors' interpreter (``PYSPARK_PYTHON``; a path on the workers,
    such as ``./environment/bin/python`` inside a packed ``spark.archives``)."""
    conf = dict(conf or {})
    submitted = under_spark_submit()  # its master rules
    cluster = master_endpoint(master) is not None and not submitted
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if python:
        os.environ["PYSPARK_PYTHON"] = python
    settings = {**NO_UI,
                # tasks hand back the applied transactions' events (tasks.ATTACH_MAX each)
                "spark.driver.memory": os.environ.get("MYSQLBACKUP_SPARK_DRIVER_MEMORY", "2g"),
                "spark.driver.maxResultSize": "0"}
    if cluster:
        settings.update(cluster_settings(master, driver_host, conf))
        if "spark.driver.bindAddress" in settings:  # the launcher's guess, said once
            os.environ.setdefault("SPARK_LOCAL_IP", settings["spark.driver.bindAddress"])
    elif not submitted:
        if driver_host:
            raise UsageError("--driver-host is for a spark://HOST:PORT master")
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    wait = _wait_seconds(conf.pop(WAIT_KEY, None))
    settings.update(conf)
    from pyspark import SparkConf, SparkContext
    # a JVM this call starts, whose tasks run here (local, local[N]): they import this
    # very package, compiled modules and all (a shipped zip has none), and it starts faster
    local = not submitted and is_local_master(master)
    launched = local and SparkContext._gateway is None
    if launched:
        _share_sources()
    ours = driver_java_options(settings.get(JAVA_OPTIONS, "")) if launched else ""
    if ours:  # before the user's: theirs win a conflict
        settings[JAVA_OPTIONS] = f"{ours} {settings.get(JAVA_OPTIONS, '')}".strip()
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per gateway connection
    spark_conf = SparkConf().setAppName("mysqlbackup-replay").setAll(list(settings.items()))
    if master or not submitted:
        spark_conf.setMaster(master or "local[*]")
    if cluster:  # the JVM first, at no deadline: the wait is the master's, not its start-up
        launch_driver(SparkContext, spark_conf)
        context = _start(SparkContext, spark_conf, master, settings, wait)
    else:
        context = _start_local(SparkContext, spark_conf, ours, conf.get(JAVA_OPTIONS))
    context.setLogLevel("ERROR")
    if cluster:
        _await_executors(context, master, wait)
    if launched:
        _SHARED[0] = SparkContext._gateway
    if local and SparkContext._gateway is _SHARED[0]:  # a JVM started by _share_sources:
        context._mysqlbackup_shipped = True  # its workers import what this process does
    if not getattr(context, "_mysqlbackup_shipped", False):  # once per context: a second
        package = package_zip()  # (a zip of another path is refused there)
        if package:
            context.addPyFile(package)
        context._mysqlbackup_shipped = True
    return context


def under_spark_submit():
    """True in a process spark-submit started (its JVM runs already, its master rules)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def is_local_master(master):
    """True for a master whose tasks run in Python workers of this machine started by
    the driver's JVM: none (local[*]), ``local``, ``local[N]``, ``local[N,F]``."""
    return master is None or re.fullmatch(r"local(\[[^\]]*\])?", master) is not None


def _share_sources():
    """Put the folder this package is imported from first on PYTHONPATH, which the JVM
    about to start hands its Python workers: they import the same code, its compiled
    row loop included. (The zip ``addPyFile`` would ship holds sources only: a replay
    run from another folder than a checkout's decoded twice as slowly.)"""
    root = source_root()
    if root is None:  # a zip already (spark-submit --py-files)
        return
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not paths or paths[0] != root:
        os.environ["PYTHONPATH"] = os.pathsep.join([root] + [p for p in paths if p != root])


def _wait_seconds(text):
    """``spark.mysqlbackup.registrationTimeout`` in seconds (``30``, ``30s``, ``2min``)."""
    if text is None:
        return DEFAULT_WAIT
    value = text.strip().lower()
    scale = 60.0 if value.endswith("min") else 1.0
    value = value.removesuffix("min").removesuffix("s")
    try:
        seconds = float(value) * scale
    except ValueError:
        seconds = -1
    if seconds <= 0:
        raise UsageError(f"bad --conf {WAIT_KEY}={text}: expected seconds (30, 30s, 2min)")
    return seconds


def _start_local(context_class, spark_conf, ours, given):
    """``context_class.getOrCreate``; when a JVM launched with our options (``ours``:
    ``jvm.driver_java_options``) did not start, once more without them (a
    cache must never cost a replay), the user's own (``given``) kept."""
    try:
        launch_driver(context_class, spark_conf)
        return context_class.getOrCreate(spark_conf)
    except Exception:  # noqa: BLE001 - whatever stopped the JVM, tried once without ours
        if not ours or context_class._gateway is not None:
            raise
        log.warning("the Spark driver did not start with %s: starting it without", ours)
        spark_conf.set(JAVA_OPTIONS, given or "")
        launch_driver(context_class, spark_conf)
        return context_class.getOrCreate(spark_conf)


class JvmOutput:
    """The driver JVM's stderr (and its Python workers', which inherit it), read a line
    at a time by a thread of its own: each line a record of the logger ``pyspark.jvm``,
    which the command's log shows at debug level only (``mysqlbackup.logs.from_spark``:
    "WARNING: Using incubator modules", Spark's log4j warnings), the last ones kept for
    the warning that says why a JVM did not start."""

    LINES = 20

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        self.last = collections.deque(maxlen=self.LINES)
        self.logger = logging.getLogger("pyspark.jvm")
        self.reader = threading.Thread(target=self._drain, name="spark-jvm-stderr",
                                       daemon=True)
        self.reader.start()

    def _drain(self):
        with open(self.read_fd, "rb") as stream:
            for raw in stream:
                line = raw.decode("utf-8", "replace").rstrip()
                if line:
                    self.last.append(line)
                    self.logger.warning("%s", line)

    def started(self):
        """The JVM holds its own copy of the pipe now: ours goes (EOF when it exits)."""
        os.close(self.write_fd)


def launch_driver(context_class, spark_conf):
    """Start the driver JVM for ``context_class`` (none runs yet, and this is no
    spark-submit, whose JVM runs already) with its stderr taken by a JvmOutput: Spark's
    own lines are not the command's output. A JVM that does not start is warned about
    with its last lines, and pyspark's error raised."""
    if context_class._gateway is not None or under_spark_submit():
        return
    from pyspark.java_gateway import launch_gateway
    output = JvmOutput()
    try:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": output.write_fd})
    except Exception:
        output.started()
        output.reader.join(5)  # what the JVM said before it exited (EOF: it is gone)
        log.warning("the Spark driver JVM did not start: %s",
                    " | ".join(output.last) or "it said nothing")
        raise
    output.started()
    context_class._ensure_initialized(gateway=gateway, conf=spark_conf)


def _start(context_class, spark_conf, master, settings, wait):
    """``context_class.getOrCreate`` against a standalone master, waiting at most ``wait``
    seconds (and SETUP_ALLOWANCE for the context's own set-up) for the master to accept
    the application (it answers at the driver's advertised address)."""
    box, wait = {}, wait + SETUP_ALLOWANCE

    def create():
        try:
            box["context"] = context_class.getOrCreate(spark_conf)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = e
    thread = threading.Thread(target=create, name="spark-start", daemon=True)
    thread.start()
    thread.join(wait)
    if thread.is_alive():  # the JVM goes with this process (it watches its stdin)
        raise MysqlBackupError(
            f"the Spark master {master} did not accept this application within {wait:.0f}s: "
            f"it cannot reach the driver at {settings['spark.driver.host']} (give --driver-host "
            "an address of this machine the master and workers reach) or it is down")
    if "error" in box:
        first = str(box["error"]).strip().splitlines()
        raise MysqlBackupError(f"cannot start Spark on {master}: "
                               f"{first[0] if first else type(box['error']).__name__}") from None
    return box["context"]


def _await_executors(context, master, wait):
    """Return once an executor registered with the driver; after ``wait`` seconds stop
    the context and raise one line: the executors cannot reach the driver."""
    deadline = time.monotonic() + wait
    tracker = context._jsc.sc().statusTracker()
    while len(tracker.getExecutorInfos()) < 2:  # the driver counts as one
        if time.monotonic() > deadline:
            conf = context.getConf()
            where = f"{conf.get('spark.driver.host')}:{conf.get('spark.driver.port')}"
            _stop_quietly(context)
            raise MysqlBackupError(
                f"no Spark executor registered with the driver at {where} within {wait:.0f}s "
                f"({master} accepted the application): the workers cannot connect to that "
                "address (give --driver-host an address of this machine they reach) or "
                "have no free cores or memory")
        time.sleep(0.2)


def _stop_quietly(context, patience=10.0):
    """Stop ``context``, giving up after ``patience`` seconds (the error matters more)."""
    stopper = threading.Thread(target=context.stop, name="spark-stop", daemon=True)
    stopper.start()
    stopper.join(patience)
