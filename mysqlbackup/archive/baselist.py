"""The base backups of an archive as ``base list`` and ``archive ls`` show them: id,
source, method, end time, age, stored size, GTID and status, from the listing and
the manifests alone (no base object is read).

A base is *sound* when its manifest reads and validates and its object is listed at
the stored size the manifest names; otherwise *damaged*, with the reason (no manifest:
an upload in progress or abandoned; a manifest that does not read; the object
missing or of another size). Only a sound base can start a restore."""

import time

from mysqlbackup.archive.names import BASE_INDEX
from mysqlbackup.archive.window import epoch
from mysqlbackup.errors import CorruptBinlog

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
    if size != manifest["stored_size"]:
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
