"""Builds the tilekern wheel.

How the library travels: by default the build runs `make` in the repository
this directory belongs to and bundles lib/libtilekern.so.0 inside the package
(a platform wheel).  With TK_LIBRARY set to an installed libtilekern.so.0 at
build time (after `make install`), nothing is bundled: the package records
that path and loads it.  Either way the choice is written to
tilekern/_library.py in the built package."""
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
HEADER = os.path.join(REPO, "include", "tilekern.h")


def version():
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    parts = [re.search(rf"#define TK_VERSION_{p} (\d+)", text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def installed_library():
    lib = os.environ.get("TK_LIBRARY")
    return os.path.abspath(lib) if lib else None


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "tilekern")
        recorded = installed_library()
        if recorded is None:
            subprocess.run(["make", "-C", REPO, "--no-print-directory", "all"], check=True)
            shutil.copyfile(os.path.join(REPO, "lib", "libtilekern.so.0"),
                            os.path.join(target, "libtilekern.so.0"))
            recorded = "libtilekern.so.0"  # next to the package's files
        elif not os.path.exists(recorded):
            raise SystemExit(f"TK_LIBRARY={recorded}: no such file")
        with open(os.path.join(target, "_library.py"), "w", encoding="utf-8") as f:
            f.write("# Written by setup.py: the library this build uses, relative to "
                    "this package.\n")
            f.write(f"RECORDED = {recorded!r}\n")


class BinaryDistribution(Distribution):
    """A bundled library makes the wheel platform-specific."""

    def has_ext_modules(self):
        return installed_library() is None


setup(version=version(), cmdclass={"build_py": BuildWithLibrary},
      distclass=BinaryDistribution)
