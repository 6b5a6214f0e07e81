"""Fixtures: a VectorStoreIndex over a ranking hash embedding, scripted LLM factory."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import TextNode

from .li_fakes import CORPUS, SELF_RAG_RULES, HashEmbedding, ScriptedLLM


@pytest.fixture
def embed() -> HashEmbedding:
    return HashEmbedding()


@pytest.fixture
def index(embed: HashEmbedding) -> VectorStoreIndex:
    nodes = [TextNode(text=text, id_=node_id) for node_id, text in CORPUS]
    return VectorStoreIndex(nodes, embed_model=embed)


@pytest.fixture
def make_llm() -> Callable[..., ScriptedLLM]:
    def make(rules: Sequence[tuple[str, str]] = SELF_RAG_RULES, **kwargs: Any) -> ScriptedLLM:
        return ScriptedLLM(rules=list(rules), **kwargs)

    return make
