"""The strategies, each one plan run by the shared engine."""

from selfrag_core.strategies.base import Strategy
from selfrag_core.strategies.self_rag import SelfIRAG

__all__ = ["SelfIRAG", "Strategy"]
