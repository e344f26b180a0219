"""The daemon with --archive against real servers: identical objects, storage outages,
kill -9 during an upload, and local retention of verified files only."""

import os
import subprocess
import sys
import time

import pytest

from mysqlbackup.archive.upload import chain_end
from mysqlbackup.archive.names import parse_key, partial_prefix
from mysqlbackup.archive.options import parse_options
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.guard.verify import verify_archive
from tests.conftest import STORES, S3Endpoint
from tests.helpers import (REPO, Daemon, backup_dir, current_binlog, read, wait_for,
                           wait_semi_sync_client)


def insert(server, n, size=200, table="z.t"):
    server.execute(*[f"INSERT INTO {table} (v) VALUES (REPEAT('v', {size}))" for _ in range(n)])


def archived_index(store, source, name):
    return store.exists(f"{source}/binlog/{name}.json")


def segment_keys(store, source, name):
    """(start, end) of each indexed segment of an active file in the store, in order."""
    return sorted((k.start, k.end) for k in map(parse_key, store.list(partial_prefix(
        source, name))) if k is not None and k.is_index)


def segments_data(store, source, name):
    """The bytes of an active file's segments in the store, joined in order."""
    keys = segment_keys(store, source, name)
    assert [s for s, _ in keys] == [0] + [e for _, e in keys[:-1]], keys  # one chain
    return b"".join(store.read(f"{source}/partial/{name}/{s:012d}-{e:012d}") for s, e in keys)


@pytest.mark.parametrize("archive", STORES, indirect=True)
def test_daemon_archives_byte_identical_files(archive, make_server, tmp_path):
    server = make_server()
    url, options = archive
    daemon = Daemon(server, tmp_path / "d", "--archive", url, "--source-name", "db1",
                    "--archive-interval", "0.3",
                    *[f"--archive-option={o}" for o in options]).start()
    store = ArchiveStore(url, parse_options(options))
    try:
        server.execute("CREATE DATABASE z", "CREATE TABLE z.t (id INT PRIMARY KEY "
                       "AUTO_INCREMENT, v TEXT)")
        insert(server, 30)
        server.execute("FLUSH BINARY LOGS")
        insert(server, 10)
        first = server.binlog_files()[0]
        wait_for(lambda: archived_index(store, "db1", first), what="the sealed upload")
        active = current_binlog(server)
        size = os.path.getsize(server.binlog_path(active))
        # one segment per durable checkpoint the archiver saw: a chain from 0 to the end
        wait_for(lambda: chain_end(store.list(partial_prefix("db1", active)))[0] == size,
                 what="the active file's segments")
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert store.read(f"db1/binlog/{first}") == read(server.binlog_path(first))
    data = bytearray(segments_data(store, "db1", active))
    original = bytearray(read(server.binlog_path(active)))
    data[21] = original[21] = 0  # the in-use flag of the file the server still writes
    assert data == original
    # verify counts objects: the sealed file, and each segment of the active one (one per
    # pass that saw its durable prefix grow: two when the ten inserts span two passes)
    segments = segment_keys(store, "db1", active)
    assert segments and verify_archive(store) == (1 + len(segments), [])


def test_storage_outage_keeps_semi_sync_and_loses_nothing(make_server, aws_env, tmp_path):
    server = make_server(semi_sync_timeout_ms=5000)
    s3 = S3Endpoint()
    url = s3.bucket("outage")
    daemon = Daemon(server, tmp_path / "d", "--archive", url, "--archive-interval", "0.3",
                    "--keep-local", "0", "--source-name", "db1",
                    f"--archive-option=endpoint_url={s3.endpoint}",
                    '--archive-option=config_kwargs={"connect_timeout": 1, "read_timeout": 5, '
                    '"retries": {"max_attempts": 1}}').start()
    local = tmp_path / "d"
    try:
        wait_semi_sync_client(server)
        server.execute("CREATE DATABASE z", "CREATE TABLE z.t (id INT PRIMARY KEY "
                       "AUTO_INCREMENT, v TEXT)")
        yes0 = int(server.status("Rpl_semi_sync_master_yes_tx"))
        no0 = int(server.status("Rpl_semi_sync_master_no_tx"))
        s3.stop()
        for _ in range(3):
            insert(server, 40)
            server.execute("FLUSH BINARY LOGS")
        sealed = server.binlog_files()[:-1]
        # an archiver pass has failed on the sealed files (and could have deleted them)
        wait_for(lambda: (r := daemon.status().get("archive")) and r.get(
            "last_error") and set(sealed) <= set(r.get("backlog_files") or ()),
            what="a failed archiver pass, the sealed files in the backlog")
        assert all((local / n).exists() for n in sealed)  # nothing deleted while S3 is down
        assert int(server.status("Rpl_semi_sync_master_yes_tx")) - yes0 == 120
        assert int(server.status("Rpl_semi_sync_master_no_tx")) - no0 == 0
        s3.restart()
        store = ArchiveStore(url, parse_options([f"endpoint_url={s3.endpoint}"]))
        wait_for(lambda: all(archived_index(store, "db1", n) for n in sealed), timeout=90,
                 interval=0.5, what="the backlog to drain")
        wait_for(lambda: not any((local / n).exists() for n in sealed), timeout=30,
                 what="local retention of verified files")
        assert daemon.stop() == 0, daemon.output()
        for name in sealed:
            assert store.read(f"db1/binlog/{name}") == read(server.binlog_path(name))
        assert verify_archive(store)[1] == []
    finally:
        if daemon.proc.poll() is None:
            daemon.stop()
        s3.stop()


def test_kill_9_during_upload_leaves_nothing_taken_for_whole(archive, make_server, tmp_path):
    server = make_server(semi_sync=False)
    server.execute("CREATE DATABASE z", "CREATE TABLE z.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v LONGTEXT)")
    for _ in range(10):
        insert(server, 40, size=50_000)
    server.execute("FLUSH BINARY LOGS")
    big = server.binlog_files()[0]
    local = backup_dir([server.binlog_path(n) for n in server.binlog_files()],
                       tmp_path / "local", "db1")
    url, options = archive
    store = ArchiveStore(url, parse_options(options))
    code = (f"from mysqlbackup.stream.archiver import Archiver; "
            f"from mysqlbackup.archive.store import ArchiveStore; "
            f"from mysqlbackup.archive.options import parse_options; Archiver({str(local)!r}, ArchiveStore({url!r}, "
            f"parse_options({options!r}))).run_once()")
    for delay in (0.05, 0.15, 0.3, 0.6):
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
        time.sleep(delay)
        proc.kill()
        proc.wait()
        problems = verify_archive(store)[1]
        # whatever the instant, an object is either whole and verified or flagged unfinished
        assert all("no index" in p or "no archived binlog" in p for p in problems), problems
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)
    assert verify_archive(store)[1] == []
    assert store.read(f"db1/binlog/{big}") == read(server.binlog_path(big))
