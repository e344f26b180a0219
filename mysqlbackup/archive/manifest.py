"""The manifest of a base backup: the ``index.json`` written beside its object, last,
once the stored object was read back and matched (pure: dicts and bytes, no I/O).

A restore picks a base by its GTID position (``gtid``) and starts the binlogs
there; ``binlog_file``/``binlog_pos`` is the same point as a file position.
``sha256`` and ``stored_size`` describe the object as stored (compressed),
``raw_sha256`` and ``raw_size`` the stream the method produced. ``codec`` says how
it is stored (``zstd`` or ``zstd+age``, see archive.codec) and ``key_ids`` which keys
open it; a manifest written before them means ``zstd``.

The base list (``base_rows``, ``checked_manifest``): the base backups of an archive as
``base list`` and ``archive ls`` show them: id, source, method, end time, age, stored
size, GTID and status, from the listing and the manifests alone (no base object is
read).

A base is *sound* when its manifest reads and validates and its object is listed at
the stored size the manifest names; otherwise *damaged*, with the reason (no manifest:
an upload in progress or abandoned; a manifest that does not read; the object
missing or of another size). Only a sound base can start a restore.
Those read manifests through the listing handed in; the rest is pure.
"""

import json
import time

from mysqlbackup.archive.names import BASE_INDEX
from mysqlbackup.archive.objects import REKEY_FROM, form_problem, manifest_forms
from mysqlbackup.utc import epoch
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
OPTIONAL_FIELDS = {"codec": _TEXT, "key_ids": (list,),
                   REKEY_FROM: (dict,),  # while archive rekey swaps the object
                   "lock": (dict,)}      # the S3 Object Lock it was written under
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
    if (malformed := form_problem(obj)):
        return malformed
    if obj.get("codec", "zstd") not in ("zstd", "zstd+age"):
        return f"codec {obj['codec']!r}"
    if obj["kind"] != "base" or obj["method"] not in METHODS:
        return f"kind {obj['kind']!r} / method {obj['method']!r}"
    for field in ("sha256", "raw_sha256"):
        if len(obj[field]) != 64 or not set(obj[field]) <= _HEX:
            return f"{field} is {obj[field][:40]!r}"
    return None

# what a row holds of the manifest (None for a base whose manifest does not read)
FIELDS = ("source", "id", "method", "gtid", "binlog_file", "binlog_pos", "start_time",
          "end_time", "raw_size", "stored_size", "server_version")
_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def base_rows(listing, sources, now=None):
    """One dict a base backup of each of ``sources`` (ArchiveListing), oldest first per
    source: FIELDS, ``age_seconds`` (since its end), ``status`` and ``problem``."""
    now = time.time() if now is None else now
    return [base_row(listing, source, base_id, members, now)
            for source in sources
            for base_id, members in sorted(listing.bases[source].items())]


def base_row(listing, source, base_id, members, now):
    """The row of one base (``members``: its objects as listed, by member name)."""
    row = dict.fromkeys(FIELDS)
    row.update(source=source, id=base_id, age_seconds=None, status="damaged")
    manifest, problem = checked_manifest(listing, source, base_id, members)
    if manifest is None:
        return dict(row, problem=problem)
    row.update((f, manifest[f]) for f in FIELDS)
    row["age_seconds"] = max(0, int(now - epoch(manifest["end_time"])))
    return dict(row, status="damaged" if problem else "sound", problem=problem)


def checked_manifest(listing, source, base_id, members=None):
    """(manifest or None, problem or None) of one base: its manifest as it reads, and why
    the base is damaged (no manifest, one that does not read, its object missing or of
    another size than the manifest's); (manifest, None) for a sound base."""
    if members is None:
        members = listing.bases[source].get(base_id, {})
    try:
        manifest = listing.base_manifest(source, base_id) if BASE_INDEX in members else None
    except (CorruptBinlog, FileNotFoundError) as e:
        return None, str(e)
    if manifest is None:
        return None, "no manifest (an upload in progress or abandoned)"
    return manifest, object_problem(listing, members, manifest)


def object_problem(listing, members, manifest):
    """Why the base's object does not match its manifest as listed (missing, or of
    another size), or None."""
    key = members.get(manifest["member"])
    if key is None:
        return f"its object {manifest['member']} is missing"
    size = listing.sizes.get(key)
    if size not in [form[0] for form in manifest_forms(manifest)]:
        return (f"its object {manifest['member']} is {size} bytes, the manifest says "
                f"{manifest['stored_size']}")
    return None


def format_age(seconds):
    """``3d 4h``, ``2h``, ``12m 5s``, ``40s``: the largest unit and the next when not 0."""
    if seconds is None:
        return "?"
    parts = []
    for unit, size in _UNITS:
        if parts or seconds >= size or unit == "s":
            count, seconds = divmod(seconds, size)
            if count or not parts:
                parts.append(f"{count}{unit}")
            if len(parts) == 2 or parts and not count:
                break
    return " ".join(parts)


def format_base(row):
    """One line of a base: the same in ``base list`` and ``archive ls``."""
    if row["method"] is None:
        return f"{row['source']}  base {row['id']}  damaged: {row['problem']}"
    status = "sound" if row["status"] == "sound" else f"damaged: {row['problem']}"
    return (f"{row['source']}  base {row['id']}  {row['method']}  ended {row['end_time']} "
            f"({format_age(row['age_seconds'])} ago)  {row['stored_size']} bytes stored  "
            f"gtid {row['gtid'] or '(none)'}  {status}")
