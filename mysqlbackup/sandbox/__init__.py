"""A throwaway MariaDB server for tests, the demo and benchmarks: a ``scratch`` server
with binlog ROW + CRC32 + GTID strict mode + FULL row metadata and semi-sync primary
enabled, and a replication user. Production code never imports this module (the drill
and restores use ``mysqlbackup.scratch``; tests/test_layers.py enforces it).
"""

import logging

from mysqlbackup.scratch import (SOCKET_MAX, TEMPLATE_PREFIX, ScratchMariaDB,  # noqa: F401
                                 ScratchServer,
                                 datadir_from_template, find_binary, free_port,
                                 private_tmpdir, socket_path)

REPL_USER, REPL_PASSWORD = "repl", "repl-secret"
log = logging.getLogger(__name__)


class SandboxServer(ScratchServer):
    """What every throwaway test server shares: a scratch server, and the source URL of
    its replication user."""

    @property
    def url(self):
        """Source URL for the replication user (password goes in the environment)."""
        return f"mysql://{REPL_USER}@127.0.0.1:{self.port}"


class MariaDBSandbox(ScratchMariaDB, SandboxServer):
    """One throwaway mariadbd; use as a context manager or call start()/stop()."""

    def _create_users(self):
        """Users are not binlogged, so a replica of this server never sees them twice.

        The accounts mariadb-install-db made stay as installed, root@<hostname> among
        them (``ScratchMariaDB._create_users``): what users meet, tests meet."""
        self.execute(
            "SET SESSION sql_log_bin = 0",
            f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'127.0.0.1' IDENTIFIED BY '{REPL_PASSWORD}'",
            f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, SELECT ON *.* "
            f"TO '{REPL_USER}'@'127.0.0.1'",
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
            "GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")

    def replicate_from(self, primary):
        """Make this server a GTID replica of ``primary`` (the real MariaDB applier)."""
        self.execute(
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
            f"MASTER_USER='{REPL_USER}', MASTER_PASSWORD='{REPL_PASSWORD}', "
            f"MASTER_USE_GTID=slave_pos", "START SLAVE")
