"""The durable-write helper on a real directory: whole file or old file, no tmp left."""

import os

import pytest

from mysqlbackup.durable import fsync_dir, open_durably, replace, write_bytes


def test_write_bytes_creates_the_whole_file_and_leaves_no_tmp(tmp_path):
    path = tmp_path / "state.json"
    write_bytes(str(path), b"new bytes")
    assert path.read_bytes() == b"new bytes"
    assert os.listdir(tmp_path) == ["state.json"]


def test_an_existing_file_is_replaced(tmp_path):
    path = tmp_path / "state.json"
    path.write_bytes(b"old and longer")
    write_bytes(str(path), b"new")
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["state.json"]


def test_the_mode_applies_to_a_new_file(tmp_path):
    path = tmp_path / "state.json"
    old = os.umask(0o022)
    try:
        write_bytes(str(path), b"x", mode=0o640)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640


def test_a_failure_before_the_rename_leaves_the_old_file_and_no_tmp(tmp_path):
    path = tmp_path / "object"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk gone"):
        with open_durably(str(path)) as f:
            f.write(b"half of the new")
            raise RuntimeError("disk gone")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["object"]


def test_a_failed_fsync_stays_oserror_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "object"
    path.write_bytes(b"old")

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")
    with pytest.raises(OSError, match="Input/output error"):
        write_bytes(str(path), b"new", fsync=failing_fsync)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["object"]


def test_streaming_into_a_chosen_tmp_name(tmp_path):
    path = tmp_path / "part-00000.parquet"
    tmp = tmp_path / ".part-00000.parquet.tmp-abc"
    with open_durably(str(path), tmp=str(tmp)) as f:
        assert os.path.exists(tmp) and not path.exists()
        for chunk in (b"a" * 10, b"b" * 5):
            f.write(chunk)
    assert path.read_bytes() == b"a" * 10 + b"b" * 5
    assert os.listdir(tmp_path) == ["part-00000.parquet"]


def test_replace_and_fsync_dir(tmp_path):
    synced = []
    (tmp_path / "a.tmp").write_bytes(b"a")
    replace(str(tmp_path / "a.tmp"), str(tmp_path / "a"), fsync=synced.append)
    assert os.listdir(tmp_path) == ["a"] and len(synced) == 1
    fsync_dir(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        fsync_dir(str(tmp_path / "missing"))
