"""``mysqlbackup archive import``: real binlog files from real servers into the archive,
then ``verify`` and ``restore`` (a base, then the replay) on it; torn, flipped and out-of-order directories;
objects stored zstd-compressed by default, and encrypted with --encrypt-to (verify --deep
with the identity, a re-run that skips everything with and without it)."""

import os
import re
import shutil

import pytest

from mysqlbackup.archive.codec import AGE_MAGIC, ZSTD_MAGIC, decode_bytes, read_identities
from mysqlbackup.archive.importer import order_files
from mysqlbackup.archive.options import parse_options
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.errors import UsageError
from mysqlbackup.sandbox import MariaDBSandbox
from tests.helpers import maria_gtids, read, run_cli

TABLES = ["d.items", "d.log"]


@pytest.fixture(scope="module")
def server_files(tmp_path_factory):
    """Binlog files, the server's own binlog.index and the final table checksums of a
    real MariaDB server: three closed files and the active one."""
    base = tmp_path_factory.mktemp("import-source")
    server = MariaDBSandbox(str(base / "server")).start()
    try:
        server.execute("CREATE DATABASE d", "CREATE TABLE d.items (id INT PRIMARY KEY, "
                       "name VARCHAR(40), qty INT)", "CREATE TABLE d.log (id INT PRIMARY KEY "
                       "AUTO_INCREMENT, note TEXT)")
        for r in range(4):
            server.execute(*[f"INSERT INTO d.items (id, name, qty) VALUES ({r * 100 + i}, "
                             f"'n{i}', {i})" for i in range(30)],
                           f"UPDATE d.items SET qty = qty + {r} WHERE id % 3 = 0",
                           f"DELETE FROM d.items WHERE id % 7 = {r}",
                           f"INSERT INTO d.log (note) VALUES (REPEAT('x', {200 * r + 1}))")
            if r == 1:
                server.execute("ALTER TABLE d.items ADD COLUMN tag CHAR(3) DEFAULT 'a'")
                taken = run_cli("base", "--source", f"mysql://root@127.0.0.1:{server.port}",
                                "--archive", f"file://{base / 'bases'}", "--source-name", "db1",
                                password="")
                assert taken.returncode == 0, taken.stderr
            if r < 3:
                server.execute("FLUSH BINARY LOGS")
        keep = base / "files"
        keep.mkdir()
        names = server.binlog_files()
        for name in names + ["binlog.index"]:
            shutil.copyfile(os.path.join(server.datadir, name), keep / name)
        checksums = {t: server.execute(f"CHECKSUM TABLE {t}")[0][1] for t in TABLES}
        gtid = server.execute("SELECT @@gtid_binlog_pos")[0][0]
    finally:
        server.stop(remove=True)
    return {"dir": keep, "names": names, "checksums": checksums, "gtid": gtid,
            "bases": base / "bases" / "db1" / "base"}


def cli_import(directory, archive, *extra, source="db1"):
    url, options = archive
    return run_cli("archive", "import", str(directory), "--archive", url,
                   *[f"--archive-option={o}" for o in options], "--source-name", source,
                   *extra)


def cli_verify(archive, source="db1"):
    url, options = archive
    return run_cli("verify", "--archive", url, *[f"--archive-option={o}" for o in options],
                   "--source-name", source)


def open_store(archive):
    return ArchiveStore(archive[0], parse_options(archive[1]))


def raw(store, key, keyring=None):
    """The raw bytes of an archived object, decoded as its index says."""
    index = store.read_json(key + ".json")
    return decode_bytes(store.read(key), index.get("codec", "none"), keyring, key,
                        index.get("key_ids"))


def stored_total(store, source="db1"):
    """Bytes stored of every indexed binlog object (what an import reports uploaded)."""
    return sum(store.read_json(k)["stored_size"] for k in store.list(source)
               if k.endswith(".json") and "/base/" not in k)


def file_archive(tmp_path):
    return f"file://{tmp_path / 'archive'}", []


def copy_files(paths, directory):
    os.makedirs(directory, exist_ok=True)
    for path in paths:
        shutil.copyfile(path, os.path.join(directory, os.path.basename(path)))
    return directory


def gtid_range(paths):
    seqs = maria_gtids(paths)
    return f"0-1-{seqs[0][1]} .. 0-1-{seqs[-1][1]}"


def sealed_names(store, source="db1"):
    return sorted(k[len(source) + 8:-5] for k in store.list(f"{source}/binlog")
                  if k.endswith(".json"))


def error_line(result):
    """The one line a refused import prints on stderr."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def event_at(path, fraction):
    """(offset, size) of the event of a real file that holds the byte at ``fraction``."""
    data = read(path)
    for off, event in iter_events(data, 4, None):
        if off + len(event) > len(data) * fraction:
            return off, len(event)
    raise AssertionError(f"no event at {fraction} of {path}")


def test_import_with_the_server_index_then_verify_and_replay(server_files, tmp_path,
                                                             make_server):
    index_lines = (server_files["dir"] / "binlog.index").read_text().split()
    assert index_lines and all(os.path.isabs(line) for line in index_lines)  # the server's
    directory = tmp_path / "copy"
    shutil.copytree(server_files["dir"], directory)
    (directory / "notes.txt").write_text("not a binlog")
    archive = file_archive(tmp_path)
    names = server_files["names"]
    paths = [directory / n for n in names]
    result = cli_import(directory, archive)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout.splitlines()
    assert out[0] == f"order: binlog.index ({len(names)} files)"
    assert out[1] == "ignored (not binlog files of this server): notes.txt"
    store = open_store(archive)
    assert out[-1] == (f"{len(names)} files imported ({names[-1]} partial), 0 skipped, "
                       f"{stored_total(store)} bytes uploaded, GTIDs {gtid_range(paths)}")
    assert store.read(f"db1/binlog/{names[0]}").startswith(ZSTD_MAGIC)  # zstd:1 by default
    assert [raw(store, f"db1/binlog/{n}") for n in names[:-1]] == [read(p) for p in paths[:-1]]
    assert gtid_range(paths).endswith(server_files["gtid"])
    checked = cli_verify(archive)
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.splitlines()[-1] == f"{len(names)} objects checked, 0 problems"
    # a base backup taken of that server mid-way: restore = the base, then the imported
    # binlogs from its GTID on (the replay job), into a new server
    shutil.copytree(server_files["bases"], tmp_path / "archive" / "db1" / "base")
    target = make_server(server_id=3, semi_sync=False, log_bin=False)
    restored = run_cli("restore", "--archive", archive[0], "--source-name", "db1", "--target",
                       f"mysql://root@127.0.0.1:{target.port}", password="", timeout=300)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    base_seq = int(re.search(r"\(dump, GTID 0-1-(\d+)\) loaded", restored.stdout)[1])
    last_seq = int(server_files["gtid"].split("-")[-1])
    assert f"applied: {last_seq - base_seq} transactions" in restored.stdout
    assert f"last applied: GTID {server_files['gtid']} committed" in restored.stdout
    assert {t: target.execute(f"CHECKSUM TABLE {t}")[0][1] for t in TABLES} == \
        server_files["checksums"]


def test_import_by_name_then_again_is_idempotent(archive, source_files, tmp_path):
    directory = copy_files(source_files, tmp_path / "copy")
    (directory / "README").write_text("copied off db1")
    result = cli_import(directory, archive)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == "ignored (not binlog files of this server): README"
    store = open_store(archive)
    for path in source_files[:-1]:
        assert raw(store, f"db1/binlog/{path.name}") == read(path)
    last = source_files[-1]
    size = os.path.getsize(last)
    assert raw(store, f"db1/partial/{last.name}/{0:012d}-{size:012d}") == read(last)
    assert cli_verify(archive).returncode == 0
    held = store.list(sizes=True)
    again = cli_import(directory, archive)
    assert again.returncode == 0, again.stdout + again.stderr
    skipped = [line for line in again.stdout.splitlines() if ": skipped, archived already" in line]
    assert [line.split(":")[0] for line in skipped] == [p.name for p in source_files]
    assert again.stdout.splitlines()[-1] == (f"0 files imported, {len(source_files)} skipped, "
                                             f"0 bytes uploaded, GTIDs "
                                             f"{gtid_range(source_files)}")
    assert store.list(sizes=True) == held


def test_torn_last_file_is_refused_then_truncated_then_completed(source_files, tmp_path):
    directory = copy_files(source_files, tmp_path / "copy")
    last = directory / source_files[-1].name
    off, size = event_at(last, 0.6)
    with open(last, "r+b") as f:
        f.truncate(off + size // 2)
    archive = file_archive(tmp_path)
    result = cli_import(directory, archive)
    assert result.returncode == 6, result.stdout + result.stderr
    assert error_line(result).startswith(f"mysqlbackup: error: {last} at offset {off}: "
                                         f"torn event: ")
    store = open_store(archive)
    assert result.stdout.splitlines()[-2:] == [
        f"{last.name}: refused, cut inside an event (a copy off a crashed server?); "
        "--torn-tail truncate archives its complete transactions",
        f"stopped: 3 files imported, 0 skipped, {stored_total(store)} "
        f"bytes uploaded, GTIDs {gtid_range(source_files[:3])}"]
    assert sealed_names(store) == [p.name for p in source_files[:-1]]
    assert store.list("db1/partial") == []
    assert cli_verify(archive).returncode == 0
    truncated = cli_import(directory, archive, "--torn-tail", "truncate")
    assert truncated.returncode == 0, truncated.stdout + truncated.stderr
    assert f"{last.name}: torn at offset {off} (torn event: " in truncated.stdout
    [segment] = [k for k in store.list(f"db1/partial/{last.name}") if not k.endswith(".json")]
    end = int(segment.rsplit("-", 1)[1])
    assert 0 < end <= off and raw(store, segment) == read(source_files[-1])[:end]
    assert cli_verify(archive).returncode == 0
    # the whole file copied later: the archive's partial file grows by one segment
    completed = cli_import(copy_files(source_files, tmp_path / "later"), archive)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    full = os.path.getsize(source_files[-1])
    assert [k for k in store.list(f"db1/partial/{last.name}") if not k.endswith(".json")] == [
        segment, f"db1/partial/{last.name}/{end:012d}-{full:012d}"]
    assert cli_verify(archive).returncode == 0


def test_a_sealed_copy_replaces_the_partial_file_it_continues(source_files, tmp_path):
    first, second = source_files[:2]
    early = copy_files([first, second], tmp_path / "early")
    off, size = event_at(second, 0.5)
    with open(early / second.name, "r+b") as f:
        f.truncate(off + 7)  # a copy taken while the server wrote the second file
    archive = file_archive(tmp_path)
    result = cli_import(early, archive, "--torn-tail", "truncate")
    assert result.returncode == 0, result.stdout + result.stderr
    store = open_store(archive)
    assert sealed_names(store) == [first.name] and store.list(f"db1/partial/{second.name}")
    later = cli_import(copy_files(source_files, tmp_path / "later"), archive)
    assert later.returncode == 0, later.stdout + later.stderr
    assert sealed_names(store) == [p.name for p in source_files[:-1]]
    assert store.list(f"db1/partial/{second.name}") == []
    assert raw(store, f"db1/binlog/{second.name}") == read(second)
    assert cli_verify(archive).returncode == 0


def test_a_crc_flip_in_a_middle_file_stops_there(source_files, tmp_path):
    directory = copy_files(source_files, tmp_path / "copy")
    broken = directory / source_files[1].name
    off, size = event_at(broken, 0.5)
    data = bytearray(read(broken))
    data[off + size - 6] ^= 0x40
    broken.write_bytes(bytes(data))
    archive = file_archive(tmp_path)
    result = cli_import(directory, archive)
    assert result.returncode == 6, result.stdout + result.stderr
    assert error_line(result).startswith(f"mysqlbackup: error: {broken} at offset {off}: "
                                         f"CRC32 mismatch in ")
    store = open_store(archive)
    assert store.list() == [f"db1/binlog/{source_files[0].name}{suffix}"
                            for suffix in ("", ".json")]
    assert cli_verify(archive).returncode == 0


def test_chain_break_and_imports_that_do_not_continue_the_archive(source_files, server_files,
                                                                 tmp_path):
    archive = file_archive(tmp_path)
    first, second, third, fourth = source_files
    gap = copy_files([first, second, fourth], tmp_path / "gap")
    result = cli_import(gap, archive)
    assert result.returncode == 7, result.stdout + result.stderr
    line = error_line(result)
    assert line.startswith(f"mysqlbackup: error: resync required: {fourth.name} does not "
                           f"continue {second.name}: db1/binlog/{third.name}: missing")
    assert line.endswith(f" at {gap / fourth.name}:{event_at(fourth, 0)[1] + 4}")
    store = open_store(archive)
    assert sealed_names(store) == [first.name, second.name]
    # the rest later: it continues the archive
    rest = cli_import(copy_files([third, fourth], tmp_path / "rest"), archive)
    assert rest.returncode == 0, rest.stdout + rest.stderr
    assert cli_verify(archive).returncode == 0
    # an older file the archive does not hold cannot go in before it
    older = cli_import(server_files["dir"], archive, "--source-name", "db1")
    assert older.returncode == 7
    assert error_line(older).startswith(
        f"mysqlbackup: error: resync required: the archive holds another "
        f"db1/binlog/{first.name} (")
    assert raw(store, f"db1/binlog/{first.name}") == read(first)  # never overwritten


def test_order_files_by_the_server_index_or_by_name():
    order = order_files(["b.000002", "b.000010", "b.000003", "b.index", "x.txt", "b.000099"],
                        "b.index", "/var/lib/mysql/b.000001\n/var/lib/mysql/b.000002\n"
                        "./b.000003\nb.000010\n\n")
    assert (order.names, order.missing, order.ignored) == (
        ["b.000002", "b.000003", "b.000010"], ["b.000001"], ["b.000099", "x.txt"])
    assert order_files(["b.000010", "b.000009", "notes"]).names == ["b.000009", "b.000010"]
    with pytest.raises(UsageError, match="2 bases"):
        order_files(["a.000001", "b.000001"])


def test_an_encrypted_import_then_verify_deep_and_a_rerun_that_skips_everything(
        source_files, tmp_path):
    ident, recip = str(tmp_path / "archive.key"), str(tmp_path / "archive.pub")
    assert run_cli("keygen", "--identity", ident, "--recipient", recip).returncode == 0
    directory = copy_files(source_files, tmp_path / "copy")
    archive = file_archive(tmp_path)
    result = cli_import(directory, archive, "--compress", "zstd:3", "--encrypt-to", recip)
    assert result.returncode == 0, result.stdout + result.stderr
    store, keyring = open_store(archive), read_identities(ident)
    first = source_files[0].name
    index = store.read_json(f"db1/binlog/{first}.json")
    assert index["codec"] == "zstd+age" and index["key_ids"] == keyring.key_ids
    assert f"{first}: archived db1/binlog/{first} ({index['size']} bytes, stored zstd+age " \
           f"{index['stored_size']} bytes, " in result.stdout
    assert result.stdout.splitlines()[-1] == (
        f"{len(source_files)} files imported ({source_files[-1].name} partial), 0 skipped, "
        f"{stored_total(store)} bytes uploaded, GTIDs {gtid_range(source_files)}")
    objects = [k for k in store.list("db1") if not k.endswith(".json")]
    assert len(objects) == len(source_files)
    assert all(store.read(k).startswith(AGE_MAGIC) for k in objects)
    assert [raw(store, k, keyring) for k in sorted(objects)] == [read(p) for p in source_files]
    url = archive[0]
    outside = run_cli("verify", "--archive", url)
    assert outside.returncode == 0, outside.stdout
    assert outside.stdout.splitlines()[-1] == f"{len(objects)} objects checked, 0 problems"
    deep = run_cli("verify", "--archive", url, "--deep", "--identity", ident)
    assert deep.returncode == 0, deep.stdout
    assert deep.stdout.splitlines() == [f"{len(objects)} objects checked, 0 problems"]
    held = store.list(sizes=True)
    for extra in ([], ["--identity", ident]):
        again = cli_import(directory, archive, "--encrypt-to", recip, *extra)
        assert again.returncode == 0, again.stdout + again.stderr
        assert [line.split(":")[0] for line in again.stdout.splitlines()
                if ": skipped, archived already" in line] == [p.name for p in source_files]
        assert again.stdout.splitlines()[-1] == (
            f"0 files imported, {len(source_files)} skipped, 0 bytes uploaded, GTIDs "
            f"{gtid_range(source_files)}")
        assert store.list(sizes=True) == held
    # a damaged stored object (its index unchanged) is uploaded again, whole
    key = f"db1/binlog/{source_files[1].name}"
    damaged = bytearray(store.read(key))
    damaged[len(damaged) // 2] ^= 0x01
    store.put_bytes(key, bytes(damaged))
    fixed = cli_import(directory, archive, "--encrypt-to", recip)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert f"{source_files[1].name}: {key} is damaged in the archive (not the stored sha256 " \
           "its index says); uploading it again" in fixed.stdout
    assert raw(store, key, keyring) == read(source_files[1])
    assert run_cli("verify", "--archive", url, "--deep", "--identity", ident).returncode == 0
