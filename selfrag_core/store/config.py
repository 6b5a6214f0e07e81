"""A RAG's settings read from a TOML file (:meth:`RAG.from_config`), and the settings
a saved index keeps (:meth:`RAG.load`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from selfrag_core.errors import ConfigurationError, MissingDependencyError

#: the settings a config file may hold and a saved index passes back to ``RAG(...)``
CONFIG_KEYS = (
    "embed", "path", "chunker", "chunk_size", "chunk_overlap", "bm25_alpha", "bm25_autorebuild",
    "reranker", "stemmer", "llm_retries",
)  # fmt: skip


def is_weight(value: Any) -> bool:
    """Whether ``value`` is a number in [0, 1] (``bm25_alpha``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def read_config(path: Path) -> dict[str, Any]:
    """The settings of a TOML file (keys at top level or under ``[rag]``), checked against
    :data:`CONFIG_KEYS`; a relative ``path`` is made relative to the file."""
    try:
        data = _load_toml(path)
    except OSError as e:
        raise ConfigurationError(f"cannot read the config file {path}: {e}") from e
    except ValueError as e:  # tomllib.TOMLDecodeError
        raise ConfigurationError(f"{path} is not valid TOML: {e}") from e
    table = data.get("rag", data)
    if not isinstance(table, dict):
        raise ConfigurationError(f"[rag] in {path} must be a table")
    unknown = sorted(set(table) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigurationError(f"unknown keys {unknown} in {path}; known keys: {list(CONFIG_KEYS)}")
    settings = dict(table)
    if isinstance(settings.get("path"), str) and not Path(settings["path"]).is_absolute():
        settings["path"] = path.parent / settings["path"]
    return settings


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef]
        except ImportError as e:
            raise MissingDependencyError("reading TOML on Python 3.10 needs tomli: pip install tomli") from e
    with path.open("rb") as f:
        data: dict[str, Any] = tomllib.load(f)
    return data
