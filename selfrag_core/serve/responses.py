"""JSON bodies: orjson where it is installed (the ``[serve]`` extra brings it), else the
standard library. One difference: orjson writes a non-finite float as ``null`` where
``json`` refuses it."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse

_ORJSON: Any
try:
    import orjson as _ORJSON
except ImportError:
    _ORJSON = None


def dumps(content: Any) -> bytes:
    """Compact UTF-8 JSON of ``content`` (lists, dicts, str, numbers, bools, None)."""
    if _ORJSON is not None:  # non-str keys become strings, as json does
        return _ORJSON.dumps(content, option=_ORJSON.OPT_NON_STR_KEYS)  # type: ignore[no-any-return]
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


class FastJSONResponse(JSONResponse):
    """Starlette's ``JSONResponse``, rendered by :func:`dumps`."""

    def render(self, content: Any) -> bytes:
        return dumps(content)
