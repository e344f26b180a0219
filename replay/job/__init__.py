"""The PySpark replay job, its stages in the order a byte takes them.

1. ``plan`` (``units_to_read``): which objects, from the archive's indexes alone, over
   ``planning/`` (pure: ``units`` which files in order and the checks on them,
   ``selection`` the start, stop and filters, ``options`` the command line's text).
2. ``tasks``: one Spark task per file reads it through the one reader of archived
   objects and assembles complete transactions, over ``decoding/`` (pure).
3. ``run`` (``run_replay``): the driver checks each decoded file against its indexes
   and the file before it, attaches the bytes and applies in order.
4. ``sinks/``: where the transactions go (a target server, an SQL file, Parquet).

``spark`` makes the session and ships the package; ``progress`` is what the job
reports; ``spark_main`` is the entry point for spark-submit. The commands built on the
job live beside it in ``replay/``: ``restore``, ``serve``, ``drill``, ``check``, ``find``.
"""
