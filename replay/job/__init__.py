"""The PySpark replay job, its stages in the order a byte takes them.

1. ``replay.planning`` (``units_to_read``) says which objects, from the archive's
   indexes alone.
2. ``tasks``: one Spark task per file (or ``engines``' local one, in this process) reads
   it through the one reader of archived objects and assembles complete transactions,
   over ``decoding/`` (pure).
3. ``run`` (``run_replay``): the driver checks each decoded file against its indexes
   and the file before it, attaches the bytes and applies in order.
4. ``sinks/``: where the transactions go (a target server, an SQL file, Parquet).

``progress`` is what the job reports; ``replay.spark`` starts Spark's driver and ships
the package; ``replay/spark_main.py`` is the entry point for spark-submit. The commands
built on the job live beside it in ``replay/``: ``restore``, ``serve``, ``drill``,
``check``, ``find``.
"""
