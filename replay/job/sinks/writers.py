"""The task writers' specs of the sinks whose tasks write (``Sink.task_spec``): light
values a Spark task unpickles without the writer's own imports (pyarrow); the task
imports the writer of a spec then (``replay.job.tasks.writer_of``), so that a worker
lacking them is named in one line."""

from dataclasses import dataclass, replace
from typing import ClassVar

from mysqlbackup.errors import mask_url
from replay.job.sinks.base import TaskWriter


@dataclass(frozen=True)
class SqlTaskWriter(TaskWriter):
    """``--sql``: a task turns its file's transactions into text (``sqlfile.SqlChunk``),
    into ``dir`` when it sees it (its ``token`` file there proves the driver's disk),
    else handed back, up to ``max_bytes``."""

    max_bytes: int = 0
    dir: str = None
    token: str = None
    module: ClassVar[str] = "replay.job.sinks.sqlfile"
    option: ClassVar[str] = "--sql"

    def failure(self, where, error):
        return f"--sql: the text of {where}: {error}"


@dataclass(frozen=True)
class ParquetTaskWriter(TaskWriter):
    """``--parquet``: a task writes its file's row changes as parts
    (``parquet.PartWriter``) at ``url`` with the storage ``options``, a part per
    ``rows_per_part`` rows or ``bytes_per_part`` bytes; ``typed``: the typed tables too."""

    url: str = None
    options: dict = None
    rows_per_part: int = 0
    bytes_per_part: int = 0
    typed: bool = False
    module: ClassVar[str] = "replay.job.sinks.parquet"
    option: ClassVar[str] = "--parquet"

    def shipped(self, credentials):
        return replace(self, options=credentials(self.url, self.options))

    def failure(self, where, error):
        return f"cannot write --parquet {mask_url(self.url)} (the parts of {where}): {error}"
