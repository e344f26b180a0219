"""Archive faults against real stores (file://, moto's S3 server) and real MariaDB servers:
damaged indexes, verify on a live archive, a frozen or emptied S3 endpoint, credentials
in the archive URL, an unreachable ftp:// archive, empty partial folders."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from mysqlbackup.stream.archiver import Archiver
from mysqlbackup.archive.index import build_index
from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.options import parse_options
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.guard.verify import list_archive, verify_archive
from mysqlbackup.errors import CorruptBinlog, UsageError
from mysqlbackup.localdir.state import ARCHIVE_STATE_FILE, State, save_state
from mysqlbackup.sandbox import free_port
from tests.conftest import STORES
from tests.helpers import Daemon, backup_dir, read, run_cli, wait_for

SOURCE = "src-1"


def open_store(archive):
    url, options = archive
    return ArchiveStore(url, parse_options(options))


@pytest.fixture
def archived(archive, tmp_path, source_files):
    """An archive holding three sealed files and two segments of the active one."""
    directory = backup_dir(source_files, tmp_path / "local", SOURCE)
    active = source_files[-1]
    half = _boundary(read(active), os.path.getsize(active) // 2)
    save_state(str(directory), State(file=active.name, pos=half, source_identity=SOURCE))
    store = open_store(archive)
    archiver = Archiver(str(directory), store)
    archiver.run_once()
    save_state(str(directory), State(file=active.name, pos=os.path.getsize(active),
                                     source_identity=SOURCE))
    archiver.run_once()
    assert verify_archive(store) == (5, [])
    return store, source_files, half


def _boundary(data, limit):
    """The end of the last transaction before ``limit`` (a durable point)."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.binlog.scan import iter_events
    end = 4
    for off, event in iter_events(data, 4, None):
        if off + len(event) > limit:
            break
        if event[4] in (ev.XID, ev.MARIA_GTID_LIST, ev.MARIA_BINLOG_CHECKPOINT):
            end = off + len(event)
    return end


# -- item 9: damaged indexes are named problems, never tracebacks ---------------------------

BAD_INDEXES = [(b"not json {", "index is not JSON"),
               (b"[]", "index is not an index object: []"),
               (b"{}", "index is not an index object: {}")]


@pytest.mark.parametrize("raw,message", BAD_INDEXES)
def test_garbage_sealed_index_is_a_named_problem(archived, archive, raw, message):
    store, files, _ = archived
    key = f"{SOURCE}/binlog/{files[1].name}.json"
    store.put_bytes(key, raw)
    with pytest.raises(CorruptBinlog) as caught:
        ArchiveListing(store).read_index(key)
    assert caught.value.exit_code == 6 and str(caught.value) == f"{key}: {message}"
    assert verify_archive(store)[1] == [f"{key}: {message}"]
    assert [r["kind"] for r in list_archive(store)][1] == "bad index"
    url, options = archive
    result = run_cli("verify", "--archive", url, *[f"--archive-option={o}" for o in options])
    assert result.returncode == 1, result.stderr
    assert f"PROBLEM {key}: {message}" in result.stdout and "Traceback" not in result.stderr


def test_index_fields_of_the_wrong_kind_are_named(archived):
    store, files, _ = archived
    key = f"{SOURCE}/binlog/{files[0].name}.json"
    good = store.read_json(key)
    cases = [({k: v for k, v in good.items() if k != "sha256"}, "bad index: missing sha256"),
             (dict(good, size="12"), "bad index: size is '12'"),
             (dict(good, transactions=True), "bad index: transactions is True"),
             (dict(good, name=files[1].name),
              f"bad index: name {files[1].name!r} (the object is {files[0].name})")]
    for index, message in cases:
        store.put_json(key, index)
        assert verify_archive(store)[1] == [f"{key}: {message}"]


def test_segment_indexes_are_compared_with_their_objects(archived):
    store, files, half = archived
    active = files[-1]
    size = os.path.getsize(active)
    second = f"{SOURCE}/partial/{active.name}/{half:012d}-{size:012d}"
    good = store.read_json(second + ".json")
    store.put_json(second + ".json", dict(good, transactions=good["transactions"] + 1))
    assert verify_archive(store)[1] == [
        f"{second}: index says transactions {good['transactions'] + 1}, the object has "
        f"{good['transactions']}"]
    store.put_json(second + ".json", good)
    first = f"{SOURCE}/partial/{active.name}/{0:012d}-{half:012d}"
    store.put_bytes(first + ".json", b"[]")
    assert verify_archive(store)[1] == [f"{first}.json: index is not an index object: []"]
    store.put_json(first + ".json", dict(store.read_json(second + ".json"), start=0, end=half,
                                         size=half))
    problems = verify_archive(store)[1]
    assert problems and all(p.startswith(f"{first}: index says") for p in problems), problems
    assert any("sha256" in p for p in problems)


def test_a_segment_with_a_flipped_byte_is_named_with_its_offset(archived):
    store, files, half = archived
    active = files[-1]
    second = f"{SOURCE}/partial/{active.name}/{half:012d}-{os.path.getsize(active):012d}"
    data = bytearray(store.read(second))
    data[len(data) // 2] ^= 0x01
    store.put_bytes(second, bytes(data))
    problems = verify_archive(store)[1]
    assert len(problems) == 1 and problems[0].startswith(f"{second} at offset ")
    assert "CRC32 mismatch" in problems[0]


# -- item 8: verify on a live archive -----------------------------------------------------


class RacingStore(ArchiveStore):
    """The real store; right after the first listing, ``between()`` runs (the archiver
    moving on while verify reads what it listed)."""

    between = None

    def list(self, prefix="", sizes=False):
        found = super().list(prefix, sizes)
        if self.between:
            step, self.between = self.between, None
            step()
        return found


@pytest.mark.parametrize("archive", STORES, indirect=True)
def test_segments_sealed_between_listing_and_reading_are_skipped(archive, tmp_path,
                                                                 source_files):
    active_files = source_files[:3]  # the third file is the active one at first
    directory = backup_dir(active_files, tmp_path / "local", SOURCE)
    url, options = archive
    store = RacingStore(url, parse_options(options))
    Archiver(str(directory), store).run_once()
    folder = f"{SOURCE}/partial/{active_files[-1].name}"
    assert store.list(folder)
    shutil.copyfile(source_files[3], directory / source_files[3].name)
    save_state(str(directory), State(file=source_files[3].name, pos=4,
                                     source_identity=SOURCE))
    store.between = Archiver(str(directory), ArchiveStore(url, parse_options(options))).run_once
    notes = []
    assert verify_archive(store, notes=notes) == (3, [])
    assert notes == [f"{folder}: sealed since the listing (segments skipped)"]
    assert store.list(folder) == []
    if url.startswith("file://"):  # no empty folders left behind
        assert not os.path.exists(os.path.join(url[len("file://"):], folder))
    assert verify_archive(store) == (3, [])


def test_unindexed_newest_segment_is_in_flight_until_too_old(archived):
    store, files, half = archived
    active = files[-1]
    key = f"{SOURCE}/partial/{active.name}/{half:012d}-{os.path.getsize(active):012d}"
    store.remove(key + ".json")  # as if its upload had not written the index yet
    notes = []
    assert verify_archive(store, notes=notes)[1] == []
    assert len(notes) == 1 and notes[0].startswith(f"{key}: upload in flight (no index yet")
    later = time.time() + 601
    assert verify_archive(store, now=later)[1] == [f"{key}: no index (upload not finished)"]
    # an unindexed sealed file with a later file in the archive is no upload in flight
    store.remove(f"{SOURCE}/binlog/{files[1].name}.json")
    assert verify_archive(store)[1] == [f"{SOURCE}/binlog/{files[1].name}: no index (upload "
                                        f"not finished or not verified)"]


def test_verify_exits_0_on_a_live_archive(make_server, archive, tmp_path):
    server = make_server(semi_sync=False)
    url, options = archive
    daemon = Daemon(server, tmp_path / "d", "--archive", url, "--source-name", "db1",
                    "--archive-interval", "0.1",
                    *[f"--archive-option={o}" for o in options]).start()
    store = ArchiveStore(url, parse_options(options))
    server.execute("CREATE DATABASE z", "CREATE TABLE z.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v TEXT)")
    results, notes = [], []
    try:
        wait_for(lambda: store.list("db1"), what="the first upload")
        for round_ in range(25):
            server.execute(*[f"INSERT INTO z.t (v) VALUES (REPEAT('x', {i * 30}))"
                             for i in range(20)])
            if round_ % 3 == 2:
                server.execute("FLUSH BINARY LOGS")
            results.append(verify_archive(store, notes=notes))
        cli = run_cli("verify", "--archive", url, *[f"--archive-option={o}" for o in options])
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert [problems for _, problems in results if problems] == []
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert verify_archive(store)[1] == []


# -- items 6 and 7: a frozen S3 endpoint, an endpoint restarted empty -----------------------


class MotoProcess:
    """moto's S3 server as a process of its own, to freeze (SIGSTOP) and restart empty."""

    def __init__(self, port=None):
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                      "-p", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_for(self._answers, timeout=30, interval=0.1, what="moto to answer")
        return self

    def _answers(self):
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=1).close()
            return True
        except OSError:
            return False

    def bucket(self, name):
        import boto3
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1").create_bucket(
            Bucket=name)
        return f"s3://{name}/backups"

    def freeze(self):
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self):
        self.proc.send_signal(signal.SIGCONT)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def moto():
    server = MotoProcess().start()
    yield server
    server.kill()


FAST_TIMEOUTS = '--archive-option=config_kwargs={"connect_timeout": 1, "read_timeout": 2}'


def insert(server, n):
    server.execute(*["INSERT INTO z.t (v) VALUES (REPEAT('v', 300))" for _ in range(n)])


def archived_all(store, names):
    store.invalidate()
    return all(store.exists(f"db1/binlog/{n}.json") for n in names)


def archiving_daemon(make_server, moto, tmp_path, bucket):
    """(server, daemon, store): a daemon archiving to a moto bucket every 0.3 s with short
    store timeouts, and a table z.t to write into."""
    server = make_server(semi_sync=False)
    url = moto.bucket(bucket)
    daemon = Daemon(server, tmp_path / "d", "--archive", url, "--archive-interval", "0.3",
                    "--source-name", "db1", f"--archive-option=endpoint_url={moto.endpoint}",
                    FAST_TIMEOUTS).start()
    store = ArchiveStore(url, parse_options([f"endpoint_url={moto.endpoint}"]))
    server.execute("CREATE DATABASE z", "CREATE TABLE z.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v TEXT)")
    return server, daemon, store


def test_frozen_store_shows_in_status_and_drains_after(make_server, moto, tmp_path):
    server, daemon, store = archiving_daemon(make_server, moto, tmp_path, "frozen")
    try:
        insert(server, 10)
        # .get: before the daemon makes its --dir, status has no "archive" (a slow start)
        wait_for(lambda: daemon.status().get("archive"), what="the first archive report")
        moto.freeze()
        seen = []
        for _ in range(4):
            insert(server, 10)
            server.execute("FLUSH BINARY LOGS")
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:  # status as a watcher polls it
                seen.append(daemon.status()["archive"])
                time.sleep(0.2)
        backlogs = [len(r["backlog_files"]) for r in seen]
        assert backlogs == sorted(backlogs) and backlogs[-1] >= 3, backlogs
        assert any(r["upload_in_progress"] for r in seen), seen  # an upload or a listing
        # each request times out (2 s, bounded retries): the hang becomes an error
        wait_for(lambda: daemon.status()["archive"]["last_error"], timeout=30,
                 what="the timeout error in status")
        text = run_cli("status", "--dir", str(tmp_path / "d")).stdout
        assert "sealed files not yet archived" in text and "archive error:" in text, text
        sealed = server.binlog_files()[:-1]
        moto.thaw()
        wait_for(lambda: archived_all(store, sealed), timeout=60, interval=0.5,
                 what="the backlog to drain after SIGCONT")
        wait_for(lambda: daemon.status()["archive"]["backlog_files"] == [], timeout=20,
                 what="status to show no backlog")
    finally:
        moto.thaw()
        assert daemon.stop() == 0, daemon.output()
    for name in sealed:
        assert store.read(f"db1/binlog/{name}") == read(server.binlog_path(name))
    assert verify_archive(store)[1] == []


def test_endpoint_restarted_empty_gets_the_files_back(make_server, moto, tmp_path):
    server, daemon, store = archiving_daemon(make_server, moto, tmp_path, "emptied")
    try:
        for _ in range(3):
            insert(server, 10)
            server.execute("FLUSH BINARY LOGS")
        sealed = server.binlog_files()[:-1]
        wait_for(lambda: archived_all(store, sealed), timeout=30, what="the first uploads")
        moto.kill()
        insert(server, 5)  # an upload fails while it is down: the archive is listed again
        wait_for(lambda: daemon.status()["archive"]["last_error"], what="the outage error")
        moto.start()
        moto.bucket("emptied")
        wait_for(lambda: archived_all(store, sealed), timeout=60, interval=0.5,
                 what="the lost files to be uploaded again")
        # the status file is written before each request and at the pass's end: the last
        # re-upload is in the store a moment before the report counts it
        report = wait_for(lambda: _reuploaded(daemon, len(sealed)), timeout=20,
                          what="status to count every re-upload")
        assert report["reuploaded"] >= len(sealed), report
        text = run_cli("status", "--dir", str(tmp_path / "d")).stdout
        assert "re-uploaded" in text and "objects missing from the store" in text, text
        insert(server, 5)
        wait_for(lambda: verify_archive(store)[1] == [], timeout=20,
                 what="the archive to verify (segments of the active file back too)")
    finally:
        assert daemon.stop() == 0, daemon.output()
    for name in sealed:
        assert store.read(f"db1/binlog/{name}") == read(server.binlog_path(name))


def _reuploaded(daemon, count):
    """The archive report once it counts ``count`` re-uploads, else None."""
    report = daemon.status()["archive"]
    return report if (report.get("reuploaded") or 0) >= count else None


@pytest.mark.parametrize("archive", STORES, indirect=True)
def test_periodic_listing_uploads_again_what_the_store_lost(archive, tmp_path, source_files):
    directory = backup_dir(source_files, tmp_path / "local", SOURCE)
    store = open_store(archive)
    now = [1000.0]
    archiver = Archiver(str(directory), store, clock=lambda: now[0], relist_interval=60)
    archiver.run_once()
    lost = source_files[1].name
    store.remove(f"{SOURCE}/binlog/{lost}")
    gone = source_files[0].name  # removed locally (retention) and then lost by the store
    os.remove(directory / gone)
    store.remove(f"{SOURCE}/binlog/{gone}.json")
    segment = [k for k in store.list(f"{SOURCE}/partial") if not k.endswith(".json")][0]
    store.remove(segment + ".json")
    now[0] += 30
    archiver.run_once()
    assert not store.exists(f"{SOURCE}/binlog/{lost}")  # not listed again yet
    now[0] += 31
    archiver.run_once()
    assert store.read(f"{SOURCE}/binlog/{lost}") == read(source_files[1])
    assert verify_archive(store)[1] == [f"{SOURCE}/binlog/{gone}: no index (upload not "
                                        f"finished or not verified)"]
    with open(directory / ARCHIVE_STATE_FILE, encoding="utf-8") as f:
        report = json.load(f)
    assert report["reuploaded"] == 2 and report["missing"] == []
    assert report["reuploaded_last"] == [lost, "(active file)"] and report["lost"] == [gone]
    text = run_cli("status", "--dir", str(directory)).stdout
    assert f"re-uploaded 2 objects missing from the store (last: {lost}, (active file))" in text
    assert f"archive lost:     {gone} missing from the store and no longer local" in text


# -- item 12 and start-up: credentials never echoed, an unreachable ftp:// archive -----------


def test_unreachable_ftp_archive_at_start_up(make_server, tmp_path):
    server = make_server(semi_sync=False)
    port = _refusing_port()
    url = f"ftp://backup:s3cr3t-pw@127.0.0.1:{port}/archive"
    daemon = Daemon(server, tmp_path / "d", "--archive", url, "--archive-interval", "0.2",
                    "--source-name", "db1").start()
    try:
        report = wait_for(lambda: (daemon.status().get("archive") or {}).get("last_error"),
                          timeout=20, what="the upload error in status")
        assert "ConnectionRefusedError" in report
        text = run_cli("status", "--dir", str(tmp_path / "d")).stdout
        assert "archive error:" in text and "ftp://***@127.0.0.1" in text, text
    finally:
        assert daemon.stop() == 0, daemon.output()
    output = daemon.output()
    assert "Traceback" not in output and "not reachable now" in output, output
    with open(tmp_path / "d" / ARCHIVE_STATE_FILE, encoding="utf-8") as f:
        stored = f.read()
    for text in (output, stored, text):
        assert "s3cr3t-pw" not in text
    result = run_cli("verify", "--archive", url)
    assert result.returncode != 0 and "s3cr3t-pw" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def _refusing_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: connections to it are refused


def test_bad_archive_urls_are_usage_errors():
    for url, options in [("ftp:///no-host", {}), ("nosuch://a/b", {}),
                         ("s3://bucket/p", {"no_such_option": 1})]:
        with pytest.raises(UsageError) as caught:
            ArchiveStore(url, options).probe()
        assert caught.value.exit_code == 2 and "cannot use archive" in str(caught.value)
    store = ArchiveStore("ftp://u:pw-x@127.0.0.1:%d/a" % _refusing_port())
    assert store.url.startswith("ftp://***@") and "ConnectionRefused" in store.probe()


def test_s3_requests_have_timeouts_and_bounded_retries(s3):
    store = ArchiveStore("s3://any-bucket/p", parse_options([f"endpoint_url={s3.endpoint}"]))
    config = store.fs.config_kwargs
    assert config["connect_timeout"] and config["read_timeout"] and store.fs.retries <= 2
    chosen = ArchiveStore("s3://any-bucket/p", parse_options(
        [f"endpoint_url={s3.endpoint}", 'config_kwargs={"read_timeout": 3}']))
    assert chosen.fs.config_kwargs["read_timeout"] == 3


def test_index_built_from_bytes_passes_validation(source_files):
    from mysqlbackup.archive.index import validate_index
    data = read(source_files[0])
    index = build_index(data, source_files[0].name, source=SOURCE)
    assert validate_index(index, "x", source_files[0].name, 0, len(data)) is index


def test_keys_in_a_cloud_store_url_are_refused_without_being_repeated():
    """botocore quotes the bucket part of a bad URL ("AKIA:secret@bucket") in its own
    errors, where no URL pattern can mask it: a key in an s3:// URL is refused at once."""
    from mysqlbackup.errors import UsageError
    with pytest.raises(UsageError) as e:
        ArchiveStore("s3://AKIAEXAMPLE:wJalr-Secret@bucket/backups")
    assert "wJalr-Secret" not in str(e.value) and "AKIAEXAMPLE" not in str(e.value)
    assert str(e.value).startswith("archive s3://***@bucket/backups: credentials do not go "
                                   "in the URL")
