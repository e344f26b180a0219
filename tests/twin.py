"""What the twin-path tests share (test_fastpath: the Syncer's inline path against its
general path; test_fusedloop: the fused loops against the general path): the binlogs they
run on, the reference syncer, a run's outcome, and the ways a stream is made bad."""

import json
import os

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.position import Position
from mysqlbackup.errors import MysqlBackupError
from mysqlbackup.localdir.state import STATE_FILE
from mysqlbackup.source.protocol import StreamDecoder
from mysqlbackup.stream import syncer as syncer_module
from mysqlbackup.stream.syncer import Syncer
from mysqlbackup.stream.writer import BinlogWriter
from tests.helpers import file_events, packets, read


OURS_MARIA = "ours/mariadb-10.11.000001"  # made here: MariaDB GTID, ANNOTATE_ROWS, ROTATE
OURS_MYSQL = "ours/mysql-9.7.000001"     # made here: MySQL GTID, TRANSACTION_PAYLOAD, ROTATE
FILES = [
    OURS_MARIA,
    OURS_MYSQL,
    "rust_mysql_common/mariadb-bin.000001",                  # MariaDB GTID, ANNOTATE_ROWS
    "gh-ost/mysql-bin.000066",                               # BEGIN..XID, ends with ROTATE
    "mysql-binlog-connector-rust/mysql-bin.000080",          # MySQL GTID
    "mysql-binlog-connector-rust/mysql-bin.000057",          # TRANSACTION_PAYLOAD
    "rust_mysql_common/json.binlog.000001",                  # anonymous GTID, partial JSON
    "rust_mysql_common/binlog_56_gtid_reserved_word.000001",  # rows outside BEGIN
    "rust_mysql_common/bug11747887-bin.000003",              # checksum OFF
]


@pytest.fixture(autouse=True)
def no_linger():
    """A drained stream is fsynced at the end of the batch (the paths are compared batch by
    batch; ``test_a_drained_stream_is_fsynced_once_silent_for_the_linger`` has the wait).
    Not by ``monkeypatch``, which ``squeezed`` undoes."""
    saved, syncer_module.SYNC_LINGER = syncer_module.SYNC_LINGER, 0.0
    yield
    syncer_module.SYNC_LINGER = saved


class StubClient:
    """The network side: records ACKs only."""

    stream_checksum = None
    received_at = 0.0

    def __init__(self):
        self.acks = []

    def send_ack(self, file, pos):
        self.acks.append((file, pos))


class GeneralSyncer(Syncer):
    """Every event through ``_route`` (the path of unusual events), as before the
    inline path existed: the reference."""

    def process(self, batch):
        ack = None
        if batch:
            self.last_data = self.clock()
        try:
            for event, needs_ack in batch:
                name = self.writer.name
                self._route(event)
                if needs_ack:
                    ack = Position(name, int.from_bytes(event[13:17], "little"))
        finally:
            if not self.writer.failed:
                self._commit(ack)


def make(cls, directory, name):
    os.makedirs(directory)
    writer = BinlogWriter(str(directory), fsync=lambda fd: None)
    writer.open(name, 4)
    return cls(StubClient(), writer, sync_interval=3600, checkpoint_interval=3600)


def snapshot(s):
    t = s.tracker
    return (s.writer.name, s.writer.pos, s.boundary, s.durable, t.state, str(t.gtids),
            t.transactions, t.last_gtid, t.checksum, s.events, s.last_event_time)


def outcome(syncer, batches):
    """Process ``batches``; the snapshot after each, and the error that stopped it."""
    states = []
    try:
        for batch in batches:
            syncer.process(batch)
            states.append(snapshot(syncer))
    except MysqlBackupError as e:
        return states, (type(e), str(e))
    return states, None


def both(tmp_path, name, events, acks=None, one_by_one=True):
    """Run the same stream (decoded from its wire bytes) through both syncers."""
    results = []
    for cls in (GeneralSyncer, Syncer):
        batch = StreamDecoder(True).feed(packets(events, semi_sync=True, ack_flags=acks))
        batches = [[b] for b in batch] if one_by_one else [batch]
        syncer = make(cls, tmp_path / cls.__name__, name)
        states, error = outcome(syncer, batches)
        files = {f: read(tmp_path / cls.__name__ / f)
                 for f in sorted(os.listdir(tmp_path / cls.__name__)) if f != STATE_FILE}
        if os.path.exists(tmp_path / cls.__name__ / STATE_FILE):  # checkpoint at a ROTATE
            state = json.loads(read(tmp_path / cls.__name__ / STATE_FILE))
            files[STATE_FILE] = {k: v for k, v in state.items() if k != "updated"}
        results.append((states, error, syncer.client.acks, files))
    return results


def corrupt(events, index, at):
    bad = bytearray(events[index])
    bad[at] ^= 0x01
    return events[:index] + [bytes(bad)] + events[index + 1:]


MARIA = OURS_MARIA  # the twin tests run on every clone, ../shared or not


def maria_events(binlog):
    """The events of MARIA but its closing ROTATE: a stream that stays in one file."""
    events = file_events(binlog(MARIA))
    return events[:-1] if events[-1][4] == ev.ROTATE else events


BAD_CASES = ["crc_row", "crc_gtid", "crc_xid", "torn_row", "missing_row", "wrong_end"]


def bad_events(events, case):
    """``events`` with one made bad as ``case`` says."""
    rows = [i for i, e in enumerate(events) if e[4] in ev.ROWS_EVENTS]
    # the GTID of a transaction of rows (one the fused loop may walk), not a DDL's
    gtid = [i for i, e in enumerate(events) if e[4] == ev.MARIA_GTID
            and events[i + 1][4] != ev.QUERY][1]
    xid = [i for i, e in enumerate(events) if e[4] == ev.XID][0]
    if case == "crc_row":
        events = corrupt(events, rows[0], 25)
    elif case == "crc_gtid":
        events = corrupt(events, gtid, 20)
    elif case == "crc_xid":
        events = corrupt(events, xid, len(events[xid]) - 1)
    elif case == "torn_row":  # its header promises more bytes than came
        events = events[:rows[0]] + [events[rows[0]][:-7]] + events[rows[0] + 1:]
    elif case == "missing_row":
        events = events[:rows[0]] + events[rows[0] + 1:]
    else:  # right CRC, wrong end position in the header
        bad = bytearray(events[rows[0]])
        bad[13] ^= 0x10
        bad[-4:] = ev.crc32(bytes(bad[:-4])).to_bytes(4, "little")
        events = events[:rows[0]] + [bytes(bad)] + events[rows[0] + 1:]
    return events
