"""How a restore applies the binlogs (``--apply auto|statements|native``) and who decodes
them (``--engine auto|spark|local``): the choice and the plan line that says why (pure);
the restores that exercise each way against real servers are in test_restore.py and
test_native_apply.py."""

from dataclasses import dataclass, field
from types import SimpleNamespace

from mysqlbackup.source.spec import SourceSpec
from replay.job.engines import BATCH_BYTES, BATCH_FILES, LOCAL_MAX_BYTES, batches, choose_engine
from replay.planning.options import build_selection
from replay.spark.context import SparkSetup
from replay.restore.run import ApplyChoice, RestoreOptions, choose_apply

MB = 1000 * 1000


@dataclass
class Plan:
    """What choose_apply reads of a RestorePlan."""

    manifest: dict = field(default_factory=lambda: {
        "id": "20261126T100000Z", "method": "dump", "gtid": "0-1-42",
        "gtid_flavor": "mariadb"})
    bytes_to_read: int = 100 * MB
    spans: tuple = ()


def local_target():
    return SourceSpec("127.0.0.1", 3306, "root", "")


def test_the_engine_is_local_for_a_small_archive_without_filters():
    assert choose_engine("auto", 100 * MB, False) == (
        "local", "100 MB to read, under 256 MB: no Spark start-up, decoded here")
    assert choose_engine("auto", LOCAL_MAX_BYTES, False) == (
        "spark", "256 MB to read: Spark decodes the files in parallel")
    assert choose_engine("auto", 1, True) == (
        "spark", "filters: Spark decodes every file in parallel")
    assert choose_engine("auto", 1, False, master="spark://h:7077") == (
        "spark", "--master spark://h:7077")
    assert choose_engine("auto", 1, False, spark_settings=("--conf", "--python")) == (
        "spark", "--conf, --python given: Spark settings")
    assert choose_engine("spark", 1, False) == ("spark", "asked for")
    assert choose_engine("local", 10 * LOCAL_MAX_BYTES, True) == ("local", "asked for")


def sized(*sizes):
    """Units of these archived sizes (what ``batches`` reads of them)."""
    return [SimpleNamespace(objects=[SimpleNamespace(index={"size": size})]) for size in sizes]


def test_small_files_share_a_task_in_order_and_large_ones_keep_their_own():
    # a quiet server's archive: 3,000 files of 10 kB on 2 cores, about 8 tasks
    found = batches(sized(*[10_000] * 3000), 2)
    assert [p for batch in found for p in batch] == list(range(3000))  # in order, once each
    assert len(found) == 15 and {len(b) for b in found} == {BATCH_FILES}
    found = batches(sized(*[10_000] * 300), 2)
    assert len(found) == 9 and max(len(b) for b in found) == 37
    # files of a batch's size or more: one task each, as ever
    assert batches(sized(*[BATCH_BYTES] * 5), 2) == [[0], [1], [2], [3], [4]]
    assert batches(sized(200 * MB, 1_000, 1_000, 200 * MB), 2) == [[0], [1, 2], [3]]
    # a small archive of a few files: one task a file (every core busy)
    assert batches(sized(5_000, 4_000, 6_000), 2) == [[0], [1], [2]]
    assert batches([], 2) == []


def test_auto_is_native_where_the_base_and_the_target_allow_it():
    choice = choose_apply(RestoreOptions("file:///a", local_target()), Plan())
    assert choice == ApplyChoice("native", "auto: the target's own applier, nothing decoded "
                                 "here", auto=True)
    assert choice.lines(RestoreOptions("file:///a", workers=3)) == [
        "apply: native (auto: the target's own applier, nothing decoded here; the target's "
        "replication applier, 3 parallel threads, fed by mysqlbackup serve on loopback)"]


def test_native_runs_one_thread_where_parallel_apply_would_not_be_exact():
    """The target's parallel applier is exact for row events of one GTID domain; a
    statement-based transaction, a second MariaDB domain, or an index that does not say
    make it one thread, and the plan's line says why."""
    def line(*spans, workers=4):
        plan = Plan(spans=tuple(SimpleNamespace(statements=s, gtid_after=after)
                                for s, after in spans))
        opts = RestoreOptions("file:///a", local_target(), workers=workers)
        return choose_apply(opts, plan).lines(opts)[0].split("; ")[1]
    assert line((0, "0-1-50"), (0, "0-1-90")) == (
        "the target's replication applier, 4 parallel threads, fed by mysqlbackup serve on "
        "loopback)")
    assert line((0, "0-1-50"), (2, "0-1-90")) == (
        "the target's replication applier, one thread, not 4: 2 statement-based "
        "transactions: their values follow the order they are applied in, fed by "
        "mysqlbackup serve on loopback)")
    assert line((0, "0-1-50,1-1-3")) == (
        "the target's replication applier, one thread, not 4: GTID domains 0, 1: a parallel "
        "replica applies each domain on its own, out of the binlog's order, fed by "
        "mysqlbackup serve on loopback)")
    assert line((None, "0-1-50"), (0, "0-1-90")) == (
        "the target's replication applier, one thread, not 4: the indexes of 1 of the files "
        "do not say whether they hold statement-based transactions (archived by an older "
        "version), fed by mysqlbackup serve on loopback)")
    assert line((0, "0-1-50,1-1-3"), workers=1) == (
        "the target's replication applier, one thread, fed by mysqlbackup serve on loopback)")


def test_auto_says_why_not_native_and_which_engine_decodes():
    mysql = Plan({"id": "b1", "method": "dump", "gtid": "3e11fa47-71ca-11e1-9e33-"
                  "c80aa9429562:1-5", "gtid_flavor": "mysql"})
    assert choose_apply(RestoreOptions("file:///a", local_target()), mysql).mode == "native"
    no_gtid = Plan({"id": "b1", "method": "dump", "gtid": "", "gtid_flavor": "mariadb"})
    choice = choose_apply(RestoreOptions("file:///a", local_target()), no_gtid)
    assert (choice.mode, choice.engine, choice.auto) == ("statements", "local", True)
    assert choice.lines(RestoreOptions("file:///a")) == [
        "apply: statements (auto: not native, --apply native needs a source with GTIDs; "
        "base b1 has no GTID position); decoded by this process, no Spark (100 MB to read, "
        "under 256 MB: no Spark start-up, decoded here)"]
    remote = choose_apply(RestoreOptions("file:///a", SourceSpec("192.0.2.1", 3306, "r", "")),
                          Plan(bytes_to_read=900 * MB))
    assert remote.lines(RestoreOptions("file:///a")) == [
        "apply: statements (auto: not native, --apply native needs the target on this "
        "machine (it replicates from serve on loopback); 192.0.2.1:3306 is not); decoded by "
        "Spark (900 MB to read: Spark decodes the files in parallel)"]
    table = RestoreOptions("file:///a", local_target(),
                           selection=build_selection(tables=["shop.items"]))
    assert choose_apply(table, Plan()).lines(table) == [
        "apply: statements (auto: not native, --apply native applies whole binlogs: --table "
        "and --rewrite-db need --apply statements); decoded by Spark (filters: Spark decodes "
        "every file in parallel)"]
    physical = choose_apply(RestoreOptions("file:///a", local_target()),
                            Plan({"id": "p1", "method": "physical", "gtid": "0-1-9",
                                  "gtid_flavor": "mariadb"}))
    assert physical.why == ("auto: not native, base p1 is a physical backup: --apply native "
                            "is not supported for it yet")


def test_spark_settings_make_auto_decode_on_spark():
    shipped = SparkSetup.of(["spark.archives=env.tar.gz#environment"],
                            python="./environment/bin/python")
    assert shipped.given() == ("--conf", "--python")
    assert SparkSetup.of().given() == ()
    opts = RestoreOptions("file:///a", local_target(), apply="statements", spark=shipped)
    assert choose_apply(opts, Plan()) == ApplyChoice(
        "statements", "asked for", "spark", "--conf, --python given: Spark settings", False)
    plain = RestoreOptions("file:///a", local_target(), apply="statements")
    assert choose_apply(plain, Plan()).engine == "local"


def test_asked_for_ways_are_kept():
    opts = RestoreOptions("file:///a", local_target(), apply="statements", engine="spark")
    assert choose_apply(opts, Plan()) == ApplyChoice("statements", "asked for", "spark",
                                                     "asked for", False)
    native = RestoreOptions("file:///a", local_target(), apply="native")
    assert choose_apply(native, Plan()) == ApplyChoice("native", "asked for")
