"""The archive ``mysqlbackup serve`` serves, as the primary it stands for sees it.

``ServedArchive`` plans the source's units as replay does
(``replay.planning.plan.units_to_read``, the selection's stop point and exclusions),
reads their chunks (``feed.unit_chunks``), tells whether the archive grew past a
dump's end (``more_than``: one listing, at most one index read) and what its end's
GTID state is now (``archive_end_gtid``, looked up at most every GTID_POS_TTL
seconds), and lists it as SHOW BINARY LOGS does (``binary_logs``). Its constructor
builds the rest whole: the ``ServerFacts`` of the primary (a MariaDB or MySQL
version, server_id, checksum, GTID state: from the newest file's format description
and index) and the ``Catalog`` of the source's tables. UsageError when the archive
holds nothing to serve.
"""

import logging
import threading
import time

from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos
from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.errors import UsageError, mask_url
from replay.serve.catalog import Catalog, base_tables, newest_table_maps
from replay.serve.feed import file_end, gtid_state_at, walk_events
from replay.serve.protocol.queries import ServerFacts

log = logging.getLogger("replay.serve.server")  # serve's lines, under the name they had

GTID_POS_TTL = 1.0        # @@gtid_binlog_pos: the archive's end, looked up at most this often


class ServedArchive:
    """The archive of source ``source_name`` at ``archive_url`` as served under
    ``selection`` (a replay Selection: its stop point and exclusions); ``source``,
    ``facts`` and ``catalog`` set at once."""

    def __init__(self, archive_url, storage_options, source_name, selection, keyring):
        self.archive_url, self.storage_options = archive_url, storage_options
        self.source_name, self.selection, self.keyring = source_name, selection, keyring
        self._gtid_now = (None, None)   # (when looked up, value)
        self._gtid_lookup = threading.Lock()  # one lookup at a time; the others use it
        self.source, units, _ = self.units()
        self.facts = self._facts(units)
        self.catalog = Catalog(
            self.facts.flavor, lambda: newest_table_maps(self.units()[1], self.chunks),
            lambda: base_tables(self.archive_url, self.storage_options, self.source,
                                self.keyring))
        self.facts.binary_logs = self.binary_logs
        self.facts.row_metadata = self.catalog.row_metadata
        self.facts.table_columns = self.catalog.table

    def units(self):
        """(source, units, True when a stop datetime left later files out), as the
        archive holds them now (replay's own planning)."""
        from replay.planning.plan import ReplayOptions, units_to_read
        opts = ReplayOptions(self.archive_url, dict(self.storage_options), self.source_name,
                             self.selection, keyring=self.keyring)
        return units_to_read(opts)

    def chunks(self, unit):
        """The chunks of ``unit``'s objects, read and decoded (``feed.unit_chunks``)."""
        from replay.serve.feed import unit_chunks
        return unit_chunks(unit, self.archive_url, self.storage_options, self.keyring)

    def newest_index(self, file, what, epoch=None):
        """``_newest_index`` of the archive as it is now (one listing, at most one index
        read); None, with a warning about ``what``, when the store fails (looked at
        again later)."""
        try:
            listing = ArchiveListing(ArchiveStore(self.archive_url, self.storage_options))
            return _newest_index(listing, self.source, file, epoch)
        except Exception as e:  # noqa: BLE001 - the archive may be back at the next look
            log.warning("%s failed: %s", what, mask_url(e))
            return None

    def more_than(self, end):
        """True when the archive now holds a transaction past ``end``: one listing and
        at most one index read (a poll must stay cheap on a big archive), never a
        file whose index is not written yet. A store error: False (looked at again)."""
        index = self.newest_index(end.file, "looking for newly archived transactions",
                                  end.epoch)
        if index is None:
            return False
        if index.get("later"):
            return True
        return index["end"] > end.pos and index.get("last_gtid") not in (None, end.last_gtid)

    def archive_end_gtid(self):
        """The GTID state at the archive's end now (the newest file's index), looked up at
        most every GTID_POS_TTL seconds; None when the store cannot tell."""
        with self._gtid_lookup:
            when, value = self._gtid_now
            if when is not None and time.monotonic() - when < GTID_POS_TTL:
                return value
            index = self.newest_index(None, "reading the archive's end")
            value = index.get("gtid_after") if index else None
            self._gtid_now = (time.monotonic(), value)
            return value

    def binary_logs(self):
        """[(file, size)] of the archive now, as SHOW BINARY LOGS lists a server's (the
        newest file up to its last whole transaction); a store's failure is raised (the
        client gets an error, not an empty list)."""
        _, units, _ = self.units()
        sizes = {}
        for unit in units:  # a file of two epochs (a failover): the later one's size
            sizes[unit.name] = file_end(unit)
        return list(sizes.items())

    # -- the primary it stands for ---------------------------------------------------

    def _facts(self, units):
        if not units:
            raise UsageError(f"the archive {mask_url(self.archive_url)} holds no "
                             f"binlog of source {self.source!r} to serve")
        last = units[-1]
        fde = self._read_fde(last)
        if not ev.is_mariadb_version(fde.server_version):
            return self._mysql_facts(units, fde)
        gtid = last.index.get("last_gtid") or ""
        return ServerFacts(
            server_id=last.index.get("server_id") or 1,
            version="5.5.5-" + fde.server_version,
            checksum="CRC32" if fde.checksum_alg == ev.CHECKSUM_CRC32 else "NONE",
            domain_id=next(iter(MariaGtidPos.parse(gtid).domains), 0),
            gtid_binlog_pos=last.index.get("gtid_after") or "",
            gtid_binlog_pos_now=self._end_gtid_now(),
            gtid_pos_at=lambda file, pos: gtid_state_at(units, file, pos))

    def _mysql_facts(self, units, fde):
        """A MySQL source's archive, served as a MySQL primary: its version, server_id,
        server_uuid (the UUID of its newest own GTID), GTIDs before the first file."""
        last = units[-1].index
        gtid = last.get("last_gtid") or next(
            (u.index["last_gtid"] for u in reversed(units) if u.index.get("last_gtid")),
            None)
        if not gtid or ":" not in gtid:
            raise UsageError(f"the archive of {self.source!r} holds no MySQL GTID: serve "
                             "serves a MySQL source with gtid_mode=ON")
        return ServerFacts(
            server_id=last.get("server_id") or 1, version=fde.server_version,
            checksum="CRC32" if fde.checksum_alg == ev.CHECKSUM_CRC32 else "NONE",
            gtid_binlog_pos=last.get("gtid_after") or "",
            gtid_binlog_pos_now=self._end_gtid_now(),
            flavor="mysql", server_uuid=gtid.split(":")[0],
            gtid_purged=units[0].index.get("gtid_before") or "")

    def _end_gtid_now(self):
        """What @@gtid_binlog_pos is looked up with: the archive's end now, unless a stop
        point fixes what is served (None)."""
        return self.archive_end_gtid if self.selection.stop.is_end else None

    def _read_fde(self, unit):
        chunks = self.chunks(unit)
        try:
            for _, event in walk_events(chunks, unit.name, unit.partial):
                return ev.parse_format_description(event)
        finally:
            chunks.close()
        raise UsageError(f"{unit.where} holds no format description event")


def _newest_index(listing, source, file, epoch=None):
    """The index of ``file`` (sealed, or its newest indexed segment), or of a file after
    it when the archive holds one with its index; None when neither. ``file`` None: the
    index of the newest file that has one. Only the newest epoch of the source's history
    is looked at: a ``file`` of an ``epoch`` before it is followed by that epoch's files
    (``{"name": ...}`` of its first, as for a file after it)."""
    number, source, _ = listing.epochs(source)[-1]
    if file is not None and epoch is not None and epoch < number:
        names = listing.sealed_names(source) + sorted(listing.segments[source],
                                                      key=binlog_sort_key)
        return {"name": names[0], "later": True} if names else None
    sealed = {n: slots for n, slots in listing.sealed[source].items() if "index" in slots}
    indexed = list(sealed) + [n for n, segs in listing.segments[source].items()
                              if any("index" in sl for sl in segs.values())]
    if file is None:
        if not indexed:
            return None
        file = max(indexed, key=binlog_sort_key)
    key = binlog_sort_key(file)
    later = [n for n in indexed if binlog_sort_key(n) > key]
    if later:
        return {"name": min(later, key=binlog_sort_key), "later": True}
    if file in sealed:
        return listing.read_index(sealed[file]["index"])
    done = [r for r, slots in listing.segments[source].get(file, {}).items() if "index" in slots]
    return listing.read_index(listing.segments[source][file][max(done)]["index"]) if done \
        else None
