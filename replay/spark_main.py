"""Entry point for spark-submit (the package shipped as a zip of its sources)::

    .venv/bin/python scripts/pack_replay_env.py --output-dir dist
    spark-submit --master spark://HOST:7077 \\
        --archives dist/replay-env.tar.gz#environment \\
        --conf spark.pyspark.python=./environment/bin/python \\
        --py-files dist/replay.zip replay/spark_main.py \\
        replay --archive s3://bucket/prefix --sql /tmp/replay.sql --stop-datetime ...

``scripts/pack_replay_env.py`` writes ``dist/replay.zip`` (``mysqlbackup/`` and
``replay/`` sources only: never the virtualenv, no compiled files) and
``dist/replay-env.tar.gz`` (the requirements, for the executors). The arguments are
those of ``mysqlbackup``; spark-submit's --master is used (``replay --master`` with no
spark-submit does the same on its own: docs/cluster.md).
"""

from mysqlbackup.cli import main
from replay.cli import replay
from replay.restore.cli import restore

if __name__ == "__main__":
    main.add_command(replay)  # a zip shipped with --py-files has no entry points
    main.add_command(restore)
    main(prog_name="mysqlbackup")
