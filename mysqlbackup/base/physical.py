"""The physical method: mariadb-backup's command line, and the snapshot's position
from what it reports on stderr (pure, no I/O)::

    [00] 2026-11-23 17:15:05 MySQL binlog position: filename 'binlog.000001',
    position '1926', GTID of the last change '0-1-9'

(one line; the same facts are in the stream's ``xtrabackup_binlog_info``). It copies
the server's data files, so it must run on the database host.
"""

import re

from mysqlbackup.base.dump import DumpError, Snapshot
from mysqlbackup.binlog.position import Position

TOOLS = ("mariadb-backup", "mariabackup")
_POSITION = re.compile(r"MySQL binlog position: filename '(?P<file>[^']+)', position "
                       r"'(?P<pos>\d+)'(?:, GTID of the last change '(?P<gtid>[^']*)')?")


def backup_argv(tool, options_path, spec, target_dir):
    """mariadb-backup's arguments: the backup as an xbstream on stdout."""
    return [tool, f"--defaults-extra-file={options_path}", "--backup", "--stream=xbstream",
            f"--target-dir={target_dir}", f"--host={spec.host}", f"--port={spec.port}",
            "--protocol=tcp"]


class StderrSnapshot:
    """Feed mariadb-backup's stderr lines; ``snapshot()`` says where the copy is."""

    def __init__(self):
        self._match = None

    def feed_line(self, line):
        m = _POSITION.search(line)
        if m:
            self._match = m

    def snapshot(self, where, said=None):
        """The Snapshot, or DumpError naming ``where`` (``said``: the tool's last stderr
        line)."""
        if self._match is None:
            raise DumpError(f"{where}: mariadb-backup reported no binlog position (no 'MySQL "
                            f"binlog position' line): is the binary log on?"
                            + (f" (the tool said {said!r})" if said else ""))
        m = self._match
        return Snapshot(Position(m["file"], int(m["pos"])), m["gtid"] or "")
