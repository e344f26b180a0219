"""Where one zstd frame ends in a stream fed a chunk at a time (pure).

A zstd frame (RFC 8878) is a header, then blocks, each behind a 3-byte header that
says its type, its size and whether it is the last one, then the content checksum
when the frame header asks for one. ``FrameEnd`` follows those headers alone (it
decompresses nothing), so that a decompressor that writes its output a bounded
piece at a time (python-zstandard's ``stream_writer``, which says neither where the
frame ends nor whether it did) can be told a truncated frame and bytes after it:
``codec._Inflate``.
"""

MAGIC = b"\x28\xb5\x2f\xfd"
_DICT_ID = (0, 1, 2, 4)    # Dictionary_ID sizes by flag
_CONTENT_SIZE = (0, 2, 4, 8)  # Frame_Content_Size sizes by flag (0: 1 byte if single segment)
_RLE, _RESERVED = 1, 3


class FrameEnd:
    """``take(data)``: how many bytes of ``data`` still belong to the frame; ``done``
    once its last byte went by. A stream that is no zstd frame (another magic, a
    reserved block type) is ``broken``: every byte is then taken, for the decompressor
    to refuse."""

    def __init__(self):
        self.done = self.broken = False
        self._head = bytearray()
        self._need, self._state = len(MAGIC) + 1, self._frame_header
        self._skip, self._last, self._checksum = 0, False, False

    def take(self, data):
        pos, size = 0, len(data)
        while pos < size and not self.done and not self.broken:
            if self._skip:
                step = min(self._skip, size - pos)
                self._skip -= step
                pos += step
                if not self._skip and self._last:
                    self.done = True
                continue
            piece = data[pos:pos + self._need - len(self._head)]
            self._head += piece
            pos += len(piece)
            if len(self._head) == self._need:
                head, self._head = bytes(self._head), bytearray()
                self._state(head)
        return size if self.broken else pos

    def _frame_header(self, head):
        if head[:4] != MAGIC:
            self.broken = True
            return
        descriptor = head[4]
        single = descriptor >> 5 & 1
        self._checksum = bool(descriptor >> 2 & 1)
        content_size = _CONTENT_SIZE[descriptor >> 6] or single
        rest = (0 if single else 1) + _DICT_ID[descriptor & 3] + content_size
        self._expect(rest, self._header_rest) if rest else self._expect(3, self._block)

    def _header_rest(self, head):
        self._expect(3, self._block)

    def _block(self, head):
        value = int.from_bytes(head, "little")
        kind, length = value >> 1 & 3, value >> 3
        if kind == _RESERVED:
            self.broken = True
            return
        self._last = bool(value & 1)
        self._skip = (1 if kind == _RLE else length) + (4 if self._last and self._checksum
                                                           else 0)
        if self._last and not self._skip:
            self.done = True
        self._expect(3, self._block)

    def _expect(self, need, state):
        self._need, self._state = need, state
