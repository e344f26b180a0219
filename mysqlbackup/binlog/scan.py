"""Walk the events of a binlog held in memory, or streamed a chunk at a time (pure: the
caller reads or maps the file).

``iter_events`` checks each event's framing as it goes: the header fits, the
declared size fits, ``log_pos`` points at the end of the event (binlog v4 files
written by a server) and, when the file is checksummed, the CRC32 matches. The
first violation raises CorruptBinlog with the offset of the bad event.
``EventStream`` does the same over a file (or a piece of one) fed in chunks, holding one
event at most.
"""

import struct

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import CorruptBinlog, TornEvent


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
        etype, size, log_pos = _unpack_frame(view, off + 4) if end - off >= 19 else (0, 0, 0)
        if size < 19 or off + size > end or (
                check_log_pos and log_pos and log_pos != base + off + size):
            _framed_size(view, off, end, file, check_log_pos, base)  # raises what is wrong
        event = view[off:off + size]
        if etype == ev.FORMAT_DESCRIPTION:
            checksum = ev.parse_format_description(event).checksum_alg == ev.CHECKSUM_CRC32
            if checksum and not ev.crc_ok(event):
                _crc_mismatch(event, file, base + off)
        elif checksum and ev.crc32(event) != ev.CRC_RESIDUE:
            _crc_mismatch(event, file, base + off)
        yield base + off, event
        off += size
        count += 1


class EventStream:
    """Walk the events of a binlog handed over a chunk at a time (``feed``), holding at
    most one event plus the bytes that complete it: the streaming twin of
    ``check_magic`` + ``iter_events(data, 4, None)`` for a whole file (``start`` 0), or
    of ``iter_events(data, 0, checksum, base=start)`` for a piece of one that begins
    at an event boundary ``start`` (``checksum``: what the format description event
    before it said), with the same checks, errors and offsets. ``on_event(offset,
    event)`` gets each event (a memoryview, valid during the call); ``close`` at the
    end raises what a torn last event raises.

    ``end``: the file offset where the bytes fed will end, when known (a sealed file's
    size, a segment's end): an event that says it runs past it is refused as soon as
    its header is in, as ``iter_events`` refuses it over the whole bytes, instead of
    being waited for. ``bounded``: without ``end``, an event whose log_pos does not
    match its size is refused as soon as its header is in too. Either way a damaged
    size field never makes the stream hold the rest of the file."""

    def __init__(self, on_event, file=None, check_log_pos=True, start=0, checksum=None,
                 end=None, bounded=False):
        self.on_event, self.file, self.check_log_pos = on_event, file, check_log_pos
        self.checksum, self.offset, self.magic_seen = checksum, start, start != 0
        self.end, self.bounded = end, bounded
        self._held = bytearray()
        self._need = ev.HEADER_LEN + (0 if start else len(ev.MAGIC))  # bytes held to go on

    def feed(self, data):
        """Take the next bytes; walk the events they complete (those whole in ``data``
        in place, without a copy)."""
        view = memoryview(data)
        while self._held and view:
            take = self._need - len(self._held)
            self._held += view[:take]
            view = view[take:]
            if len(self._held) >= self._need:
                self._walk_held()
        if view:
            if len(view) < self._need and not self._held:
                self._held = bytearray(view)
                return
            pos = self._walk(view)
            if pos < len(view):
                self._held = bytearray(view[pos:])

    def close(self):
        """The end of the file: CorruptBinlog if it ends inside an event (or before
        its magic bytes end)."""
        if self._held:
            self._walk_held()
        if not self.magic_seen:
            check_magic(b"", self.file)
        if self._held:
            rest = memoryview(self._held)
            _take_event(rest, 0, len(rest), self.file, self.check_log_pos, self.offset)

    def _walk_held(self):
        held = self._held
        pos = self._walk(memoryview(held))
        self._held = held[pos:]  # a new bytearray: on_event may still hold views of ``held``

    def _walk(self, view):
        """Walk the whole events at the start of ``view`` (the bytes from ``offset``);
        returns how many bytes they took; ``_need`` is then what the rest waits for.
        The framing and CRC checks, inlined as ``iter_events`` has them (the hot
        loop of every archive upload, import and verify)."""
        pos, end = 0, len(view)
        if not self.magic_seen:
            if end < len(ev.MAGIC):
                self._need = len(ev.MAGIC) + ev.HEADER_LEN
                return 0
            check_magic(view, self.file)
            self.magic_seen, pos = True, len(ev.MAGIC)
        self._need = ev.HEADER_LEN
        base, checksum, on_event, check_log_pos = (self.offset, self.checksum, self.on_event,
                                                   self.check_log_pos)
        unpack, crc32, residue, header = _unpack_frame, ev.crc32, ev.CRC_RESIDUE, ev.HEADER_LEN
        try:
            while end - pos >= header:
                etype, size, log_pos = unpack(view, pos + 4)
                if size >= header and pos + size > end:
                    self._ahead(view, pos, size)
                    self._need = size
                    break
                if size < header or (check_log_pos and log_pos and log_pos != base + pos + size):
                    _framed_size(view, pos, end, self.file, check_log_pos, base)  # raises
                event = view[pos:pos + size]
                if etype == ev.FORMAT_DESCRIPTION:
                    checksum = ev.parse_format_description(event).checksum_alg == \
                        ev.CHECKSUM_CRC32
                    if checksum and not ev.crc_ok(event):
                        _crc_mismatch(event, self.file, base + pos)
                elif checksum and crc32(event) != residue:
                    _crc_mismatch(event, self.file, base + pos)
                on_event(base + pos, event)
                pos += size
        finally:
            self.checksum = checksum
        self.offset += pos
        return pos

    def _ahead(self, view, pos, size):
        """Refuse now an event whose header already shows it is wrong (see ``end``)."""
        if self.end is not None:
            _framed_size(view, pos, self.end - self.offset, self.file, self.check_log_pos,
                         self.offset)
        elif self.bounded and self.check_log_pos:
            log_pos = _unpack_frame(view, pos + 4)[2]
            if log_pos and log_pos != self.offset + pos + size:
                _bad_frame(ev.parse_header(view, pos), size, self.file, True, self.offset + pos)


def _take_event(view, off, end, file, check_log_pos, base):
    """The whole event starting at ``off``; raise CorruptBinlog if torn or malformed."""
    return view[off:off + _framed_size(view, off, end, file, check_log_pos, base)]


def _framed_size(view, off, end, file, check_log_pos, base):
    """The size of the event at ``off`` once its framing is checked (the hot path of
    every scan: one unpack, no header object)."""
    if end - off < ev.HEADER_LEN:
        raise TornEvent(f"torn event: {end - off} bytes left, header needs 19", file,
                            base + off)
    etype, size, log_pos = _unpack_frame(view, off + 4)
    if size < ev.HEADER_LEN or off + size > end or (
            check_log_pos and log_pos and log_pos != base + off + size):
        _bad_frame(ev.parse_header(view, off), end - off, file, check_log_pos, base + off)
    return size


def _bad_frame(header, left, file, check_log_pos, at):
    if header.size < ev.HEADER_LEN:
        raise CorruptBinlog(f"event size {header.size} is smaller than a header", file, at)
    if header.size > left:
        raise TornEvent(
            f"torn event: {ev.event_name(header.type)} of {header.size} bytes, "
            f"{left} left in the file", file, at)
    raise CorruptBinlog(
        f"{ev.event_name(header.type)} event says it ends at {header.log_pos}, "
        f"it ends at {at + header.size}", file, at)


def _crc_mismatch(event, file, at):
    raise CorruptBinlog(f"CRC32 mismatch in {ev.event_name(event[4])} event", file, at)


# type (1 byte), skip server_id, size and log_pos: bytes 4..17 of the header
_unpack_frame = struct.Struct("<B4xII").unpack_from
