"""replay --parquet --typed: one typed dataset per source table, held equal, value for value,
to the change table of JSON images (its own tests hold that to the reference decoder)."""

import base64
import datetime
import json
import os

import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from replay.job.decoding.changejson import ChangeDecodeError, time_text
from replay.job.sinks import typed
from replay.job.sinks.parquet import ParquetSink, PartWriter, part_name
from tests.helpers import run_cli
from tests.test_rowdecode import TYPES, corpus_files, own_files, parsed

OWN_TYPES = [f for f in own_files() if os.path.basename(f) in TYPES]


def write_tables(path, out, rows_per_part=100_000):
    """A task's PartWriter (typed on) over a file's transactions with column names (the
    first one without them ends it: the JSON table refuses it alike); the driver's
    adoption and finish. (sink, transactions written) or None when none decode."""
    found = parsed(path)
    if found is None:
        return None
    transactions, fde, checksum = found
    sink = ParquetSink(f"file://{out}", typed_tables=True, rows_per_part=rows_per_part)
    sink.open(None)
    writer = PartWriter(sink.task_spec().at(3))
    for trx in transactions:
        try:
            writer.apply(trx, fde, checksum)
        except ChangeDecodeError:
            break  # no column names (binlog_row_metadata=MINIMAL) or a refused event
    written = writer.close()
    sink.adopt(written, [None] * written["transactions"])
    sink.finish()
    return sink


def as_json(value, atype):
    """A typed value as the JSON change table writes it (``changejson.encode_value``)."""
    if value is None:
        return None
    if pa.types.is_decimal(atype):
        return format(value, "f")
    if pa.types.is_binary(atype):
        return base64.b64encode(value).decode("ascii")
    if pa.types.is_timestamp(atype):
        if atype.tz is None:
            return value.isoformat()
        return value.astimezone(datetime.timezone.utc).replace(tzinfo=None).isoformat() + "Z"
    if pa.types.is_date(atype):
        return value.isoformat()
    if pa.types.is_duration(atype):
        return time_text(value)
    return value


def typed_rows(out):
    """{(file, position, row_index): (op, before, after, the version's Arrow image type)}
    of every typed dataset, read as readers do (hive partitions), and the manifest."""
    manifest = json.loads((out / typed.TABLES_DIR / typed.MANIFEST).read_text())
    rows = {}
    for table in manifest["tables"].values():
        for info in table["versions"].values():
            dataset = pads.dataset(str(out / typed.TABLES_DIR / info["dir"]),
                                   format="parquet", partitioning="hive")
            image_type = dataset.schema.field("after").type
            for row in dataset.to_table().to_pylist():
                assert row["commit_date"] == row["commit_time"].date().isoformat()
                rows[(row["file"], row["position"], row["row_index"])] = (
                    row["op"], row["before"], row["after"], image_type)
    return rows, manifest


def check_equal(json_image, typed_image, image_type, columns):
    """A typed image against the JSON one, column by column."""
    if json_image is None:
        assert typed_image is None
        return
    json_image = json.loads(json_image)
    for field in image_type:
        got, name = typed_image[field.name], field.name
        if name not in json_image:  # absent from the row image (MINIMAL, NOBLOB)
            assert got is None, name
            continue
        want = json_image[name]
        source = columns[name]["source_type"]
        if source == 248:    # SET: the JSON table has a list, the typed one its string
            assert got == ",".join(want) if want is not None else got is None, name
        elif source == 16:   # BIT: '0'/'1' text against its number
            assert got == (int(want, 2) if want else 0) if want is not None else got is None
        elif pa.types.is_floating(field.type):
            assert got == want or (got is None and want is None), name
        else:
            assert as_json(got, field.type) == want, (name, got, want)


def compare_file(path, out):
    """Every row change of the JSON table has its typed row with the same values."""
    sink = write_tables(path, out)
    if sink is None:
        return 0
    rows, manifest = typed_rows(out)
    json_rows = [r for part in sink.parts for r in pads.dataset(
        str(out / part), format="parquet").to_table().to_pylist()]
    assert len(rows) == len(json_rows)
    columns = {(t["db"], t["table"], v): {c["name"]: c for c in info["columns"]}
               for t in manifest["tables"].values() for v, info in t["versions"].items()}
    versions = {(t["db"], t["table"]): list(t["versions"]) for t in manifest["tables"].values()}
    for change in json_rows:
        op, before, after, image_type = rows[(change["file"], change["position"],
                                              change["row_index"])]
        assert op == change["op"]
        names = [f.name for f in image_type]
        version = next(v for v in versions[(change["db"], change["table"])]
                       if list(columns[(change["db"], change["table"], v)]) == names)
        described = columns[(change["db"], change["table"], version)]
        check_equal(change["before"], before, image_type, described)
        check_equal(change["after"], after, image_type, described)
    return len(json_rows)


def test_the_type_file_as_typed_columns(tmp_path):
    # every column type MariaDB 10.11 writes, in FULL, MINIMAL and NOBLOB row images
    path = OWN_TYPES[0]
    assert compare_file(path, tmp_path / "t") > 0
    manifest = json.loads((tmp_path / "t" / "_tables" / "_manifest.json").read_text())
    (version,) = manifest["tables"]["ty.a"]["versions"].values()
    types = {c["name"]: c["type"] for c in version["columns"]}
    assert {k: types[k] for k in ("tu", "bu", "dc", "dz", "dt", "dt6", "ts", "tm", "vb",
                                  "vc", "e", "s", "b13", "yr", "j")} == {
        "tu": "uint8", "bu": "uint64", "dc": "decimal128(10, 2)", "dz": "decimal256(65, 30)",
        "dt": "date32[day]", "dt6": "timestamp[us]", "ts": "timestamp[us, tz=UTC]",
        "tm": "duration[us]", "vb": "binary", "vc": "string", "e": "string", "s": "string",
        "b13": "uint64", "yr": "int16", "j": "string"}


@pytest.mark.parametrize("name", [os.path.basename(f) for f in own_files()])
def test_every_own_file_is_the_same_typed(name, tmp_path):
    path = next(f for f in own_files() if os.path.basename(f) == name)
    compare_file(path, tmp_path / "t")


def test_every_corpus_file_is_the_same_typed(tmp_path):
    compared = 0
    for i, path in enumerate(corpus_files()):
        compared += compare_file(path, tmp_path / str(i))
    assert compared > 0


def test_memory_stays_bounded_parts_rotate_across_tables(tmp_path):
    # two rows buffered in all: every table's buffer is written together
    sink = write_tables(OWN_TYPES[0], tmp_path / "t", rows_per_part=2)
    rows, _ = typed_rows(tmp_path / "t")
    assert len(sink.typed_parts) >= len(rows) // 2 > 1
    assert all(p.endswith(part_name(3, i)) for i, p in enumerate(
        sorted(p for p in sink.typed_parts if p.startswith(sink.typed_parts[0].rsplit("/", 1)[0]))))


def test_the_driver_removes_typed_parts_it_did_not_adopt(tmp_path):
    out = tmp_path / "changes"
    sink = ParquetSink(f"file://{out}", typed_tables=True).open(None)
    stray = f"{typed.TABLES_DIR}/db.t/v-000000000000/commit_date=2026-01-01/{part_name(5, 0)}"
    sink.dest.write_table(stray, [])
    sink.finish()
    assert not (out / stray).exists()
    manifest = json.loads((out / typed.TABLES_DIR / typed.MANIFEST).read_text())
    assert manifest == {"format": 1, "tables": {}, "parts": []}
    again = ParquetSink(f"file://{out}", typed_tables=True)
    with pytest.raises(Exception, match="already holds a change table"):
        again.open(None)


def test_typed_needs_parquet():
    result = run_cli("replay", "--archive", "file:///nowhere", "--sql", "/dev/null", "--typed")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == "Error: --typed goes with --parquet"


def test_a_table_name_is_a_safe_folder():
    schema = typed.TableSchema("my db", "a/b", [], "mariadb")
    assert schema.key == "my%20db.a%2Fb"
    assert typed.directory(schema, datetime.datetime(2026, 1, 2)).startswith(
        "my%20db.a%2Fb/v-")


def test_a_timestamp_past_2038_from_mariadb_11_8(tmp_path):
    # MariaDB 11.5+ stores TIMESTAMPs to 2106: the 11.8 type file's row 5 holds 2040
    path = next(f for f in OWN_TYPES if "11.8" in f)
    write_tables(path, tmp_path / "t")
    rows, _ = typed_rows(tmp_path / "t")
    fives = [after for _op, _before, after, _t in rows.values() if after and after["id"] == 5]
    assert fives and fives[0]["ts"] == datetime.datetime(2040, 1, 1,
                                                         tzinfo=datetime.timezone.utc)
