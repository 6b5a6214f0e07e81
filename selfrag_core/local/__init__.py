"""The embedded local LLM and embedder (extra ``[local]``).

Importing this package is cheap: llama-cpp-python, torch and sentence-transformers
load only when a ``LocalLLM`` or ``LocalEmbeddings`` is constructed.
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
