"""Every replay sink implements the Sink protocol the job calls."""

import inspect
import os
import pickle
from dataclasses import replace

import pytest

from mysqlbackup.binlog import events as ev
from replay.job.decoding.assemble import assemble
from replay.job.decoding.transaction import Transaction
from replay.job.sinks.base import Sink
from replay.job.sinks.parquet import ParquetSink
from replay.job.sinks.sqlfile import Declined, SqlChunk, SqlFileSink
from replay.job.sinks.target import TargetApplier
from tests.conftest import OWN_BINLOGS

SINKS = [TargetApplier, SqlFileSink, ParquetSink]
CALLED = ["open", "is_applied", "apply_many", "close"]


@pytest.mark.parametrize("sink", SINKS, ids=lambda c: c.__name__)
def test_each_sink_is_a_sink_and_implements_every_method(sink):
    assert issubclass(sink, Sink)
    assert not inspect.isabstract(sink)
    for name in CALLED:
        ours = inspect.signature(getattr(sink, name)).parameters
        assert list(ours) == list(inspect.signature(getattr(Sink, name)).parameters)
    # takes transactions: by its own apply_many, or one at a time through the base's
    assert sink.apply_many is not Sink.apply_many or sink.apply is not Sink.apply
    for name in ("most_workers", "parallel_applied", "commits"):
        assert hasattr(sink, name)


def test_a_sink_that_takes_nothing_is_refused():
    class Half(Sink):
        def open(self, source):
            return self

    with pytest.raises(TypeError, match="close"):
        Half()


def test_a_transaction_pickles_for_spark():
    trx = Transaction("b.000001", 4, 50, gtid="0-1-5", gtid_parts=[0, 1, 5],
                      events=[b"\x00" * 19])
    assert pickle.loads(pickle.dumps(trx)) == trx
    assert trx.maria_gtid == (0, 1, 5) and trx.end_position.offset == 50


OWN = sorted(os.listdir(OWN_BINLOGS))


@pytest.mark.parametrize("shared", [True, False], ids=["driver's disk", "handed back"])
@pytest.mark.parametrize("name", OWN)
def test_sql_text_made_in_a_task_is_the_drivers(name, shared, tmp_path):
    # --sql: the task's SqlChunk (into a file on the driver's disk, or handed back),
    # adopted by the driver, writes the bytes the driver's own apply writes
    path = os.path.join(OWN_BINLOGS, name)
    with open(path, "rb") as f:
        transactions, _, fde_event = assemble(f.read(), name, newest=True)
    fde = ev.parse_format_description(fde_event)
    checksum = fde.checksum_alg == ev.CHECKSUM_CRC32
    transactions = [t for t in transactions if t.events]
    driver = SqlFileSink(str(tmp_path / "driver.sql")).open("s")
    driver.apply_many(transactions, fde_event, checksum, fde)
    tasks = SqlFileSink(str(tmp_path / "tasks.sql"))
    spec = tasks.task_spec().at(4)
    tasks.open("s")
    if not shared:  # an executor on another host: no token file where it looks
        spec = replace(spec, dir=str(tmp_path / "elsewhere"))
    chunk = SqlChunk(spec, fde_event)
    for trx in transactions:
        chunk.apply(trx, fde, checksum)
    written = chunk.close()
    assert ("path" in written) == shared and ("sql" in written) != shared
    tasks.adopt(written, transactions)
    for sink in (driver, tasks):
        sink.close()
        sink.finish()
    text = (tmp_path / "driver.sql").read_bytes()
    assert text.count(b"### ") > 10
    assert (tmp_path / "tasks.sql").read_bytes() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["driver.sql", "tasks.sql"]
    with pytest.raises(RuntimeError, match="a task wrote 0 transactions of"):
        tasks.adopt({"sql": b"", "fde": fde_event, "transactions": 0}, transactions)


def test_a_task_hands_back_at_most_task_bytes_of_text(tmp_path):
    # past it the task declines and the driver writes the file
    name = OWN[0]
    with open(os.path.join(OWN_BINLOGS, name), "rb") as f:
        transactions, _, fde_event = assemble(f.read(), name, newest=True)
    fde = ev.parse_format_description(fde_event)
    sink = SqlFileSink(str(tmp_path / "x.sql"), task_bytes=100)
    spec = replace(sink.task_spec(), dir=str(tmp_path / "elsewhere"))
    small = SqlChunk(spec, fde_event)
    with pytest.raises(Declined, match="more than 100 bytes of text"):
        for trx in transactions:
            if trx.events:
                small.apply(trx, fde, fde.checksum_alg == ev.CHECKSUM_CRC32)
    sink.close()
    assert not (tmp_path / "x.sql.parts").exists()


def test_the_sql_file_is_fsynced_whole_then_renamed_durably(tmp_path):
    # finish: the whole FILE.partial fsynced, renamed to FILE, the folder fsynced after
    final, synced = tmp_path / "x.sql", []

    def record(fd):
        where = os.path.realpath(f"/proc/self/fd/{fd}")
        whole = os.path.isfile(where) and open(where, "rb").read().endswith(b"DELIMITER ;\n")
        synced.append((where, os.path.isdir(where), whole, final.exists()))
        os.fsync(fd)
    sink = SqlFileSink(str(final), fsync=record).open("s")
    sink.close()
    sink.finish()
    folder = os.path.realpath(tmp_path)
    assert synced == [(os.path.join(folder, "x.sql.partial"), False, True, False),
                      (folder, True, False, True)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.sql"]


def test_a_failed_fsync_gives_no_sql_file(tmp_path):
    def failing(fd):
        raise OSError(5, "Input/output error")
    sink = SqlFileSink(str(tmp_path / "x.sql"), fsync=failing).open("s")
    sink.close()
    with pytest.raises(OSError):
        sink.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.sql.partial"]


@pytest.mark.parametrize("kernel", [True, False], ids=["copy_file_range", "fallback"])
def test_a_tasks_text_file_is_appended_whole_after_what_was_written(tmp_path, monkeypatch,
                                                                    kernel):
    from replay.job.sinks import sqlfile
    if not kernel:
        def refuse(*args):
            raise OSError(18, "Invalid cross-device link")
        monkeypatch.setattr(os, "copy_file_range", refuse)
    part = tmp_path / "part"
    text = os.urandom(3 * sqlfile.CHUNK + 17)
    part.write_bytes(text)
    with open(tmp_path / "out", "wb") as out:
        out.write(b"head\n")  # still in the buffer: written first
        sqlfile._append_file(str(part), out)
        out.write(b"tail\n")
        assert out.tell() == len(text) + 10
    assert (tmp_path / "out").read_bytes() == b"head\n" + text + b"tail\n"
