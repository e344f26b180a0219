"""Walk the events of a binlog held in memory (pure: the caller reads or maps the file).

``iter_events`` checks each event's framing as it goes: the header fits, the
declared size fits, ``log_pos`` points at the end of the event (binlog v4 files
written by a server) and, when the file is checksummed, the CRC32 matches. The
first violation raises CorruptBinlog with the offset of the bad event.
"""

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import CorruptBinlog


def check_magic(buf, file=None):
    """Raise CorruptBinlog unless ``buf`` starts with the binlog magic bytes."""
    if len(buf) < len(ev.MAGIC) or bytes(buf[:4]) != ev.MAGIC:
        raise CorruptBinlog("not a binlog file (bad magic bytes)", file, 0)


def read_fde(buf, file=None):
    """The format description event at offset 4 as (event bytes, parsed FDE)."""
    check_magic(buf, file)
    event = next(iter_events(buf, 4, checksum=None, file=file, limit=1), (None, None))[1]
    if event is None or event[4] != ev.FORMAT_DESCRIPTION:
        raise CorruptBinlog("first event is not a format description event", file, 4)
    fde = ev.parse_format_description(event)
    if fde.binlog_version != 4:
        raise CorruptBinlog(f"binlog format v{fde.binlog_version} is not supported", file, 4)
    return bytes(event), fde


def iter_events(buf, start, checksum, file=None, limit=None, check_log_pos=True, base=0):
    """Yield (offset, event memoryview) from ``start`` to the end of ``buf``.

    ``base`` is the file offset of ``buf[0]`` when ``buf`` is a piece of a file:
    offsets yielded and reported are then file offsets.

    ``checksum``: True to verify CRC32 on every event, False to skip it, None to
    verify only a format description event's own CRC (the algorithm is then
    read from it and applied to the events after it).
    """
    view = memoryview(buf)
    off, count, end = start, 0, len(view)
    while off < end and (limit is None or count < limit):
        event = _take_event(view, off, end, file, check_log_pos, base)
        if event[4] == ev.FORMAT_DESCRIPTION:
            checksum = ev.parse_format_description(event).checksum_alg == ev.CHECKSUM_CRC32
        if checksum and not ev.crc_ok(event):
            raise CorruptBinlog(f"CRC32 mismatch in {ev.event_name(event[4])} event", file,
                                base + off)
        yield base + off, event
        off += len(event)
        count += 1


def _take_event(view, off, end, file, check_log_pos, base):
    """The whole event starting at ``off``; raise CorruptBinlog if torn or malformed."""
    at = base + off
    if end - off < ev.HEADER_LEN:
        raise CorruptBinlog(f"torn event: {end - off} bytes left, header needs 19", file, at)
    header = ev.parse_header(view, off)
    if header.size < ev.HEADER_LEN:
        raise CorruptBinlog(f"event size {header.size} is smaller than a header", file, at)
    if off + header.size > end:
        raise CorruptBinlog(
            f"torn event: {ev.event_name(header.type)} of {header.size} bytes, "
            f"{end - off} left in the file", file, at)
    if check_log_pos and header.log_pos not in (0, at + header.size):
        raise CorruptBinlog(
            f"{ev.event_name(header.type)} event says it ends at {header.log_pos}, "
            f"it ends at {at + header.size}", file, at)
    return view[off:off + header.size]
