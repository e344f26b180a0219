"""The archive at rest: objects compressed (zstd) and encrypted (age) by the daemon and
by `base`, with only the public key on the backup host; verify with and without the
identity, restore from the encrypted archive compared with CHECKSUM TABLE of the
primary; damaged, cut, other-key and wrong-identity objects named; a kill -9 of an
encoding archiver mid-upload; a mixed archive (plain, then compressed after a
restart); codec round trips and old indexes and manifests (pure)."""

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from mysqlbackup.archive.codec import (AGE_MAGIC, ZSTD_MAGIC, Codec, IdentityError, decode_bytes,
                                       encode_bytes, key_id, read_identities, read_recipients,
                                       stored_of)
from mysqlbackup.archive.index import build_index, validate_index
from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.guard.verify import verify_archive
from mysqlbackup.errors import CorruptBinlog
from mysqlbackup.sandbox import MariaDBSandbox, find_binary
from tests.helpers import (REPO, Daemon, backup_dir, caught_up, cli_env, current_binlog, read,
                           run_cli, wait_for)

TABLES = "shop.items, shop.orders"


def checksums(server):
    return dict(server.execute(f"CHECKSUM TABLE {TABLES}"))


def keygen(directory, name):
    """A key pair made by the CLI; (identity path, recipient path, identity text)."""
    ident, recip = str(directory / f"{name}.key"), str(directory / f"{name}.pub")
    result = run_cli("keygen", "--identity", ident, "--recipient", recip)
    assert result.returncode == 0, result.stderr
    with open(ident) as f:
        return ident, recip, f.read()


# -- pure: the codec and the index/manifest fields ------------------------------------------

@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    return {name: keygen(root, name) for name in ("everyday", "offline", "stranger")}


@pytest.mark.server
@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize("encrypted", [False, True])
@pytest.mark.parametrize("data", [b"", b"\xfebin", os.urandom(3000) + b"row" * 400_000],
                         ids=["empty", "magic", "1.2MB"])
def test_codec_round_trips(keys, compression, encrypted, data):
    recipients = read_recipients(keys["everyday"][1]) if encrypted else ()
    codec = Codec(compression, 3, recipients)
    stored, digests = encode_bytes(data, codec)
    assert (digests.raw_size, digests.raw_sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert (digests.stored_size, digests.stored_sha256) == (
        len(stored), hashlib.sha256(stored).hexdigest())
    keyring = read_identities(keys["everyday"][0])
    assert decode_bytes(stored, codec.name, keyring, "obj", codec.key_ids) == data
    if encrypted:
        assert stored.startswith(AGE_MAGIC)
        assert codec.key_ids == [key_id(recipients[0])] == keyring.key_ids
    elif compression == "zstd":
        assert stored.startswith(ZSTD_MAGIC)
        if len(data) > 100:
            assert len(stored) * 3 < len(data)
    else:
        assert stored == data


@pytest.mark.server
def test_by_hand_with_the_age_format_and_the_zstd_tool(keys, tmp_path):
    """What docs/archive-format.md says: age (here pyrage's plain decrypt, the format's
    reference library) then the zstd command line give the raw bytes back."""
    import pyrage
    if shutil.which("zstd") is None:
        pytest.skip("the zstd command line is not installed")
    data = b"\xfebin" + os.urandom(500) + b"x" * 100_000
    codec = Codec("zstd", 9, read_recipients(keys["everyday"][1])
                  + read_recipients(keys["offline"][1]))
    stored, _ = encode_bytes(data, codec)
    for who in ("everyday", "offline"):  # either key opens it (several recipients)
        frame = pyrage.decrypt(stored, read_identities(keys[who][0]).identities())
        out = subprocess.run(["zstd", "-d", "-c"], input=frame, capture_output=True, check=True)
        assert out.stdout == data


@pytest.mark.server
def test_each_fault_is_named(keys):
    codec = Codec("zstd", 3, read_recipients(keys["everyday"][1]))
    stored, _ = encode_bytes(b"\xfebin" + b"e" * 300_000 + os.urandom(2000), codec)
    mine, stranger = (read_identities(keys[n][0]) for n in ("everyday", "stranger"))
    where = "db1/binlog/mariadb-bin.000007"
    flipped = bytearray(stored)
    flipped[len(stored) // 2] ^= 1
    cases = [(bytes(flipped), mine, CorruptBinlog, "damaged or truncated"),
             (stored[:-100], mine, CorruptBinlog, "damaged or truncated"),
             (stored, stranger, IdentityError, "another key"),
             (stored, None, IdentityError, "give --identity")]
    for data, keyring, kind, text in cases:
        with pytest.raises(kind) as e:
            decode_bytes(data, codec.name, keyring, where, codec.key_ids)
        assert str(e.value).startswith(where) and text in str(e.value)
    with pytest.raises(IdentityError, match="no identity in .* opens it"):
        decode_bytes(stored, codec.name, stranger, where)  # no index to name the key
    plain = encode_bytes(b"\xfebin" + b"z" * 100_000, Codec("zstd"))[0]
    with pytest.raises(CorruptBinlog, match="zstd frame ends early: the object is truncated"):
        decode_bytes(plain[:-20], "zstd", None, where)


def test_old_indexes_and_manifests_mean_plain_and_zstd(source_files):
    data = read(source_files[0])
    index = build_index(data, os.path.basename(source_files[0]))
    assert validate_index(dict(index), "x") and stored_of(index) == (index["size"],
                                                                     index["sha256"])
    new = dict(index, codec="zstd+age", stored_size=10, stored_sha256="a" * 64,
               key_ids=["0123456789abcdef"])
    assert stored_of(validate_index(new, "x")) == (10, "a" * 64)
    for bad, text in [({"codec": "rot13"}, "codec is"), ({"stored_sha256": "xyz"},
                      "stored_sha256 is"), ({"key_ids": [1]}, "key_ids is")]:
        with pytest.raises(CorruptBinlog, match=text):
            validate_index(dict(index, **bad), "x")


@pytest.mark.server
def test_keygen_never_overwrites_and_key_files_are_checked(tmp_path, keys):
    ident, recip, text = keygen(tmp_path, "k")
    assert stat.S_IMODE(os.stat(ident).st_mode) == 0o600
    assert text.splitlines()[-1].startswith("AGE-SECRET-KEY-1")
    before = read(ident)
    again = run_cli("keygen", "--identity", ident, "--recipient", str(tmp_path / "other.pub"))
    assert again.returncode == 2
    assert again.stderr.strip().splitlines()[-1].endswith(f"{ident} exists: keygen never "
                                                          "overwrites a key file")
    assert read(ident) == before and not (tmp_path / "other.pub").exists()
    both = tmp_path / "both.pub"
    both.write_text(f"# everyday\n{read(keys['everyday'][1]).decode()}\n# offline\n"
                    f"{read(keys['offline'][1]).decode()}")
    assert len(read_recipients(str(both))) == 2
    wrong = run_cli("stream", "--source", "mysql://u@127.0.0.1:1", "--server-id", "9", "--dir",
                    str(tmp_path / "d"), "--archive", f"file://{tmp_path}/a", "--encrypt-to",
                    ident)
    assert wrong.returncode == 2
    assert "not an age recipient (age1...) (that is a secret key" in wrong.stderr


# -- a daemon and a base writing an encrypted archive -------------------------------------

@pytest.fixture(scope="module")
def world(tmp_path_factory, keys):
    """A primary archived by a daemon with --compress zstd:3 and two --encrypt-to (the
    everyday and an offline key), a dump base encrypted too; the identity files moved
    away while the daemon and base run (the backup host holds public keys only)."""
    if find_binary("mariadbd") is None:
        pytest.fail("mariadbd not found: run scripts/test.sh, which installs mariadb-server")
    root = tmp_path_factory.mktemp("codec")
    host = root / "backup-host"
    host.mkdir()
    for who in ("everyday", "offline"):
        shutil.copy(keys[who][1], host / f"{who}.pub")
    away = {who: keys[who][0] + ".away" for who in ("everyday", "offline")}
    for who, path in away.items():
        os.rename(keys[who][0], path)
    primary = MariaDBSandbox(str(root / "primary"), semi_sync_timeout_ms=1000).start()
    url = f"file://{root / 'archive'}"
    codec_args = ["--encrypt-to", str(host / "everyday.pub"), "--encrypt-to",
                  str(host / "offline.pub")]
    daemon = Daemon(primary, root / "backup", "--archive", url, "--archive-interval", "0.3",
                    "--source-name", "db1", "--compress", "zstd:3", *codec_args).start()
    try:
        primary.execute(
            "CREATE DATABASE shop",
            "CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40), pad TEXT)",
            "CREATE TABLE shop.orders (id INT PRIMARY KEY AUTO_INCREMENT, item INT, qty INT)",
            "INSERT INTO shop.items SELECT seq, CONCAT('item ', seq), REPEAT('p', 500) "
            "FROM shop.seq_1_to_2000", "FLUSH BINARY LOGS")
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{primary.port}", "--archive",
                       url, "--source-name", "db1", *codec_args, password="", timeout=120)
        assert base.returncode == 0, base.stderr
        primary.execute(*[f"INSERT INTO shop.orders (item, qty) VALUES ({i}, {i % 5})"
                          for i in range(200)], "FLUSH BINARY LOGS",
                        "UPDATE shop.items SET name = 'renamed' WHERE id % 7 = 0")
        primary.execute(*[f"UPDATE shop.orders SET qty = qty + 1 WHERE id = {i}"
                          for i in range(1, 50)], "FLUSH BINARY LOGS",
                        "DELETE FROM shop.items WHERE id % 11 = 0")
        wait_for(lambda: caught_up(primary, root / "backup"), what="the daemon caught up")
        last, store = current_binlog(primary), ArchiveStore(url)
        size = os.path.getsize(primary.binlog_path(last))
        wait_for(lambda: any(k.endswith(f"-{size:012d}.json")
                             for k in store.list(f"db1/partial/{last}")), timeout=60,
                 what="the archive to hold the last transaction")
        assert not any(os.path.exists(keys[w][0]) for w in away)  # never on this host
    finally:
        assert daemon.stop() == 0, daemon.output()
        for who, path in away.items():
            os.rename(path, keys[who][0])
    yield {"primary": primary, "url": url, "root": root, "final": checksums(primary),
           "backup": root / "backup", "last": last}
    primary.stop(remove=True)


@pytest.mark.server
def test_objects_are_encrypted_and_local_files_byte_identical(world, keys):
    store, primary = ArchiveStore(world["url"]), world["primary"]
    listing = ArchiveListing(store)
    names = listing.sealed_names("db1")
    assert len(names) >= 2 and listing.segments["db1"][world["last"]]
    ids = [key_id(read_recipients(keys[w][1])[0]) for w in ("everyday", "offline")]
    for name in names:
        index = listing.index("db1", name)
        assert (index["codec"], index["key_ids"]) == ("zstd+age", ids)
        local = read(world["backup"] / name)
        assert local == read(primary.binlog_path(name))  # local: the server's bytes
        assert (index["size"], index["sha256"]) == (len(local), hashlib.sha256(local).hexdigest())
        stored = store.read(listing.sealed["db1"][name]["data"])
        assert stored.startswith(AGE_MAGIC) and b"shop" not in stored
        assert stored_of(index) == (len(stored), hashlib.sha256(stored).hexdigest())
    [base_id] = listing.base_ids("db1")
    manifest = listing.base_manifest("db1", base_id)
    assert (manifest["codec"], manifest["key_ids"]) == ("zstd+age", ids)
    dump = store.read(f"db1/base/{base_id}/dump.sql.zst")
    assert dump.startswith(AGE_MAGIC) and len(dump) == manifest["stored_size"]


def verify_cli(url, *extra, env_identity=None):
    env = cli_env()
    if env_identity:
        env["MYSQLBACKUP_IDENTITY"] = env_identity
    return subprocess.run([sys.executable, "-m", "mysqlbackup", "verify", "--archive", url,
                           *extra], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.server
def test_verify_without_and_with_the_identity(world, keys):
    outside = verify_cli(world["url"])
    assert outside.returncode == 0, outside.stdout
    lines = outside.stdout.splitlines()
    assert any(line.startswith("NOTE ") and "encrypted objects checked by stored size and "
               "sha256 only" in line for line in lines)
    assert lines[-1].endswith(", 0 problems")
    deep = run_cli("verify", "--archive", world["url"], "--deep")
    assert deep.returncode == 2 and "--deep needs --identity" in deep.stderr
    for args, env in ((["--deep", "--identity", keys["everyday"][0]], None),
                      (["--deep"], keys["offline"][0])):
        inside = verify_cli(world["url"], *args, env_identity=env)
        assert inside.returncode == 0, inside.stdout
        assert not any("encrypted objects" in line for line in inside.stdout.splitlines())
        assert inside.stdout.splitlines()[-1] == outside.stdout.splitlines()[-1]
    stranger = verify_cli(world["url"], "--deep", "--identity", keys["stranger"][0])
    assert stranger.returncode == 1
    problems = [x for x in stranger.stdout.splitlines() if x.startswith("PROBLEM ")]
    [line] = problems  # one line for every object the identity does not open, by key ids
    assert "encrypted objects do not open with the identity" in line and "stranger" in line


def test_restore_from_the_encrypted_archive(world, keys, make_server):
    target = make_server(server_id=3, semi_sync=False)
    args = ["restore", "--archive", world["url"], "--target",
            f"mysql://root@127.0.0.1:{target.port}"]
    refused = run_cli(*args, password="", timeout=120)
    assert refused.returncode == 2
    assert "encrypted (age, key id" in refused.stderr and "give --identity" in refused.stderr
    assert target.execute("SHOW DATABASES LIKE 'shop'") == ()  # refused before the target
    done = run_cli(*args, "--identity", keys["offline"][0], password="", timeout=300)
    assert done.returncode == 0, done.stderr
    assert checksums(target) == world["final"]


def test_restore_after_a_rekey_needs_the_new_key_only(world, keys, make_server, tmp_path):
    """The daemon's archive (sealed files, the active file's segments, a base) rekeyed to
    another key: the restore with it gives the primary's tables; the old identities open
    nothing, and the restore refuses them before touching the target."""
    url, store = damaged_copy(world, tmp_path)
    done = run_cli("archive", "rekey", "--archive", url, "--identity", keys["everyday"][0],
                   "--recipient", keys["stranger"][1], timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 on the new keys already" in done.stdout and "rekeyed (" in done.stdout
    target = make_server(server_id=4, semi_sync=False)
    args = ["restore", "--archive", url, "--target", f"mysql://root@127.0.0.1:{target.port}"]
    old = run_cli(*args, "--identity", keys["offline"][0], password="", timeout=120)
    assert old.returncode == 2 and "another key" in old.stderr
    assert target.execute("SHOW DATABASES LIKE 'shop'") == ()
    new = run_cli(*args, "--identity", keys["stranger"][0], password="", timeout=300)
    assert new.returncode == 0, new.stderr
    assert checksums(target) == world["final"]


def damaged_copy(world, tmp_path):
    shutil.copytree(world["root"] / "archive", tmp_path / "archive")
    return f"file://{tmp_path / 'archive'}", ArchiveStore(f"file://{tmp_path / 'archive'}")


@pytest.mark.server
def test_flipped_cut_and_reencrypted_objects_are_named(world, keys, tmp_path):
    url, store = damaged_copy(world, tmp_path)
    names = ArchiveListing(store).sealed_names("db1")
    flipped, cut, other = (f"db1/binlog/{n}" for n in names[:3])
    # a file encrypted to another key, its index saying so (its stored form matches)
    index = json.loads(store.read(other + ".json"))
    raw = decode_bytes(store.read(other), "zstd+age", read_identities(keys["everyday"][0]))
    reencoded, digests = encode_bytes(raw, Codec("zstd", 3, read_recipients(keys["stranger"][1])))
    store.put_bytes(other, reencoded)
    index.update(stored_size=digests.stored_size, stored_sha256=digests.stored_sha256,
                 key_ids=[key_id(read_recipients(keys["stranger"][1])[0])])
    store.put_json(other + ".json", index)
    sql = tmp_path / "out.sql"
    replay = run_cli("replay", "--archive", url, "--sql", str(sql), "--identity",
                     keys["everyday"][0], timeout=120)
    assert replay.returncode == 2  # refused in the plan, before Spark or the sink
    assert replay.stderr.strip().splitlines()[-1].startswith(
        f"mysqlbackup: error: {other}: encrypted to key id {index['key_ids'][0]}; the identity ")
    assert not sql.exists()
    data = bytearray(store.read(flipped))
    data[len(data) // 2] ^= 0x10
    store.put_bytes(flipped, bytes(data))
    store.put_bytes(cut, store.read(cut)[:-50])
    outside = verify_cli(url)
    assert outside.returncode == 1
    problems = [x for x in outside.stdout.splitlines() if x.startswith("PROBLEM ")]
    assert len(problems) == 2, problems
    for problem, key in zip(problems, (flipped, cut)):
        assert problem.startswith(f"PROBLEM {key}: stored as ") and "not the archived" in problem
    inside = verify_cli(url, "--deep", "--identity", keys["everyday"][0])
    problems = [x for x in inside.stdout.splitlines() if x.startswith("PROBLEM ")]
    assert len(problems) == 3 and problems[2].startswith(f"PROBLEM {other}: encrypted to key "
                                                         "id ") and "another key" in problems[2]
    replay = run_cli("replay", "--archive", url, "--sql", str(sql), "--identity",
                     keys["everyday"][0], timeout=120)
    assert replay.returncode == 6, replay.stderr
    assert f"error: {flipped}" in replay.stderr or f"error: {cut}" in replay.stderr


def test_kill_9_of_an_encoding_archiver_leaves_nothing_taken_for_whole(make_server, keys,
                                                                       tmp_path):
    server = make_server(semi_sync=False)
    server.execute("CREATE DATABASE z", "CREATE TABLE z.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v LONGTEXT)")
    for _ in range(6):
        server.execute(*["INSERT INTO z.t (v) VALUES (REPEAT(UUID(), 2000))"] * 40)
    server.execute("FLUSH BINARY LOGS")
    big = server.binlog_files()[0]
    local = backup_dir([server.binlog_path(n) for n in server.binlog_files()],
                       tmp_path / "local", "db1")
    url = f"file://{tmp_path / 'archive'}"
    store = ArchiveStore(url)
    code = (f"from mysqlbackup.stream.archiver import Archiver; "
            f"from mysqlbackup.archive.codec import make_codec; "
            f"from mysqlbackup.archive.store import ArchiveStore; "
            f"Archiver({str(local)!r}, ArchiveStore({url!r}), codec=make_codec('zstd:19', "
            f"[{keys['everyday'][1]!r}])).run_once()")
    for delay in (0.3, 0.6, 0.9):
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
        time.sleep(delay)
        proc.kill()
        proc.wait()
        problems = verify_archive(store)[1]  # no identity: the backup host's view
        assert all("no index" in p or "no archived binlog" in p for p in problems), problems
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)
    keyring = read_identities(keys["everyday"][0])
    assert verify_archive(store, keyring=keyring)[1] == []
    index = json.loads(store.read(f"db1/binlog/{big}.json"))
    assert decode_bytes(store.read(f"db1/binlog/{big}"), index["codec"], keyring) == \
        read(server.binlog_path(big))


def test_mixed_archive_plain_then_compressed_after_a_restart(make_server, tmp_path):
    server = make_server()
    url = f"file://{tmp_path / 'archive'}"
    common = ["--archive", url, "--archive-interval", "0.3", "--source-name", "db1"]
    server.execute("CREATE DATABASE shop", "CREATE TABLE shop.items (id INT PRIMARY KEY, "
                   "name VARCHAR(40), pad TEXT)", "CREATE TABLE shop.orders (id INT "
                   "PRIMARY KEY AUTO_INCREMENT, item INT, qty INT)")
    for compress, first in (("none", 1), ("zstd:3", 1001)):
        daemon = Daemon(server, tmp_path / "d", *common, "--compress", compress).start()
        try:
            server.execute(f"INSERT INTO shop.items SELECT seq, 'x', REPEAT('p', 300) FROM "
                           f"shop.seq_{first}_to_{first + 499}", "FLUSH BINARY LOGS")
            sealed = server.binlog_files()[-2]
            wait_for(lambda: ArchiveStore(url).exists(f"db1/binlog/{sealed}.json"),
                     what=f"{sealed} archived")
        finally:
            assert daemon.stop() == 0, daemon.output()
    listing = ArchiveListing(ArchiveStore(url))
    codecs = [listing.index("db1", n).get("codec") for n in listing.sealed_names("db1")]
    assert codecs[0] == "none" and codecs[-1] == "zstd" and set(codecs) == {"none", "zstd"}
    verified = run_cli("verify", "--archive", url)
    assert verified.returncode == 0, verified.stdout
    assert "encrypted" not in verified.stdout  # zstd is read without any key
    target = make_server(server_id=5, semi_sync=False)
    replay = run_cli("replay", "--archive", url, "--target",
                     f"mysql://root@127.0.0.1:{target.port}", password="", timeout=180)
    assert replay.returncode == 0, replay.stderr
    assert checksums(target) == checksums(server)


@pytest.mark.server
def test_verify_deep_decodes_the_base_against_its_manifest(world, keys, tmp_path):
    """A base whose stored form matches its manifest (the manifest rewritten to it) but
    whose insides do not: only the identity sees it, and names the object."""
    url, store = damaged_copy(world, tmp_path)
    [base_id] = ArchiveListing(store).base_ids("db1")
    key, manifest_key = f"db1/base/{base_id}/dump.sql.zst", f"db1/base/{base_id}/index.json"
    manifest = json.loads(store.read(manifest_key))
    ident = keys["everyday"][0]
    clean = verify_cli(url, "--deep", "--identity", ident)
    assert clean.returncode == 0, clean.stdout

    def restamp(stored):
        store.put_bytes(key, stored)
        store.put_json(manifest_key, dict(manifest, stored_size=len(stored),
                                          sha256=hashlib.sha256(stored).hexdigest()))
    original = store.read(key)
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0x10  # inside an age chunk: its tag no longer holds
    restamp(bytes(flipped))
    assert verify_cli(url).returncode == 0  # the stored form is what the manifest says
    deep = verify_cli(url, "--deep", "--identity", ident)
    assert deep.returncode == 1
    [problem] = [x for x in deep.stdout.splitlines() if x.startswith("PROBLEM ")]
    assert problem.startswith(f"PROBLEM {key} at offset ") or problem.startswith(
        f"PROBLEM {key}: "), problem
    assert "cannot decrypt" in problem and "damaged or truncated" in problem
    # other bytes, well encrypted, under the manifest's stored fields: the raw sha256 differs
    raw = decode_bytes(original, "zstd+age", read_identities(ident))
    changed = raw.replace(b"item 1", b"ITEM 1")
    assert changed != raw
    other, _ = encode_bytes(changed, Codec("zstd", 1, read_recipients(keys["everyday"][1])))
    restamp(other)
    deep = verify_cli(url, "--deep", "--identity", ident)
    assert deep.returncode == 1
    [problem] = [x for x in deep.stdout.splitlines() if x.startswith("PROBLEM ")]
    assert problem == (f"PROBLEM {key}: decodes to {manifest['raw_size']} bytes, sha256 "
                       f"{hashlib.sha256(changed).hexdigest()[:16]}"
                       f"..., its manifest says {manifest['raw_size']} bytes, sha256 "
                       f"{manifest['raw_sha256'][:16]}...: not what was archived")


@pytest.mark.server
def test_allow_gaps_refuses_a_cut_encoded_last_segment_by_name(world, keys, tmp_path):
    """A plain cut last segment is replayed as far as it holds (test_replay_checks); an
    encoded one is refused, naming it and saying why, before anything is applied."""
    url, store = damaged_copy(world, tmp_path)
    segments = [k for k in store.list(f"db1/partial/{world['last']}") if not k.endswith(".json")]
    last = segments[-1]
    index = json.loads(store.read(last + ".json"))
    assert index["codec"] == "zstd+age"
    store.put_bytes(last, store.read(last)[:-40])
    sql = tmp_path / "out.sql"
    replay = run_cli("replay", "--archive", url, "--sql", str(sql), "--allow-gaps",
                     "--identity", keys["everyday"][0], timeout=120)
    assert replay.returncode == 6, replay.stderr
    assert replay.stderr.strip().splitlines()[-1] == (
        f"mysqlbackup: error: {last}: {index['stored_size'] - 40} of its "
        f"{index['stored_size']} stored bytes are left: its tail is lost, and it is stored as "
        "zstd+age, which is never read in part (age authenticates each 64 KiB chunk and "
        "marks the last one, so a cut age file is refused whole); --allow-gaps replays a cut "
        "plain segment, not this one. Nothing was applied. Upload it again from the backup "
        "host's local file, or remove it and its index: the replay then ends where the "
        "segment before it ends")
    assert not sql.exists() or "INSERT" not in sql.read_text()


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_allow_gaps_and_a_cut_last_segment_by_codec(codec):
    from replay.planning.units import Unit, UnitObject, check_listed_sizes
    index = {"codec": codec, "size": 500, "sha256": "a" * 64, "stored_size": 200,
             "stored_sha256": "b" * 64}
    want = 500 if codec == "none" else 200
    key = "s/partial/b.000003/000000000000-000000000500"
    unit = Unit("b.000003", (key,), index, True, "s/partial/b.000003",
                (UnitObject(key, 0, index),))
    sizes = {key: want - 10}
    if codec == "none":
        check_listed_sizes([unit], sizes, allow_gaps=True)  # replays what it holds
        return
    with pytest.raises(CorruptBinlog) as refused:
        check_listed_sizes([unit], sizes, allow_gaps=True)
    assert str(refused.value).startswith(f"{key}: 190 of its 200 stored "
                                         "bytes are left: its tail is lost, and it is stored "
                                         "as zstd, which is never read in part (a zstd frame "
                                         "is proven whole only by its end")
