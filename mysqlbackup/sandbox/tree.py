"""A throwaway MariaDB 11.8 LTS server for tests, beside the host's 10.11 one.

``scripts/mariadb_tree.sh`` installs Debian trixie's ``mariadb-server``,
``mariadb-client`` and ``mariadb-backup`` into a folder of the project once
(``.mariadb/tree``), and each sandbox runs ``chroot TREE /usr/sbin/mariadbd`` with a
datadir of its own inside the tree, on a free loopback port, as a new install runs:
Debian's own configuration read (``--defaults-extra-file`` adds ours: the datadir,
port and socket, ``log-bin``, ``server-id``, ROW format, ``gtid-strict-mode``, FULL row
metadata, semi-sync), the accounts ``mariadb-install-db`` makes as Debian's package runs
it (root by unix socket), and the server's defaults: TLS on with the certificate it
makes itself, ``binlog_legacy_event_pos`` OFF (``legacy_event_pos`` turns it on),
``skip_name_resolve`` off. The interface of ``sandbox.MariaDBSandbox`` (start, stop,
execute, status, binlog_files, binlog_path, replicate_from, url), so tests take either.

The tree's client tools (mariadb, mariadb-dump, mariadb-binlog, mariadb-backup,
mariadb-install-db) run on the host through ``sandbox.mysql.client_wrappers(directory,
tree, TOOLS)``.
"""

import os
import subprocess

from mysqlbackup.sandbox import (REPL_PASSWORD, REPL_USER, datadir_from_template,
                                 free_port, private_tmpdir)
from mysqlbackup.sandbox.mysql import TreeServer, why_no_tree as tree_problem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TREE_ENV = "MYSQLBACKUP_MARIADB_TREE"
TOOLS = ("mariadb", "mariadb-dump", "mariadb-binlog", "mariadb-backup", "mariadb-install-db")


def mariadb_tree():
    """The folder of the 11.8 tree (``$MYSQLBACKUP_MARIADB_TREE`` or ``.mariadb/tree``)."""
    return os.path.abspath(os.environ.get(TREE_ENV) or os.path.join(ROOT, ".mariadb", "tree"))


def why_no_tree(tree=None):
    """Why no 11.8 sandbox can run here (None when one can): what the tests skip with."""
    return tree_problem(tree or mariadb_tree(), "MariaDB 11.8", "scripts/mariadb_tree.sh",
                        "Debian trixie's mariadb-server", "mariadbd")


class MariaDBTreeSandbox(TreeServer):
    """One throwaway 11.8 mariadbd in the tree; a context manager, or start()/stop()."""

    flavor = "mariadb"
    admin = ("admin", "admin-secret")   # (user, password) of TCP logins as an administrator
    ready_timeout = 60

    def __init__(self, server_id=1, log_bin=True, semi_sync=True, semi_sync_timeout_ms=2000,
                 extra_args=(), log_bin_name="binlog", tree=None, legacy_event_pos=False):
        super().__init__(tree or mariadb_tree(), server_id, log_bin, log_bin_name, semi_sync,
                         semi_sync_timeout_ms, extra_args)
        self.legacy_event_pos = legacy_event_pos

    def start(self):
        """Initialise the datadir if needed, start the server, create the repl user."""
        problem = why_no_tree(self.tree)
        if problem:
            raise RuntimeError(problem)
        private_tmpdir(os.path.join(self.basedir, "tmp"))
        self.port = self.port or free_port()
        self._write_options()
        if not os.path.isdir(os.path.join(self.datadir, "mysql")):
            datadir_from_template(self.datadir, "mariadb-tree",
                                  os.path.join(self.tree, "srv", "mysqlbackup"),
                                  self._install_db)
        self.proc = subprocess.Popen(
            ["chroot", self.tree, "/usr/sbin/mariadbd",
             f"--defaults-extra-file={self.inner}/my.cnf", *self.extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._wait_ready()
        self._create_users()
        return self

    def _install_db(self, datadir):
        """mariadb-install-db into ``datadir`` (a host path inside the tree) as Debian's
        package runs it: the accounts of a new install, no test database."""
        inner = datadir[len(self.tree):]
        tmp = private_tmpdir(datadir + ".tmp")
        try:
            done = subprocess.run(
                ["chroot", self.tree, "/usr/bin/mariadb-install-db", "--user=root",
                 f"--datadir={inner}", f"--tmpdir={tmp[len(self.tree):]}", "--skip-test-db",
                 "--disable-log-bin"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        finally:
            subprocess.run(["rm", "-rf", tmp])
        if done.returncode:
            raise RuntimeError(f"mariadb-install-db failed in {self.tree}: "
                               f"{done.stdout.decode(errors='replace')[-2000:]}")

    def inside(self, name):
        """The path mariadbd (in the chroot) knows the file ``name`` of its folder by."""
        return f"{self.inner}/{name}"

    def _write_options(self):
        inner = self.inner
        lines = ["[mariadbd]", "user=root", f"datadir={inner}/data", f"port={self.port}",
                 "bind-address=127.0.0.1", f"socket={inner}/mysqld.sock",
                 f"pid-file={inner}/mysqld.pid", f"log-error={inner}/error.log",
                 f"tmpdir={inner}/tmp", f"server-id={self.server_id}",
                 "innodb-buffer-pool-size=64M", "innodb-log-file-size=64M"]
        if self.log_bin:
            lines += [f"log-bin={self.log_bin_name}", "binlog-format=ROW",
                      "gtid-strict-mode=1", "binlog-row-metadata=FULL"]
        if self.legacy_event_pos:
            lines.append("binlog-legacy-event-pos=ON")
        if self.semi_sync:
            lines += ["rpl-semi-sync-master-enabled=1",
                      f"rpl-semi-sync-master-timeout={self.semi_sync_timeout_ms}"]
        with open(os.path.join(self.basedir, "my.cnf"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def _create_users(self):
        """The replication user, as MariaDBSandbox's, and an administrator for TCP logins
        (``admin``): the install's root@localhost logs in by unix socket only, and
        with name resolution on, a TCP client from 127.0.0.1 is 'localhost' (not
        binlogged; the accounts of the install stay as they are)."""
        user, password = self.admin
        self.execute(
            "SET SESSION sql_log_bin = 0",
            f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'127.0.0.1' IDENTIFIED BY '{REPL_PASSWORD}'",
            f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, SELECT ON *.* "
            f"TO '{REPL_USER}'@'127.0.0.1'",
            f"CREATE USER IF NOT EXISTS '{user}'@'localhost' IDENTIFIED BY '{password}'",
            f"GRANT ALL ON *.* TO '{user}'@'localhost' WITH GRANT OPTION",
            f"GRANT PROXY ON ''@'%' TO '{user}'@'localhost' WITH GRANT OPTION")

    def replicate_from(self, primary):
        """Make this server a GTID replica of ``primary`` (the real MariaDB applier)."""
        self.execute(
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
            f"MASTER_USER='{REPL_USER}', MASTER_PASSWORD='{REPL_PASSWORD}', "
            f"MASTER_USE_GTID=slave_pos", "START SLAVE")
