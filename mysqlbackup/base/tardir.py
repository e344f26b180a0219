"""A directory as a tar stream (POSIX pax format), read a bounded chunk at a time:
``TarReader(root).read(n)`` gives the archive's next bytes, each file read in pieces
of at most CHUNK bytes as the stream reaches it (never a whole file in memory, nothing
staged on disk). ``tar -x`` (GNU or bsdtar) unpacks it.

Entries are the directory's folders and regular files, below ``root`` and in sorted
order, by their relative names; owner and group are left out (a restore gives the
files to whoever unpacks them), mode and modification time are kept. Anything else
(a symlink, a socket, a device) is refused: a cloned data directory holds none. A
file that changes size while it is read is an error naming it: the directory must
be at rest (a clone is, once its server has stopped).
"""

import os
import stat
import tarfile

from mysqlbackup.errors import MysqlBackupError

CHUNK = 1 << 20
BLOCK = tarfile.BLOCKSIZE


class TarDirError(MysqlBackupError):
    """The directory cannot be streamed as it is (a special file, a file that changed)."""


class TarReader:
    """``read(n)``: the next bytes of the tar stream of ``root`` (b"" at its end);
    ``files``/``size``: how many regular files and how many bytes of them went."""

    def __init__(self, root, skip=()):
        """``skip``: names (relative to ``root``) left out, with what is below them."""
        self.root, self.skip = os.path.abspath(root), set(skip)
        self.files = self.size = 0
        self._pieces = self._walk()
        self._pending = b""

    def read(self, n=CHUNK):
        """At most ``max(n, CHUNK)`` bytes, fewer only at the end of the stream."""
        want = n if n and n > 0 else CHUNK
        out = [self._pending]
        have = len(self._pending)
        while have < want:
            piece = next(self._pieces, None)
            if piece is None:
                break
            out.append(piece)
            have += len(piece)
        data = b"".join(out)
        self._pending = data[want:]
        return data[:want]

    def _walk(self):
        for relative in self._names():
            path = os.path.join(self.root, relative)
            st = os.lstat(path)
            info = tarfile.TarInfo(relative)
            info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                yield info.tobuf(tarfile.PAX_FORMAT)
            elif stat.S_ISREG(st.st_mode):
                info.type, info.size = tarfile.REGTYPE, st.st_size
                yield info.tobuf(tarfile.PAX_FORMAT)
                yield from self._content(path, relative, st.st_size)
                self.files += 1
                self.size += st.st_size
            else:
                raise TarDirError(f"{path}: neither a file nor a folder: not streamed")
        yield bytes(2 * BLOCK)  # the end-of-archive marker

    def _names(self, relative=""):
        """Every folder and file below ``root``, relative, depth first in sorted order:
        a folder, then what it holds."""
        folder = os.path.join(self.root, relative) if relative else self.root
        for name in sorted(os.listdir(folder)):
            path = os.path.join(relative, name) if relative else name
            if path in self.skip:
                continue
            yield path
            if os.path.isdir(os.path.join(self.root, path)) and \
                    not os.path.islink(os.path.join(self.root, path)):
                yield from self._names(path)

    @staticmethod
    def _content(path, relative, size):
        left = size
        with open(path, "rb") as f:
            while left:
                data = f.read(min(CHUNK, left))
                if not data:
                    raise TarDirError(f"{relative} shrank while it was read ({size} bytes "
                                      f"when listed, {size - left} read): the directory "
                                      f"must not change while it is streamed")
                left -= len(data)
                yield data
            if f.read(1):
                raise TarDirError(f"{relative} grew while it was read (listed at {size} "
                                  f"bytes): the directory must not change while it is "
                                  f"streamed")
        if size % BLOCK:
            yield bytes(BLOCK - size % BLOCK)
