"""Code shipped by value with its file name and source lines, so that a rank's traceback shows the caller's code.

cloudpickle sends a function that the ranks cannot import (defined in `__main__`, a notebook cell, a lambda, a
closure) by value, code object and all; since 3.1.3 it names every such code object's file "<dynamic-code>", which
leaves a rank's traceback without the user's file and source line. `dumps` pickles code objects itself (marshal,
which keeps `co_filename`, nested code objects and line tables) with the source lines of their file as the caller's
linecache has them (a script from its disk, a notebook cell from IPython's entry); `_code` rebuilds each on the
rank and puts those lines in the rank's linecache, where `traceback` looks for them. marshal's format is the
Python version's, as cloudpickle's code objects are: the ranks run the caller's Python. Pure: pickling only.
"""

from __future__ import annotations

import io
import linecache
import marshal
import types
from typing import Any

__all__ = ["dumps"]


def dumps(value: object) -> bytes:
    """cloudpickle bytes of `value`, its code objects named and with their source as in this process."""
    import cloudpickle

    class _Pickler(cloudpickle.Pickler):
        """cloudpickle's pickler, but code objects travel with their file name and that file's lines."""

        def __init__(self, file: io.BytesIO) -> None:
            super().__init__(file)
            self.sources: dict[str, list[str] | None] = {}  # one list per file: pickled once, then by reference

        def reducer_override(self, obj: object) -> Any:
            if type(obj) is types.CodeType:
                try:
                    data = marshal.dumps(obj)
                except ValueError:  # a constant marshal cannot write (code made by hand): cloudpickle's way
                    return super().reducer_override(obj)
                name = obj.co_filename
                if name not in self.sources:
                    self.sources[name] = linecache.getlines(name) or None
                return _code, (data, self.sources[name])
            return super().reducer_override(obj)

    with io.BytesIO() as file:
        _Pickler(file).dump(value)
        return file.getvalue()


def _code(data: bytes, lines: list[str] | None) -> types.CodeType:
    """The code object marshal wrote; its file's `lines`, where sent, in this process's linecache."""
    code = marshal.loads(data)
    if lines is not None:
        # mtime None: linecache.checkcache keeps the entry (as for IPython's cells) instead of reading a file here
        linecache.cache[code.co_filename] = (sum(map(len, lines)), None, lines, code.co_filename)
    return code
