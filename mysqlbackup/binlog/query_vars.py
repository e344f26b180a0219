"""The session state a QUERY event carries in its status variables (pure).

A statement from the binlog (DDL, statement-based DML) must run under the
source session's sql_mode, character sets, time zone, timestamp and checks,
or it may do something else on the target: ``ALTER TABLE ... ADD COLUMN ts
TIMESTAMP DEFAULT CURRENT_TIMESTAMP`` fills rows with the replay's time, a
latin1 statement read as utf8mb4 renames columns. ``query_session`` gives the
statement as raw bytes (in its own character set) and the ``SET`` statements
that recreate the session, as mysqlbinlog prints them.
"""

import struct
from collections import namedtuple

from mysqlbackup.binlog import events as ev

RawQuery = namedtuple("RawQuery", "db sql status timestamp thread_id")

# code -> fixed length of the value (None: a length-prefixed or special layout)
_FIXED = {0: 4, 1: 8, 3: 4, 4: 6, 7: 2, 8: 2, 9: 8, 10: 4, 13: 3, 14: 8, 16: 1, 17: 8,
          18: 2, 19: 1, 20: 1, 128: 3, 129: 8, 130: 1}
_ONE_STRING = {5: "time_zone", 6: "catalog"}
OPTION_AUTO_IS_NULL, OPTION_NOT_AUTOCOMMIT = 1 << 14, 1 << 19
OPTION_NO_FOREIGN_KEY_CHECKS, OPTION_RELAXED_UNIQUE_CHECKS = 1 << 26, 1 << 27
# flags2 bits only MariaDB writes: (bit, session variable, value when the bit is set)
MARIADB_FLAGS2 = ((1 << 15, "check_constraint_checks", 0),
                  (1 << 24, "explicit_defaults_for_timestamp", 1),
                  (1 << 28, "sql_if_exists", 1),
                  (1 << 30, "system_versioning_insert_history", 1))
# MySQL's status variables that set a session variable of the same meaning
MYSQL_SESSION_VARS = ("explicit_defaults_for_timestamp", "default_collation_for_utf8mb4",
                      "sql_require_primary_key", "default_table_encryption")


def parse_status_vars(data):
    """{name: value} of a QUERY event's status variables; stops at an unknown code
    (as the server does: what follows it cannot be located)."""
    out, i = {}, 0
    while i < len(data):
        code, i = data[i], i + 1
        if code in _FIXED:
            end = i + _FIXED[code]
            if end > len(data):
                break
            _store(out, code, bytes(data[i:end]))
            i = end
        elif code in _ONE_STRING:
            n = data[i]
            out[_ONE_STRING[code]] = bytes(data[i + 1:i + 1 + n]).decode("ascii", "replace")
            i += 1 + n
        elif code == 2:  # old catalog: length, text, NUL
            i += 2 + data[i]
        elif code == 11:  # invoker: user, then host, each length-prefixed
            i += 1 + data[i]
            i += 1 + data[i]
        elif code == 12:  # updated db names: count (254: too many to list), NUL-ended names
            count, i = data[i], i + 1
            for _ in range(count if count != 254 else 0):
                i = bytes(data).index(b"\0", i) + 1
        else:
            break
    return out


def _store(out, code, raw):
    if code == 0:
        out["flags2"] = struct.unpack("<I", raw)[0]
    elif code == 1:
        out["sql_mode"] = struct.unpack("<Q", raw)[0]
    elif code == 3:
        out["auto_increment"] = struct.unpack("<HH", raw)
    elif code == 4:
        out["charset"] = struct.unpack("<HHH", raw)
    elif code == 7:
        out["lc_time_names"] = struct.unpack("<H", raw)[0]
    elif code == 8:
        out["collation_database"] = struct.unpack("<H", raw)[0]
    elif code in (13, 128):
        out["microseconds"] = int.from_bytes(raw, "little")
    elif code == 16:
        out["explicit_defaults_for_timestamp"] = raw[0]
    elif code == 18:
        out["default_collation_for_utf8mb4"] = struct.unpack("<H", raw)[0]
    elif code == 19:
        out["sql_require_primary_key"] = raw[0]
    elif code == 20:
        out["default_table_encryption"] = raw[0]


def raw_query(event, checksum, fde=None):
    """Schema, statement bytes, status variables, timestamp and the source session's
    thread id of a QUERY (or EXECUTE_LOAD_QUERY) event."""
    body, status, db, sql_start = ev.query_parts(event, checksum, fde)
    return RawQuery(bytes(db).decode("utf-8", "replace"), bytes(body[sql_start:]),
                    parse_status_vars(status), ev.parse_header(event).timestamp,
                    struct.unpack_from("<I", body, 0)[0])


def session_statements(query, mariadb=True):
    """``SET`` statements that recreate the source session of ``query`` (a RawQuery),
    as the engine's own binlog reader prints them: every variable the event carries,
    and those it leaves out at their defaults (AUTO_INCREMENT steps 1 and 1,
    lc_time_names 0, the database's collation), so that no other session's setting
    carries over; ``mariadb``: the event is MariaDB's (its own flags2 bits)."""
    s = query.status
    usec = s.get("microseconds")
    sets = [f"SET TIMESTAMP={query.timestamp}" + (f".{usec:06d}" if usec else ""),
            f"SET @@session.pseudo_thread_id={query.thread_id}"]
    if "flags2" in s:
        sets.append(_flags2(s["flags2"], mariadb))
    if "sql_mode" in s:
        sets.append(f"SET @@session.sql_mode={s['sql_mode']}")
    inc, off = s.get("auto_increment", (1, 1))
    sets.append(f"SET @@session.auto_increment_increment={inc}, "
                f"@@session.auto_increment_offset={off}")
    if "charset" in s:
        client, connection, server = s["charset"]
        sets.append(f"SET @@session.character_set_client={client}, "
                    f"@@session.collation_connection={connection}, "
                    f"@@session.collation_server={server}")
    if "time_zone" in s:
        sets.append("SET @@session.time_zone='" + s["time_zone"].replace("'", "''") + "'")
    sets.append(f"SET @@session.lc_time_names={s.get('lc_time_names', 0)}")
    sets.append(f"SET @@session.collation_database={s.get('collation_database') or 'DEFAULT'}")
    sets += [f"SET @@session.{name}={s[name]}" for name in MYSQL_SESSION_VARS if name in s]
    return sets


def _flags2(flags, mariadb):
    """The SET of the session options a QUERY event's flags2 holds."""
    options = [("foreign_key_checks", int(not flags & OPTION_NO_FOREIGN_KEY_CHECKS)),
               ("sql_auto_is_null", int(bool(flags & OPTION_AUTO_IS_NULL))),
               ("unique_checks", int(not flags & OPTION_RELAXED_UNIQUE_CHECKS))]
    if mariadb:
        options += [(name, value if flags & bit else 1 - value)
                    for bit, name, value in MARIADB_FLAGS2]
    return "SET " + ", ".join(f"@@session.{name}={value}" for name, value in options)


# what a replay session goes back to after a statement ran in the source's session
RESET_SESSION = ("SET NAMES utf8mb4, TIMESTAMP=DEFAULT, @@session.foreign_key_checks=1, "
                 "@@session.unique_checks=1, @@session.sql_auto_is_null=0, "
                 "@@session.collation_database=DEFAULT")
