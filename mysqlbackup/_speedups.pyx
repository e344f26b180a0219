# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The compiled fused loop of the stream (optional: ``mysqlbackup.speedups`` says whether
it is built and in use; its pure Python twin, ``mysqlbackup.fusedloop``, has the same
functions with the same results, and ``tests/test_fastpath.py`` holds them to it).

``squeeze_packets`` (the decoder's side) walks a run of plain event packets and moves
their events together in place, so that the run becomes one contiguous range of whole
events. ``walk_events`` (the Syncer's side) takes from such a range the common events
that it can check and follow on its own. Both stop, leaving the bytes untouched, at the
first packet or event they do not handle; the Python code then handles that one, so
every unusual case, and every error message, stays in one place.
"""

from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memmove


cdef extern from "zlib.h":
    unsigned long crc32(unsigned long crc, const unsigned char *buf, unsigned int length) nogil


cdef enum:
    HEADER = 19     # v4 event header
    CRC_SIZE = 4
    OK_BYTE = 0x00  # a binlog packet's first byte

# the kinds of event ``walk_events`` takes (``configure`` gets the table of types)
KIND_OTHER, KIND_INERT_IN_TRX, KIND_XID, KIND_MARIA_GTID = 0, 1, 2, 3
# which version of the twins this is: ``fusedloop.TWIN`` must be the same, else a build
# from another version of this file is not used
TWIN = 3

# The protocol's constants, handed over by ``configure`` from their one definition.
cdef unsigned char _kinds[256]
cdef uint32_t _residue, _max_payload
cdef Py_ssize_t _squeeze_max = 0
cdef unsigned int _artificial, _standalone, _semi_indicator, _need_ack
cdef object _crc = None
cdef Py_ssize_t _inline_crc_max = 0


def configure(kinds, residue, artificial, standalone, max_payload, semi_indicator,
              need_ack, crc, inline_crc_max, squeeze_max):
    """Set the constants (``kinds``: 256 bytes, a KIND_* per event type), the CRC
    function for events larger than ``inline_crc_max`` (zlib's runs inline below) and
    the largest event ``squeeze_packets`` moves."""
    global _residue, _max_payload, _artificial, _standalone, _semi_indicator, _need_ack
    global _crc, _inline_crc_max, _squeeze_max
    if len(kinds) != 256:
        raise ValueError("kinds needs one entry per event type")
    for i in range(256):
        _kinds[i] = kinds[i]
    _residue, _artificial, _standalone = residue, artificial, standalone
    _max_payload, _semi_indicator, _need_ack = max_payload, semi_indicator, need_ack
    _crc, _inline_crc_max, _squeeze_max = crc, inline_crc_max, squeeze_max


cdef inline uint32_t _u32(const unsigned char *p) noexcept nogil:
    return p[0] | (p[1] << 8) | (p[2] << 16) | (<uint32_t>p[3] << 24)


def squeeze_packets(unsigned char[::1] buf, Py_ssize_t off, Py_ssize_t end, int seq,
                    bint semi_sync):
    """``mysqlbackup.fusedloop.squeeze_packets``, compiled: the same arguments, results
    and stops (squeeze_max is the configured SQUEEZE_MAX)."""
    cdef Py_ssize_t head = 7 if semi_sync else 5  # packet header, OK byte, semi-sync bytes
    cdef Py_ssize_t out = off, start = off, plen, size, count = 0
    cdef unsigned char *p
    if end <= off:
        return off, seq, 0, 0
    p = &buf[0]
    while end - off >= head + HEADER:
        plen = p[off] | (p[off + 1] << 8) | (p[off + 2] << 16)
        size = plen - (head - 4)
        if p[off + 3] != seq or plen >= _max_payload or off + 4 + plen > end \
                or p[off + 4] != OK_BYTE or size < HEADER or size > _squeeze_max \
                or _u32(p + off + head + 9) != size:
            break
        if semi_sync and (p[off + 5] != _semi_indicator or p[off + 6] & _need_ack):
            break
        memmove(p + out, p + off + head, size)
        out += size
        off += 4 + plen
        seq = (seq + 1) & 0xFF
        count += 1
    return off, seq, out - start, count


def walk_events(data, Py_ssize_t off, uint64_t pos, bint in_trx):
    """``mysqlbackup.fusedloop.walk_events``, compiled: the same arguments, results and
    stops (events over inline_crc_max get their CRC from the configured function)."""
    cdef const unsigned char[::1] view = data
    cdef Py_ssize_t n = view.shape[0], start = off, size
    cdef const unsigned char *p
    cdef uint64_t boundary = 0
    cdef uint32_t when = 0
    cdef unsigned char kind
    cdef long count = 0, closed = 0
    cdef unsigned long residue
    opened = []
    while n - off >= HEADER:
        p = &view[off]
        size = _u32(p + 9)
        kind = _kinds[p[4]]
        # MariaDB 11.4+ (binlog_legacy_event_pos=OFF): a row event inside a transaction
        # carries no end position (0); the offset follows the sizes
        if size < HEADER + CRC_SIZE or size > n - off or (p[17] | (p[18] << 8)) & _artificial \
                or (_u32(p + 13) != pos + size and not (
                    in_trx and kind == KIND_INERT_IN_TRX and _u32(p + 13) == 0)):
            break
        if in_trx:
            if kind != KIND_INERT_IN_TRX and kind != KIND_XID:
                break
        elif kind != KIND_MARIA_GTID or size < HEADER + 13 + CRC_SIZE \
                or p[HEADER + 12] & _standalone:
            break
        if size <= _inline_crc_max:
            residue = crc32(0, p, <unsigned int>size)
        else:
            residue = _crc(data[off:off + size])
        if residue != _residue:
            break
        if kind == KIND_XID:
            in_trx = False
            boundary = pos + size
            closed += 1
        elif kind == KIND_MARIA_GTID:
            in_trx = True
            opened.append((_u32(p + HEADER + 8), _u32(p + 5),
                           _u32(p + HEADER) | (<uint64_t>_u32(p + HEADER + 4) << 32)))
        when = _u32(p)
        pos += size
        off += size
        count += 1
    return off - start, count, in_trx, boundary, when, opened, closed
