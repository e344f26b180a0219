"""One complete transaction of a binlog, as the replay carries it (pure).

``replay.job.decoding.assemble`` makes them; a Spark task sends them to the driver
without their bytes (``events`` None, ``event_lengths`` instead: see
``assemble.detach_events``), the driver gives the bytes back, chooses, filters,
rewrites and hands them to a sink. A module-level dataclass, so it pickles.
"""

from dataclasses import dataclass, field

from mysqlbackup.binlog.position import Position


@dataclass
class Transaction:
    """A transaction: where it lies, its GTID, commit time, tables and raw events."""

    file: str
    start: int                 # offset of its first event
    end: int                   # offset just after its last event
    gtid: str = None           # '0-1-5' / 'uuid:5', None without a GTID
    gtid_parts: list = None    # [domain, server_id, seq] (MariaDB) / [uuid, gno] (MySQL)
    commit_ts: int = 0         # the commit event's timestamp (epoch seconds)
    tables: list = field(default_factory=list)   # 'db.table' of its TABLE_MAPs, sorted
    events: list = None        # raw events (bytes), None while detached
    db: str = None             # default schema of its first statement
    group: tuple = None        # commit group (replay.job.decoding.groups), None: runs alone
    rows_events: int = 0
    event_lengths: list = None  # while detached: the length of each event, in order
    db_map: dict = None        # --rewrite-db mapping its statements run under
    statements: bool = False   # holds a logged statement or its context (runs alone)
    event_starts: list = None  # with events: the file offset of the stored event each
    # came from (a compressed event's for the plain ones it holds)
    incident: str = None       # an INCIDENT marker (no transaction): what it says

    @property
    def gtid_key(self):
        """The GTID as a tuple (of ``gtid_parts``), or None."""
        return tuple(self.gtid_parts) if self.gtid_parts else None

    @property
    def maria_gtid(self):
        """(domain, server_id, seq) of a MariaDB GTID, else None."""
        parts = self.gtid_parts
        return tuple(parts) if parts and len(parts) == 3 and isinstance(parts[0], int) \
            else None

    @property
    def start_position(self):
        """Position of its first event."""
        return Position(self.file, self.start)

    @property
    def end_position(self):
        """Position just after its last event."""
        return Position(self.file, self.end)
