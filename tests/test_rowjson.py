"""The change table's JSON written straight from a rows event's bytes
(``_changejson.rows_json``, taken by ``changejson.json_changes``) against the usual way (the
row dicts, ``changejson.image_values``, ``to_json``, ``key_json``): the same before, after and key
texts at every edge, or None where it leaves a value to the usual way. The whole files
(own, types and corpus) are compared in ``tests/test_rowdecode.py``
(``test_the_compiled_json_image_gives_the_pure_ones_rows``), where this path runs for
every table it can write."""

from types import SimpleNamespace

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from replay.job.decoding import changejson, changes, rowdecode, rowloop, rowtext
from tests.test_rowdecode import (EDGE_COLUMNS, change_rows, corpus_files, outcome, own_files,
                                  parsed, same)

pytestmark = pytest.mark.skipif(rowdecode.compiled is None, reason=rowdecode.describe())

# the columns rows_json writes itself (no stored column, no bytes kept as bytes)
WRITTEN = [s for s in EDGE_COLUMNS if s[0][0] in changejson.JSON_KINDS
           and s[0][3] not in ("h", "i", "ts")]


def usual(data, plan, before, after, op, pk):
    """The (before, after, key) texts of each row the usual way (the pure row loop)."""
    columns = {c[3]: SimpleNamespace(type=t, name=c[3], character_set_name=None,
                                     max_length=0) for c, t in plan.types}
    rows, _ = rowloop.read_rows(data, 0, len(data), before, after)
    out = []
    for row in rows:
        old, new = changejson.images(op, row, columns, changejson.image_values)
        out.append((changejson.to_json(old), changejson.to_json(new), changejson.key_json(pk, old, new)))
    return out


def compiled(data, plan, before, after, op, pk):
    names = [c[3] for c in plan.columns]
    found = changejson.compiled.rows_json(
        data, 0, len(data), before, after, changejson.OP_CODES[op],
        tuple(changejson.ENCODER.encode(n) + ":" for n in names),
        tuple(names.index(c) for c in pk))
    return None if found is None else found[0]


class Table(rowdecode.Plan):
    """A plan that also knows its columns' types (the usual way's columns)."""

    __slots__ = ("types",)


def table(specs):
    plan = Table(tuple(s[0] for s in specs), "d", "t", 1)
    plan.types = [(s[0], s[1]) for s in specs]
    return plan


def image_bytes(specs, present, nulls=()):
    shown = [s for i, s in enumerate(specs) if present >> i & 1]
    bitmap = sum(1 << j for j, s in enumerate(shown) if s[0][3] in nulls)
    return bitmap.to_bytes((len(shown) + 7) // 8, "little") + b"".join(
        s[2] for s in shown if s[0][3] not in nulls and s[2] is not None)


@pytest.mark.parametrize("op", ["insert", "update", "delete"])
def test_every_written_value_is_the_usual_text(op):
    specs = [s for s in WRITTEN if s[0][3] not in ("null", "absent")]
    plan, every = table(specs), (1 << len(specs)) - 1
    one = image_bytes(specs, every)
    data = (one + one) * 3 if op == "update" else one * 3
    image = plan.image(every)
    after = image if op == "update" else None
    for pk in ([], ["a"], ["d", "a"]):
        assert compiled(data, plan, image, after, op, pk) == \
            usual(data, plan, image, after, op, pk)


def test_nulls_absent_columns_and_the_key_of_a_minimal_image():
    """NULL values, columns not in an image (MINIMAL), an update whose after image lacks
    a key column (the key from the before image), a delete without its key column (null
    in the key), an insert without it (left to the usual way, which fails there)."""
    specs = [((rowloop.K_INT, 4, True, "id"), FIELD_TYPE.LONG, (7).to_bytes(4, "little")),
             ((rowloop.K_STRING, 1, "utf-8", "s"), FIELD_TYPE.VARCHAR, b"\x02hi"),
             ((rowloop.K_DECIMAL, 12, 2, "m"), FIELD_TYPE.NEWDECIMAL, EDGE_COLUMNS[10][2])]
    plan = table(specs)
    full, no_id = 0b111, 0b110
    old = plan.image(full)
    new = plan.image(no_id)
    data = image_bytes(specs, full, nulls=("s",)) + image_bytes(specs, no_id)
    assert compiled(data, plan, old, new, "update", ["id"]) == \
        usual(data, plan, old, new, "update", ["id"]) == \
        [('{"id":7,"s":null,"m":"0.50"}', '{"s":"hi","m":"0.50"}', '{"id":7}')]
    data = image_bytes(specs, no_id)
    assert compiled(data, plan, new, None, "delete", ["id", "s"]) == \
        usual(data, plan, new, None, "delete", ["id", "s"]) == \
        [('{"s":"hi","m":"0.50"}', None, '{"id":null,"s":"hi"}')]
    assert compiled(data, plan, new, None, "insert", ["id"]) is None


@pytest.mark.parametrize("value, encoding", [
    (b"\x05caf\xc3\xa9", "utf-8"),            # not ASCII: written as it is
    (b"\x05a\"b\\c", "utf-8"),                # escaped by the json module's encoder
    (b"\x03a\nb", "utf-8"),
    (b"\x04abc\x80", "cp1252"),               # another character set
    (b"\x00", "utf-8"),                       # empty
])
def test_strings_as_the_json_module_writes_them(value, encoding):
    specs = [((rowloop.K_STRING, 1, encoding, "s"), FIELD_TYPE.VARCHAR, value)]
    plan = table(specs)
    data = image_bytes(specs, 1) * 2
    assert compiled(data, plan, plan.image(1), None, "insert", ["s"]) == \
        usual(data, plan, plan.image(1), None, "insert", ["s"])


@pytest.mark.parametrize("spec", [
    ((rowloop.K_DOUBLE, 8, None, "x"), FIELD_TYPE.DOUBLE, bytes.fromhex("000000000000f87f")),
    ((rowloop.K_DOUBLE, 8, None, "x"), FIELD_TYPE.DOUBLE, bytes.fromhex("000000000000f07f")),
    ((rowloop.K_DATE, 3, None, "x"), FIELD_TYPE.DATE, (2023 << 9 | 2 << 5 | 30).to_bytes(3, "little")),
    ((rowloop.K_STRING, 1, "utf-8", "x"), FIELD_TYPE.VARCHAR, b"\x02\xff\xfe"),
])
def test_a_value_it_does_not_write_goes_the_usual_way(spec):
    """NaN and infinity (the json module refuses them), a DATE that is no date: None;
    bytes that are not UTF-8: the decoders' ValueError (``json_changes`` takes either as
    the usual way's to say)."""
    plan = table([spec])
    data = image_bytes([spec], 1)
    try:
        assert compiled(data, plan, plan.image(1), None, "insert", []) is None
    except UnicodeDecodeError:
        assert spec[2] == b"\x02\xff\xfe"


def test_the_zero_date_and_an_invalid_datetime_are_null():
    specs = [((rowloop.K_DATE, 3, None, "d"), FIELD_TYPE.DATE, bytes(3)),
             ((rowloop.K_DATETIME2, 0, None, "t"), FIELD_TYPE.DATETIME2, bytes.fromhex("8000000000"))]
    plan = table(specs)
    data = image_bytes(specs, 3)
    assert compiled(data, plan, plan.image(3), None, "insert", []) == \
        usual(data, plan, plan.image(3), None, "insert", []) == \
        [(None, '{"d":null,"t":null}', None)]


def test_rows_past_the_event_are_left_to_the_usual_way():
    specs = WRITTEN[:3]
    plan = table(specs)
    data = image_bytes(specs, 7)
    with pytest.raises(ValueError):
        changejson.compiled.rows_json(data[:-1], 0, len(data), plan.image(7), None, 0,
                                     ('"a":', '"b":', '"c":'), ())


def test_it_runs_for_the_tables_of_the_own_files(monkeypatch):
    """The own files' tables of plain columns take this path (the rest the usual one),
    and give the change rows the pure row loop gives."""
    taken = []
    original = changejson.json_changes

    def spy(*args):
        found = original(*args)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(changes, "json_changes", spy)
    for path in own_files():
        monkeypatch.setattr(rowdecode, "loop", rowdecode.compiled)
        mine = change_rows(path)
        monkeypatch.setattr(rowdecode, "loop", rowloop)
        assert mine == change_rows(path), path
    assert sum(taken) >= 40 and not all(taken)


def stored_rows(path):
    """The typed tables' view of a file's changes (``iter_changes(stored=True)``): each
    change with its stored images, as the typed sink takes them."""
    found = parsed(path)
    if found is None:
        return []
    transactions, fde, checksum = found
    tables = {}

    def changes_of(trx):
        out = []
        for change in changes.iter_changes(trx, fde, checksum, [], tables, stored=True):
            stored = change.pop("stored")
            out.append((change, stored.dbms, stored.before, stored.after))
        return out
    return [outcome(lambda: changes_of(trx)) for trx in transactions]


@pytest.mark.parametrize("which", ["own", "corpus"])
def test_the_typed_view_is_the_same_either_way(which, monkeypatch):
    """With the stored images too (--typed), the JSON from the bytes and the images from
    the rows give what the row dicts alone give, type for type."""
    for path in own_files() if which == "own" else corpus_files():
        monkeypatch.setattr(rowdecode, "loop", rowdecode.compiled)
        mine = stored_rows(path)
        monkeypatch.setattr(rowdecode, "loop", rowloop)
        assert same(mine, stored_rows(path)), path


@pytest.mark.parametrize("op", ["insert", "update", "delete"])
def test_the_plain_images_are_the_stored_ones(op):
    """``changes._present`` (a table json_changes writes) gives ``stored_image``'s
    images, a column not in an image (MINIMAL) left out, NULL kept."""
    specs = [s for s in WRITTEN if s[0][3] not in ("null", "absent")][:4]
    plan = table(specs)
    columns = {c[3]: SimpleNamespace(type=t, name=c[3], character_set_name=None,
                                     max_length=0) for c, t in plan.types}
    full, part = 0b1111, 0b0101
    data = image_bytes(specs, full, nulls=("b",)) + image_bytes(specs, part)
    if op == "update":
        before, after = plan.image(full), plan.image(part)
    else:
        before, after, data = plan.image(part), None, image_bytes(specs, part)
    rows, _ = rowloop.read_rows(data, 0, len(data), before, after)
    for row in rows:
        assert changejson.images(op, row, None, changes._present) == changejson.images(
            op, row, columns, changejson.stored_image)


def test_the_compiled_loops_take_image_plans_only():
    """The loops read an image plan by index: a plan that is not a tuple (an ImagePlan
    is one) is refused, never read."""
    for call in (lambda: changejson.compiled.rows_json(b"", 0, 0, [1], None, 0, (), ()),
                 lambda: rowdecode.compiled.read_rows(b"", 0, 0, (), {}),
                 lambda: rowtext.compiled.rows_text(b"", 0, 0, "x", None, (), (), (), ())):
        with pytest.raises(TypeError, match="ImagePlans"):
            call()
    plan = rowdecode.Plan([(rowloop.K_INT, 4, True, "a")], "d", "t", 1)
    image = plan.image(1)
    assert isinstance(image, rowdecode.ImagePlan) and image.columns[0].name == "a"
    assert rowdecode.compiled.read_rows(b"\x00\x07\x00\x00\x00", 0, 5, image, None) == \
        ([{"values": {"a": 7}, "none_sources": {}}], 5)
