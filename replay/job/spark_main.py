"""Entry point for spark-submit (the package shipped as a zip or wheel)::

    python -c "import shutil; shutil.make_archive('mysqlbackup', 'zip', '.', ...)"  # or a wheel
    spark-submit --master spark://HOST:7077 --py-files mysqlbackup.zip replay/job/spark_main.py \\
        replay --archive s3://bucket/prefix --target mysql://USER@HOST:3306 --stop-datetime ...

The arguments are those of ``mysqlbackup``; spark-submit's --master is used.
"""

from mysqlbackup.cli import main
from replay.cli import replay
from replay.restore.cli import restore

if __name__ == "__main__":
    main.add_command(replay)  # a zip shipped with --py-files has no entry points
    main.add_command(restore)
    main(prog_name="mysqlbackup")
