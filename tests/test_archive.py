"""The archive contract, run over file:// and S3 (moto's server through s3fs)."""

import os

import pytest

from mysqlbackup.stream.archiver import Archiver
from mysqlbackup.archive.options import parse_options
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.guard.verify import list_archive, verify_archive
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.localdir.state import State, save_state
from tests.conftest import STORES
from tests.helpers import backup_dir, read, run_cli

SOURCE = "src-1"


def local_dir(tmp_path, files):
    """A backup directory holding copies of ``files``, checkpointed at the end of the last."""
    return backup_dir(files, tmp_path / "local", SOURCE)


class CountingStore(ArchiveStore):
    """The real store, counting the requests that write."""

    writes = 0

    def put_bytes(self, relative, data):
        self.writes += 1
        super().put_bytes(relative, data)

    def put_file(self, relative, path):
        self.writes += 1
        super().put_file(relative, path)

    def open_write(self, relative):
        self.writes += 1  # the archiver streams every object through it
        return super().open_write(relative)


def open_store(archive, cls=ArchiveStore):
    url, options = archive
    return cls(url, parse_options(options))


def test_sealed_objects_equal_the_files_and_verify(archive, tmp_path, source_files):
    directory = local_dir(tmp_path, source_files)
    store = open_store(archive)
    Archiver(str(directory), store).run_once()
    for f in source_files[:-1]:
        assert store.read(f"{SOURCE}/binlog/{f.name}") == read(f)
        index = store.read_json(f"{SOURCE}/binlog/{f.name}.json")
        assert index["size"] == os.path.getsize(f) and index["transactions"] >= 40
    active = source_files[-1]
    segment = f"{SOURCE}/partial/{active.name}/{0:012d}-{os.path.getsize(active):012d}"
    assert store.read(segment) == read(active)
    assert verify_archive(store) == (4, [])
    rows = list_archive(store)
    assert [r["kind"] for r in rows] == ["sealed"] * 3 + ["partial (1 segments)"]
    assert rows[1]["first_gtid"] and rows[1]["first_commit"].endswith("Z")


@pytest.mark.parametrize("archive", STORES, indirect=True)  # the store's requests counted
def test_no_request_when_nothing_new_and_segments_grow(archive, tmp_path, source_files):
    directory = local_dir(tmp_path, source_files)
    active = source_files[-1]
    cut = _boundary_before(read(active), os.path.getsize(active) // 2)
    (directory / active.name).write_bytes(read(active)[:cut])
    save_state(str(directory), State(file=active.name, pos=cut, source_identity=SOURCE))
    store = open_store(archive, CountingStore)
    archiver = Archiver(str(directory), store)
    archiver.run_once()
    first = store.writes
    archiver.run_once()
    assert store.writes == first  # idle: no upload at all
    (directory / active.name).write_bytes(read(active))
    save_state(str(directory), State(file=active.name, pos=os.path.getsize(active),
                                     source_identity=SOURCE))
    archiver.run_once()
    assert store.writes == first + 2  # one new segment and its index
    keys = store.list(f"{SOURCE}/partial/{active.name}")
    assert len([k for k in keys if not k.endswith(".json")]) == 2
    assert verify_archive(store)[1] == []


def _boundary_before(data, limit):
    """The end of the last XID event before ``limit``."""
    end = 4
    for off, event in iter_events(data, 4, None):
        if off + len(event) > limit:
            break
        if event[4] in (ev.XID, ev.MARIA_GTID_LIST, ev.MARIA_BINLOG_CHECKPOINT):
            end = off + len(event)
    return end


@pytest.fixture
def archived(archive, tmp_path, source_files):
    store = open_store(archive)
    Archiver(str(local_dir(tmp_path, source_files)), store).run_once()
    return store, source_files


def test_verify_catches_a_corrupt_byte(archived):
    store, files = archived
    key = f"{SOURCE}/binlog/{files[1].name}"
    data = bytearray(store.read(key))
    data[1000] ^= 0x40
    store.put_bytes(key, bytes(data))
    problems = verify_archive(store)[1]
    event_offset = max(o for o, _ in iter_events(read(files[1]), 4, None) if o <= 1000)
    assert problems == [f"{key} at offset {event_offset}: CRC32 mismatch in "
                        f"{_type_at(read(files[1]), event_offset)} event"]


def _type_at(data, offset):
    return ev.event_name(data[offset + 4])


def test_verify_catches_a_deleted_file(archived, archive):
    store, files = archived
    store.remove(f"{SOURCE}/binlog/{files[1].name}")
    assert verify_archive(store)[1] == [
        f"{SOURCE}/binlog/{files[1].name}: index without the binlog object (file deleted)"]
    store.remove(f"{SOURCE}/binlog/{files[1].name}.json")
    assert verify_archive(store)[1] == [
        f"{SOURCE}/binlog/{files[1].name}: missing ({files[0].name} is followed by it, the "
        f"archive goes on with {files[2].name})"]
    url, options = archive
    result = run_cli("verify", "--archive", url, *[f"--archive-option={o}" for o in options])
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "3 objects checked, 1 problems"


def test_verify_catches_a_truncated_file(archived):
    store, files = archived
    key = f"{SOURCE}/binlog/{files[2].name}"
    data = store.read(key)
    store.put_bytes(key, data[:-7])
    last = max(o for o, _ in iter_events(data, 4, None))
    assert verify_archive(store)[1] == [
        f"{key} at offset {last}: torn event: ROTATE of {len(data) - last} bytes, "
        f"{len(data) - last - 7} left in the file"]


def test_unfinished_upload_is_never_taken_for_whole(archived):
    store, files = archived
    # a crash after the data and before its index (file:// also leaves a .tmp- object)
    store.remove(f"{SOURCE}/binlog/{files[2].name}.json")
    store.put_bytes(f"{SOURCE}/binlog/{files[2].name}.tmp-deadbeef", b"half")
    problems = verify_archive(store)[1]
    assert problems == [f"{SOURCE}/binlog/{files[2].name}: no index (upload not finished or "
                        f"not verified)"]
    assert [r["kind"] for r in list_archive(store)][2] == "unverified"
