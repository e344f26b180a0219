"""The manifest of a base backup: the ``index.json`` written beside its object, last,
once the stored object was read back and matched (pure: dicts and bytes, no I/O).

A restore picks a base by its GTID position (``gtid``) and starts the binlogs
there; ``binlog_file``/``binlog_pos`` is the same point as a file position.
``sha256`` and ``stored_size`` describe the object as stored (compressed),
``raw_sha256`` and ``raw_size`` the stream the method produced. ``codec`` says how
it is stored (``zstd`` or ``zstd+age``, see archive.codec) and ``key_ids`` which keys
open it; a manifest written before them means ``zstd``.
"""

import json

from mysqlbackup.errors import CorruptBinlog

MANIFEST_VERSION = 1
METHODS = ("dump", "physical", "clone")
_TEXT, _COUNT = (str,), (int,)
_OPTIONAL_TEXT, _OPTIONAL_COUNT = (str, type(None)), (int, type(None))
# every field a manifest holds, with the types a sound one may hold there
MANIFEST_FIELDS = {
    "version": _COUNT, "kind": _TEXT, "id": _TEXT, "source": _TEXT, "method": _TEXT,
    "member": _TEXT, "compression": _TEXT,
    "start_time": _TEXT, "end_time": _TEXT,        # UTC, ISO 8601 with Z, the source's clock
    "gtid": _OPTIONAL_TEXT, "gtid_flavor": _TEXT,  # the snapshot's GTID position
    "binlog_file": _OPTIONAL_TEXT, "binlog_pos": _OPTIONAL_COUNT,
    "server_uuid": _OPTIONAL_TEXT, "server_id": _COUNT, "server_version": _TEXT,
    "raw_size": _COUNT, "stored_size": _COUNT, "sha256": _TEXT, "raw_sha256": _TEXT,
    "tool_version": _TEXT, "details": (dict,),     # method-specific facts
}
# optional: absent from manifests written before encryption (codec "zstd", no keys)
OPTIONAL_FIELDS = {"codec": _TEXT, "key_ids": (list,)}
_HEX = frozenset("0123456789abcdef")


def build_manifest(**fields):
    """A manifest dict from keyword fields (``version`` and ``kind`` filled in);
    ValueError when a field is missing, unknown or of the wrong type."""
    obj = {"version": MANIFEST_VERSION, "kind": "base", "details": {}, **fields}
    problem = _problem(obj)
    if problem:
        raise ValueError(f"bad base manifest: {problem}")
    return obj


def format_manifest(obj):
    """The bytes of a manifest object."""
    return json.dumps(obj, indent=1, sort_keys=True).encode()


def parse_manifest(raw, where, source=None, base_id=None):
    """The manifest in ``raw`` or CorruptBinlog naming ``where`` and the fault; when
    given, ``source`` and ``base_id`` (what the object's key says) must match."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise CorruptBinlog("base manifest is not JSON", file=where) from None
    problem = _problem(obj) if isinstance(obj, dict) else f"not an object: {str(obj)[:40]}"
    if not problem and source is not None and obj["source"] != source:
        problem = f"source {obj['source']!r} (the object is under {source})"
    if not problem and base_id is not None and obj["id"] != base_id:
        problem = f"id {obj['id']!r} (the object is {base_id})"
    if problem:
        raise CorruptBinlog(f"bad base manifest: {problem}", file=where)
    return obj


def _problem(obj):
    unknown = sorted(set(obj) - set(MANIFEST_FIELDS) - set(OPTIONAL_FIELDS))
    missing = [f for f in MANIFEST_FIELDS if f not in obj]
    if unknown or missing:
        return "; ".join(filter(None, [missing and "missing " + ", ".join(missing),
                                       unknown and "unknown " + ", ".join(unknown)]))
    for field, types in MANIFEST_FIELDS.items():
        value = obj[field]
        if isinstance(value, bool) or not isinstance(value, types):
            return f"{field} is {str(value)[:40]!r}"
        if types in (_COUNT, _OPTIONAL_COUNT) and value is not None and value < 0:
            return f"{field} is {value}"
    for field, types in OPTIONAL_FIELDS.items():
        if field in obj and not isinstance(obj[field], types):
            return f"{field} is {str(obj[field])[:40]!r}"
    if obj.get("codec", "zstd") not in ("zstd", "zstd+age"):
        return f"codec {obj['codec']!r}"
    if obj["kind"] != "base" or obj["method"] not in METHODS:
        return f"kind {obj['kind']!r} / method {obj['method']!r}"
    for field in ("sha256", "raw_sha256"):
        if len(obj[field]) != 64 or not set(obj[field]) <= _HEX:
            return f"{field} is {obj[field][:40]!r}"
    return None
