"""The two engines of the restore benchmark (scripts/bench_restore.py): their servers
(the same settings for the source and every target), their numbered rows, and the
manual way's commands (``mariadb`` and ``mariadb-binlog``; MySQL's ``mysql`` and
``mysqlbinlog`` of the tree through ``sandbox.mysql.client_wrappers``).

MySQL's tools run inside the tree (chroot): the binlog files ``mysqlbinlog`` reads are
linked into a scratch folder there for the run (copied when the work directory is on
another file system)."""

import contextlib
import os
import shutil
import tempfile

from mysqlbackup.sandbox import MariaDBSandbox

SOURCE_ARGS = ["--max-binlog-size=256M", "--sync-binlog=1",
               "--innodb-flush-log-at-trx-commit=1"]


class MariaDB:
    name = "mariadb"
    manual_label = "manual: mariadb, binlog pipe"
    server_args = ["--innodb-buffer-pool-size=1G", "--innodb-log-file-size=512M",
                   "--max-allowed-packet=256M"]

    def __init__(self, workdir):
        self.workdir = workdir

    def source(self):
        """The source (durable), not started."""
        return MariaDBSandbox(os.path.join(self.workdir, "source"), semi_sync=False,
                              extra_args=[*self.server_args, *SOURCE_ARGS])

    def target(self, name, binlog):
        """A fresh target, not started: the same settings for every way."""
        return MariaDBSandbox(os.path.join(self.workdir, name), server_id=7, log_bin=binlog,
                              semi_sync=False, extra_args=self.server_args)

    def clear(self, names):
        """The folders of targets an earlier run (``--reuse``) left."""
        for name in names:
            shutil.rmtree(os.path.join(self.workdir, name), ignore_errors=True)

    @staticmethod
    def session_setup(rows):
        return []

    @staticmethod
    def numbers(lo, hi):
        """(WITH clause, FROM) of the rows ``seq`` = lo..hi."""
        return "", f"shop.seq_{lo}_to_{hi}"

    @staticmethod
    def md5(expr):
        """32 hex digits of ``expr`` (SQL)."""
        return f"MD5({expr})"

    def env(self, **variables):
        """The environment of the mysqlbackup commands and the manual way's tools."""
        return dict(os.environ, **variables)

    @staticmethod
    def client(target):
        return ["mariadb", "--no-defaults", f"--socket={target.socket}", "-uroot",
                "--max-allowed-packet=1G"]

    @contextlib.contextmanager
    def binlog_tool(self, position, files):
        """The command line printing the binlogs from ``position`` (the first file's)."""
        yield ["mariadb-binlog", "--no-defaults", f"--start-position={position}", *files]


class MySQL(MariaDB):
    """MySQL 9.7 of the tree (sandbox.mysql): GTID mode on; its tools through chroot."""

    name = "mysql"
    manual_label = "manual: mysql, mysqlbinlog pipe"
    server_args = ["--innodb-buffer-pool-size=1G", "--innodb-redo-log-capacity=512M",
                   "--max-allowed-packet=256M"]

    def __init__(self, workdir):
        from mysqlbackup.sandbox.mysql import client_wrappers, mysql_tree, why_no_mysql
        problem = why_no_mysql()
        if problem:
            raise SystemExit(f"--engine mysql: {problem}")
        super().__init__(workdir)
        self.tree = mysql_tree()
        self.bin = client_wrappers(os.path.join(workdir, "bin"))

    def source(self):
        from mysqlbackup.sandbox.mysql import MySQLSandbox
        return MySQLSandbox(semi_sync=False, extra_args=[*self.server_args, *SOURCE_ARGS],
                            gtid_mode="ON")

    def target(self, name, binlog):
        """Its folder is inside the tree (removed with it), not ``workdir/name``."""
        from mysqlbackup.sandbox.mysql import MySQLSandbox
        return MySQLSandbox(server_id=7, log_bin=binlog, semi_sync=False,
                            extra_args=self.server_args, gtid_mode="ON")

    @staticmethod
    def session_setup(rows):
        return [f"SET SESSION cte_max_recursion_depth = {rows + 1}"]

    @staticmethod
    def numbers(lo, hi):
        return (f"WITH RECURSIVE numbered (seq) AS (SELECT CAST({lo} AS SIGNED) UNION ALL "
                f"SELECT seq + 1 FROM numbered WHERE seq < {hi}) ", "numbered")

    @staticmethod
    def md5(expr):
        """MySQL 9.7 has no MD5(): the first 32 hex digits of SHA2-256."""
        return f"LEFT(SHA2({expr}, 256), 32)"

    def env(self, **variables):
        """PATH with the tree's mysqldump, mysql and mysqlbinlog first."""
        return dict(os.environ, PATH=self.bin + os.pathsep + os.environ["PATH"], **variables)

    def client(self, target):
        return [os.path.join(self.bin, "mysql"), "--no-defaults",
                f"--socket={target.inside('mysqld.sock')}", "-uroot", "--max-allowed-packet=1G"]

    @contextlib.contextmanager
    def binlog_tool(self, position, files):
        """``mysqlbinlog`` over links to ``files`` inside the tree, removed afterwards."""
        os.makedirs(os.path.join(self.tree, "tmp"), exist_ok=True)
        scratch = tempfile.mkdtemp(prefix="bench-restore-", dir=os.path.join(self.tree, "tmp"))
        try:
            inside = []
            for path in files:
                link(path, os.path.join(scratch, os.path.basename(path)))
                inside.append(os.path.join(scratch[len(self.tree):], os.path.basename(path)))
            yield [os.path.join(self.bin, "mysqlbinlog"), "--no-defaults",
                   f"--start-position={position}", *inside]
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def link(path, to):
    """A hard link, else (another file system) a copy."""
    try:
        os.link(path, to)
    except OSError:
        shutil.copyfile(path, to)


ENGINES = {"mariadb": MariaDB, "mysql": MySQL}
