"""The compiled backend's builds: the normal one and the sanitizer test builds, each with its flags (a leaf).

The MPI_SANITIZER setting picks one for a process: unset, the normal build (-O2); `tsan` or `asan`, a test build
with the sanitizer's instrumentation and the test-only hooks of csrc/testing.h (-DHPCDIST_NATIVE_TESTING), which
loads only where that sanitizer's runtime was preloaded (LD_PRELOAD). The flags are part of the build key, so each
build has its own directory and module name in the cache, and none of a test build's flags reach the normal one.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import settings
from ..records import record

__all__ = ["NORMAL", "SANITIZED", "Variant", "chosen"]

_TESTING = ("-O1", "-g", "-fno-omit-frame-pointer", "-DHPCDIST_NATIVE_TESTING")


@record(frozen=True)
class Variant:
    """One build of the backend: its name ("" for the normal one), compiler and linker flags, and runtime."""

    name: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    runtime: str | None  # the sanitizer's runtime (`libtsan.so`), which must be loaded before the module

    def key(self, digest: str) -> str:
        """The cache's directory name for this build: the digest, after the variant's name for a test build."""
        return f"{self.name}_{digest}" if self.name else digest


NORMAL = Variant("", ("-O2",), (), None)
SANITIZED = {
    "tsan": Variant("tsan", ("-fsanitize=thread", *_TESTING), ("-fsanitize=thread",), "libtsan.so"),
    "asan": Variant(
        "asan",
        ("-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", *_TESTING),
        ("-fsanitize=address,undefined",),
        "libasan.so",
    ),
}


def chosen(environ: Mapping[str, str]) -> Variant:
    """The build the MPI_SANITIZER setting in `environ` names (NORMAL when unset).

    Raises:
        UsageError: the setting names no sanitizer build.
    """
    name = settings.mpi_sanitizer(environ)
    return NORMAL if name is None else SANITIZED[name]
