"""The embedded default backend: ``RAG`` (chunking, BM25, dense and hybrid search,
reranking, persistence, answering) and its parts. Lexical search needs
``pip install 'selfrag[store]'``.
"""

from selfrag_core.store.answer import QueryResult, Usage, format_hits
from selfrag_core.store.chunking import CHUNKERS, Chunker, TextChunk
from selfrag_core.store.dense import HashingEmbeddings
from selfrag_core.store.lexical import LexicalIndex, Tokenizer
from selfrag_core.store.persist import (
    FORMAT_VERSION,
    EmbedderMismatchError,
    IndexConflictError,
    IndexFormatError,
)
from selfrag_core.store.rag import RAG
from selfrag_core.store.rerank import CrossEncoderReranker, MMRReranker, NoopReranker, Reranker
from selfrag_core.store.search import SearchHit

__all__ = [
    "CHUNKERS",
    "FORMAT_VERSION",
    "RAG",
    "Chunker",
    "CrossEncoderReranker",
    "EmbedderMismatchError",
    "HashingEmbeddings",
    "IndexConflictError",
    "IndexFormatError",
    "LexicalIndex",
    "MMRReranker",
    "NoopReranker",
    "QueryResult",
    "Reranker",
    "SearchHit",
    "TextChunk",
    "Tokenizer",
    "Usage",
    "format_hits",
]
