"""``archive rekey``: every encrypted object moved to new recipients, in place, with the
old identity useless afterwards; a run stopped at any write (in process, at each of them)
or by kill -9 (a subprocess, at moments it is seen to reach) leaves an archive every
reader reads, and a second run finishes it; a restore's lease stops it; S3 (moto), with
Object Lock refusing each locked object with its date. The restore from a rekeyed
archive is in tests/test_archive_codec.py (its daemon-written world)."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import boto3
import pytest

from mysqlbackup.archive.codec import (AGE_MAGIC, Codec, IdentityError, decode_bytes, keygen,
                                       read_identities, read_recipients)
from mysqlbackup.archive.importer import import_directory
from mysqlbackup.archive.index import validate_index
from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.manifest import parse_manifest
from mysqlbackup.archive.objects import (Promise, read_object, rekey_from, stored_forms,
                                         stored_problem)
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.guard.verify import verify_archive
from mysqlbackup.errors import CorruptBinlog
from mysqlbackup.guard.lease import Lease
from mysqlbackup.rekey import run as rekey_run
from mysqlbackup.rekey.run import RekeyStopped, items, run_rekey
from tests.helpers import cli_env, run_cli, wait_for

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """{name: (identity path, recipient path)} for old, new and both (one identity file
    holding the two keys)."""
    root = tmp_path_factory.mktemp("rekey-keys")
    found = {}
    for name in ("old", "new"):
        keygen(str(root / f"{name}.key"), str(root / f"{name}.pub"))
        found[name] = (str(root / f"{name}.key"), str(root / f"{name}.pub"))
    with open(root / "both.key", "w") as f:
        f.write("".join(open(found[n][0]).read() for n in ("old", "new")))
    found["both"] = (str(root / "both.key"), None)
    return found


def make_archive(folder, files, keys, compress="zstd"):
    """A file:// archive of ``files`` imported as source db1, encrypted to the old key
    (the last file, without ROTATE, as the newest file's segments)."""
    src = folder / "binlogs"
    src.mkdir(parents=True)
    for path in files:
        shutil.copyfile(path, src / os.path.basename(path))
    url = f"file://{folder / 'archive'}"
    store = ArchiveStore(url)
    codec = Codec(compress, 1, tuple(read_recipients(keys["old"][1])))
    import_directory(store, str(src), "db1", "refuse", lambda line: None, codec)
    return url, store


def ring(keys, name):
    return read_identities(keys[name][0])


def new_codec(keys):
    return Codec("none", 1, tuple(read_recipients(keys["new"][1])))


def objects(store, sources=("db1",)):
    """{object key: (its index or manifest, stored bytes)} of the sources' indexed objects."""
    listing = ArchiveListing(store)
    found = {}
    for item in (i for source in sources for i in items(listing, source, [])):
        raw = store.read(item.doc_key)
        doc = parse_manifest(raw, item.doc_key) if item.is_base else json.loads(raw)
        found[item.key] = (doc, store.read(item.key))
    return found


def assert_on_keys(store, keys, name, sources=("db1",)):
    """Every object is encrypted to ``name``'s key only, decodes to its index's raw bytes
    with it, and opens with no other key."""
    other = "old" if name == "new" else "new"
    want = read_identities(keys[name][0]).key_ids
    found = objects(store, sources)
    assert found
    for key, (doc, stored) in found.items():
        assert stored.startswith(AGE_MAGIC) and "rekey_from" not in doc
        assert doc["key_ids"] == want
        promise = Promise.of_index(key, doc)
        raw = decode_bytes(stored, promise.codec, ring(keys, name), key, promise.key_ids)
        assert (len(raw), hashlib.sha256(raw).hexdigest()) == (doc["size"], doc["sha256"])
        assert stored_problem(promise, (len(stored), hashlib.sha256(stored).hexdigest())) is None
        with pytest.raises(IdentityError):
            decode_bytes(stored, promise.codec, ring(keys, other), key)


def test_rekey_moves_every_object_to_the_new_key(source_files, keys, tmp_path):
    url, store = make_archive(tmp_path, source_files, keys)
    before = objects(store)
    assert len(before) >= 4 and any("/partial/" in k for k in before)
    done = run_cli("archive", "rekey", "--archive", url, "--identity", keys["old"][0],
                   "--recipient", keys["new"][1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith(
        f"db1: {len(before)} objects rekeyed (")
    assert_on_keys(store, keys, "new")
    for key, (doc, _) in objects(store).items():  # the raw bytes' facts unchanged
        assert (doc["size"], doc["sha256"]) == (before[key][0]["size"], before[key][0]["sha256"])
    assert not store.list("db1/rekey") and not store.list("db1/lease")
    deep = run_cli("verify", "--archive", url, "--deep", "--identity", keys["new"][0])
    assert deep.returncode == 0, deep.stdout
    assert deep.stdout.splitlines()[-1].endswith(", 0 problems")
    old = run_cli("verify", "--archive", url, "--deep", "--identity", keys["old"][0])
    assert old.returncode == 1
    problems = [x for x in old.stdout.splitlines() if x.startswith("PROBLEM ")]
    [line] = problems
    assert f"{len(before)} encrypted objects do not open with the identity" in line
    after = objects(store)
    again = run_cli("archive", "rekey", "--archive", url, "--identity", keys["new"][0],
                    "--recipient", keys["new"][1])
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1].startswith(
        "db1: 0 objects rekeyed (0.0 MB raw, 0.0 MB stored, ")
    assert f"{len(before)} on the new keys already" in again.stdout
    assert objects(store) == after  # nothing rewritten


def test_refusals_are_one_line(source_files, keys, tmp_path):
    url, store = make_archive(tmp_path, source_files[:2], keys)
    before = objects(store)
    env = cli_env()
    env.pop("MYSQLBACKUP_IDENTITY", None)
    no_key = subprocess.run([sys.executable, "-m", "mysqlbackup", "archive", "rekey",
                             "--archive", url, "--recipient", keys["new"][1]], env=env,
                            capture_output=True, text=True, timeout=60)
    assert no_key.returncode == 2 and "archive rekey needs --identity FILE" in no_key.stderr
    wrong = run_cli("archive", "rekey", "--archive", url, "--identity", keys["new"][0],
                    "--recipient", keys["new"][1])
    assert wrong.returncode == 2 and len(wrong.stderr.splitlines()) == 1
    assert "encrypted to key id" in wrong.stderr and "another key" in wrong.stderr
    assert objects(store) == before and not store.list("db1/rekey")
    no_recipient = run_cli("archive", "rekey", "--archive", url, "--identity", keys["old"][0])
    assert no_recipient.returncode == 2 and "--recipient" in no_recipient.stderr


class _Crash(BaseException):
    """What a kill -9 is to the code under test: nothing after it runs."""


class _CrashingStore:
    """The store, but the ``at``-th write (put, open_write's publication, move, remove)
    raises _Crash before it happens."""

    WRITES = ("put_bytes", "put_json", "open_write", "move", "remove", "drop_old_versions",
              "lock_now")

    def __init__(self, store, at, shared=None):
        self._store, self.at, self._count = store, at, shared or [0]

    @property
    def count(self):
        return self._count[0]

    def unlocked(self):  # the staged copies' writes count too
        return _CrashingStore(self._store.unlocked(), self.at, self._count)

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if name not in self.WRITES:
            return attr

        def write(*args, **kwargs):
            self._count[0] += 1
            if self._count[0] == self.at:
                raise _Crash()
            return attr(*args, **kwargs)
        return write


def test_a_stop_at_every_write_leaves_a_readable_archive_and_a_second_run_finishes(
        source_files, keys, tmp_path, monkeypatch):
    """At each write of a whole run in turn, the run stops (as a kill -9 does: no
    cleanup, its lease left behind); the archive then verifies with the old and the new
    key, every object readable; archive import finds everything archived; a second run
    finishes, and afterwards only the new key opens anything."""
    _, pristine = make_archive(tmp_path / "pristine", source_files, keys)
    monkeypatch.setattr(Lease, "release", lambda self: self._stop.set())  # left behind
    counting = _CrashingStore(pristine, at=0)
    counting_copy = tmp_path / "count"
    shutil.copytree(tmp_path / "pristine", counting_copy)
    counting = _CrashingStore(ArchiveStore(f"file://{counting_copy / 'archive'}"), at=0)
    run_rekey(ArchiveListing(counting), ["db1"], ring(keys, "old"), new_codec(keys),
              lambda line: None)
    total = counting.count
    assert total >= 4 * len(objects(pristine))
    seen = {"two forms": 0, "staged": 0}
    for at in range(1, total + 1):
        folder = tmp_path / f"at{at}"
        shutil.copytree(tmp_path / "pristine", folder)
        store = ArchiveStore(f"file://{folder / 'archive'}")
        with pytest.raises(_Crash):
            run_rekey(ArchiveListing(_CrashingStore(store, at)), ["db1"], ring(keys, "old"),
                      new_codec(keys), lambda line: None)
        seen["two forms"] += any("rekey_from" in d for d, _ in objects(store).values())
        for key, (doc, stored) in objects(store).items():  # one key alone: said, not damage
            if "rekey_from" in doc:
                promise = Promise.of_index(key, doc)
                has = (len(stored), hashlib.sha256(stored).hexdigest())
                lacking = "new" if has == promise.previous else "old"
                with pytest.raises(IdentityError, match="left it between two keys"):
                    read_object(store, promise, lambda data: None, ring(keys, lacking))
        seen["staged"] += bool(store.list("db1/rekey"))
        checked, problems = verify_archive(store, "db1", keyring=ring(keys, "both"))
        assert problems == [] and checked, (at, problems)
        for lease in store.list("db1/lease"):   # a killed process's lease is left; ours
            store.remove(lease)                 # is alive, so it stands for a dead one here
        lines = []
        import_directory(store, str(tmp_path / "pristine" / "binlogs"), "db1", "refuse",
                         lines.append, Codec("zstd", 1, tuple(read_recipients(keys["old"][1]))),
                         ring(keys, "both"))
        assert not any("again" in line for line in lines), (at, lines)
        assert run_rekey(ArchiveListing(store), ["db1"], ring(keys, "old"), new_codec(keys),
                         lambda line: None)
        assert_on_keys(store, keys, "new")
        assert not store.list("db1/rekey")
        shutil.rmtree(folder)
    assert seen["two forms"] >= len(objects(pristine)) and seen["staged"] >= 1


SOURCES = ("db1", "db2", "db3")


def test_kill_9_anywhere_then_a_second_run(tmp_path, keys, grown_files):
    """kill -9 of the command at moments it is seen to reach (a new form staged, an index
    naming two forms, an object swapped): each time verify --deep with both keys finds
    nothing wrong, and a second run (same host: the dead run's lease does not stop it)
    finishes; afterwards the old identity opens nothing. Three sources of one 24 MB
    file each: objects large enough that a run is seen between its steps."""
    url = f"file://{tmp_path / 'archive'}"
    store = ArchiveStore(url)
    codec = Codec("zstd", 1, tuple(read_recipients(keys["old"][1])))
    for source, path in zip(SOURCES, grown_files):
        folder = tmp_path / source
        folder.mkdir()
        shutil.copyfile(path, folder / path.name)
        import_directory(store, str(folder), source, "refuse", lambda line: None, codec)
    count = len(objects(store, SOURCES))

    def quiet():
        try:
            return objects(store, SOURCES).values()
        except (FileNotFoundError, CorruptBinlog):
            return []

    def staged():
        return any(store.list(f"{s}/rekey") for s in SOURCES)

    def two_forms():
        return any("rekey_from" in doc for doc, _ in quiet())

    def one_swapped():
        return any(doc.get("key_ids") == ring(keys, "new").key_ids and "rekey_from" not in doc
                   for doc, _ in quiet())

    killed = 0
    args = [sys.executable, "-m", "mysqlbackup", "archive", "rekey", "--archive", url,
            "--identity", keys["both"][0], "--recipient", keys["new"][1]]
    for moment in (staged, two_forms, one_swapped, staged):
        proc = subprocess.Popen(args, env=cli_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: moment() or proc.poll() is not None, timeout=120, interval=0.002,
                     what=f"rekey to reach {moment.__name__}")
        finally:
            proc.send_signal(signal.SIGKILL)
            killed += proc.wait() == -signal.SIGKILL
        checked, problems = verify_archive(store, keyring=ring(keys, "both"))
        assert problems == [] and checked, (moment.__name__, problems)
    assert killed >= 2  # stopped midway, not after the end
    done = run_cli("archive", "rekey", "--archive", url, "--identity", keys["both"][0],
                   "--recipient", keys["new"][1], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_on_keys(store, keys, "new", SOURCES)
    assert len(objects(store, SOURCES)) == count


@pytest.fixture(scope="module")
def grown_files(source_files, tmp_path_factory):
    """Three sealed binlog files of 24 MB, grown from a real one."""
    from tests.bigbinlog import grow_binlog
    folder = tmp_path_factory.mktemp("grown")
    paths = []
    for source in SOURCES:
        path = folder / source / "binlog.000001"
        path.parent.mkdir()
        grow_binlog(str(source_files[0]), str(path), 24 << 20, 1 << 20, "binlog.000002")
        paths.append(path)
    return paths


def test_a_restore_lease_stops_it_before_any_swap(source_files, keys, tmp_path):
    url, store = make_archive(tmp_path, source_files[:2], keys)
    before = objects(store)
    with Lease(store, "db1", base="x"):
        with pytest.raises(RekeyStopped, match="not started: restore lease .* is live"):
            run_rekey(ArchiveListing(store), ["db1"], ring(keys, "old"), new_codec(keys),
                      lambda line: None)
    assert objects(store) == before


def test_stored_forms_and_their_validation():
    index = {"size": 10, "sha256": "a" * 64, "codec": "zstd+age", "stored_size": 5,
             "stored_sha256": "b" * 64, "key_ids": ["k2"],
             "rekey_from": rekey_from(6, "c" * 64, ["k1"])}
    assert stored_forms(index) == [(5, "b" * 64), (6, "c" * 64)]
    promise = Promise.of_index("o", index)
    assert promise.key_ids == ("k2", "k1")
    assert stored_problem(promise, (6, "c" * 64)) is None
    assert "before its rekey" in stored_problem(promise, (7, "c" * 64))
    from mysqlbackup.archive.objects import form_problem
    assert form_problem(index) is None
    for bad in ({"stored_size": 6}, dict(rekey_from(6, "c" * 64, []), stored_size=-1),
                dict(rekey_from(6, "z" * 64, []))):
        assert form_problem(dict(index, rekey_from=bad)).startswith("rekey_from is")


def test_s3_and_object_lock(s3, source_files, keys, tmp_path):
    """On S3 (moto): objects move by a server-side copy; on an Object Lock bucket, the
    objects written unlocked are rekeyed (and, the lock options given, locked as new
    objects are; their staged copies never, so they go), each locked one is refused with
    its date (its locked version would keep the old key), exit 1; verify --deep with the
    new key then names only the locked ones."""
    name = "rekey-" + str(int(time.time() * 1000))
    boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1").create_bucket(
        Bucket=name, ObjectLockEnabledForBucket=True)
    url = f"s3://{name}/a"
    endpoint = ["--archive-option", f"endpoint_url={s3.endpoint}"]
    folder = tmp_path / "binlogs"
    folder.mkdir()
    for i, path in enumerate(source_files):
        shutil.copyfile(path, folder / os.path.basename(path))
        if i == 1:
            first = run_cli("archive", "import", str(folder), "--archive", url,
                            "--source-name", "db1", "--encrypt-to", keys["old"][1], *endpoint)
            assert first.returncode == 0, first.stderr
    locked = run_cli("archive", "import", str(folder), "--archive", url, "--source-name",
                     "db1", "--encrypt-to", keys["old"][1], *endpoint, "--archive-option",
                     "lock_mode=governance", "--archive-option", "lock_days=1")
    assert locked.returncode == 0, locked.stderr
    lock = ["--archive-option", "lock_mode=governance", "--archive-option", "lock_days=1"]
    done = run_cli("archive", "rekey", "--archive", url, "--identity", keys["old"][0],
                   "--recipient", keys["new"][1], *endpoint, *lock, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    refused = [x for x in done.stdout.splitlines() if "locked until" in x]
    assert len(refused) >= 2 and all("(S3 Object Lock)" in x and "T" in x for x in refused)
    assert done.stdout.splitlines()[0].startswith("db1: 2 objects rekeyed (")
    deep = run_cli("verify", "--archive", url, "--deep", "--identity", keys["new"][0],
                   *endpoint, timeout=120)
    assert deep.returncode == 1
    problems = [x for x in deep.stdout.splitlines() if x.startswith("PROBLEM ")]
    assert len(problems) == len(refused) and all("another key" in x for x in problems)
    both = run_cli("verify", "--archive", url, "--deep", "--identity", keys["both"][0],
                   *endpoint, timeout=120)
    assert both.returncode == 0, both.stdout
    client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")
    for path in source_files[:2]:  # the old form's version is gone: the old key opens none
        key = "a/db1/binlog/" + os.path.basename(path)
        listed = client.list_object_versions(Bucket=name, Prefix=key)
        [version] = [v for v in listed["Versions"] if v["Key"] == key]
        stored = client.get_object(Bucket=name, Key=key)["Body"].read()
        with pytest.raises(IdentityError):
            decode_bytes(stored, "zstd+age", ring(keys, "old"), key)
        assert decode_bytes(stored, "zstd+age", ring(keys, "new"), key) == open(path, "rb").read()
        locked = client.head_object(Bucket=name, Key=key)  # locked as a new object is
        assert locked["ObjectLockMode"] == "GOVERNANCE" and version["IsLatest"]
    staging = client.list_object_versions(Bucket=name, Prefix="a/db1/rekey/")
    assert not staging.get("Versions") and not staging.get("DeleteMarkers")


def test_index_and_manifest_validators_take_the_two_forms(source_files, keys, tmp_path):
    _, store = make_archive(tmp_path, source_files[:2], keys)
    doc = next(iter(objects(store).values()))[0]
    validate_index(dict(doc, rekey_from=rekey_from(1, "d" * 64, ["x"])), "w")
    with pytest.raises(CorruptBinlog, match="rekey_from is"):
        validate_index(dict(doc, rekey_from={"stored_size": "1"}), "w")
    assert rekey_run.staging_key(rekey_run.Item("db1/binlog/x.000001", "db1/binlog/x.000001"
                                                ".json", "db1")) == "db1/rekey/binlog/x.000001"


def test_a_base_whose_manifest_does_not_read_is_named_and_the_rest_rekeyed(source_files, keys,
                                                                            tmp_path):
    from mysqlbackup.archive.names import format_base_id
    url, store = make_archive(tmp_path, source_files[:2], keys)
    base = f"db1/base/{format_base_id(time.time())}"
    store.put_bytes(f"{base}/dump.sql.zst", b"x")
    store.put_bytes(f"{base}/index.json", b"{not json")
    done = run_cli("archive", "rekey", "--archive", url, "--identity", keys["old"][0],
                   "--recipient", keys["new"][1])
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0].startswith("db1: 2 objects rekeyed (")
    [line] = [x for x in done.stdout.splitlines() if x.startswith("not rekeyed: ")]
    assert f"{base}/index.json" in line and "not JSON" in line
    assert_on_keys(store, keys, "new")


def test_a_stop_at_every_write_on_an_object_lock_bucket(s3, source_files, keys, tmp_path):
    """As above on S3 with Object Lock, the lock options given (the swapped object locked
    by the run itself): wherever the run stops, a second run finishes, each object's
    replaced version is gone and the new one is locked; the staged copies leave nothing."""
    import boto3
    client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")
    options = {"endpoint_url": s3.endpoint}
    locked = dict(options, lock_mode="governance", lock_days=1)
    codec = Codec("zstd", 1, tuple(read_recipients(keys["old"][1])))
    folder = tmp_path / "one"  # one sealed file: one object, every step of it
    folder.mkdir()
    shutil.copyfile(source_files[0], folder / os.path.basename(source_files[0]))
    total, at = None, 1
    while total is None or at <= total:
        name = f"rekey-lock-{at}-{int(time.time() * 1000)}"
        client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
        url = f"s3://{name}/a"
        plain = ArchiveStore(url, options)
        import_directory(plain, str(folder), "db1", "refuse", lambda line: None, codec)
        store = _CrashingStore(ArchiveStore(url, dict(locked)), at if total else 0)
        try:
            run_rekey(ArchiveListing(store), ["db1"], ring(keys, "old"), new_codec(keys),
                      lambda line: None)
        except _Crash:
            checked, problems = verify_archive(plain, "db1", keyring=ring(keys, "both"))
            assert problems == [] and checked, (at, problems)
            for lease in plain.list("db1/lease"):
                plain.remove(lease)
        total = total or store.count
        again = ArchiveStore(url, dict(locked))
        assert run_rekey(ArchiveListing(again), ["db1"], ring(keys, "old"), new_codec(keys),
                         lambda line: None), at
        for key, (doc, _) in objects(plain).items():
            full = f"a/{key}"
            versions = client.list_object_versions(Bucket=name, Prefix=full)
            assert [v["Key"] for v in versions.get("Versions", []) if v["Key"] == full] == [
                full], (at, key)  # the replaced version is gone
            assert client.head_object(Bucket=name, Key=full)["ObjectLockMode"] == "GOVERNANCE"
        staged = client.list_object_versions(Bucket=name, Prefix="a/db1/rekey/")
        assert not staged.get("Versions") and not staged.get("DeleteMarkers"), at
        assert_on_keys(plain, keys, "new")
        at += 1
