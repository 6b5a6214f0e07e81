"""selfrag for LangChain: strategies as LCEL runnables and retrievers; any LangChain model
as the LLM and any retriever or vector store as the backend."""

from selfrag_langchain._convert import from_document, to_document
from selfrag_langchain.backends import LangChainBackend, VectorStoreSearch, as_backend, raw_score_kind
from selfrag_langchain.embeddings import SelfRAGEmbeddings
from selfrag_langchain.llm import LangChainLLM, as_llm
from selfrag_langchain.providers import make_chat_model, make_llm
from selfrag_langchain.retriever import StrategyRetriever
from selfrag_langchain.runnable import SelfRAGRunnable

__version__ = "0.1.0"

__all__ = [
    "LangChainBackend",
    "LangChainLLM",
    "SelfRAGEmbeddings",
    "SelfRAGRunnable",
    "StrategyRetriever",
    "VectorStoreSearch",
    "as_backend",
    "as_llm",
    "from_document",
    "make_chat_model",
    "make_llm",
    "raw_score_kind",
    "to_document",
]
