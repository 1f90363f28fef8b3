"""Builds the Cython core: csrc/STAGE/_x_c.pyx as the extension benchc.STAGE._x_c.

Without a C compiler (or Cython) the install still succeeds and benchc runs on
its pure-Python twins; BENCHC_REQUIRE_EXTENSIONS=1 (set by CI) turns a failed
build into an error, so a broken extension never goes unnoticed.
"""

import glob
import os

from setuptools import setup
from setuptools.command.build_ext import build_ext

REQUIRED = os.environ.get("BENCHC_REQUIRE_EXTENSIONS", "") not in ("", "0")


class OptionalBuildExt(build_ext):
    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - any build failure falls back to pure Python
            if REQUIRED:
                raise
            print(f"benchc: C extensions not built ({e}); using the pure-Python core")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            if REQUIRED:
                raise
            print(f"benchc: {ext.name} not built ({e}); using its pure-Python twin")


def extensions():
    if os.environ.get("BENCHC_NO_EXTENSIONS", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if REQUIRED:
            raise
        return []
    sources = sorted(glob.glob("csrc/*/*.pyx"))
    for src in sources:
        # a module's own .pxd sits in the package, where cythonize does not look for it: a C
        # file older than that .pxd is made again (else its struct layout goes stale)
        pxd = os.path.join("benchc", os.path.relpath(src, "csrc"))[:-4] + ".pxd"
        c = src[:-4] + ".c"
        if os.path.exists(pxd) and os.path.exists(c) and os.path.getmtime(pxd) > os.path.getmtime(c):
            os.remove(c)
    from setuptools import Extension

    # csrc/ mirrors the package: csrc/client/_stream_c.pyx is benchc.client._stream_c
    exts = [Extension("benchc." + os.path.splitext(os.path.relpath(s, "csrc"))[0].replace(os.sep, "."), [s],
                      extra_compile_args=["-O3"]) for s in sources]
    # include_path: the .pxd files shared between modules sit in the package
    # (benchc/metrics/_hdr_c.pxd), so `cimport benchc.metrics._hdr_c` resolves
    return cythonize(exts, include_path=["."], compiler_directives={"language_level": 3})


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
