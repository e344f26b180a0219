"""Spark's driver for the replay job: ``context`` makes the SparkContext (local or a
cluster's), ``jvm`` the local driver JVM's options (a class-data archive of Spark's
classes, a quiet log configuration), ``shipping`` what executors get (the sources zip,
S3 credentials) and how a failed job is told, ``probe`` what a worker can import."""
