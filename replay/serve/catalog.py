"""What serve knows of the archived source's tables, for the clients that ask a primary
about them besides reading its dump (python-mysql-replication, zongji: ``SHOW VARIABLES
LIKE 'binlog_row_metadata'``, ``INFORMATION_SCHEMA.COLUMNS``).

Its only source is the archive's own TABLE_MAP events: the columns of a table as the
newest TABLE_MAP serve has sent for it names them (a source with
``binlog_row_metadata=FULL``), and the setting itself as the newest archived TABLE_MAP
shows it (``tablemap.row_metadata``). A table no TABLE_MAP named is unknown: the
query's answer is then empty, and serve's log says so.
"""

import logging
import threading
from collections import OrderedDict

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.tablemap import parse_table_map, row_metadata
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError, mask_url

log = logging.getLogger(__name__)

KEPT_TABLES = 10_000      # the tables remembered (the least recently seen forgotten)
SCAN_BYTES = 64 << 20     # how far back the archive is read for a TABLE_MAP at most
SCAN_UNITS = 4


class Catalog:
    """The tables the TABLE_MAPs of serve's dumps named (thread-safe: every dump feeds
    it), and the source's binlog_row_metadata, looked up once in the archive."""

    def __init__(self, flavor, scan):
        """``scan``: a callable giving the newest archived TABLE_MAP events, newest
        first, as (event, checksum, fde) (read only when the setting is first asked)."""
        self.flavor, self._scan = flavor, scan
        self._tables, self._raw = OrderedDict(), {}
        self._lock = threading.Lock()
        self._setting = None

    def saw(self, event, checksum, fde):
        """Note a TABLE_MAP a dump sends (parsed only when its body is new)."""
        body = bytes(event[ev.HEADER_LEN + 6:len(event) - (ev.CRC_LEN if checksum else 0)])
        with self._lock:
            if self._raw.get(body) is not None:
                return
        try:
            table = parse_table_map(event, checksum, fde)
        except CorruptBinlog:
            return  # the dump's own reading reports a damaged event
        with self._lock:
            key = (table.schema, table.table)
            if table.names is not None:
                self._tables[key] = table
                self._tables.move_to_end(key)
                while len(self._tables) > KEPT_TABLES:
                    self._tables.popitem(last=False)
            self._raw[body] = True
            if len(self._raw) > KEPT_TABLES:
                self._raw.clear()

    def table(self, schema, table):
        """The newest TableMap naming the columns of ``schema.table``, or None."""
        with self._lock:
            return self._tables.get((schema, table))

    def row_metadata(self):
        """The source's binlog_row_metadata as its newest archived TABLE_MAP shows it
        (the engine's default when the archive's newest files have none)."""
        with self._lock:
            if self._setting is not None:
                return self._setting
        setting = "MINIMAL" if self.flavor == "mysql" else "NO_LOG"
        try:
            for event, checksum, fde in self._scan():
                try:
                    setting = row_metadata(parse_table_map(event, checksum, fde), self.flavor)
                    self.saw(event, checksum, fde)
                except CorruptBinlog:
                    continue
                break
        except MysqlBackupError as e:  # the store failed: asked again next time
            log.warning("reading the archive's newest TABLE_MAP failed: %s", mask_url(e))
            return setting
        with self._lock:
            self._setting = setting
        return setting
