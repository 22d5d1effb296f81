"""Regular expressions compiled when first used, not when their module is imported.

Python compiles a pattern in Python code (re._compiler): the kernel-log readers' hundred-odd patterns took 17 ms of a
cold `gpudiag check`'s imports on the dev VM (issue 36, item 9), most of them for formats and drivers a node's log does
not have (the amdgpu messages on an NVIDIA node, dmesg's time formats when /dev/kmsg is read, a NIC driver that is
not loaded). `lazy_compile(pattern, flags)` stands for `re.compile(pattern, flags)`: the first use of a method or
attribute compiles it, and from then on its methods are the compiled pattern's own (bound once, so a scan pays no
more per line than with the pattern itself). A pattern that does not compile raises at its first use, not at import:
tests/probe/test_patterns.py compiles every one the probe declares.
"""

from __future__ import annotations

import re
import threading
from typing import Any

# What a compiled pattern offers, bound onto the stand-in once it is compiled.
_ATTRIBUTES = ("match", "fullmatch", "search", "finditer", "findall", "sub", "subn", "split", "scanner", "pattern",
               "flags", "groups", "groupindex")
DECLARED: list["LazyPattern"] = []  # every stand-in made, for the test that compiles them all
_LOCK = threading.Lock()


class LazyPattern:
    """re.compile(pattern, flags), compiled at its first use."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._source = (pattern, flags)

    def compiled(self) -> re.Pattern:
        with _LOCK:  # the kernel-log scan and the main thread may meet here
            found = self.__dict__.get("_compiled")
            if found is None:
                found = re.compile(*self._source)
                for name in _ATTRIBUTES:
                    setattr(self, name, getattr(found, name))
                self._compiled = found
        return found

    def __getattr__(self, name: str) -> Any:  # only for what is not bound yet: the first use
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return f"lazy_compile({self._source[0]!r}, {self._source[1]!r})"


def lazy_compile(pattern: str, flags: int = 0) -> LazyPattern:
    made = LazyPattern(pattern, flags)
    DECLARED.append(made)
    return made
