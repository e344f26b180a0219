"""The Syncer's inline path for common events against its general path (``_route`` for
every event), on real binlogs (``tests.twin``): same bytes, same boundaries, GTIDs, ACKs
and the same error (file and position) for a corrupt, torn or misplaced event; the
drain's fsync and checkpoint."""

import json
import os
import sys

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.source.protocol import StreamDecoder
from mysqlbackup.localdir.state import STATE_FILE
from mysqlbackup.stream import syncer as syncer_module
from mysqlbackup.stream.syncer import Syncer
from mysqlbackup.stream import writer as writer_module
from mysqlbackup.stream.writer import BinlogWriter
from tests.twin import (BAD_CASES, FILES, OURS_MYSQL, StubClient, bad_events, both, make,
                        maria_events)
from tests.twin import no_linger  # noqa: F401 (autouse: paths compared batch by batch)
from tests.helpers import file_events, packets, read


@pytest.mark.parametrize("relative", FILES)
def test_inline_path_matches_the_general_path_event_for_event(tmp_path, binlog,
                                                              relative):
    events = file_events(binlog(relative))
    name = os.path.basename(relative)
    general, inline = both(tmp_path, name, events)
    assert inline == general
    assert general[1] is None and len(general[0]) == len(events)
    whole = both(tmp_path / "whole", name, events, acks=[e[4] == ev.XID for e in events],
                 one_by_one=False)
    assert whole[1] == whole[0]
    assert whole[1][3][name][:4 + sum(map(len, events))] == read(binlog(relative)) \
        or ev.ROTATE in [e[4] for e in events]


@pytest.mark.parametrize("case", BAD_CASES)
def test_a_bad_event_stops_both_paths_with_the_same_error(tmp_path, binlog, case):
    events = bad_events(maria_events(binlog), case)
    for one_by_one in (True, False):
        general, inline = both(tmp_path / str(one_by_one), "mariadb-bin.000001", events,
                               acks=[e[4] == ev.XID for e in events], one_by_one=one_by_one)
        assert inline == general
        assert general[1] is not None
    message = general[1][1]
    assert "mariadb-bin.000001:" in message or "mariadb-bin.000001 is at" in message


class DrainingClient(StubClient):
    """Says whether more bytes wait after each batch (``idle``), as the network would."""

    def __init__(self, idle):
        super().__init__()
        self.answers = list(idle)

    def idle(self):
        return self.answers.pop(0)


def test_a_drained_stream_is_fsynced_once_silent_for_the_linger(tmp_path, binlog):
    syncer_module.SYNC_LINGER = 0.005  # (``no_linger`` puts it back)
    events = maria_events(binlog)
    syncer = make(Syncer, tmp_path / "d", "mariadb-bin.000001")
    now = [1000.0]
    syncer.clock = lambda: now[0]
    syncer.process(StreamDecoder(False).feed(packets(events)))  # no ACK asked, drained
    assert syncer.writer.unsynced and syncer.durable.offset == 4
    assert syncer._wake_in(now[0]) == pytest.approx(0.005)  # the loop looks again then
    now[0] += 0.003
    syncer.process([])  # still within the linger: more may come
    assert syncer.writer.unsynced and syncer._wake_in(now[0]) == pytest.approx(0.002)
    now[0] += 0.0021
    syncer.process([])
    assert not syncer.writer.unsynced and syncer.durable.offset == 4 + sum(map(len, events))


def test_written_bytes_are_handed_to_write_back_every_few_mib(tmp_path, monkeypatch):
    if sys.platform.startswith("linux"):
        assert writer_module._sync_file_range is not None  # libc's, found through ctypes
    hints = []
    monkeypatch.setattr(writer_module, "_sync_file_range",
                        lambda fd, off, n, flags: hints.append((off, n, flags)))
    writer = BinlogWriter(str(tmp_path), fsync=lambda fd: None)
    writer.open("binlog.000001", 4)
    size = writer_module.WRITEBACK_BYTES
    for _ in range(5):
        writer.append(b"x" * (size // 2))
        writer.flush()
    assert hints == [(4, size, 2), (4 + size, size, 2)]  # in order, none overlapping
    assert os.path.getsize(tmp_path / "binlog.000001") == 4 + 5 * (size // 2)


@pytest.mark.parametrize("ack", [False, True])
def test_a_drained_catch_up_is_checkpointed_at_once_a_commit_load_keeps_the_limit(
        tmp_path, binlog, ack):
    events = maria_events(binlog)
    batch = StreamDecoder(True).feed(packets(events, semi_sync=True, ack_flags=[
        ack and e[4] == ev.XID for e in events]))
    syncer = make(Syncer, tmp_path / "d", "mariadb-bin.000001")
    syncer.client = DrainingClient([False] * 2 + [True] * 3)  # busy, then drained
    syncer.checkpoint()
    syncer.process(batch[:5])   # more waits: no checkpoint within the interval
    assert syncer.recorded[0].offset == 4
    syncer.process(batch[5:])   # the stream drained with everything durable
    state = json.loads(read(tmp_path / "d" / STATE_FILE))
    end = 4 + sum(map(len, events))
    assert (state["pos"], syncer.durable.offset) == ((4, end) if ack else (end, end))


def test_a_drained_catch_up_is_checkpointed_once_fsynced_after_the_linger(tmp_path,
                                                                         binlog):
    """The catch-up drains before its last fsync (which waits for SYNC_LINGER): that
    fsync's durable point is recorded at once, not a checkpoint interval later; the next
    trickle of events keeps the interval."""
    syncer_module.SYNC_LINGER = 0.005  # (``no_linger`` puts it back)
    events = maria_events(binlog)
    batch = StreamDecoder(False).feed(packets(events))
    syncer = make(Syncer, tmp_path / "d", "mariadb-bin.000001")
    syncer.client = DrainingClient([False] + [True] * 9)  # busy, then drained
    now = [1000.0]
    syncer.clock = lambda: now[0]
    xid = next(i for i, e in enumerate(events) if e[4] == ev.XID and i >= 7)
    syncer.checkpoint()
    syncer.process(batch[:xid - 2])         # more waits
    syncer.process(batch[xid - 2:xid + 1])  # drained at an XID, not fsynced yet: nothing
    assert syncer.writer.unsynced and syncer.recorded[0].offset == 4  # new to record
    now[0] += 0.006
    syncer.process([])           # the linger is over: fsync, and record it
    end = 4 + sum(map(len, events[:xid + 1]))
    assert json.loads(read(tmp_path / "d" / STATE_FILE))["pos"] == end
    now[0] += 0.001
    syncer.process(batch[xid + 1:])  # a trickle after the drain: back to the interval
    now[0] += 0.006
    syncer.process([])
    assert syncer.durable.offset > end == json.loads(read(tmp_path / "d" / STATE_FILE))["pos"]


@pytest.mark.parametrize("relative", [OURS_MYSQL, "gh-ost/mysql-bin.000066"])
def test_the_drain_after_a_rotate_is_checkpointed_at_once(tmp_path, binlog, relative):
    events = file_events(binlog(relative))
    assert events[-1][4] == ev.ROTATE
    following = ev.parse_rotate(events[-1], True)[1]
    stream = events + events[:2]  # the next file starts as this one did (FDE at 4)
    syncer = make(Syncer, tmp_path / "d", os.path.basename(relative))  # a checkpoint an hour
    syncer.process(StreamDecoder(False).feed(packets(stream)))  # one batch, then drained
    state = json.loads(read(tmp_path / "d" / STATE_FILE))
    assert (state["file"], state["pos"]) == (following, 4 + len(stream[-2] + stream[-1]))


@pytest.mark.parametrize("semi_sync", [False, True])
def test_the_decoders_runs_give_every_event_and_ack_request_whatever_the_chunks(
        binlog, semi_sync):
    events = maria_events(binlog) * 3
    acks = [semi_sync and e[4] == ev.XID for e in events]
    wire = packets(events, semi_sync=semi_sync, ack_flags=acks)
    for chunk in (1, 5, 7, 64, len(wire)):
        decoder, got = StreamDecoder(semi_sync), []
        for at in range(0, len(wire), chunk):
            got += [(bytes(e), flag) for e, flag in decoder.feed(wire[at:at + chunk])]
        assert got == list(zip(events, acks)) and not decoder.partial
        assert decoder.events == len(events)
