"""Every replay sink implements the Sink protocol the job calls."""

import inspect
import pickle

import pytest

from replay.job.decoding.transaction import Transaction
from replay.job.sinks.base import Sink
from replay.job.sinks.parquet import ParquetSink
from replay.job.sinks.sqlfile import SqlFileSink
from replay.job.sinks.target import TargetApplier

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
