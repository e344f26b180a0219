"""What serve knows of the archived source's tables, for the clients that ask a primary
about them besides reading its dump (python-mysql-replication, zongji: ``SHOW VARIABLES
LIKE 'binlog_row_metadata'``, ``INFORMATION_SCHEMA.COLUMNS``).

The columns of a table come from the archive's own TABLE_MAP events, as the newest one
serve has sent for it names them (a source with ``binlog_row_metadata=FULL``), else from
the newest dump base's CREATE TABLE (``mysqlbackup.base.schemascan``, read once, when
first needed); the setting itself as the newest archived TABLE_MAP shows it
(``tablemap.row_metadata``). A table neither names is unknown: the query's answer is
then empty, and serve's log says so.
"""

import logging
import threading
import time
from collections import OrderedDict

from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.names import base_key, format_key
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.base.schemascan import SchemaScan
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.tablemap import parse_table_map, row_metadata
from mysqlbackup.errors import CorruptBinlog, MysqlBackupError, mask_url
from mysqlbackup.base.stream import scan_dump
from replay.serve.feed import walk_events

log = logging.getLogger(__name__)

KEPT_TABLES = 10_000      # the tables remembered (the least recently seen forgotten)
SCAN_BYTES = 64 << 20     # how far back the archive is read for a TABLE_MAP at most
SCAN_UNITS = 4
READ_TRIES = 3          # readings of the archive for the setting before a failure


class Catalog:
    """The tables the TABLE_MAPs of serve's dumps named (thread-safe: every dump feeds
    it), and the source's binlog_row_metadata, looked up once in the archive."""

    def __init__(self, flavor, scan, base_tables=None):
        """``scan``: a callable giving the newest archived TABLE_MAP events, newest
        first, as (event, checksum, fde) (read only when the setting is first asked);
        ``base_tables``: a callable giving the newest dump base's {(schema, table):
        Columns} (read once, when a table no TABLE_MAP named is first asked for)."""
        self.flavor, self._scan, self._base_tables = flavor, scan, base_tables
        self._base, self._base_lock = None, threading.Lock()
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
        """The columns of ``schema.table``: the newest TableMap naming them, else the
        dump base's; None when neither has the table."""
        with self._lock:
            found = self._tables.get((schema, table))
        return found if found is not None else self._base_schema().get((schema, table))

    def _base_schema(self):
        with self._base_lock:  # one reading; the other askers wait for it
            if self._base is None:
                try:
                    self._base = (self._base_tables() if self._base_tables else None) or {}
                except MysqlBackupError as e:  # asked again next time
                    log.warning("reading the base's schema failed: %s", mask_url(e))
                    return {}
            return self._base

    def row_metadata(self):
        """The source's binlog_row_metadata as its newest archived TABLE_MAP shows it
        (the engine's default when the archive's newest files have none). The archive
        may change under serve (a partial file's segments give way to the sealed file):
        a failed reading is tried again on a new listing, ``READ_TRIES`` times in all,
        then raised (a client gets an error, never a guessed setting)."""
        with self._lock:
            if self._setting is not None:
                return self._setting
        for attempt in range(READ_TRIES):
            try:
                setting = self._newest_setting()
                break
            except MysqlBackupError as e:
                log.warning("reading the archive's newest TABLE_MAP failed (try %d of %d):"
                            " %s", attempt + 1, READ_TRIES, mask_url(e))
                if attempt + 1 == READ_TRIES:
                    raise
                time.sleep(0.1 * (attempt + 1))
        with self._lock:
            self._setting = setting
        return setting

    def _newest_setting(self):
        for event, checksum, fde in self._scan():
            try:
                setting = row_metadata(parse_table_map(event, checksum, fde), self.flavor)
            except CorruptBinlog:
                continue
            self.saw(event, checksum, fde)
            return setting
        return "MINIMAL" if self.flavor == "mysql" else "NO_LOG"


def newest_table_maps(units, chunks):
    """(event, checksum, fde) of the first TABLE_MAP of each of the archive's newest
    files (``units``, read through ``chunks``), newest first (at most SCAN_UNITS files
    and SCAN_BYTES read)."""
    budget = SCAN_BYTES
    for unit in list(reversed(units))[:SCAN_UNITS]:
        stream, fde = chunks(unit), None
        try:
            for _, event in walk_events(stream, unit.name, unit.partial):
                budget -= len(event)
                if event[4] == ev.FORMAT_DESCRIPTION:
                    fde = ev.parse_format_description(event)
                elif event[4] == ev.TABLE_MAP and fde is not None:
                    yield event, fde.checksum_alg == ev.CHECKSUM_CRC32, fde
                    break
                if budget <= 0:
                    return
        finally:
            stream.close()


def base_tables(url, storage_options, source, keyring):
    """{(schema, table): Columns} of the newest sound dump base of ``source``, its SQL
    read through once (``schemascan.SchemaScan``, bounded memory); {} without one."""
    store = ArchiveStore(url, storage_options)
    dumps = [m for m in ArchiveListing(store).sound_manifests(source) if m["method"] == "dump"]
    if not dumps:
        return {}
    manifest = max(dumps, key=lambda m: m["end_time"])
    key = format_key(base_key(source, manifest["id"], manifest["member"]))
    log.info("reading the schema of base %s (%d bytes) for INFORMATION_SCHEMA.COLUMNS",
             manifest["id"], manifest["stored_size"])
    return scan_dump(store, key, manifest, SchemaScan(), keyring=keyring).tables
