"""Fixtures: real throwaway MariaDB and MySQL servers (never a server the tests did not
start)."""

import os
import shutil
import subprocess
import sys

import pytest

from mysqlbackup.sandbox import MariaDBSandbox, find_binary

SHARED_BINLOGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "shared", "binlogs")


# The suite's tiers (pytest markers), set on each test from what it uses
# (``pytest_collection_modifyitems``): ``scripts/test.sh -m unit`` runs in under a minute.
TIERS = {
    "unit": "no server, Spark, S3 or subprocess: pure code, in process (any test marked "
            "nothing else; one that starts a process anyway fails, naming it)",
    "server": "starts a database server, moto's S3 server, or a process (the CLI, the "
              "daemon, a client tool)",
    "spark": "uses the run's Spark session",
    "mysql": "needs a live MySQL server (the .mysql/tree sandbox)",
    "torture": "the long fault-injection runs",
}
# fixtures that put a test in a tier (a module's own server fixtures: its pytestmark)
FIXTURE_TIERS = {"primary": "server", "make_server": "server", "source_files": "server",
                 "make_mysql": "mysql", "spark": "spark", "s3": "server"}


def pytest_configure(config):
    for name, meaning in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


def pytest_collection_modifyitems(config, items):
    """Each test's tiers: its marks, its fixtures' (FIXTURE_TIERS; the S3 side of the
    ``archive`` fixture), and ``unit`` when it has none of the others."""
    for item in items:
        tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
        tiers |= {FIXTURE_TIERS[f] for f in item.fixturenames if f in FIXTURE_TIERS}
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("archive") == "s3":
            tiers.add("server")
        if "mysql" in tiers:
            tiers.add("server")
        if not tiers - {"unit"}:
            tiers.add("unit")
        for name in sorted(tiers):
            item.add_marker(name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A ``unit`` test may start no process: Popen raises for it, naming the command,
    so a test that needs one is marked for its tier instead of slowing the unit tier."""
    if item.get_closest_marker("unit") is None:
        yield
        return
    real = subprocess.Popen.__init__

    def refuse(self, args, *rest, **kwargs):
        raise RuntimeError(f"{item.nodeid} is in the unit tier but starts a process "
                           f"({args!r}): mark it (pytestmark = pytest.mark.server)")
    subprocess.Popen.__init__ = refuse
    try:
        yield
    finally:
        subprocess.Popen.__init__ = real


def _require_mariadbd():
    if find_binary("mariadbd") is None:
        pytest.fail("mariadbd not found: run scripts/test.sh, which installs mariadb-server")


@pytest.fixture(scope="session")
def primary(tmp_path_factory):
    """One MariaDB primary for the whole session (binlog ROW/CRC32/GTID, semi-sync on)."""
    _require_mariadbd()
    server = MariaDBSandbox(str(tmp_path_factory.mktemp("primary")), semi_sync_timeout_ms=1000)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def make_server(tmp_path_factory):
    """Factory for extra throwaway servers (destructive tests); all stopped afterwards."""
    _require_mariadbd()
    servers = []

    def make(**kwargs):
        kwargs.setdefault("semi_sync_timeout_ms", 1000)
        server = MariaDBSandbox(str(tmp_path_factory.mktemp("server")), **kwargs)
        servers.append(server)
        return server.start()

    yield make
    for server in servers:
        server.stop(remove=True)


@pytest.fixture
def make_mysql():
    """Factory for throwaway MySQL servers (Debian sid's MySQL in .mysql/tree, through
    chroot: sandbox.mysql); skips, saying why, where that tree cannot run here. GTID
    mode on unless a test asks for MySQL's default (``gtid_mode="OFF"``): these tests
    are of the GTID features, tests/test_mysql_nogtid.py of the default."""
    from mysqlbackup.sandbox.mysql import MySQLSandbox, why_no_mysql
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    servers = []

    def make(**kwargs):
        kwargs.setdefault("semi_sync_timeout_ms", 1000)
        kwargs.setdefault("gtid_mode", "ON")
        server = MySQLSandbox(**kwargs)
        servers.append(server)
        return server.start()

    yield make
    for server in servers:
        server.stop(remove=True)


@pytest.fixture
def shared_118():
    """A folder of this test's own inside the one the MariaDB 11.8 tree's chroot and the
    host both know by one path (``sandbox.mysql.shared_dir``: tests in other processes
    use it at the same time); it goes afterwards, with what the test left there."""
    from mysqlbackup.sandbox.mysql import private_shared_dir
    from mysqlbackup.sandbox.tree import mariadb_tree, why_no_tree
    problem = why_no_tree()
    if problem:
        pytest.skip(problem)
    with private_shared_dir(mariadb_tree()) as folder:
        yield folder


@pytest.fixture(scope="session")
def source_files(tmp_path_factory):
    """Four real binlog files from a MariaDB server: three closed, the last active."""
    server = MariaDBSandbox(str(tmp_path_factory.mktemp("binlog-source"))).start()
    try:
        server.execute("CREATE DATABASE a", "CREATE TABLE a.t (id INT PRIMARY KEY "
                       "AUTO_INCREMENT, v TEXT)")
        for round_ in range(4):
            server.execute(*[f"INSERT INTO a.t (v) VALUES (REPEAT('{round_}', {50 * i}))"
                             for i in range(40)])
            if round_ < 3:
                server.execute("FLUSH BINARY LOGS")
        keep = tmp_path_factory.mktemp("binlog-files")
        names = server.binlog_files()
        for name in names:
            shutil.copyfile(server.binlog_path(name), keep / name)
        return [keep / n for n in names]
    finally:
        server.stop(remove=True)


@pytest.fixture
def shared_binlog():
    """Path of a real binlog file from ../shared/binlogs, the corpus of real MySQL and
    MariaDB binlogs that sits beside the project's checkout on its developers' and CI's
    machines; a user's clone of the repository alone does not have it: skip, saying so."""
    def path(relative):
        if not os.path.isdir(SHARED_BINLOGS):
            pytest.skip(f"needs the real-binlog corpus {SHARED_BINLOGS} (../shared/binlogs "
                        f"beside the checkout; not part of a clone of the repository)")
        full = os.path.join(SHARED_BINLOGS, relative)
        assert os.path.exists(full), f"missing test input {full}"
        return full
    return path


OWN_BINLOGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "binlogs")


@pytest.fixture
def binlog(shared_binlog):
    """Path of a binlog file: ``ours/NAME`` one of tests/data/binlogs (made by this
    project's own servers: scripts/make_test_binlogs.py; in every clone), anything else
    one of the corpus in ../shared/binlogs (``shared_binlog``: skips without it)."""
    def path(relative):
        if relative.startswith("ours/"):
            return os.path.join(OWN_BINLOGS, relative[len("ours/"):])
        return shared_binlog(relative)
    return path


@pytest.fixture
def copy_binlog(tmp_path, shared_binlog):
    def copy(relative, name=None):
        dest = tmp_path / (name or os.path.basename(relative))
        shutil.copyfile(shared_binlog(relative), dest)
        return dest
    return copy


class S3Endpoint:
    """moto's S3 server on loopback: a real HTTP endpoint that s3fs talks to."""

    def __init__(self, port=0):
        import logging

        from moto.server import ThreadedMotoServer
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()
        host, self.port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{self.port}"

    def stop(self):
        self.server.stop()

    def restart(self):
        """Start again on the same port (moto keeps the buckets in this process)."""
        self.__init__(self.port)

    def bucket(self, name, lock=False):
        import boto3
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1").create_bucket(
            Bucket=name, **({"ObjectLockEnabledForBucket": True} if lock else {}))
        return f"s3://{name}/backups"


_SPARK = {"session": None}  # the ``spark`` fixture's context, while it runs


@pytest.fixture(scope="session")
def spark(_spark_gateway):
    """One local Spark context (2 cores) for the whole run: a JVM starts once."""
    from replay.spark.context import spark_context
    _stop_spark_context()  # a module's own (getOrCreate would hand it back): local[2]
    context = _SPARK["session"] = spark_context("local[2]")
    yield context
    _SPARK["session"] = None
    context.stop()


def _stop_spark_context(keep=None):
    """Stop the SparkContext running in this process unless it is ``keep`` (nothing to
    do when pyspark was never imported: a unit run never imports it)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext
    context = SparkContext._active_spark_context
    if context is not None and context is not keep:
        context.stop()


@pytest.fixture(scope="module", autouse=True)
def _spark_contexts():
    """A Spark context a module's tests start themselves (a replay run in process
    through ``run_cli`` without the ``spark`` fixture) stops at the module's end: its
    tests share it, the next module meets the ``spark`` fixture's or none, never one
    another module left running with its settings."""
    yield
    _stop_spark_context(keep=_SPARK["session"])


@pytest.fixture(scope="session", autouse=True)
def _spark_gateway():
    """At the session's end, the context still running stops and the JVM gateway
    shuts down, its process waited for: nothing of Spark outlives the run."""
    yield
    _stop_spark_context()
    if "pyspark" in sys.modules:
        _shut_gateway()


def _shut_gateway():
    """Close the py4j gateway and end its JVM (it exits when its stdin closes)."""
    from pyspark import SparkContext
    gateway = SparkContext._gateway
    if gateway is None:
        return
    SparkContext._gateway = SparkContext._jvm = None
    gateway.shutdown()
    process = getattr(gateway, "proc", None)
    if process is None:
        return
    process.stdin.close()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


@pytest.fixture(scope="session", autouse=True)
def aws_env():
    """Dummy credentials for moto, also seen by daemon subprocesses and by Spark's
    workers: set before anything starts (a Spark JVM keeps the environment it began with)."""
    keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1"}
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def s3(aws_env):
    endpoint = S3Endpoint()
    yield endpoint
    endpoint.stop()


STORES = ["file", "s3"]


@pytest.fixture
def archive(request, tmp_path):
    """(URL, --archive-option list) of an empty archive: file://, or S3 through moto for
    a test parametrized ``@pytest.mark.parametrize("archive", STORES, indirect=True)``
    (the store contract, tests/test_store.py, and the few runs where the store's own
    behaviour matters: one end to end, streamed uploads, listings and their timing)."""
    kind = getattr(request, "param", "file")
    if kind == "file":
        return f"file://{tmp_path / 'archive'}", []
    endpoint = request.getfixturevalue("s3")
    bucket = "mb-" + os.urandom(6).hex()
    if kind == "s3-lock":  # a bucket with Object Lock (versioned), every write locked
        return endpoint.bucket(bucket, lock=True), [
            f"endpoint_url={endpoint.endpoint}", "lock_mode=governance", "lock_days=1"]
    return endpoint.bucket(bucket), [f"endpoint_url={endpoint.endpoint}"]
