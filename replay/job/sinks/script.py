"""The packets that apply one transaction to the target, its checkpoint with them (pure).

A script's body is what a session sends (SQL text, the source's statement bytes,
BinlogPackets); its ``commit`` writes the checkpoint row in the same commit. A
statement that commits by itself (DDL) is announced in ``pending_ddl`` first
and recorded after, both unlogged (``replay.job.sinks.target`` explains why).
"""

from replay.job.sinks.session import BinlogPacket
from replay.job.sinks.statements import (MYSQL_GTID_AUTOMATIC, ddl_prefix, gtid_session,
                                         mysql_gtid, transaction_steps)


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
        # a transaction that commits by itself: the index in body of its first statement
        # of the source's (what errors_if_already_applied reads on a rerun)
        self.first_raw = None
        # MariaDB's CREATE ... SELECT: the packets of its DDL, which a rerun cut off after
        # it skips when they say they ran (the rows' part is one commit of its own)
        self.ddl_packets = 0


def script_transaction(trx, fde, checksum, cap, checkpoint, source, quote, keep_gtid=True):
    """The TrxScript of ``trx``: SQL text, the source's bytes, a LoadData or a BinlogPacket
    (statements, then a BINLOG, which must end its packet); ``checkpoint`` (its row's SQL)
    goes with its commit, or, for a transaction that commits by itself, in a commit of
    its own after it. ``quote``: the connection's escape (a value -> an SQL literal).
    ``keep_gtid``: the target logs it under its original GTID (else one of its own)."""
    steps = transaction_steps(trx, fde, checksum, cap)
    session = gtid_session(trx) if keep_gtid else []
    prefix = ddl_prefix(steps)
    packets, current = [], list(session) if prefix is None else []
    if prefix is not None and keep_gtid:  # the GTID goes with the rows' commit
        current = ["SET SESSION sql_log_bin=0"]
    ddl_packets = None
    for i, (kind, what) in enumerate(steps):
        if i == prefix:
            packets += [";\n".join(current)] if current else []
            ddl_packets, current = len(packets), []
            if keep_gtid:
                current = ["SET SESSION sql_log_bin=1"] + session
        if kind == "commit":
            continue  # the checkpoint row goes with the COMMIT: one packet
        if kind in ("sql", "begin"):
            current.append(what)
            continue
        before = "".join(sql + ";\n" for sql in current)
        if kind == "binlog":
            packets.append(BinlogPacket(before, what))
        else:  # the source's own bytes, or a LoadData: a packet of their own
            packets += [before] if before else []
            packets.append(what)
        current = []
    if current:
        packets.append(";\n".join(current))
    # MySQL: a GTID set in gtid_next is spent by its commit and must be set again
    automatic = f";\n{MYSQL_GTID_AUTOMATIC}" if session and mysql_gtid(trx) else ""
    if steps[-1][0] == "commit":
        script = TrxScript(trx, packets, f"{checkpoint};\nCOMMIT{automatic}")
        script.ddl_packets = ddl_packets or 0
        script.first_raw = next((i for i, p in enumerate(packets)
                                 if not isinstance(p, (str, BinlogPacket))), None)
        return script
    script = _ddl_script(trx, packets, checkpoint, quote(source), quote)
    if automatic:
        script.commit = f"{MYSQL_GTID_AUTOMATIC};\n{script.commit}"
    return script


def _ddl_script(trx, packets, checkpoint, source, quote):
    """A transaction that commits by itself (DDL, a non-transactional change, XA PREPARE
    or COMMIT): announced before, recorded after (both unlogged)."""
    announce = ("SET SESSION sql_log_bin=0;\nREPLACE INTO mysqlbackup_replay.pending_ddl "
                f"(source, file, start, gtid) VALUES ({source}, {quote(trx.file)}, "
                f"{trx.start}, {quote(trx.gtid or '')});\n"
                "SET SESSION sql_log_bin=1")
    script = TrxScript(trx, [announce] + packets, "SET SESSION sql_log_bin=0;\nBEGIN;\n"
                f"{checkpoint};\nDELETE FROM mysqlbackup_replay.pending_ddl WHERE "
                f"source = {source};\nCOMMIT;\nSET SESSION sql_log_bin=1")
    raw = [i for i, packet in enumerate(packets) if not isinstance(packet, (str, BinlogPacket))]
    script.first_raw = 1 + raw[0] if raw else None  # after the announcement
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
