"""The optional compiled stream path (mysqlbackup/_speedups.pyx) and row decoders
(replay/job/decoding/_rowloop.pyx, _rowtext.pyx, _changejson.pyx, _rowcount.pyx, each the
twin of the pure module of its name): built with Cython when
a C compiler and zlib's headers are there, skipped with a warning otherwise (the pure
Python path then runs; ``mysqlbackup --version`` says which). MYSQLBACKUP_PURE_PYTHON=1
at install time skips it. Everything else is in setup.cfg."""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the package works without the extension."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # no compiler, no headers: the pure Python path
            self.warn(f"the compiled stream path was not built ({e}): pure Python")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:
            self.warn(f"the compiled stream path was not built ({e}): pure Python")


def extensions():
    """The Cython extensions, or none when Cython is missing or they are turned off."""
    if os.environ.get("MYSQLBACKUP_PURE_PYTHON", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    ext = Extension("mysqlbackup._speedups", ["mysqlbackup/_speedups.pyx"], libraries=["z"])
    # the row decoders' twins, one compiled module per pure module; the others take the
    # row loop's C parts through its .pxd
    core = "replay/job/decoding/_rowloop.pxd"
    rows = [Extension(f"replay.job.decoding.{name}", [f"replay/job/decoding/{name}.pyx"],
                      depends=[core])
            for name in ("_rowloop", "_rowtext", "_changejson", "_rowcount")]
    return cythonize([ext, *rows], quiet=True)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
