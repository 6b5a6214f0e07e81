"""The embedded local LLM and embedder (extra ``[local]``).

Importing this package is cheap: llama-cpp-python loads only when a ``LocalLLM`` is
constructed, torch and sentence-transformers only when a ``LocalEmbeddings`` embeds
documents (its queries run in numpy: ``selfrag_core.local.minilm``).
"""

from selfrag_core.local.embeddings import LocalEmbeddings, default_embeddings, embeddings_available
from selfrag_core.local.factory import LLM_CHOICES, make_llm
from selfrag_core.local.llm import LocalLLM
from selfrag_core.local.models import MODELS, resolve_model

__all__ = [
    "LLM_CHOICES",
    "MODELS",
    "LocalEmbeddings",
    "LocalLLM",
    "default_embeddings",
    "embeddings_available",
    "make_llm",
    "resolve_model",
]
