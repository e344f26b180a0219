"""``replay --master spark://...`` on a standalone cluster the test makes (issue 31).

The master, the driver and moto's S3 server sit in the root namespace on a bridge of
the test's own (tests/netns.py); each of the two workers in a network namespace of its
own, standing in for another host, started with pyspark's own ``spark-class`` and an
environment without the project's path, its Python packages or any AWS variable: the
executors run the environment ``scripts/pack_replay_env.py`` packs (shipped with
``spark.archives``), the code ``replay`` ships itself, and read S3 with the driver's
credentials, which travel inside the tasks.
"""

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import pyspark
import pytest

from tests import netns
from tests.helpers import REPO, backup_dir, wait_for


def on_a_cluster(test):
    """A test of the cluster: tiers spark and server (the pure tests below stay unit)."""
    return pytest.mark.spark(pytest.mark.server(test))

SPARK_CLASS = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "cluster-test", "AWS_SECRET_ACCESS_KEY": "cluster-secret",
               "AWS_DEFAULT_REGION": "us-east-1"}


def _bare_env(**extra):
    """What a worker host's daemon or a user's shell starts with: no AWS variables, no
    PYTHONPATH, no SPARK_LOCAL_IP; small daemons."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "JAVA_HOME") if k in os.environ}
    env["SPARK_DAEMON_MEMORY"] = "256m"
    env.update(extra)
    return env


def _free_port(address):
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


# The pure tests first: the cluster's fixtures end (processes, namespaces) in the
# teardown of the module's last test, which must be one of its tier (a unit test may
# start no process).

def test_the_driver_s_credentials_ride_in_the_s3_options_only():
    from replay.spark.shipping import executor_options
    env = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "sk", "AWS_SESSION_TOKEN": "t",
           "AWS_ENDPOINT_URL": "http://e:1", "AWS_DEFAULT_REGION": "eu-west-1"}
    assert executor_options("s3://b/p", {"max_concurrency": 2}, env) == {
        "max_concurrency": 2, "key": "id", "secret": "sk", "token": "t",
        "endpoint_url": "http://e:1", "region_name": "eu-west-1"}
    # the user's own options win; anon/profile choose other credentials; other stores: none
    assert executor_options("s3://b/p", {"key": "mine", "client_kwargs": {
        "endpoint_url": "http://x"}}, env)["key"] == "mine"
    assert "endpoint_url" not in executor_options("s3://b/p", {"client_kwargs": {
        "endpoint_url": "http://x"}}, env)
    assert executor_options("s3://b/p", {"anon": True}, env) == {"anon": True}
    assert executor_options("file:///a", {}, env) == {}


def test_spark_settings_and_masters_are_read_strictly():
    from mysqlbackup.errors import UsageError
    from replay.spark.context import _wait_seconds, master_endpoint, parse_conf
    assert parse_conf(["spark.executor.memory=1g", "spark.archives=a.tgz#env=x"]) == {
        "spark.executor.memory": "1g", "spark.archives": "a.tgz#env=x"}
    with pytest.raises(UsageError, match=r"^bad --conf 'spark.x': expected KEY=VALUE"):
        parse_conf(["spark.x"])
    assert master_endpoint("spark://h1:7077,h2:7077") == ("h1", 7077)
    assert master_endpoint("local[2]") is None
    with pytest.raises(UsageError, match=r"^bad --master 'spark://h1': expected spark://"):
        master_endpoint("spark://h1")
    assert (_wait_seconds(None), _wait_seconds("8s"), _wait_seconds("2min")) == (30, 8, 120)
    with pytest.raises(UsageError, match="registrationTimeout=soon: expected seconds"):
        _wait_seconds("soon")


def test_a_failed_spark_job_becomes_its_cause():
    from replay.spark.shipping import explain_failure
    trace = ("An error occurred while calling o1.collect.\n: org.apache.spark.SparkException:"
             " Job aborted due to stage failure: Task 0 in stage 0.0 failed 4 times\n"
             "Traceback (most recent call last):\n  File \"worker.py\"\n"
             "ModuleNotFoundError: No module named 'pyrage'\n\tat org.apache.spark.Foo")
    assert str(explain_failure(Exception(trace))).startswith(
        "a Spark executor's Python has no module 'pyrage' (see docs/cluster.md")
    mismatch = ("[PYTHON_VERSION_MISMATCH] Python in worker has different version: 3.10 "
                "than that in driver: 3.11, PySpark cannot run with different minor versions.")
    assert str(explain_failure(Exception(mismatch))).startswith(
        "the executors' Python is 3.10, the driver's 3.11: they must match")
    missing = 'java.io.IOException: Cannot run program "./environment/bin/python": error=2'
    assert "cannot run the Python './environment/bin/python'" in str(
        explain_failure(Exception(missing)))
    other = str(explain_failure(Exception(
        "x\nJob aborted due to stage failure: Task 3 failed: ExecutorLostFailure\n\tat a")))
    assert other == "the Spark job failed: Task 3 failed: ExecutorLostFailure"


def test_the_tasks_hand_back_the_bytes_of_the_applied_transactions_only(tmp_path,
                                                                        shared_binlog):
    """Item 4 of issue 31: with ``keep``, a decode task cuts the events of the
    transactions the driver applies from its own read, and the driver reads nothing."""
    from mysqlbackup.archive.store import ArchiveStore
    from mysqlbackup.stream.archiver import Archiver
    from replay.planning.plan import ReplayOptions, units_to_read
    from mysqlbackup.archive.stop import StopGtid
    from replay.planning.options import build_selection
    from replay.job.tasks import decode_unit, keep_spec
    from tests.helpers import backup_dir
    path = shared_binlog("rust_mysql_common/mariadb-bin.000001")  # GTIDs 0-1-1, 0-1-2
    local = backup_dir([path], tmp_path / "local", "demo")
    url = f"file://{tmp_path / 'archive'}"
    Archiver(str(local), ArchiveStore(url)).run_once()
    selection = build_selection(stop=StopGtid((0, 1, 2)))
    _, (unit,), _ = units_to_read(ReplayOptions(url, {}, selection=selection))
    result = decode_unit(unit, url, {}, None, keep_spec(selection, unit))
    assert result.error is None and result.attached is True
    first, second = result.transactions
    data = open(path, "rb").read()
    assert b"".join(first.events) == data[first.start:first.end]  # the applied one
    assert second.events is None and second.event_lengths  # past the stop: no bytes
    whole = decode_unit(unit, url, {}, None, keep_spec(build_selection(), unit))
    assert [b"".join(t.events) for t in whole.transactions] == [
        data[t.start:t.end] for t in whole.transactions]
    big = decode_unit(unit, url, {}, None, replace(keep_spec(selection, unit), max_bytes=10))
    assert big.attached is False and big.transactions[0].events is None
    assert decode_unit(unit, url, {}).attached is False  # no keep: as before


def test_a_parquet_task_writes_its_parts_and_hands_back_no_bytes(tmp_path, shared_binlog):
    """Item 4 of issue 31 for --parquet: the task writes the parts of the transactions
    the driver applies (filtered and rewritten as the driver would) and hands back none
    of their bytes; a row change the table cannot hold comes back as a named error."""
    from mysqlbackup.archive.store import ArchiveStore
    from mysqlbackup.stream.archiver import Archiver
    from replay.planning.plan import ReplayOptions, units_to_read
    from mysqlbackup.archive.stop import StopGtid
    from replay.planning.options import build_selection
    from replay.job.sinks.parquet import ParquetSink, part_name
    from replay.job.tasks import decode_unit, keep_spec
    from tests.helpers import backup_dir, change_table_rows
    paths = [shared_binlog("rust_mysql_common/mariadb-bin.000001"),  # 0-1-1, 0-1-2
             shared_binlog("rust_mysql_common/minimal_row_metadata.000001")]
    url = f"file://{tmp_path / 'archive'}"
    for path, source in zip(paths, ("demo", "minimal")):
        local = backup_dir([path], tmp_path / source, source)
        Archiver(str(local), ArchiveStore(url)).run_once()
    selection = build_selection(stop=StopGtid((0, 1, 2)),
                                rewrites=("toddy_test:renamed",))
    _, (unit,), _ = units_to_read(ReplayOptions(url, {}, "demo", selection=selection))
    sink = ParquetSink(f"file://{tmp_path / 'changes'}").open(None)
    result = decode_unit(unit, url, {}, None, keep_spec(selection, unit, sink.task_spec(), 3))
    assert result.error is None and result.attached is False
    assert all(t.events is None and t.event_lengths for t in result.transactions)
    assert result.written == {"parts": [(part_name(3, 0), 1)], "rows": 1,
                                 "transactions": 1,  # 0-1-1 only: the stop is 0-1-2
                                 "left_out": []}
    sink.adopt(result.written, result.transactions[:1])
    sink.finish()
    (row,) = change_table_rows(tmp_path / "changes")
    assert (row["db"], row["gtid"], row["op"]) == ("renamed", "0-1-1", "insert")
    _, (unit,), _ = units_to_read(ReplayOptions(url, {}, "minimal", selection=build_selection()))
    failed = decode_unit(unit, url, {}, None, keep_spec(selection, unit, replace(
        sink.task_spec(), url=f"file://{tmp_path / 'other'}"), 0))
    assert failed.error.kind == "sink" and failed.error.message.startswith(
        "minimal_row_metadata.000001:312: TABLE_MAP of noria.t1 carries no column names")


def test_a_writing_task_holds_the_events_of_one_transaction_at_a_time(shared_binlog):
    """The stream hands a writing task each transaction with its events as it ends
    (``StreamAssembly``'s ``each``: nothing spooled) and keeps none it handed out; the
    detached originals that go back to the driver stay without bytes, their events'
    lengths kept."""
    import gc
    import weakref

    from replay.job.decoding.assemble import StreamAssembly
    from tests.helpers import read
    name = "mysql-bin.000066"
    data = read(shared_binlog(f"gh-ost/{name}"))
    handed, most = [], 0

    def each(trx):
        nonlocal most
        assert b"".join(trx.events) == data[trx.start:trx.end]
        handed.append(weakref.ref(trx))
        gc.collect()
        most = max(most, sum(ref() is not None for ref in handed))

    walk = StreamAssembly(name, each=each)
    gc.freeze()  # what lived before: each collection looks at the new objects only
    try:
        for at in range(0, len(data), 4096):
            walk.feed(data[at:at + 4096])
        transactions, _, _, _ = walk.finish()
    finally:
        gc.unfreeze()
    assert len(transactions) > 5 and len(handed) == len(transactions) and most == 1
    assert all(t.events is None and t.event_lengths for t in transactions)


@pytest.fixture(scope="module")
def packing(tmp_path_factory):
    """scripts/pack_replay_env.py, started in the background: it builds while the
    cluster and the archive are made (``packed`` waits for it)."""
    out = tmp_path_factory.mktemp("packed")
    with open(out / "pack.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, os.path.join(REPO, "scripts",
                                                              "pack_replay_env.py"),
                                 "--output-dir", str(out)], stdout=log,
                                stderr=subprocess.STDOUT)
    yield SimpleNamespace(proc=proc, out=out)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def packed(packing):
    """scripts/pack_replay_env.py's output: (replay-env.tar.gz, replay.zip)."""
    returncode = packing.proc.wait(timeout=300)
    assert returncode == 0, (packing.out / "pack.log").read_text()[-2000:]
    return SimpleNamespace(env=packing.out / "replay-env.tar.gz",
                           zip=packing.out / "replay.zip")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, packing):
    """A master (root namespace, on the bridge), two workers (1 core, 1 GB each, one per
    namespace) and moto's S3 server on the bridge's address; all ended and the network
    removed at the end, even on failure. (The environment's packing starts first.)"""
    problem = netns.why_not()
    if problem:
        pytest.skip(problem)
    base = tmp_path_factory.mktemp("cluster")
    net = netns.Network(2)
    net.open()
    try:
        host = net.gateway
        port, s3_port = _free_port(host), _free_port(host)
        master = net.start([SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host",
                            host, "--port", str(port), "--webui-port", str(_free_port(host))],
                           env=_bare_env(SPARK_LOCAL_IP=host), cwd=str(base),
                           log=str(base / "master.log"))
        netns.wait_port(host, port, process=master)
        url = f"spark://{host}:{port}"
        workers = {}
        for name, address in net.hosts.items():
            work = base / name
            work.mkdir()
            net.start([SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", "--host", address,
                       "--cores", "1", "--memory", "1g", "--work-dir", str(work),
                       "--webui-port", "0", url], host=name,
                      env=_bare_env(SPARK_LOCAL_IP=address), cwd=str(work),
                      log=str(base / f"{name}.log"))
            workers[address] = work
        wait_for(lambda: sum((base / "master.log").read_text().count(f"Registering worker {a}")
                             for a in workers) == len(workers), timeout=90,
                 what="both workers registered with the master")
        moto = net.start([os.path.join(os.path.dirname(sys.executable), "moto_server"), "-H",
                          host, "-p", str(s3_port)], env=_bare_env(), cwd=str(base),
                         log=str(base / "moto.log"))
        netns.wait_port(host, s3_port, process=moto)
        yield SimpleNamespace(master=url, host=host, workers=workers, base=base,
                              s3=f"http://{host}:{s3_port}", spare=f"{net.prefix}.200")
    finally:
        net.close()


@pytest.fixture(scope="module")
def archive(cluster, tmp_path_factory):
    """An S3 archive (on the cluster's moto) of a MariaDB server's four binlog files of
    row changes (binlog_row_metadata=FULL, so --parquet works), with a base taken after
    the first round; ``checksum``: the server's table at the end."""
    import boto3

    from mysqlbackup.archive.store import ArchiveStore
    from mysqlbackup.sandbox import MariaDBSandbox
    from mysqlbackup.stream.archiver import Archiver
    boto3.client("s3", endpoint_url=cluster.s3, region_name="us-east-1",
                 aws_access_key_id="cluster-test",
                 aws_secret_access_key="cluster-secret").create_bucket(Bucket="archive")
    url = "s3://archive/backups"
    base = tmp_path_factory.mktemp("source")
    server = MariaDBSandbox(str(base / "server"), semi_sync=False).start()
    try:
        server.execute("CREATE DATABASE shop", "CREATE TABLE shop.items (id INT PRIMARY KEY, "
                       "name VARCHAR(40), qty INT)")
        for round_ in range(4):
            server.execute(*[f"INSERT INTO shop.items VALUES ({round_ * 100 + i}, "
                             f"'item {round_}-{i}', {i})" for i in range(30)],
                           f"UPDATE shop.items SET qty = qty + 1 WHERE id < {round_ * 100 + 5}",
                           f"DELETE FROM shop.items WHERE id = {round_ * 100 + 7}")
            if round_ == 0:
                taken, _ = mysqlbackup(cluster, "base", "--source",
                                       f"mysql://root@127.0.0.1:{server.port}", "--archive",
                                       url, "--source-name", "db1")
                assert taken.returncode == 0, taken.stderr[-3000:]
            if round_ < 3:
                server.execute("FLUSH BINARY LOGS")
        checksum = server.execute("CHECKSUM TABLE shop.items")
        files = [server.binlog_path(n) for n in server.binlog_files()]
        local = backup_dir(files, base / "local", "db1")
    finally:
        server.stop()
    store_options = {"endpoint_url": cluster.s3, "key": "cluster-test",
                     "secret": "cluster-secret"}
    store = ArchiveStore(url, store_options)
    Archiver(str(local), store).run_once()
    return SimpleNamespace(url=url, files=len(files), checksum=checksum,
                           options=store_options)


def mysqlbackup(cluster, *args, timeout=240):
    """``mysqlbackup ARGS`` as a user runs it on the driver's host: the S3 credentials
    and endpoint in its environment only (the servers' root has no password). Returns
    (CompletedProcess, seconds)."""
    tmp = cluster.base / "driver-tmp"
    tmp.mkdir(exist_ok=True)
    env = _bare_env(**CREDENTIALS, AWS_ENDPOINT_URL=cluster.s3, TMPDIR=str(tmp),
                    PYSPARK_PYTHON=sys.executable, MYSQLBACKUP_PASSWORD="")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mysqlbackup", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout,
                          cwd=str(cluster.base))
    return done, time.monotonic() - started


def replay(cluster, archive, *args, timeout=240):
    """``mysqlbackup replay --archive URL ARGS`` on the driver's host (``mysqlbackup``)."""
    return mysqlbackup(cluster, "replay", "--archive", archive.url, *args, timeout=timeout)


def local_replay(archive, sink):
    """The one-machine reference: the same replay with its tasks run in this process
    (the local engine: the same task functions and driver, no Spark start-up)."""
    from replay.planning.plan import ReplayOptions
    from replay.job.run import run_replay
    return run_replay(ReplayOptions(archive.url, archive.options, engine="local"), sink)


def error_line(done):
    """The one error line of a failed run (its log lines around it aside)."""
    assert done.returncode != 0, done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("mysqlbackup: error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def on_cluster(cluster, packed, *extra):
    """The options of a replay on the test's cluster, as docs/cluster.md gives them."""
    return ("--master", cluster.master, "--python", "./environment/bin/python",
            "--conf", f"spark.archives={packed.env}#environment",
            "--conf", "spark.executor.memory=512m", *extra)


def executor_dirs(cluster):
    """The folders of the executors that ran a task (app-*/N): the master may launch
    another executor or two while the application ends, which never run anything."""
    return [d for work in cluster.workers.values() for app in work.glob("app-*")
            for d in app.iterdir()
            if (d / "stderr").exists() and "Running task" in (d / "stderr").read_text()]


@on_a_cluster
def test_sql_on_the_cluster_is_the_local_one(cluster, archive, packed, tmp_path):
    from replay.job.sinks.sqlfile import SqlFileSink
    local_replay(archive, SqlFileSink(str(tmp_path / "local.sql")))
    done, seconds = replay(cluster, archive, *on_cluster(cluster, packed),
                           "--sql", tmp_path / "cluster.sql")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{archive.files} files in {archive.files} Spark tasks" in done.stdout
    sql = (tmp_path / "cluster.sql").read_bytes()
    assert sql == (tmp_path / "local.sql").read_bytes() and sql.count(b"COMMIT") >= 12
    ran = executor_dirs(cluster)  # on both workers, from the shipped environment
    assert {d.parent.parent for d in ran} == set(cluster.workers.values()), ran
    assert all((d / "environment" / "bin" / "python").exists() for d in ran)
    assert not list((cluster.base / "driver-tmp").glob("mysqlbackup-pyfiles-*"))
    assert "pure Python" not in done.stderr, done.stderr[-3000:]  # the compiled loop ran
    print(f"cluster --sql: {seconds:.1f}s")


@on_a_cluster
def test_parquet_on_the_cluster_has_the_local_rows(cluster, archive, packed, tmp_path):
    # the executors write the parts to S3 (the workers' own disks are no destination),
    # one file's parts each; the driver adopts them and writes _SUCCESS
    import pyarrow.parquet as pq
    import s3fs
    from replay.job.sinks.parquet import ParquetSink
    sink = ParquetSink(f"file://{tmp_path / 'local'}").open(None)
    sink.finish(local_replay(archive, sink))
    done, _ = replay(cluster, archive, *on_cluster(cluster, packed),
                     "--parquet", "s3://archive/changes")
    assert done.returncode == 0, done.stderr[-3000:]
    fs = s3fs.S3FileSystem(key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                           secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                           client_kwargs={"endpoint_url": cluster.s3,
                                          "region_name": "us-east-1"})
    success = json.loads(fs.cat_file("archive/changes/_SUCCESS"))
    assert success["parts"] == [f"part-{n:06d}-0000.parquet" for n in range(archive.files)]

    def ordered(rows):
        return sorted(rows, key=lambda r: (r["file"], r["position"], r["row_index"]))
    expected = ordered(pq.read_table(str(tmp_path / "local")).to_pylist())
    rows = [r for part in success["parts"]
            for r in pq.read_table(f"archive/changes/{part}", filesystem=fs).to_pylist()]
    updated = sum(29 * r + 5 for r in range(4))  # each round: every row before it, and 5
    assert len(expected) == 4 * 30 + updated + 4 and rows == expected  # in commit order


@on_a_cluster
def test_a_target_on_the_cluster_reaches_the_source(cluster, archive, packed, tmp_path):
    # replay --target from the cluster: the executors decode, the driver applies; every
    # file from the first, into an empty server, gives the source's table
    from mysqlbackup.sandbox import MariaDBSandbox
    target = MariaDBSandbox(str(tmp_path / "target"), server_id=8, semi_sync=False).start()
    before = set(executor_dirs(cluster))
    try:
        done, _ = replay(cluster, archive, *on_cluster(cluster, packed), "--target",
                         f"mysql://root@127.0.0.1:{target.port}")
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"{archive.files} files in {archive.files} Spark tasks" in done.stdout
        assert target.execute("CHECKSUM TABLE shop.items") == archive.checksum
        assert set(executor_dirs(cluster)) - before  # the executors decoded them
    finally:
        target.stop(remove=True)


@on_a_cluster
def test_restore_on_the_cluster_reaches_the_source(cluster, archive, packed, tmp_path):
    # restore takes the cluster options too: the base loaded here, the binlogs decoded
    # by the executors, applied to a target on this host
    from mysqlbackup.sandbox import MariaDBSandbox
    target = MariaDBSandbox(str(tmp_path / "target"), server_id=7, semi_sync=False).start()
    before = set(executor_dirs(cluster))
    try:
        done, seconds = mysqlbackup(
            cluster, "restore", "--archive", archive.url, "--source-name", "db1", "--target",
            f"mysql://root@127.0.0.1:{target.port}", "--apply", "statements", "--engine",
            "spark", *on_cluster(cluster, packed))
        assert done.returncode == 0, done.stderr[-3000:]
        assert target.execute("CHECKSUM TABLE shop.items") == archive.checksum
        assert set(executor_dirs(cluster)) - before  # the executors decoded them
    finally:
        target.stop(remove=True)
    print(f"cluster restore: {seconds:.1f}s")


@on_a_cluster
def test_a_driver_the_executors_cannot_reach_fails_in_one_line(cluster, archive, packed,
                                                              tmp_path):
    # the bug of issue 31: the driver advertised on loopback; the master (beside it)
    # accepts the application, the executors in their namespaces never reach it
    # (no environment shipped: no executor ever starts a task; the driver would unpack
    # it too, which only slows the test)
    done, seconds = replay(cluster, archive, "--master", cluster.master, "--driver-host",
                           "127.0.0.1", "--conf", "spark.mysqlbackup.registrationTimeout=8",
                           "--sql", tmp_path / "x.sql")
    last = error_line(done)
    assert "no Spark executor registered with the driver at 127.0.0.1:" in last, done.stderr
    assert "within 8s" in last and "--driver-host" in last
    # the wait itself is 8 s; the rest is the JVM's start, slow on a loaded 2-core
    # machine. A hang (the bug) would run into the helper's timeout (240 s)
    assert seconds < 120 and not (tmp_path / "x.sql").exists()
    # an address that is not this machine's: refused before Spark starts
    done, seconds = replay(cluster, archive, *on_cluster(
        cluster, packed, "--driver-host", cluster.spare), "--sql", tmp_path / "y.sql")
    assert seconds < 30 and error_line(done).endswith(
        f"--driver-host {cluster.spare} is not an address of this machine: give one the "
        "workers reach, or --conf spark.driver.bindAddress=ADDR when a NAT forwards that "
        "address here")


@on_a_cluster
def test_an_executor_python_without_the_requirements_is_named(cluster, archive, tmp_path):
    bare = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    done, _ = replay(cluster, archive, "--master", cluster.master, "--python", bare,
                     "--conf", "spark.executor.memory=512m", "--sql", tmp_path / "x.sql")
    last = error_line(done)
    assert f"(Python {bare}) has no module " in last, done.stderr
    assert "its Python lacks the job's requirements (see docs/cluster.md" in last


@on_a_cluster
def test_the_zip_holds_the_sources_and_the_environment_the_compiled_modules(packed):
    import tarfile
    import zipfile

    from mysqlbackup import speedups
    from replay.job.decoding import changejson, rowcount, rowdecode, rowtext
    names = zipfile.ZipFile(packed.zip).namelist()
    assert "replay/job/tasks.py" in names and "mysqlbackup/archive/store.py" in names
    assert not [n for n in names if n.endswith((".so", ".c", ".pyc"))], names
    with tarfile.open(packed.env) as tar:
        env = [m.name for m in tar.getmembers() if m.isfile()]
    assert any(n.endswith("site-packages/s3fs/__init__.py") for n in env)
    assert not any("site-packages/pyspark/" in n for n in env)
    ours = sorted(n.split("site-packages/", 1)[1] for n in env
                  if "site-packages/mysqlbackup/" in n or "site-packages/replay/" in n)
    built = sorted(f"{m.__name__.rpartition('.')[0].replace('.', '/')}/"
                   f"{os.path.basename(m.__file__)}"
                   for m in (speedups.compiled, rowdecode.compiled, rowtext.compiled,
                             changejson.compiled, rowcount.compiled) if m is not None)
    assert ours == built, ours  # the compiled modules, and no other file of the project

