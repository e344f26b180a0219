"""The statements way's exactly-once for transactions that commit by themselves, against
real MariaDB servers: a run cut off between such a transaction and its checkpoint, run
again, applies it once (an XA PREPARE found prepared, MariaDB's CREATE ... SELECT found
made: its rows then applied) or refuses to guess (a non-transactional write on a target
that keeps no GTIDs); what the target then holds is the source's."""

import pymysql
import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.source.spec import SourceSpec
from replay.job.decoding.assemble import assemble
from replay.job.sinks import session as session_module
from replay.job.sinks.target import ApplyError, TargetApplier
from tests.fidelity import fingerprint
from tests.helpers import read

pytestmark = pytest.mark.server

WORKLOAD = [
    "CREATE DATABASE x",
    "CREATE TABLE x.t (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB",
    "CREATE TABLE x.m (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=MyISAM",
    "INSERT INTO x.t VALUES (1, 'one')",
    "XA START 'p1'", "INSERT INTO x.t VALUES (2, 'xa')", "XA END 'p1'", "XA PREPARE 'p1'",
    "XA COMMIT 'p1'",
    "CREATE TABLE x.c ENGINE=InnoDB AS SELECT * FROM x.t",
    "INSERT INTO x.m VALUES (1, 'myisam')",
    "INSERT INTO x.t VALUES (3, 'last')",
]


@pytest.fixture(scope="module")
def binlog(tmp_path_factory):
    """The transactions of a source that ran WORKLOAD, with its format description, and
    what the source then holds."""
    from tests.helpers import module_primary
    server = module_primary(tmp_path_factory, "commits-by-itself")
    try:
        conn = server.root()
        with conn.cursor() as cur:
            for sql in WORKLOAD:
                cur.execute(sql)
        conn.close()
        name = server.binlog_files()[-1]
        transactions, _, fde_event = assemble(read(server.binlog_path(name)), name)
        yield transactions, fde_event, fingerprint(server, "mariadb")
    finally:
        server.stop(remove=True)


def run(target, transactions, fde_event, cut=None):
    """Apply what the target does not hold yet, as the replay's driver does; ``cut``: a
    text whose statement loses the connection instead of running (a run cut off)."""
    fde = ev.parse_format_description(fde_event)
    applier = TargetApplier(SourceSpec("127.0.0.1", target.port, "root", ""), workers=1,
                            merge=1).open("db1")
    real = session_module.TargetSession.run

    def cut_run(self, *statements):
        if cut and any(cut in (s if isinstance(s, str) else s.decode("utf-8", "replace"))
                       for s in statements):
            raise pymysql.err.OperationalError(2013, "Lost connection (a test cut it)")
        return real(self, *statements)
    session_module.TargetSession.run = cut_run
    try:
        applier.apply_many([t for t in transactions if not applier.is_applied(t)],
                           fde_event, True, fde)
    finally:
        session_module.TargetSession.run = real
        applier.close()


def named(transactions, text):
    """The transaction whose events hold ``text``."""
    return next(t for t in transactions if any(text.encode() in e for e in t.events))


def checkpoint_of(trx):
    """A text only the checkpoint row of ``trx`` holds (its end)."""
    return f"'{trx.file}', {trx.end}, "


@pytest.mark.parametrize("log_bin", [False, True], ids=["no-binlog", "binlog"])
def test_an_xa_prepare_cut_off_before_its_checkpoint_is_applied_once(binlog, make_server,
                                                                       log_bin):
    transactions, fde_event, source = binlog
    target = make_server(server_id=2, log_bin=log_bin, semi_sync=False)
    with pytest.raises(ApplyError, match="Lost connection"):
        run(target, transactions, fde_event, cut=checkpoint_of(named(transactions, "XA END")))
    assert target.execute("XA RECOVER") != ()  # prepared, its checkpoint not written
    run(target, transactions, fde_event)
    assert fingerprint(target, "mariadb").differences(source) == []


def test_a_create_select_cut_off_after_its_table_applies_its_rows(binlog, make_server):
    transactions, fde_event, source = binlog
    target = make_server(server_id=2, semi_sync=False)
    ctas = named(transactions, "CREATE TABLE `x`.`c`")
    with pytest.raises(ApplyError):
        run(target, transactions, fde_event, cut=f"gtid_seq_no={ctas.gtid_parts[2]};")
    assert target.execute("SELECT COUNT(*) FROM x.c") == ((0,),)  # made, rows not yet
    run(target, transactions, fde_event)
    assert fingerprint(target, "mariadb").differences(source) == []
    assert target.execute("SELECT @@gtid_binlog_pos")[0][0].endswith(
        f"-{transactions[-1].gtid_parts[2]}")


def test_a_non_transactional_write_cut_off_is_not_guessed(binlog, make_server):
    transactions, fde_event, _ = binlog
    target = make_server(server_id=2, log_bin=False, semi_sync=False)
    myisam = named(transactions, "INSERT INTO x.m")
    with pytest.raises(ApplyError, match="Lost connection"):
        run(target, transactions, fde_event, cut=checkpoint_of(myisam))
    assert target.execute("SELECT * FROM x.m") == ((1, "myisam"),)  # it ran, unrecorded
    with pytest.raises(ApplyError, match=rf"cut off while applying transaction "
                       rf"{myisam.gtid} at {myisam.file}:{myisam.start}, which commits by "
                       r"itself \(non-transactional tables\), and this target \(no binlog, "
                       r"no GTIDs\) cannot tell whether it ran"):
        run(target, transactions, fde_event)
