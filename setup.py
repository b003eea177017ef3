"""Build the compiled core (src/_core) into the package pykfk._core.

Switches (also as environment variables):
  PYKFK_DEBUG=1                 line tracing, -O0 -g, Cython annotations
  PYKFK_BUILD_CYTHON_ALWAYS=1   re-cythonize even when a generated .c is newer
  PYKFK_EXTENSIONS=a,b          build only these extensions of pykfk._core
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

CORE = "src/_core"
DEBUG = os.environ.get("PYKFK_DEBUG", "") not in ("", "0")

# -O2 -Wall as asyncpg/aiokafka; x86-64 SIMD is enabled per function with
# __attribute__((target)) and chosen at run time, so no -m flags here.
compile_args = ["-O0", "-g", "-DPYKFK_DEBUG"] if DEBUG else ["-O2"]
compile_args += ["-Wall", "-Wno-unused-function", "-std=c11"]
macros = [("CYTHON_TRACE", "1"), ("CYTHON_TRACE_NOGIL", "1")] if DEBUG else []


def core_extension(name: str, *c_sources: str) -> Extension:
    """One extension pykfk._core.<name> from <name>.pyx plus shared C sources."""
    return Extension(
        f"pykfk._core.{name}",
        [f"{CORE}/{name}.pyx", *(f"{CORE}/{c}" for c in c_sources)],
        include_dirs=[CORE],
        extra_compile_args=compile_args,
        define_macros=macros,
    )


extensions = [
    core_extension("crc", "crc32.c"),
    core_extension("records", "crc32.c", "batch.c"),
    core_extension("segment", "crc32.c", "batch.c"),
    core_extension("sendfile"),
    core_extension("wire"),
    core_extension("structs"),
    core_extension("regions"),
    core_extension("metadata"),
    core_extension("fetch_path"),
    core_extension("request_lane"),
    core_extension("append_path"),
]

# PYKFK_EXTENSIONS=segment,sendfile builds only those (handy while working on one module).
only = {n for n in os.environ.get("PYKFK_EXTENSIONS", "").split(",") if n}
if only:
    extensions = [e for e in extensions if e.name.rsplit(".", 1)[1] in only]

directives = {"language_level": 3, "embedsignature": True}
if DEBUG:
    directives["linetrace"] = True

setup(
    ext_modules=cythonize(
        extensions,
        include_path=[CORE],
        compiler_directives=directives,
        force=os.environ.get("PYKFK_BUILD_CYTHON_ALWAYS", "") not in ("", "0"),
        annotate=DEBUG,
    ),
)
