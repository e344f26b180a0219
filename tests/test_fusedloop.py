"""The fused loops, compiled (``mysqlbackup._speedups``) and pure Python (``fusedloop``),
against the Syncer's general path (``tests.twin``) on real binlogs and crafted streams:
the same events, boundaries, ACKs and errors whatever the chunks; the build of the
compiled one."""

import os
import random
import shutil
import struct
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from mysqlbackup import __version__, fusedloop, speedups
from mysqlbackup.binlog import events as ev
from mysqlbackup.cli import main
from mysqlbackup.binlog.transactions import INERT_IN_TRX
from mysqlbackup.source import protocol
from mysqlbackup.source.protocol import StreamDecoder, frame, split_batch
from mysqlbackup.localdir.state import STATE_FILE
from mysqlbackup.stream.syncer import Syncer
from tests.twin import (BAD_CASES, FILES, GeneralSyncer, bad_events, make, maria_events,
                        outcome)
from tests.twin import no_linger  # noqa: F401 (autouse: paths compared batch by batch)
from tests.helpers import file_events, make_event, packets, read


# -- the fused loops: compiled (mysqlbackup._speedups) and pure Python (fusedloop) ------

# each test below runs with both: the compiled one where it is built
LOOPS = [pytest.param(speedups.compiled, id="compiled",
                      marks=pytest.mark.skipif(speedups.compiled is None,
                                               reason=speedups.describe())),
         pytest.param(fusedloop, id="pure")]


def squeezed(directory, name, events, acks, semi_sync, chunk, monkeypatch, loop):
    """The stream through the decoder with ``loop`` (fed ``chunk`` bytes at a time, one
    batch per chunk) and the Syncer: (final snapshot, error, last ACK, files, events the
    fused walk took)."""
    taken = []

    def walk(*args):
        result = loop.walk_events(*args)
        taken.append(result[1])
        return result
    monkeypatch.setattr(speedups, "fused", SimpleNamespace(walk_events=walk))
    wire = packets(events, semi_sync=semi_sync, ack_flags=acks)
    decoder = StreamDecoder(semi_sync, loop.squeeze_packets)
    batches = [decoder.feed(wire[at:at + chunk]) for at in range(0, len(wire), chunk)]
    syncer = make(Syncer, directory, name)
    states, error = outcome(syncer, batches)
    monkeypatch.undo()
    files = {f: read(directory / f) for f in sorted(os.listdir(directory)) if f != STATE_FILE}
    return states[-1] if states else None, error, syncer.client.acks[-1:], files, sum(taken)


def reference(directory, name, events, acks, semi_sync):
    """The same as ``squeezed`` by the general path, the whole stream as one batch."""
    batch = StreamDecoder(semi_sync).feed(packets(events, semi_sync=semi_sync, ack_flags=acks))
    syncer = make(GeneralSyncer, directory, name)
    states, error = outcome(syncer, [batch])
    files = {f: read(directory / f) for f in sorted(os.listdir(directory)) if f != STATE_FILE}
    return states[-1] if states else None, error, syncer.client.acks[-1:], files


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("semi_sync", [False, True])
@pytest.mark.parametrize("relative", FILES)
def test_the_fused_loop_matches_the_general_path(tmp_path, binlog, relative,
                                                 semi_sync, monkeypatch, loop):
    events = file_events(binlog(relative))
    name, acks = os.path.basename(relative), [semi_sync and e[4] == ev.XID for e in events]
    want = reference(tmp_path / "general", name, events, acks, semi_sync)
    assert want[1] is None
    # what the walk may take: events of a checksummed file inside BEGIN/GTID..XID
    common = sum(e[4] in INERT_IN_TRX | {ev.XID, ev.MARIA_GTID} for e in events)
    for chunk in (7, 300, 1 << 30):
        got = squeezed(tmp_path / str(chunk), name, events, acks, semi_sync, chunk,
                       monkeypatch, loop)
        assert got[:4] == want
        assert got[4] >= common // 2 if want[0][8] else got[4] == 0


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("semi_sync", [False, True])
def test_the_fused_loop_matches_the_general_path_on_large_and_odd_events(
        tmp_path, binlog, semi_sync, monkeypatch, loop):
    """Events a squeeze leaves (over SQUEEZE_MAX), a standalone GTID and its statement."""
    events = maria_then_mixed(binlog, 40, artificial=False)
    acks = [semi_sync and e[4] == ev.XID for e in events]
    want = reference(tmp_path / "general", "mariadb-bin.000001", events, acks, semi_sync)
    assert want[1] is None
    for chunk in (300, 1 << 30):
        got = squeezed(tmp_path / str(chunk), "mariadb-bin.000001", events, acks, semi_sync,
                       chunk, monkeypatch, loop)
        assert got[:4] == want and got[4] > len(events) // 2


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("case", BAD_CASES)
def test_a_bad_event_stops_the_fused_loop_with_the_general_paths_error(
        tmp_path, binlog, case, monkeypatch, loop):
    events = bad_events(maria_events(binlog), case)
    want = reference(tmp_path / "general", "mariadb-bin.000001", events, None, False)
    assert want[1] is not None and "mariadb-bin.000001" in want[1][1]
    for chunk in (300, 1 << 30):
        got = squeezed(tmp_path / str(chunk), "mariadb-bin.000001", events, None, False, chunk,
                       monkeypatch, loop)
        assert got[1:4] == want[1:] and got[4] > 0


@pytest.mark.parametrize("loop", LOOPS)
def test_the_squeezed_runs_split_back_into_every_event(binlog, loop):
    events = maria_events(binlog) * 3
    acks = [e[4] == ev.XID for e in events]
    wire = packets(events, semi_sync=True, ack_flags=acks)
    for chunk in (1, 64, len(wire)):
        decoder, got = StreamDecoder(True, loop.squeeze_packets), []
        for at in range(0, len(wire), chunk):
            got += [(bytes(e), flag) for e, flag in split_batch(decoder.feed(wire[at:at + chunk]))]
        assert got == list(zip(events, acks)) and not decoder.partial
        assert decoder.events == len(events)  # the metrics' count of received events


def a_mixed_run(pos, groups, artificial=True):
    """Events from ``pos``: ``groups`` MariaDB transactions of rows (one in five with a
    5 KB row event, some with one of 40 KB or of SQUEEZE_MAX bytes and one more, the
    largest a squeeze moves and the smallest it leaves), and in them what the walk leaves
    to the general code: a standalone GTID with its statement, an ``artificial`` event."""
    out = []

    def add(etype, body, flags=0):
        out.append(make_event(etype, body, pos + len(body) + 23, flags=flags))
        return pos + len(out[-1])
    sizes = {4: 40000, 6: fusedloop.SQUEEZE_MAX - 23, 7: fusedloop.SQUEEZE_MAX - 22}
    for i in range(groups):
        standalone = i % 7 == 3
        pos = add(ev.MARIA_GTID, struct.pack("<QIB", i + 1, 0, standalone))
        if standalone:  # thread id, exec time, db length, error code, no status variables
            pos = add(ev.QUERY, struct.pack("<IIBHH", 1, 0, 4, 0, 0) + b"test\0"
                      b"CREATE TABLE t (a INT)")
            continue
        pos = add(ev.TABLE_MAP, bytes(20))
        pos = add(23, bytes(5000 if i % 5 == 1 else sizes.get(i % 13, 30)))  # WRITE_ROWS_V1
        if artificial and i % 9 == 5:  # (only the flag differs from the common event)
            pos = add(ev.TABLE_MAP, bytes(20), flags=ev.LOG_EVENT_ARTIFICIAL_F)
        pos = add(ev.XID, struct.pack("<Q", i))
    return out


def maria_then_mixed(binlog, groups, artificial=True):
    """The events of the MariaDB binlog MARIA, then ``a_mixed_run`` of ``groups`` after."""
    events = maria_events(binlog)
    return events + a_mixed_run(4 + sum(map(len, events)), groups, artificial)


def damaged_copies(data, count, seed, hot=()):
    """``count`` copies of ``data``, each with one bit flipped (half of them at one of
    the ``hot`` offsets, where the loops look) or the end cut off."""
    rng = random.Random(seed)
    for _ in range(count):
        copy = bytearray(data)
        at = rng.choice(hot) if hot and rng.random() < 0.5 else rng.randrange(len(copy))
        if rng.random() < 0.2:
            del copy[at:]
        else:
            copy[at] ^= 1 << rng.randrange(8)
        yield copy


def headers(lengths, head):
    """The offsets of the first ``head`` bytes of each of the items of ``lengths`` laid
    end to end."""
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    return [start + k for start, n in zip(starts, lengths) for k in range(min(head, n))]


def squeeze_all(loop, buf, semi_sync):
    """Squeeze the runs of ``buf`` from the first packet to the last, stepping over each
    packet a run stops at (the next run expects the sequence id found after it): the
    results, in order."""
    results, off, seq, view = [], 0, 1, memoryview(buf)
    while len(buf) - off >= 4:
        results.append(loop.squeeze_packets(view, off, len(buf), seq, semi_sync))
        off = results[-1][0]
        off += 4 + int.from_bytes(buf[off:off + 3], "little")
        if len(buf) - off < 4:
            break
        seq = buf[off + 3]
    return results


needs_compiled = pytest.mark.skipif(speedups.compiled is None, reason=speedups.describe())


@needs_compiled
@pytest.mark.parametrize("semi_sync", [False, True])
def test_the_two_loops_squeeze_damaged_streams_alike(binlog, semi_sync):
    """The pure Python loop is the compiled one's twin: on the same packets, intact or with
    one bit flipped or cut short anywhere, the same runs and the same squeezed bytes."""
    events = maria_then_mixed(binlog, 80)
    acks = [e[4] == ev.XID and i % 4 == 0 for i, e in enumerate(events)]
    wire = packets(events, semi_sync=semi_sync, ack_flags=acks if semi_sync else None)
    head = 4 + (3 if semi_sync else 1)  # packet header, OK byte, semi-sync bytes
    hot = headers([head + len(e) for e in events], head + ev.HEADER_LEN)
    for copy in [bytearray(wire), *damaged_copies(wire, 200, int(semi_sync), hot)]:
        mine, theirs = bytearray(copy), bytearray(copy)
        runs = squeeze_all(fusedloop, mine, semi_sync)
        assert runs == squeeze_all(speedups.compiled, theirs, semi_sync)
        assert mine == theirs
        if copy == wire:  # every event in a run, but those asking for an ACK or too large
            left = [a and semi_sync or len(e) > fusedloop.SQUEEZE_MAX for e, a in zip(events, acks)]
            assert sum(r[3] for r in runs) == len(events) - sum(left) and sum(left) >= 8
            assert len(events) > 256  # the sequence id wraps


@needs_compiled
@pytest.mark.parametrize("semi_sync", [False, True])
def test_the_two_loops_squeeze_crafted_edges_alike(semi_sync):
    """... on packets no damage makes: an event shorter than a header whose size field
    agrees, a 16 MiB payload split in two packets, and one that fills its packet
    exactly (an empty packet follows)."""
    head = b"\0\xef\0" if semi_sync else b"\0"
    short = struct.pack("<IBII", 0, ev.XID, 1, 13)[:13]
    split = protocol.MAX_PAYLOAD - len(head)
    huge = make_event(23, bytes(split + 100), 0)
    full = make_event(23, bytes(split - 23), 0)
    plain = [frame(head + e, 1 + i) for i, e in enumerate(a_mixed_run(4, 3, False))]
    for wire in (frame(head + short, 1) + b"".join(plain[1:]),
                 plain[0] + frame(head + huge[:split], 2) + frame(huge[split:], 3)
                 + b"".join(plain[1:]),
                 plain[0] + frame(head + full, 2) + frame(b"", 3) + b"".join(plain[1:])):
        mine, theirs = bytearray(wire), bytearray(wire)
        runs = squeeze_all(fusedloop, mine, semi_sync)
        assert runs == squeeze_all(speedups.compiled, theirs, semi_sync) and mine == theirs
        assert runs[0][3] == (wire[4 + len(head) + 9] != 13)  # the short one stops it
        assert sum(r[3] for r in runs) >= len(plain) - 1


@needs_compiled
def test_the_two_loops_walk_damaged_events_alike(binlog):
    """... and on the same events, from any of them, in or outside a group, the walk
    takes the same events and stops at the same one."""
    events = maria_then_mixed(binlog, 60)
    starts = [sum(map(len, events[:i])) for i in range(len(events))]
    hot = headers([len(e) for e in events], ev.HEADER_LEN + 13)  # (a GTID's flags too)
    walked, intact = 0, b"".join(events)
    for copy in [intact, *damaged_copies(intact, 150, 2, hot)]:
        data = bytes(copy)
        for off in starts[::5]:
            for in_trx in (False, True):
                mine = fusedloop.walk_events(data, off, 4 + off, in_trx)
                assert mine == speedups.compiled.walk_events(data, off, 4 + off, in_trx)
                walked += mine[1]
    assert walked > 150 * len(events)
    # intact events the walk must refuse: a GTID too short for its body, a wrong position
    first = starts[[e[4] for e in events].index(ev.MARIA_GTID)]
    for data, off, pos in ((make_event(ev.MARIA_GTID, bytes(10), 4 + 33), 0, 4),
                           (intact, first, 4 + first + 1)):
        for in_trx in (False, True):
            mine = fusedloop.walk_events(data, off, pos, in_trx)
            assert mine == speedups.compiled.walk_events(data, off, pos, in_trx)
            assert mine[1] == 0


def test_the_compiled_path_is_built_where_a_compiler_is(monkeypatch):
    """Where a C compiler is there at install time the extension is built (CI has one):
    a silently missing build would make every test above a skip."""
    if speedups.compiled is None and os.environ.get(speedups.PURE_ENV, "") in ("", "0"):
        assert shutil.which("cc") is None, speedups.describe()
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.split("\n")[:2] == [f"mysqlbackup {__version__}", speedups.describe()]


@needs_compiled
def test_a_build_of_another_version_is_not_used(monkeypatch):
    """An extension built from an older ``_speedups.pyx`` (its twin version differs, or it
    has none) leaves the pure Python twin running, and says why."""
    monkeypatch.setattr(speedups.compiled, "TWIN", fusedloop.TWIN - 1)
    assert speedups._load() == (None, "built from another version (reinstall the package)")
    monkeypatch.delattr(speedups.compiled, "TWIN")
    assert speedups._load()[0] is None
    monkeypatch.undo()
    assert speedups._load() == (speedups.compiled, "compiled")


# -- MariaDB 11.4+: events inside a transaction without an end position ----------------

def maria_fde():
    """A MariaDB 10.11-style format description (CRC32), at offset 4."""
    body = (struct.pack("<H", 4) + b"11.8.9-MariaDB-log".ljust(50, b"\0")
            + struct.pack("<I", 0) + bytes([ev.HEADER_LEN]) + bytes([13] * 40) + b"\x01")
    return make_event(ev.FORMAT_DESCRIPTION, body, 4 + ev.HEADER_LEN + len(body) + 4)


def positionless(events):
    """``events`` as binlog_legacy_event_pos=OFF writes them: the events inside a
    transaction (its table maps and rows) with end position 0, their CRC made again."""
    import zlib
    out = []
    for event in events:
        if event[4] in INERT_IN_TRX:
            raw = event[:13] + b"\0\0\0\0" + event[17:-4]
            event = raw + struct.pack("<I", zlib.crc32(raw))
        out.append(event)
    return out


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("semi_sync", [False, True])
def test_events_without_an_end_position_follow_the_sizes_on_every_path(
        tmp_path, semi_sync, monkeypatch, loop):
    """MariaDB 11.4+ (binlog_legacy_event_pos=OFF) gives an end position to GTID and
    commit events only: the file offset follows the sizes, every path writes the same
    bytes (those the server's file holds), and ACKs name the commits' ends."""
    first = maria_fde()
    events = [first] + positionless(a_mixed_run(4 + len(first), 30, artificial=False))
    acks = [semi_sync and e[4] == ev.XID for e in events]
    want = reference(tmp_path / "general", "binlog.000001", events, acks, semi_sync)
    assert want[1] is None
    assert want[3]["binlog.000001"] == ev.MAGIC + b"".join(events)
    assert not acks[-1] or want[2] == [("binlog.000001", 4 + sum(map(len, events)))]
    for chunk in (300, 1 << 30):
        got = squeezed(tmp_path / str(chunk), "binlog.000001", events, acks, semi_sync, chunk,
                       monkeypatch, loop)
        assert got[:4] == want and got[4] > len(events) // 2


@pytest.mark.parametrize("loop", LOOPS)
def test_a_commit_whose_end_is_not_where_the_sizes_lead_stops_every_path(
        tmp_path, monkeypatch, loop):
    """Where the server gives a position, it must be where the sizes lead: an event lost
    inside a transaction (its end position 0 says nothing) is caught at the commit."""
    first = maria_fde()
    events = [first] + positionless(a_mixed_run(4 + len(first), 6, artificial=False))
    lost = next(i for i, e in enumerate(events) if e[4] == 23)  # a row event dropped
    events = events[:lost] + events[lost + 1:]
    want = reference(tmp_path / "general", "binlog.000001", events, None, False)
    assert want[1] is not None and want[1][1].startswith("XID event ends at ")
    assert "but binlog.000001 is at" in want[1][1]
    got = squeezed(tmp_path / "fused", "binlog.000001", events, None, False, 1 << 30,
                   monkeypatch, loop)
    assert got[1:4] == want[1:]
