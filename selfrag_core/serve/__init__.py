"""``selfrag serve``: the strategies as an async HTTP service (extra ``[serve]``).

Only ``ServeSettings`` is imported eagerly: the rest (``create_app``, ``run``, ...) loads
FastAPI on first use, with an install hint when the extra is missing."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from selfrag_core.serve.settings import ServeSettings

if TYPE_CHECKING:
    from selfrag_core.presets import default_strategies, open_backend
    from selfrag_core.serve.app import create_app
    from selfrag_core.serve.server import add_arguments, run, run_from_args, settings_from_args

_LAZY = {
    "create_app": "selfrag_core.serve.app",
    "default_strategies": "selfrag_core.presets",  # below both the server and the CLI
    "open_backend": "selfrag_core.presets",
    "add_arguments": "selfrag_core.serve.server",
    "run": "selfrag_core.serve.server",
    "run_from_args": "selfrag_core.serve.server",
    "settings_from_args": "selfrag_core.serve.server",
}

__all__ = [
    "ServeSettings",
    "add_arguments",
    "create_app",
    "default_strategies",
    "open_backend",
    "run",
    "run_from_args",
    "settings_from_args",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'selfrag_core.serve' has no attribute {name!r}")
