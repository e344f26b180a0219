"""A replay decode task streams its file (issue 14, item 4): it holds one event and a
read chunk, never the file, and gives the very results of a decode of the whole file.

Pure: every file of the real-binlog corpus, whole and damaged (a flipped byte, cut
inside an event, bad magic), fed to ``StreamAssembly`` in chunks of 1 byte, 1000
bytes and 1 MB: the same transactions, facts, fingerprint, or the same error at the
same offset, as ``assemble`` + ``detach_events`` on the whole bytes; ``StreamAttach``
as ``attach_events``. Memory: a ~160 MB binlog with 2 MB rows events made by a real
MariaDB, archived plain and zstd+age, decoded by ``replay.job.tasks.decode_unit`` in a fresh
process (``scripts/measure_decode_memory.py --child``) whose peak RSS grows by a
fraction of the file."""

import glob
import hashlib
import importlib.util
import json
import os
import pickle
import subprocess
import sys

import pytest

from mysqlbackup.archive.codec import keyring_from
from mysqlbackup.errors import CorruptBinlog
from mysqlbackup.sandbox import find_binary
from replay.job.decoding.assemble import (StreamAssembly, StreamAttach, assemble, attach_events,
                                      detach_events)
from replay.planning.plan import ReplayOptions, units_to_read
from tests.conftest import SHARED_BINLOGS
from tests.helpers import REPO, read

MEASURE = os.path.join(REPO, "scripts", "measure_decode_memory.py")
CHUNKS = [1, 1000, 1 << 20]


def corpus():
    """(id, bytes) of every corpus file and of damaged copies of a few."""
    if not os.path.isdir(SHARED_BINLOGS):
        pytest.skip(f"needs the real-binlog corpus {SHARED_BINLOGS} (../shared/binlogs beside "
                    "the checkout; not part of a clone of the repository)")
    files = sorted(p for p in glob.glob(os.path.join(SHARED_BINLOGS, "*", "*"))
                   if not p.endswith((".txt", ".md")))
    cases = [(os.path.relpath(p, SHARED_BINLOGS), read(p)) for p in files]
    maria = mariadb_file()
    flipped = bytearray(maria)
    flipped[len(maria) // 2] ^= 0x40
    cases += [("flipped", bytes(flipped)), ("cut", maria[:len(maria) - 7]),
              ("header-cut", maria[:14]),
              ("bad-magic", b"\xfebim" + maria[4:]), ("empty", b""), ("two-bytes", b"\xfeb")]
    return cases


def mariadb_file():
    return read(os.path.join(SHARED_BINLOGS, "rust_mysql_common", "mariadb-bin.000001"))


def whole_outcome(data, name, newest):
    """What a decode of the whole bytes gives: ("ok", results) or ("error", text, offset)."""
    facts = {}
    try:
        transactions, incomplete, fde = assemble(data, name, newest=newest, facts=facts)
    except CorruptBinlog as e:
        return "error", str(e), e.offset
    return "ok", transactions, incomplete, fde, facts, detach_events(transactions, data)


def streamed_outcome(data, name, newest, chunk):
    facts = {}
    walk = StreamAssembly(name, newest=newest, facts=facts)
    for at in range(0, len(data), chunk):
        walk.feed(data[at:at + chunk])
    try:
        transactions, incomplete, fde, fingerprint = walk.finish()
    except CorruptBinlog as e:
        return "error", str(e), e.offset
    return "ok", transactions, incomplete, fde, facts, fingerprint


@pytest.mark.parametrize("newest", [False, True], ids=["sealed", "newest"])
def test_a_streamed_decode_gives_what_the_whole_file_gives(newest):
    outcomes = set()
    for case, data in corpus():
        expected = whole_outcome(data, "f.000001", newest)
        outcomes.add(expected[0])
        for chunk in CHUNKS:
            assert streamed_outcome(data, "f.000001", newest, chunk) == expected, (case, chunk)
    assert outcomes == {"ok", "error"}  # the corpus and its damaged copies hold both


def test_events_attached_from_a_stream_are_the_whole_file_s():
    corpus()  # skips without it
    data = mariadb_file()
    whole, _, _ = assemble(data, "f.000001")
    for chunk in CHUNKS:
        light, _, _ = assemble(data, "f.000001")
        fingerprint = detach_events(light, data)
        cut = StreamAttach(light)
        for at in range(0, len(data), chunk):
            cut.feed(data[at:at + chunk])
        cut.finish("obj", fingerprint)
        assert light == whole and all(t.events for t in light)
    changed = data[:-1] + bytes([data[-1] ^ 1])
    light, _, _ = assemble(data, "f.000001")
    fingerprint = detach_events(light, data)
    with pytest.raises(CorruptBinlog) as whole_error:
        attach_events(light, changed, "obj", fingerprint)
    cut = StreamAttach(light)
    cut.feed(changed)
    with pytest.raises(CorruptBinlog) as streamed_error:
        cut.finish("obj", fingerprint)
    assert str(streamed_error.value) == str(whole_error.value)
    assert all(t.events is None for t in light)  # nothing attached from other bytes


# -- memory: a decode task on a big file ------------------------------------------------

def _measure_module():
    spec = importlib.util.spec_from_file_location("measure_decode_memory", MEASURE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A ~160 MB binlog (rows events up to 2 MB) archived plain and zstd+age:
    (workdir, {kind: (url, identity)}, expected decode results)."""
    try:
        with open("/proc/self/status") as f:
            assert "VmHWM:" in f.read()
    except (OSError, AssertionError):
        pytest.skip("peak RSS is read from VmHWM of /proc/self/status (Linux only)")
    if find_binary("mariadbd") is None:  # as every server test: a failure, never a skip
        pytest.fail("mariadbd not found: run scripts/test.sh, which installs mariadb-server")
    measure = _measure_module()
    workdir = str(tmp_path_factory.mktemp("big"))
    binlogs = measure.make_binlog(workdir, 160, 2)
    archives = {kind: measure.make_archive(workdir, binlogs, kind == "zstd+age")
                for kind in ("plain", "zstd+age")}
    return workdir, binlogs, archives


@pytest.mark.server
@pytest.mark.parametrize("kind", ["plain", "zstd+age"])
def test_a_decode_task_holds_an_event_not_the_file(big, kind):
    workdir, binlogs, archives = big
    url, identity = archives[kind]
    _, units, _ = units_to_read(ReplayOptions(archive_url=url, keyring=keyring_from(identity)))
    unit = units[0]
    path = os.path.join(binlogs, unit.name)
    size = os.path.getsize(path)
    assert size > 128 << 20 and not unit.partial
    job, out = os.path.join(workdir, f"{kind}.job"), os.path.join(workdir, f"{kind}.out")
    with open(job, "wb") as f:
        pickle.dump((unit, url, identity), f)
    run = subprocess.run([sys.executable, MEASURE, "--child", job, "--out", out],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    grew = report["hwm_after"] - report["hwm_before"]
    assert grew < min(size // 4, 64 << 20), f"peak RSS grew by {grew} bytes on {size}"
    with open(out, "rb") as f:
        result = pickle.load(f)
    data = read(path)
    expected = whole_outcome(data, unit.name, False)
    assert result.error is None
    assert ("ok", result.transactions, result.incomplete, result.fde,
            result.facts, result.fingerprint) == expected
    assert result.digests == [(size, hashlib.sha256(data).hexdigest())]
    assert len(result.transactions) > 5  # ~16 MB transactions of 2 MB events

