"""``mysqlbackup undo``: the named transactions found in the archive, checked, and their
row changes reversed on a target in one conflict-checked transaction, or written as SQL.

The pipeline: ``locate`` (the archive's files that hold the GTIDs, streamed, each
transaction's events spooled) -> ``reverse.read_changes`` (what an undo can reverse, and
the refusals) -> ``expect`` (the state the transactions left, row by row) -> ``target``
(locked, compared, then the reversed events applied with BINLOG, newest transaction
first, each one's rows events last first; one COMMIT) or ``script`` (``--sql``).
"""

from dataclasses import dataclass, field

import pymysql

from mysqlbackup.archive.stop import parse_file_position, parse_one_gtid
from mysqlbackup.errors import MysqlBackupError, UsageError
from replay.job.sinks.session import TargetSession, connect_target
from replay.job.sinks.statements import MYSQL_GTID_AUTOMATIC
from replay.undo.expect import ABSENT, Expected
from replay.undo.locate import POSITION, find_transactions
from replay.undo.reverse import (INSTEAD, NO_FOREIGN_KEY_CHECKS_F, UndoRefused,
                                 read_changes, reversed_event, row_spans, with_server_id)
from replay.undo.script import write_script
from replay.undo.target import SHOWN, UndoConflict, UndoTarget
from replay.undo.values import ImageReader, Unchecked

BINLOG_CAP = 4 << 20  # raw bytes of events in one BINLOG statement


@dataclass(frozen=True)
class UndoOptions:
    """What ``undo`` was asked."""

    archive_url: str
    archive_options: dict
    source_name: str
    gtids: tuple            # texts, as given
    positions: tuple = ()   # 'FILE:POS' texts: where transactions start (no GTIDs)
    target: object = None   # a SourceSpec, or None with sql_path
    sql_path: str = None
    tables: tuple = ()      # 'db.table', lowercase
    dry_run: bool = False
    keyring: object = None
    lock_timeout: int = 10  # seconds a row lock is waited for


class UndoFailed(MysqlBackupError):
    """The target refused a statement of the undo (a lock wait timeout, a privilege, a
    duplicate key a concurrent write made): rolled back, nothing changed."""


@dataclass
class UndoReport:
    """What an undo did: the source, the transactions, rows and tables reversed, the
    target's GTID of the undo (MariaDB says it), whether it was a dry run."""

    source: str = None
    transactions: list = field(default_factory=list)
    rows: int = 0
    tables: list = field(default_factory=list)
    target_gtid: str = None
    dry_run: bool = False
    sql_path: str = None

    def line(self):
        """One line for the terminal."""
        what = (f"{len(self.transactions)} transaction(s) ({', '.join(self.transactions)}), "
                f"{self.rows} row(s) in {', '.join(self.tables)}")
        if self.sql_path:
            return f"undo: the reversal of {what} written to {self.sql_path} (no conflict check)"
        if self.dry_run:
            return f"undo --dry-run: {what} would be reversed: every row checked; rolled back"
        gtid = f" as the target's transaction {self.target_gtid}" if self.target_gtid else ""
        return f"undo: {what} reversed{gtid}"


def run_undo(opts):
    """Undo the named transactions (see the module); an ``UndoReport``. UndoRefused
    (exit 2) and UndoConflict (exit 12) leave the target unchanged."""
    wanted = {}
    for text in opts.gtids:
        wanted[parse_one_gtid(text, "--gtid")] = text.strip()
    for text in opts.positions:
        at = parse_file_position(text, "--at")
        wanted[(POSITION, at.file, at.offset)] = f"{at.file}:{at.offset}"
    source, founds = find_transactions(opts.archive_url, opts.archive_options,
                                       opts.source_name, wanted, opts.keyring)
    try:
        return _undo(opts, source, founds)
    except (ValueError, Unchecked) as e:  # rows that do not read as their TABLE_MAP says
        raise UndoRefused(f"the rows of {', '.join(f.gtid for f in founds)} cannot be read "
                          f"({e}); {INSTEAD}") from None
    finally:
        for found in founds:
            found.events.close()


def _undo(opts, source, founds):
    plans = [(found, _changes(found, opts.tables)) for found in founds]
    _same_format(founds)
    report = UndoReport(source, [f.gtid for f in founds], dry_run=opts.dry_run,
                        sql_path=opts.sql_path)
    report.tables = sorted({t for _, c in plans for t in c.tables()})
    if opts.sql_path:
        report.rows = write_script(opts.sql_path, plans, source)
    else:
        report.rows, report.target_gtid = _apply(opts, plans)
    return report


def _changes(found, tables):
    changes = read_changes(found.events, found.fde, found.checksum, found.where)
    if tables:
        changes.steps = [s for s in changes.steps if _label(changes.maps[s.table_id]).lower()
                         in tables]
    if not changes.steps:
        scope = " of the tables given (--table)" if tables else ""
        raise UndoRefused(f"transaction {found.gtid} ({found.file}:{found.start}) changed "
                          f"no rows{scope}: nothing to undo")
    return changes


def _label(table_map):
    return f"{table_map.schema}.{table_map.table}"


def _same_format(founds):
    kinds = {(f.checksum, f.fde.server_version) for f in founds}
    if len(kinds) > 1:
        raise UsageError("the named transactions lie in binlogs of different formats "
                         "(server version or checksum): undo them one at a time")


def _apply(opts, plans):
    session = TargetSession(connect_target(opts.target))
    try:
        return _apply_on(session, opts, plans)
    except pymysql.err.MySQLError as e:
        session.rollback()
        raise UndoFailed(f"the undo failed on the target {opts.target.address}: "
                         f"{e.args[-1] if e.args else e} (error {e.args[0] if e.args else '?'})"
                         f"; rolled back, nothing was changed") from None
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def _apply_on(session, opts, plans):
    """(rows reversed, the target's GTID of the undo) on one connection: refusals, the
    expected states, the locked check, the reversal, COMMIT (ROLLBACK: --dry-run)."""
    target = UndoTarget(session, opts.lock_timeout)
    tables, unchecked = _tables(target, plans)
    expected = Expected()
    try:
        rows = _expect(plans, tables, expected)
        session.after_fde = None if target.mariadb else MYSQL_GTID_AUTOMATIC
        session.use_fde(plans[0][0].fde_event)  # before BEGIN (MySQL sets gtid_next)
        target.begin()
        _check(target, tables, expected)
    finally:
        expected.close()
    _reverse(session, target, plans, unchecked)
    return rows, target.finish(commit=not opts.dry_run)


def _tables(target, plans):
    """({label: Table}, labels whose reversed events go with foreign key checks off):
    every table checked on the target (see ``_cascades``)."""
    tables, maps, unchecked = {}, {}, set()
    for found, changes in plans:
        changed = {}
        for step in changes.steps:
            changed.setdefault(step.table_id, set()).add(step.kind)
        for tid, kinds in changed.items():
            table_map = changes.maps[tid]
            label = _label(table_map)
            if label not in tables:
                tables[label] = _table(target, table_map, found)
                maps[label] = (table_map.types, table_map.metas)
            elif maps[label] != (table_map.types, table_map.metas):
                raise UndoRefused(f"{label} changed its definition between the named "
                                  f"transactions: undo them one at a time; {INSTEAD}")
            _check_whole(tables[label], changes.missing.get(tid, 0))
            unchecked |= _cascades(target, table_map, label, kinds, found)
    return tables, unchecked


def _table(target, table_map, found):
    table = target.table(table_map, mysql_json=not found.mariadb)
    try:
        for column in table.columns:
            column.form  # noqa: B018 - Unchecked for a type not compared
    except Unchecked as e:
        raise UndoRefused(f"{table.label}: {e} cannot be compared on the target; "
                          f"{INSTEAD}") from None
    return table


def _cascades(target, table_map, label, kinds, found):
    """The labels whose reversed events go with foreign key checks off (the table and
    the children its foreign keys cascade to), or UndoRefused. MariaDB and MySQL 8 do not
    log the rows a cascade changed: refused. MySQL 9 logs them: a transaction that only
    deleted is undone as logged, parents and children put back with the checks off; the
    reversal of an INSERT or an UPDATE would delete or change parents that rows written
    since may reference (not in the binlog, so not checked): refused."""
    cascades = target.cascades(table_map.schema, table_map.table)
    if not cascades:
        return set()
    shown = ", ".join(f"{child} ({rules})" for child, rules in cascades)
    if found.mariadb or found.version < (9,):
        raise UndoRefused(
            f"{label} has foreign keys that change other rows ({shown}): the binlog of "
            f"{'MariaDB' if found.mariadb else 'MySQL 8'} does not hold the rows they "
            f"changed, so undo cannot put them back; {INSTEAD}")
    if kinds - {"delete"}:
        raise UndoRefused(
            f"{label} has foreign keys that change other rows ({shown}): undoing its "
            f"{' and '.join(sorted(kinds - {'delete'}))}s would delete or change parent "
            f"rows that rows written since may reference; {INSTEAD}")
    return {label} | {child for child, _ in cascades}


def _check_whole(table, missing):
    """UndoRefused when a row image lacks a column that is not generated."""
    lacking = [c.name for i, c in enumerate(table.columns) if missing >> i & 1
               and not c.generated]
    if lacking:
        raise UndoRefused(
            f"the row images of {table.label} lack columns ({', '.join(lacking[:5])}: the "
            f"source's binlog_row_image was MINIMAL or NOBLOB): undo needs FULL images to "
            f"put rows back; {INSTEAD}")


def _expect(plans, tables, expected):
    """Play the transactions' row images into ``expected``; the rows they hold. With
    several transactions, each one's before images must be what the ones before it left
    (``_chained``): a transaction not named in between is a conflict."""
    rows, readers, chained = 0, {}, len(plans) > 1
    for found, changes in plans:
        for step in changes.steps:
            table = tables[_label(changes.maps[step.table_id])]
            reader = readers.get(table.label)
            if reader is None:
                reader = readers[table.label] = ImageReader(table.columns)
            event = found.events[step.index]
            _, spans = row_spans(event, changes.layouts[step.table_id], found.fde,
                                 found.checksum)
            rows += len(spans)
            for start, middle, end in spans:
                _expect_row(expected, table, reader, step, event, start, middle, chained)
    return rows


def _expect_row(expected, table, reader, step, event, start, middle, chained):
    kind = step.kind
    first = reader.read(event, start, step.present[0])[0]
    second = reader.read(event, middle, step.present[1])[0] if kind == "update" else None
    label = table.label
    if table.key:
        key = [first[i] for i in table.key]
        if chained:
            _chained(expected, table, key, None if kind == "insert" else first)
        if kind == "insert":
            expected.put(label, key, first)
        elif kind == "delete":
            expected.put(label, key, ABSENT)
        else:
            after_key = [second[i] for i in table.key]
            if after_key != key:
                expected.put(label, key, ABSENT)
            expected.put(label, after_key, second)
    elif kind == "insert":
        expected.count(label, first, 1)
    elif kind == "delete":
        expected.count(label, first, -1)
    else:
        expected.count(label, first, -1)
        expected.count(label, second, 1)


def _chained(expected, table, key, before):
    """UndoConflict when ``key`` has a state from the named transactions before and the
    row image that follows it is not that state (``before``; None: an insert, the key
    must be absent)."""
    known, state = expected.state(table.label, key)
    if not known:
        return
    compared = [i for i, c in enumerate(table.columns) if not c.generated]
    same = (state is ABSENT) if before is None else (
        state is not ABSENT and all(state[i] == before[i] for i in compared))
    if not same:
        raise UndoConflict(
            f"{table.label} {_key_text(table, key)}: a transaction not named changed it "
            f"between the named ones; name it too, or undo them one at a time; nothing "
            f"was changed")


def _key_text(table, key):
    return "(" + ", ".join(f"{table.columns[i].name}={v}" for i, v in zip(table.key, key)) + ")"


def _check(target, tables, expected):
    conflicts, checked = [], 0
    for label, table in sorted(tables.items()):
        checked += target.check(table, expected, label, conflicts)
    if not checked:
        raise UndoRefused(
            f"nothing the undo changes can be checked: it only puts back rows deleted from "
            f"{', '.join(sorted(tables))} (no primary key), which may be there already; a "
            f"second run would insert them twice; {INSTEAD}")
    if conflicts:
        shown = "\n".join("  " + c.line() for c in conflicts[:SHOWN])
        more = f"\n  ... and {len(conflicts) - SHOWN} more" if len(conflicts) > SHOWN else ""
        raise UndoConflict(
            f"{len(conflicts)} difference(s) in the {checked} row(s) checked: rows the undo "
            f"would change are no longer as the transaction(s) left them (a later write); "
            f"nothing was changed\n{shown}{more}")


def _reverse(session, target, plans, unchecked):
    """The reversed events applied with BINLOG, newest first, in statements of up to
    ``BINLOG_CAP`` bytes."""
    batch, size = [], 0
    for found, changes in reversed(plans):
        for step in reversed(changes.steps):
            table_map = with_server_id(found.events[step.table_map], found.checksum,
                                       target.server_id)
            event = found.events[step.index]
            start, spans = row_spans(event, changes.layouts[step.table_id], found.fde,
                                     found.checksum)
            flags = NO_FOREIGN_KEY_CHECKS_F if _label(changes.maps[step.table_id]) \
                in unchecked else 0
            undone = reversed_event(event, spans, start, found.fde, found.checksum,
                                    target.server_id, flags)
            batch += [table_map, undone]
            size += len(table_map) + len(undone)
            if size >= BINLOG_CAP:
                session.binlog(batch, fragments=target.mariadb)
                batch, size = [], 0
    if batch:
        session.binlog(batch, fragments=target.mariadb)
