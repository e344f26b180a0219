"""The packets that apply one transaction to the target, its checkpoint with them (pure).

A script's body is what a session sends (SQL text, the source's statement bytes,
BinlogPackets); its ``commit`` writes the checkpoint row in the same commit. A
statement that commits by itself (DDL) is announced in ``pending_ddl`` first
and recorded after, both unlogged (``replay.job.sinks.target`` explains why).
"""

from replay.job.sinks.session import BinlogPacket
from replay.job.sinks.statements import (MYSQL_GTID_AUTOMATIC, gtid_session, mysql_gtid,
                                     transaction_steps)


def add_gtid(gtids, trx):
    """Add ``trx``'s GTID to ``gtids`` (a MariaGtidPos or a MysqlGtidSet) when it has one
    of that flavor."""
    key = trx.gtid_key
    if key and (len(key) == 2) == (getattr(gtids, "flavor", "mariadb") == "mysql"):
        gtids.add(*key)


class TrxScript:
    """The packets of one transaction: its body, then what commits it."""

    def __init__(self, trx, body, commit):
        self.trx, self.body, self.commit = trx, body, commit
        self.ddl_at = None  # index in body of a statement that commits by itself


def script_transaction(trx, fde, checksum, cap, checkpoint, source, quote, keep_gtid=True):
    """The TrxScript of ``trx``: SQL text, the source's bytes, or a BinlogPacket (statements,
    then a BINLOG, which must end its packet); ``checkpoint`` (its row's SQL) goes with
    its commit. ``quote``: the connection's escape (a value -> an SQL literal).
    ``keep_gtid``: the target logs it under its original GTID (else one of its own)."""
    steps = transaction_steps(trx, fde, checksum, cap)
    session = gtid_session(trx) if keep_gtid else None
    packets, current = [], [session] if session else []
    for kind, what in steps:
        if kind == "commit":
            continue  # the checkpoint row goes with the COMMIT: one packet
        if kind == "sql":
            current.append(what)
            continue
        before = "".join(sql + ";\n" for sql in current)
        if kind == "binlog":
            packets.append(BinlogPacket(before, what))
        else:  # the source's own bytes: a packet of their own
            packets += [before] if before else []
            packets.append(what)
        current = []
    if current:
        packets.append(";\n".join(current))
    # MySQL: a GTID set in gtid_next is spent by its commit and must be set again
    automatic = f";\n{MYSQL_GTID_AUTOMATIC}" if session and mysql_gtid(trx) else ""
    if steps[-1][0] == "commit":
        return TrxScript(trx, packets, f"{checkpoint};\nCOMMIT{automatic}")
    script = _ddl_script(trx, packets, checkpoint, quote(source), quote)
    if automatic:
        script.commit = f"{MYSQL_GTID_AUTOMATIC};\n{script.commit}"
    return script


def _ddl_script(trx, packets, checkpoint, source, quote):
    """DDL commits by itself: announced before, recorded after (both unlogged)."""
    announce = ("SET SESSION sql_log_bin=0;\nREPLACE INTO mysqlbackup_replay.pending_ddl "
                f"(source, file, start, gtid) VALUES ({source}, {quote(trx.file)}, "
                f"{trx.start}, {quote(trx.gtid or '')});\n"
                "SET SESSION sql_log_bin=1")
    script = TrxScript(trx, [announce] + packets, "SET SESSION sql_log_bin=0;\nBEGIN;\n"
                f"{checkpoint};\nDELETE FROM mysqlbackup_replay.pending_ddl WHERE "
                f"source = {source};\nCOMMIT;\nSET SESSION sql_log_bin=1")
    raw = [i for i, packet in enumerate(packets) if isinstance(packet, bytes)]
    script.ddl_at = 1 + raw[0] if len(raw) == 1 else None  # after the announcement
    return script


def checkpoint_sql(quote, source, trx, gtids, slot):
    """The checkpoint row of worker ``slot`` once ``trx`` is applied: its end, and the
    GTIDs applied (``gtids`` plus its own)."""
    gtids = gtids.copy()
    add_gtid(gtids, trx)
    return ("INSERT INTO mysqlbackup_replay.checkpoint (source, worker, file, pos, gtid) "
            f"VALUES ({quote(source)}, {slot}, {quote(trx.file)}, "
            f"{trx.end}, {quote(str(gtids))}) ON DUPLICATE KEY UPDATE "
            "file=VALUES(file), pos=VALUES(pos), gtid=VALUES(gtid), "
            "updated=CURRENT_TIMESTAMP(6)")
