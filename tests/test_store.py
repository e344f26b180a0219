"""The store's contract: every operation of ``ArchiveStore`` the tool uses, on file:// and
on S3 (moto's server, real HTTP through s3fs) and on an S3 bucket with Object Lock (every
write locked, as ``--archive-option lock_mode/lock_days`` asks), with the same results. The rest of the
suite runs on file:// but for a few runs where the store's own behaviour matters (see
``archive`` in conftest.py): what holds here holds for them on either store."""

import hashlib
import os
import time

import pytest

from mysqlbackup.archive.options import parse_options
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.errors import ArchiveNotFound, StoreError
from tests.conftest import STORES

on_both = pytest.mark.parametrize("archive", STORES + ["s3-lock"], indirect=True)


@pytest.fixture
def store(archive):
    url, options = archive
    return ArchiveStore(url, parse_options(options))


@on_both
def test_whole_objects_written_read_listed_and_removed(store, tmp_path):
    assert store.probe() is None
    assert store.list() == [] and store.list(sizes=True) == {}
    store.put_bytes("db1/binlog/binlog.000001", b"\xfebin" + bytes(100))
    store.put_json("db1/binlog/binlog.000001.json", {"name": "binlog.000001", "size": 104})
    local = tmp_path / "segment"
    local.write_bytes(b"x" * 5000)
    store.put_file("db1/partial/binlog.000002/0-5000", str(local))
    assert store.list() == ["db1/binlog/binlog.000001", "db1/binlog/binlog.000001.json",
                            "db1/partial/binlog.000002/0-5000"]
    assert store.list("db1/partial") == ["db1/partial/binlog.000002/0-5000"]
    assert store.list("db1/nothing") == []
    sizes = store.list(sizes=True)
    assert sizes["db1/binlog/binlog.000001"] == 104
    assert sizes["db1/partial/binlog.000002/0-5000"] == 5000
    assert store.read("db1/binlog/binlog.000001", 0, 4) == b"\xfebin"
    assert store.read("db1/binlog/binlog.000001", 100) == bytes(4)
    assert store.read_json("db1/binlog/binlog.000001.json")["size"] == 104
    assert store.info_size("db1/partial/binlog.000002/0-5000") == 5000
    assert store.sha256("db1/partial/binlog.000002/0-5000") == (
        5000, hashlib.sha256(b"x" * 5000).hexdigest())
    assert abs(store.modified("db1/binlog/binlog.000001") - time.time()) < 300
    assert store.exists("db1/binlog/binlog.000001")
    store.remove("db1/binlog/binlog.000001")
    assert not store.exists("db1/binlog/binlog.000001")
    store.remove_empty_folder("db1/binlog")  # not empty: it stays (file://); no-op on S3
    assert store.list("db1/binlog") == ["db1/binlog/binlog.000001.json"]
    with pytest.raises(FileNotFoundError):
        store.read("db1/binlog/binlog.000001")


@on_both
def test_reader_reads_in_ranges_up_to_the_total(store):
    data = bytes(range(256)) * 40
    store.put_bytes("o", data)
    read = store.reader("o", 9000)  # fewer bytes than the object holds
    got, chunk = b"", read(1000)
    while chunk:
        got, chunk = got + chunk, read(1000)
    assert got == data[:9000]


@on_both
def test_a_streamed_write_publishes_only_when_it_ends_well(store):
    with store.open_write("db1/base/1/dump.sql.zst") as f:
        for i in range(3):
            f.write(bytes([i]) * 70000)
    assert store.info_size("db1/base/1/dump.sql.zst") == 210000
    with pytest.raises(RuntimeError, match="the dump tool died"):
        with store.open_write("db1/base/2/dump.sql.zst") as f:
            f.write(b"partial")
            raise RuntimeError("the dump tool died")
    assert store.list("db1/base") == ["db1/base/1/dump.sql.zst"]
    assert not store.exists("db1/base/2/dump.sql.zst")


@on_both
def test_an_existing_empty_archive_is_one_and_a_missing_root_is_not(store, archive):
    url, options = archive
    if url.startswith("file://"):
        os.makedirs(url[len("file://"):])  # as the bucket is there, empty
    assert store.root_problem(store.list(sizes=True)) is None  # empty, and there
    store.put_bytes("db1/x", b"1")
    assert store.root_problem(store.list(sizes=True)) is None
    missing = url.replace("/archive", "/no-such-folder") if url.startswith("file://") else \
        "s3://no-such-bucket-" + url.split("//")[1].split("/")[0][-8:] + "/backups"
    gone = ArchiveStore(missing, parse_options(options))
    problem = gone.root_problem(gone.list(sizes=True))
    assert isinstance(problem, ArchiveNotFound), problem
    assert str(problem).startswith(f"archive {missing}: not an archive: no such ")


@on_both
def test_move_replaces_an_object_whole_and_old_versions_go(store, archive):
    """``move`` (rekey's swap): the object becomes the moved one, the moved one is gone;
    ``drop_old_versions`` leaves one version (the current) where a bucket keeps them."""
    store.unlocked().put_bytes("db1/binlog/binlog.000001", b"old form")
    store.unlocked().put_bytes("db1/rekey/binlog/binlog.000001", b"the new form")
    assert store.lock_of("db1/rekey/binlog/binlog.000001") is None
    store.move("db1/rekey/binlog/binlog.000001", "db1/binlog/binlog.000001")
    assert store.read("db1/binlog/binlog.000001") == b"the new form"
    assert store.list() == ["db1/binlog/binlog.000001"]
    dropped = store.drop_old_versions("db1/binlog/binlog.000001")
    gone = store.drop_old_versions("db1/rekey/binlog/binlog.000001", every=True)
    assert (dropped, gone) == ((1, 2) if store.lock else (0, 0))  # versions: a lock's bucket
    assert store.read("db1/binlog/binlog.000001") == b"the new form"
    if store.lock:  # the moved object is locked as a new object is
        assert store.retain_until("db1/binlog/binlog.000001") > time.time() + 23 * 3600
        store.put_bytes("db1/x", b"locked")
        with pytest.raises(StoreError, match="drop_old_versions db1/x"):
            store.put_bytes("db1/x", b"again") or store.drop_old_versions("db1/x")


def test_a_store_that_is_down_is_a_store_error(s3):
    """(file:// has no transport to fail: a refusing file system is test_base.py's full
    tmpfs.)"""
    down = ArchiveStore(s3.bucket("mb-" + os.urandom(6).hex()), parse_options([
        "endpoint_url=http://127.0.0.1:9", 'config_kwargs={"connect_timeout": 1, '
        '"retries": {"max_attempts": 1}}']))
    with pytest.raises(StoreError, match="failed"):
        down.list()
