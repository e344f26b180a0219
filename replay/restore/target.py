"""The restore's target server: is it empty, and is a restore of this source from
this base already in progress there (network I/O)?

The progress marker is one row per source in ``mysqlbackup_replay.restore``
(base id, state 'loading' or 'loaded', the stop, when it started), written with
the binlog off for the session (it invents no GTID). A restore killed at any
point and run again finds it: 'loaded' skips the load (the replay resumes from
its exactly-once checkpoint), 'loading' loads the base again (the dump drops and
recreates its tables). Nothing is written here before the plan has been proved.
"""

from dataclasses import dataclass

from mysqlbackup.errors import UsageError
from replay.job.sinks.session import connect_target

# schemas a fresh server has, or that are the tool's own
SYSTEM_SCHEMAS = ("mysql", "sys", "information_schema", "performance_schema",
                  "mysqlbackup_replay")
MARKER_DDL = (
    "CREATE TABLE IF NOT EXISTS mysqlbackup_replay.restore (source VARCHAR(128) NOT NULL "
    "PRIMARY KEY, base_id VARCHAR(64) NOT NULL, state VARCHAR(16) NOT NULL, stop TEXT, "
    "started TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
    "updated TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB")


class TargetNotEmpty(UsageError):
    """The target holds user schemas and the restore was not told to load into them."""


@dataclass(frozen=True)
class Marker:
    """A restore in progress on the target, as its marker row says."""

    source: str
    base_id: str
    state: str      # 'loading' | 'loaded'
    stop: str
    started: str


class RestoreTarget:
    """One connection to the restore's target (autocommit)."""

    def __init__(self, spec):
        self.spec = spec
        self.conn = connect_target(spec)  # with its TLS settings; SourceError (exit 3)

    def _rows(self, sql, args=None):
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def user_schemas(self):
        """Schemas other than the system's and the tool's (an empty ``test`` too)."""
        rows = self._rows("SELECT s.schema_name, COUNT(t.table_name) FROM "
                          "information_schema.schemata s LEFT JOIN information_schema.tables t "
                          "ON t.table_schema = s.schema_name GROUP BY s.schema_name")
        return sorted(name for name, tables in rows
                      if name.lower() not in SYSTEM_SCHEMAS
                      and not (name.lower() == "test" and tables == 0))

    def marker(self, source):
        """The Marker of ``source``'s restore on the target, or None."""
        if not self._rows("SELECT 1 FROM information_schema.tables WHERE table_schema = "
                          "'mysqlbackup_replay' AND table_name = 'restore'"):
            return None
        rows = self._rows("SELECT source, base_id, state, stop, started FROM "
                          "mysqlbackup_replay.restore WHERE source = %s", (source,))
        return Marker(*rows[0][:4], str(rows[0][4])) if rows else None

    def check(self, source, base_id, into_nonempty):
        """The Marker of this very restore in progress (same source and base), else None
        once the target is proved usable: TargetNotEmpty when it holds user schemas and
        ``into_nonempty`` is not given."""
        marker = self.marker(source)
        if marker and marker.base_id == base_id and marker.state in ("loading", "loaded"):
            return marker
        schemas = self.user_schemas()
        if schemas and not into_nonempty:
            shown = ", ".join(schemas[:5]) + (f" and {len(schemas) - 5} more"
                                              if len(schemas) > 5 else "")
            raise TargetNotEmpty(f"the target {self.spec.address} already holds schemas "
                                 f"({shown}): restore into an empty server, or give "
                                 "--into-nonempty to load the base over them")
        return None

    def grants(self):
        """(CURRENT_USER(), the rows of SHOW GRANTS FOR CURRENT_USER()): what the user
        the restore loads as may do (users.TargetGrants reads them)."""
        [(user,)] = self._rows("SELECT CURRENT_USER()")
        return user, [row[0] for row in self._rows("SHOW GRANTS FOR CURRENT_USER()")]

    def mark(self, source, base_id, state, stop):
        """Write the marker row (unlogged). 'loading' also forgets the replay
        checkpoint of ``source``: the base being loaded is the new starting point."""
        tables = {r[0].lower() for r in self._rows(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = "
            "'mysqlbackup_replay'")}
        with self.conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin=0")
            try:
                cur.execute("CREATE DATABASE IF NOT EXISTS mysqlbackup_replay")
                cur.execute(MARKER_DDL)
                for table in ("checkpoint", "pending_ddl"):
                    if state == "loading" and table in tables:
                        cur.execute(f"DELETE FROM mysqlbackup_replay.{table} WHERE source = %s",
                                    (source,))
                cur.execute(
                    "INSERT INTO mysqlbackup_replay.restore (source, base_id, state, stop) "
                    "VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE base_id = VALUES(base_id), "
                    "state = VALUES(state), stop = VALUES(stop), started = IF(VALUES(state) = "
                    "'loading', CURRENT_TIMESTAMP(6), started), updated = CURRENT_TIMESTAMP(6)",
                    (source, base_id, state, stop))
            finally:
                cur.execute("SET SESSION sql_log_bin=1")

    def close(self):
        self.conn.close()

