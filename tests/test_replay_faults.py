"""Replay against a damaged archive, on real MariaDB servers (issue 10).

One archive of a real source (its stream starts with CREATE DATABASE; one file per
batch of rows, each row naming its file), copied and damaged per test; replayed
into a new, empty target through ``mysqlbackup replay`` (in this process, but for one
test). A damaged object must stop the replay with exit 6 naming it, and nothing of it
may reach the target.
"""

import shutil

import pytest

from mysqlbackup.stream.archiver import Archiver
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.sandbox import MariaDBSandbox
from replay.job.decoding.assemble import assemble
from tests.helpers import backup_dir, run_cli

SOURCE = "fz1"
BATCHES = 4      # binlog.000002 .. binlog.000005 hold one batch each
ROWS = 25        # single-row transactions per batch


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """(archive directory, checksum of fz.t on the source) of a file:// archive whose
    first event is CREATE DATABASE; rows of batch N carry file = N + 1 (their binlog)."""
    tmp = tmp_path_factory.mktemp("faults")
    source = MariaDBSandbox(str(tmp / "source"), semi_sync=False).start()
    try:
        source.execute("CREATE DATABASE fz",
                       "CREATE TABLE fz.t (id INT PRIMARY KEY, file INT, v VARCHAR(40))",
                       "FLUSH BINARY LOGS")
        for batch in range(1, BATCHES + 1):
            source.execute(*[f"INSERT INTO fz.t VALUES ({batch * 100 + i}, {batch + 1}, "
                             f"'row {i}')" for i in range(ROWS)])
            if batch < BATCHES:
                source.execute("FLUSH BINARY LOGS")
        files = [source.binlog_path(n) for n in source.binlog_files()]
        assert len(files) == BATCHES + 1
        local = backup_dir(files, tmp / "local", SOURCE)
        Archiver(str(local), ArchiveStore(f"file://{tmp / 'archive'}")).run_once()
        checksum = source.execute("CHECKSUM TABLE fz.t")[0][1]
    finally:
        source.stop(remove=True)
    return tmp / "archive", checksum


@pytest.fixture
def damaged(pristine, tmp_path):
    """A copy of the archive to damage: (directory, file:// URL)."""
    copy = tmp_path / "archive"
    shutil.copytree(pristine[0], copy)
    return copy, f"file://{copy}"


def replay(url, target, *extra, process=False):
    """``mysqlbackup replay`` into ``target``: in this process on the run's Spark session
    (the test asks for ``spark``), or with ``process`` as a user runs it (one test)."""
    return run_cli("replay", "--archive", url, "--target",
                   f"mysql://root@127.0.0.1:{target.port}", *extra, password="",
                   process=process, timeout=600)


def rows_by_file(target):
    """{file: row count} on the target ({} when not even the table is there)."""
    if not target.execute("SHOW DATABASES LIKE 'fz'") or not target.execute(
            "SHOW TABLES FROM fz LIKE 't'"):
        return {}
    return dict(target.execute("SELECT file, COUNT(*) FROM fz.t GROUP BY file"))


def empty_target(make_server):
    target = make_server(server_id=7, semi_sync=False)
    assert not target.execute("SELECT schema_name FROM information_schema.schemata WHERE "
                              "schema_name NOT IN ('mysql', 'information_schema', "
                              "'performance_schema', 'sys', 'test')")
    return target


def assert_refused(result, target, damaged_file, what):
    """Exit 6 naming the object, one clear line, nothing of it or after it applied, and
    every file before it either whole or absent."""
    out = result.stdout + result.stderr
    assert result.returncode == 6, out
    assert f"{SOURCE}/binlog/binlog.{damaged_file:06d}" in result.stderr, out
    assert what in result.stderr, out
    assert "Traceback" not in out and "Py4J" not in out, out
    counts = rows_by_file(target)
    assert all(f < damaged_file for f in counts), counts
    assert all(n == ROWS for n in counts.values()), counts


def test_replay_into_an_empty_target_of_a_stream_starting_with_create_database(
        pristine, make_server, spark):
    target = empty_target(make_server)
    result = replay(f"file://{pristine[0]}", target)
    assert result.returncode == 0, result.stdout + result.stderr
    assert target.execute("CHECKSUM TABLE fz.t")[0][1] == pristine[1]
    assert rows_by_file(target) == {f: ROWS for f in range(2, BATCHES + 2)}


def test_an_object_replaced_by_the_previous_file_is_refused(damaged, make_server, spark):
    directory, url = damaged
    sealed = directory / SOURCE / "binlog"
    shutil.copyfile(sealed / "binlog.000002", sealed / "binlog.000003")  # index left as is
    target = empty_target(make_server)
    assert_refused(replay(url, target), target, 3, "not the archived object")
    assert rows_by_file(target) == {}  # refused before anything at all was applied


def test_an_object_cut_at_a_transaction_boundary_is_refused(damaged, make_server, spark):
    directory, url = damaged
    path = directory / SOURCE / "binlog" / "binlog.000004"
    data = path.read_bytes()
    transactions, _, _ = assemble(data, "binlog.000004")
    cut = transactions[len(transactions) // 2].end
    path.write_bytes(data[:cut])  # index left as is
    target = empty_target(make_server)
    result = replay(url, target)
    assert_refused(result, target, 4, f"the archive lists {cut} bytes")
    assert rows_by_file(target) == {}  # refused before anything at all was applied


def test_a_flipped_byte_is_refused_with_object_and_offset(damaged, make_server):
    directory, url = damaged
    path = directory / SOURCE / "binlog" / "binlog.000003"
    data = bytearray(path.read_bytes())
    victim = assemble(bytes(data), "binlog.000003")[0][3]
    data[victim.start + 25] ^= 0x01
    path.write_bytes(bytes(data))
    target = empty_target(make_server)
    result = replay(url, target, process=True)  # end to end: a process's exit code, stderr
    assert_refused(result, target, 3, f"binlog.000003 at offset {victim.start}: ")
    assert "CRC" in result.stderr


@pytest.mark.parametrize("text", [b"not json", b"[]", b"{}"])
def test_a_bad_index_is_refused_by_name_before_anything(damaged, make_server, spark, text):
    directory, url = damaged
    key = sorted((directory / SOURCE / "partial").glob("binlog.*/*.json"))[0]
    key.write_bytes(text)
    target = empty_target(make_server)
    result = replay(url, target)
    out = result.stdout + result.stderr
    assert result.returncode == 6, out
    assert str(key.relative_to(directory)) in result.stderr and "Traceback" not in out, out
    assert rows_by_file(target) == {}
    (directory / SOURCE / "binlog" / "binlog.000002.json").write_bytes(text)
    result = replay(url, target)
    assert result.returncode == 6 and f"{SOURCE}/binlog/binlog.000002.json" in result.stderr
