"""selfrag for LlamaIndex: the strategies as query engines and retrievers, any
LlamaIndex LLM as their LLM and any retriever or index as their backend.

    from selfrag_core import SelfIRAG
    from selfrag_llamaindex import LlamaIndexLLM, SelfRAGQueryEngine, as_backend

    strategy = SelfIRAG(as_backend(index), LlamaIndexLLM(llm))
    engine = SelfRAGQueryEngine(strategy=strategy)
    response = engine.query("...")   # Response: answer, source_nodes, metadata
"""

from selfrag_llamaindex._events import SelfRAGStepEvent
from selfrag_llamaindex.backend import LlamaIndexBackend, as_backend
from selfrag_llamaindex.embeddings import SelfRAGEmbedding
from selfrag_llamaindex.llm import LlamaIndexLLM
from selfrag_llamaindex.query_engine import SelfRAGQueryEngine
from selfrag_llamaindex.retriever import StrategyRetriever

__version__ = "0.1.0"

__all__ = [
    "LlamaIndexBackend",
    "LlamaIndexLLM",
    "SelfRAGEmbedding",
    "SelfRAGQueryEngine",
    "SelfRAGStepEvent",
    "StrategyRetriever",
    "as_backend",
]
