"""Base backups: a consistent full copy of the source, streamed into the archive.

``run.take_base`` is the entry point: it reads the source's facts and checks the
user's privileges (``server``), runs the server's own tool as a child process
(``dump``: mariadb-dump / mysqldump; ``physical``: mariadb-backup) with the
password in a private options file (``client``), or has a MySQL source clone itself
(``clone``: CLONE LOCAL DATA DIRECTORY, the copy recovered by a moment's mysqld and
streamed as tar by ``tardir``), streams its output through zstd
and sha256 into the archive (``upload``), reads the object back, and only then
writes the manifest (``mysqlbackup.archive.manifest``).
"""
