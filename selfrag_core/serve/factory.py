"""What ``selfrag serve`` serves by default: the embedded backend and the four strategies."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from selfrag_core.errors import MissingDependencyError
from selfrag_core.strategies import HyDERAG, RecursiveRAG, SelfHealingRAG, SelfIRAG

logger = logging.getLogger("selfrag.serve")


def default_strategies(rag: Any, llm: Any) -> dict[str, Any]:
    """The four strategies over one backend and LLM, by their URL names.

    ``healing`` tries plain retrieval first, then HyDE, keeping the first answer
    whose faithfulness clears its threshold.
    """
    return {
        "self": SelfIRAG(rag, llm),
        "hyde": HyDERAG(rag, llm),
        "recursive": RecursiveRAG(rag, llm),
        "healing": SelfHealingRAG(llm, [rag, HyDERAG(rag, llm)]),
    }


def open_backend(index_dir: str | Path | None) -> Any:
    """The embedded backend over ``index_dir`` (opened with the embedder it was built
    with, or created there; the CLI's ``open_index``), or in memory when None."""
    try:
        from selfrag_core.store import RAG
    except ImportError as e:
        raise MissingDependencyError(
            f"the embedded backend needs bm25s ({e}): pip install 'selfrag[serve,store]'"
        ) from e
    if index_dir is None:
        logger.info("no --index: the documents live in memory only")
        return RAG()
    from selfrag_core.cli import open_index

    return open_index(Path(index_dir), create=True)
