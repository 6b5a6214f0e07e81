"""The strategies, each one plan run by the shared engine."""

# the built-in strategies by name (it imports each), which the results' summaries read
from selfrag_core.strategies import registry as registry
from selfrag_core.strategies.adaptive import AdaptiveRAG
from selfrag_core.strategies.base import Strategy
from selfrag_core.strategies.hyde import HyDERAG
from selfrag_core.strategies.plain import DraftsRAG, PlainRAG
from selfrag_core.strategies.recursive import RecursiveRAG
from selfrag_core.strategies.self_healing import SelfHealingRAG
from selfrag_core.strategies.self_rag import SelfIRAG

__all__ = [
    "AdaptiveRAG",
    "DraftsRAG",
    "HyDERAG",
    "PlainRAG",
    "RecursiveRAG",
    "SelfHealingRAG",
    "SelfIRAG",
    "Strategy",
]
