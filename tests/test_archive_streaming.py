"""The one-pass archive pipeline (issue 26): indexes built a chunk at a time are the
indexes built before from whole bytes, damage is named as before, a file that changes
while read is never indexed, and the daemon's archiver, ``archive import`` and
``verify`` stay under 150 MB of peak RSS on a ~320 MB file of 64 MB transactions."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from mysqlbackup.stream import archiver as archiver_module
from mysqlbackup.archive import importer as importer_module
from mysqlbackup.stream.archiver import Archiver
from mysqlbackup.archive.upload import UploadMismatch
from mysqlbackup.archive.index import STATEMENT_CONTEXT, IndexBuilder, build_index
from mysqlbackup.archive.importer import import_directory
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import gtid_text
from mysqlbackup.binlog.scan import EventStream, iter_events
from mysqlbackup.binlog.transactions import IN_TRX, INERT_IN_TRX, TrxTracker, is_control
from mysqlbackup.errors import CorruptBinlog
from mysqlbackup.localdir.state import State, save_state
from tests.bigbinlog import grow_binlog
from tests.conftest import SHARED_BINLOGS
from tests.helpers import backup_dir, cli_env, read

SOURCE = "src-1"
MB = 1 << 20
CHUNKS = (None, 1, 7, 4096, 1 << 20)  # None: build_index over the whole bytes


# -- the index as it was built before issue 26, from whole bytes (the reference) --------

def reference_index(data, name, predecessor=None, start=0, tracker=None, source=None,
                    where=None):
    """build_index as it was before the one-pass pipeline, kept verbatim as the
    reference the streamed index must equal field for field (and the later count of
    statement-based transactions: an event that makes the open one so, counted as it
    ends)."""
    import hashlib
    from datetime import datetime, timezone

    def utc(ts):
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    tracker = tracker or TrxTracker()
    before = str(tracker.gtids) if tracker.gtids is not None else None
    info = {"first_gtid": None, "last_gtid": None, "first_commit": None,
            "last_commit": None, "transactions": 0, "next_file": None, "server_id": None,
            "statements": 0}
    statement = False
    offset = 4 if start == 0 else 0
    checksum = None if start == 0 else tracker.checksum
    for off, event in iter_events(data, offset, checksum, file=where or name, base=start):
        if tracker.state == IN_TRX and event[4] in INERT_IN_TRX:
            continue
        header = ev.parse_header(event)
        if off == 4:
            info["server_id"] = header.server_id
        if tracker.state == IN_TRX and (event[4] in STATEMENT_CONTEXT or (
                event[4] == ev.QUERY and not is_control(
                    ev.parse_query(event, tracker.checksum, tracker.fde).sql))):
            statement = True
        count = tracker.transactions
        tracker.feed(event)
        if tracker.transactions > count:
            info["statements"] += statement
            statement = False
            info["transactions"] += 1
            info["first_commit"] = info["first_commit"] or header.timestamp
            info["last_commit"] = header.timestamp
            gtid = gtid_text(tracker.last_gtid)
            if gtid:
                info["first_gtid"] = info["first_gtid"] or gtid
                info["last_gtid"] = gtid
        if header.type == ev.ROTATE and not ev.is_artificial(header):
            info["next_file"] = ev.parse_rotate(event, tracker.checksum)[1]
        if event[4] == ev.FORMAT_DESCRIPTION and start == 0:
            before = None
        if event[4] in (ev.MARIA_GTID_LIST, ev.PREVIOUS_GTIDS) and before is None:
            before = str(tracker.gtids)
    return {
        "version": 1, "name": name, "source": source, "start": start,
        "end": start + len(data), "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(), "predecessor": predecessor,
        "gtid_before": before,
        "gtid_after": str(tracker.gtids) if tracker.gtids is not None else None,
        "complete_transactions": tracker.at_boundary, **info,
        "first_commit": info["first_commit"] and utc(info["first_commit"]),
        "last_commit": info["last_commit"] and utc(info["last_commit"]),
    }


def streamed_index(data, name, chunk, start=0, tracker=None, **kwargs):
    """The index of ``data`` fed ``chunk`` bytes at a time (None: build_index)."""
    if chunk is None:
        return build_index(data, name, start=start, tracker=tracker, **kwargs)
    builder = IndexBuilder(name, start=start, tracker=tracker, end=start + len(data), **kwargs)
    for i in range(0, len(data), chunk):
        builder.update(data[i:i + chunk])
    return builder.finish()


def outcome(build):
    """The index JSON text ``build()`` gives, or its error (type, text, offset)."""
    try:
        return json.dumps(build(), sort_keys=True)
    except CorruptBinlog as e:
        return ("CorruptBinlog", str(e), e.offset)


def corpus_binlogs():
    if not os.path.isdir(SHARED_BINLOGS):
        return []
    found = []
    for root, _, names in sorted(os.walk(SHARED_BINLOGS)):
        for name in sorted(names):
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                if f.read(4) == ev.MAGIC:
                    found.append(path)
    return found


def boundaries(data):
    """File offsets of the transaction boundaries of a whole file (after its header)."""
    tracker, found = TrxTracker(), []
    for off, event in iter_events(data, 4, None):
        tracker.feed(event)
        if tracker.at_boundary:
            found.append(off + len(event))
    return found


def assert_segments_match(data, name, cuts, chunk):
    """A chain of segments [0, c1), [c1, c2) ... indexed a chunk at a time with one
    tracker equals the reference chain, JSON text for JSON text."""
    streamed, reference = TrxTracker(), TrxTracker()
    for start, end in zip([0] + cuts, cuts + [len(data)]):
        got = streamed_index(data[start:end], name, chunk, start=start, tracker=streamed,
                             source="s")
        want = reference_index(data[start:end], name, start=start, tracker=reference,
                               source="s")
        assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True), \
            (name, start, end, chunk)


# -- the same indexes --------------------------------------------------------------------

@pytest.mark.skipif(not corpus_binlogs(), reason=f"needs the real-binlog corpus "
                    f"{SHARED_BINLOGS} (../shared/binlogs beside the checkout)")
def test_real_binlogs_index_the_same_in_any_chunks_or_fail_the_same():
    checked = 0
    for path in corpus_binlogs():
        data, name = read(path), os.path.basename(path)
        want = outcome(lambda: reference_index(data, name, "prev", source="s"))
        for chunk in CHUNKS:
            got = outcome(lambda: streamed_index(data, name, chunk, predecessor="prev",
                                                 source="s"))
            assert got == want, (path, chunk)
        checked += 1
    assert checked >= 40  # the corpus's binlogs, broken ones included


@pytest.mark.skipif(not corpus_binlogs(), reason="needs the real-binlog corpus")
def test_real_binlogs_split_into_segments_index_the_same():
    split = 0
    for path in corpus_binlogs():
        data = read(path)
        try:
            cuts = boundaries(data)[:-1]
        except CorruptBinlog:
            continue  # a broken file: no chain of segments to cut it into
        for chunk in (None, 5, 4096):
            assert_segments_match(data, os.path.basename(path), cuts[::2], chunk)
        split += 1
    assert split >= 30


def test_generated_binlogs_index_the_same(source_files, tmp_path):
    big = tmp_path / "binlog.000001"
    grow_binlog(source_files[0], big, 3 * MB + 4096, MB, "binlog.000002", first_seq=100)
    for path in [*source_files, big]:
        data = read(path)
        want = outcome(lambda: reference_index(data, path.name, source="s"))
        assert isinstance(want, str)
        for chunk in CHUNKS:
            assert outcome(lambda: streamed_index(data, path.name, chunk, source="s")) == want
        cuts = boundaries(data)[:-1]
        assert_segments_match(data, path.name, cuts[::3], 65536)
    index = json.loads(want)
    assert index["transactions"] == 3 and index["next_file"] == "binlog.000002"
    assert index["first_gtid"].endswith("-100") and index["complete_transactions"]


# -- damaged bytes -------------------------------------------------------------------------

def test_damaged_bytes_are_named_with_file_and_offset_as_before(source_files):
    data = read(source_files[1])
    events = [(off, len(e)) for off, e in iter_events(data, 4, None)]
    off, size = events[len(events) // 2]
    flipped = bytearray(data)
    flipped[off + size // 2] ^= 0x01                   # a CRC mismatch
    huge = bytearray(data)
    huge[off + 9:off + 13] = (1 << 30).to_bytes(4, "little")  # a size past the end
    cases = {"flipped": bytes(flipped), "torn": data[:off + size // 2], "huge": bytes(huge),
             "header cut": data[:off + 10]}
    for what, damaged in cases.items():
        want = outcome(lambda: reference_index(damaged, "f", where="/x/f"))
        assert want[0] == "CorruptBinlog" and want[2] == off, (what, want)
        for chunk in CHUNKS:
            got = outcome(lambda: streamed_index(damaged, "f", chunk, where="/x/f"))
            assert got == want, (what, chunk)
        assert "/x/f at offset" in want[1]


def test_a_size_field_past_the_end_is_refused_without_holding_the_rest(source_files):
    """A damaged size field is refused as soon as the header is in, with or without the
    end known, instead of the stream holding bytes until the end of the file."""
    data = bytearray(read(source_files[1]))
    off = [o for o, _ in iter_events(bytes(data), 4, None)][3]
    data[off + 9:off + 13] = (len(data) // 2).to_bytes(4, "little")  # inside the file
    for end in (len(data), None):
        stream = EventStream(lambda o, e: None, file="f", end=end, bounded=True)
        with pytest.raises(CorruptBinlog) as caught:
            for i in range(0, len(data), 4096):
                stream.feed(bytes(data[i:i + 4096]))
                assert len(stream._held) < 8192  # never the rest of the file
        assert caught.value.offset == off


# -- a file that changes while it is read --------------------------------------------------

def test_a_sealed_file_shorter_than_its_size_is_not_archived(tmp_path, source_files,
                                                              monkeypatch):
    directory = backup_dir(source_files, tmp_path / "local", SOURCE)
    store = ArchiveStore(f"file://{tmp_path / 'archive'}")
    first = source_files[0].name
    real = os.path.getsize
    monkeypatch.setattr(archiver_module.os.path, "getsize",
                        lambda p: real(p) + 100 if p.endswith(first) else real(p))
    with pytest.raises(UploadMismatch, match="changed while read"):
        Archiver(str(directory), store).run_once()
    assert not [k for k in store.list(SOURCE) if first in k]  # no object, no index
    monkeypatch.undo()
    Archiver(str(directory), store).run_once()
    index = store.read_json(f"{SOURCE}/binlog/{first}.json")
    assert index == dict(index, **reference_index(read(source_files[0]), first, None,
                                                  source=SOURCE))


def test_import_refuses_a_file_changed_between_its_reads(tmp_path, source_files, monkeypatch):
    directory = tmp_path / "copied"
    directory.mkdir()
    for f in source_files[:2]:
        shutil.copyfile(f, directory / f.name)
    victim = directory / source_files[0].name
    scan = importer_module.scan_file

    def scan_then_change(path, *args, **kwargs):
        found = scan(path, *args, **kwargs)
        if path == str(victim):
            data = bytearray(read(victim))
            data[len(data) // 2] ^= 0x01
            victim.write_bytes(bytes(data))
        return found
    monkeypatch.setattr(importer_module, "scan_file", scan_then_change)
    store = ArchiveStore(f"file://{tmp_path / 'archive'}")
    with pytest.raises(UploadMismatch, match="changed while it was imported"):
        import_directory(store, str(directory), SOURCE, echo=lambda line: None)
    assert store.list(SOURCE) == []


# -- the active file's segments ------------------------------------------------------------

class FailingOnce(ArchiveStore):
    """The real store whose second streamed upload under ``partial/`` fails."""

    partial_uploads = 0

    def open_write(self, relative):
        if "/partial/" in relative:
            self.partial_uploads += 1
            if self.partial_uploads == 2:
                raise OSError("the store went away")
        return super().open_write(relative)


def test_a_segment_chain_after_a_failed_upload_indexes_as_before(tmp_path, source_files):
    """The active file grows in steps; one segment upload fails and is retried: every
    segment's index equals the reference built over the same bytes with one tracker."""
    active = source_files[-1]
    data = read(active)
    cuts = boundaries(data)
    steps = [cuts[len(cuts) // 4], cuts[len(cuts) // 2], cuts[-1]]
    directory = backup_dir(source_files, tmp_path / "local", SOURCE)
    store = FailingOnce(f"file://{tmp_path / 'archive'}")
    archiver = Archiver(str(directory), store)
    for i, end in enumerate(steps):
        save_state(str(directory), State(file=active.name, pos=end, source_identity=SOURCE))
        if i == 1:
            with pytest.raises(OSError):
                archiver.run_once()
        archiver.run_once()
    tracker = TrxTracker()
    for start, end in zip([0] + steps, steps):
        key = f"{SOURCE}/partial/{active.name}/{start:012d}-{end:012d}"
        index = store.read_json(key + ".json")
        want = reference_index(data[start:end], active.name, start=start, tracker=tracker,
                               source=SOURCE)
        assert {k: index[k] for k in want} == want, (start, end)


# -- memory: bounded whatever the file size -------------------------------------------------

PEAK_LIMIT = 150 * MB
RUN_ARCHIVER = """
import sys
from mysqlbackup.stream.archiver import Archiver
from mysqlbackup.archive.codec import make_codec
from mysqlbackup.archive.store import ArchiveStore
Archiver(sys.argv[1], ArchiveStore(sys.argv[2]), source_name="m",
         codec=make_codec(sys.argv[3], sys.argv[4:])).run_once()
"""
# runs ``-c CODE ARGS`` or ``-m MODULE ARGS`` and writes its own VmHWM to a file at exit:
# the peak of this process's memory alone (a child's wait4 ru_maxrss also counts what
# the parent held when the child was forked: pytest's own, on a long run)
WITH_PEAK = """
import atexit, runpy, sys
def report(path=sys.argv[1]):
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(path, "w") as out:
        out.write(str(hwm * 1024))
atexit.register(report)
how, what, sys.argv = sys.argv[2], sys.argv[3], sys.argv[3:]
if how == "-c":
    exec(compile(what, "<run>", "exec"))
else:
    runpy.run_module(what, run_name="__main__", alter_sys=True)
"""


def peak_rss(args, cwd, tmp_path):
    """(exit code, peak RSS in bytes (VmHWM), output) of ``python ARGS`` (``-c CODE ...``
    or ``-m MODULE ...``) in a fresh process."""
    report = tmp_path / "peak"
    done = subprocess.run([sys.executable, "-c", WITH_PEAK, str(report), *args], cwd=cwd,
                          env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = int(report.read_text()) if report.exists() else None
    report.unlink(missing_ok=True)
    return done.returncode, peak, done.stdout.decode(errors="replace")


def test_archiver_import_and_verify_peak_rss_does_not_grow_with_the_file(tmp_path,
                                                                           source_files):
    """A ~320 MB file of 64 MB transactions: the daemon's archiver pass (zstd and age),
    ``archive import`` (zstd) and ``verify --deep`` each stay under 150 MB of peak RSS
    (VmHWM; they held the whole file, and verify twice that, before the one-pass
    pipeline)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    alone, local = tmp_path / "import", tmp_path / "local"
    alone.mkdir()
    big = alone / "binlog.000001"
    grow_binlog(source_files[0], big, 330 * MB, 64 * MB, "binlog.000002")
    size = os.path.getsize(big)
    local.mkdir()
    os.link(big, local / big.name)
    header = next(off for off, e in iter_events(read(source_files[0]), 4, None)
                  if e[4] == ev.MARIA_GTID)
    (local / "binlog.000002").write_bytes(read(source_files[0])[:header])
    save_state(str(local), State(file="binlog.000002", pos=header, source_identity="m"))
    ident, recip = tmp_path / "key.txt", tmp_path / "key.pub"
    subprocess.run([sys.executable, "-m", "mysqlbackup", "keygen", "--identity", str(ident),
                    "--recipient", str(recip)], check=True, cwd=root, env=cli_env(),
                   capture_output=True)
    daemon_url, import_url = f"file://{tmp_path / 'a1'}", f"file://{tmp_path / 'a2'}"
    runs = {
        "archiver": ["-c", RUN_ARCHIVER, str(local), daemon_url, "zstd", str(recip)],
        "import": ["-m", "mysqlbackup", "archive", "import", str(alone), "--archive",
                   import_url, "--source-name", "m"],
        "verify": ["-m", "mysqlbackup", "verify", "--archive", daemon_url, "--deep",
                   "--identity", str(ident)],
    }
    peaks = {}
    for what, args in runs.items():
        code, peaks[what], out = peak_rss(args, root, tmp_path)
        assert code == 0 and peaks[what], (what, out)
    print(f"file {size / MB:.0f} MB; peak RSS "
          + ", ".join(f"{k} {v / MB:.0f} MB" for k, v in peaks.items()))
    assert size > 300 * MB
    assert all(peak < PEAK_LIMIT for peak in peaks.values()), peaks
    index = json.loads((tmp_path / "a2" / "m" / "binlog" / "binlog.000001.json").read_text())
    assert (index["size"], index["transactions"]) == (size, 5)


@pytest.mark.server
def test_the_default_zstd_level_is_the_measured_one():
    """Level 1 (codec.DEFAULT_LEVEL, chosen by scripts/bench_archive.py): the daemon,
    archive import and base backups alike."""
    from mysqlbackup.archive.codec import DEFAULT_LEVEL, parse_compress
    from tests.helpers import run_cli
    assert DEFAULT_LEVEL == 1 and parse_compress("zstd") == ("zstd", 1)
    for command in (["stream"], ["archive", "import"], ["base"]):
        shown = " ".join(run_cli(*command, "--help").stdout.split())
        assert "[default: zstd:1]" in shown, command


@pytest.mark.parametrize("encrypted", [False, True])
def test_import_compares_a_shorter_copy_with_the_sealed_object_as_it_decodes(
        tmp_path, source_files, encrypted):
    """A copy of a file taken before it was complete, imported after the archive holds
    the whole file sealed: the stored object is decoded only as far as the copy goes and
    compared with it a chunk at a time (an encrypted one needs the identity)."""
    from mysqlbackup.archive.codec import IdentityError, keygen, make_codec, read_identities
    recipients = []
    if encrypted:
        keygen(str(tmp_path / "key.txt"), str(tmp_path / "key.pub"))
        recipients = [str(tmp_path / "key.pub")]
    codec = make_codec("zstd", recipients)
    store = ArchiveStore(f"file://{tmp_path / 'archive'}")
    whole = tmp_path / "whole"
    whole.mkdir()
    for f in source_files:
        shutil.copyfile(f, whole / f.name)
    import_directory(store, str(whole), SOURCE, echo=lambda line: None, codec=codec)
    early = tmp_path / "early"
    early.mkdir()
    first, second = source_files[:2]
    shutil.copyfile(first, early / first.name)
    data = read(second)
    cut = boundaries(data)[len(boundaries(data)) // 2]
    (early / second.name).write_bytes(data[:cut])
    held = store.list(sizes=True)
    keyring = read_identities(str(tmp_path / "key.txt")) if encrypted else None
    if encrypted:
        with pytest.raises(IdentityError):
            import_directory(store, str(early), SOURCE, echo=lambda line: None, codec=codec)
    lines = []
    summary = import_directory(store, str(early), SOURCE, echo=lines.append, codec=codec,
                               keyring=keyring)
    assert summary.skipped == [first.name, second.name] and summary.imported == []
    assert f"{second.name}: skipped, archived already as a sealed file ({len(data)} bytes)" \
        in lines
    assert store.list(sizes=True) == held
