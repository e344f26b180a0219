"""What the replay job asks of a sink (the target, an SQL file, a Parquet table).

``replay.job.run.run_replay`` opens the sink with the source's name, asks it which
transactions it already holds (``is_applied``), hands it each file's chosen
transactions in commit order (``apply_many``), or, for a sink whose tasks write
(``task_spec``), what each file's task wrote (``adopt``), tells it when the replay
stops on an error (``failed``), closes it, also after an error, and, once the replay
ended well, tells it so with the summary (``finish``).
Afterwards it reads the summary attributes below. A sink that takes one
transaction at a time implements ``apply`` and inherits ``apply_many``.

A sink whose tasks write describes that writing as a ``TaskWriter`` (``task_spec``): a
small picklable value that travels into each task with the file's place in the replay
(``at``); the task imports the class that writes it (``replay.job.tasks.writer_of``).
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import ClassVar


@dataclass(frozen=True)
class TaskWriter:
    """What a sink's tasks need to write a file's chosen transactions themselves; ``seq``:
    the file's place in the replay. Its writer class (``tasks.writer_of``) is made with
    the spec and the file's FORMAT_DESCRIPTION bytes, ``apply``s each transaction and
    ``close``s with what it wrote (the sink's ``adopt`` takes that)."""

    seq: int = 0
    module: ClassVar[str] = ""     # the module the writer lives in (what tasks import)
    option: ClassVar[str] = ""     # the command-line option that asked for it

    def at(self, seq):
        """This spec for the file at place ``seq``."""
        return replace(self, seq=seq)

    def shipped(self, credentials):
        """This spec as it travels to executors (``credentials(url, options)``: the
        storage options with the driver's credentials added, for a destination)."""
        return self

    def failure(self, where, error):
        """The one line of an OSError while writing the file ``where``."""
        return f"{self.option}: {where}: {error}"


class Sink(ABC):
    """The protocol every replay sink implements (subclass it explicitly)."""

    most_workers = 1        # the most target connections one batch used
    parallel_applied = 0    # transactions that ran beside another one
    commits = None          # target commits made (None: the sink has no target)

    def task_spec(self):
        """The TaskWriter of a sink whose tasks write a file's transactions themselves,
        or None: the transactions come to the driver and ``apply_many`` takes them."""
        return None

    def adopt(self, written, transactions):
        """Take what a file's task wrote (a sink with ``task_spec``): ``transactions``
        are the ones the driver chose to apply of that file, without their bytes."""
        raise NotImplementedError(f"{type(self).__name__} has its transactions applied here")

    @abstractmethod
    def open(self, source):
        """Get ready to take the transactions of ``source`` (its archive name); returns self."""

    def is_applied(self, trx):
        """True when the sink already holds ``trx`` (a Transaction): it is skipped."""
        return False

    def apply_many(self, transactions, fde_event, checksum, fde):
        """Take ``transactions`` (one file's, in commit order). ``fde_event``: the file's
        FORMAT_DESCRIPTION bytes, ``fde`` its parsed form, ``checksum``: events carry
        a CRC32."""
        for trx in transactions:
            self.apply(trx, fde_event, checksum, fde)

    def apply(self, trx, fde_event, checksum, fde):
        """Take one transaction (the arguments of ``apply_many``)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither apply "
                                  "nor apply_many")

    def failed(self):
        """The replay stopped on an error (called before ``close``)."""

    def finish(self, summary):
        """The replay ended well (called after ``close``, with its ``run.RunSummary``)."""

    @abstractmethod
    def close(self):
        """Release what ``open`` took (called also after an error)."""
