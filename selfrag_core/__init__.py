"""selfrag: self-improving retrieval-augmented generation over any backend and LLM."""

from selfrag_core.config import (
    ExecutionConfig,
    GroundingConfig,
    RecursiveRAGConfig,
    SelfRAGConfig,
)
from selfrag_core.engine import (
    Generate,
    Note,
    Parallel,
    Plan,
    RetrievalWatch,
    Retrieve,
    RetrieveMany,
    Run,
    observe_trace,
)
from selfrag_core.errors import (
    BudgetExceededError,
    ConfigurationError,
    LLMCallError,
    LLMTimeoutError,
    MissingDependencyError,
    ParseError,
    QueryTimeoutError,
    RAGSystemError,
    RetrievalError,
    RetrievalTimeoutError,
    StrategyError,
)
from selfrag_core.llm import _acall_llm as _acall_llm  # importable; not in __all__ (no spec name)
from selfrag_core.llm import _call_llm
from selfrag_core.memory import ConversationMemory
from selfrag_core.metrics import FaithfulnessMetric, FaithfulnessScore
from selfrag_core.openai_llm import OpenAICompatibleLLM
from selfrag_core.profiles import CAPABLE, SMALL_LOCAL, ModelProfile, profile_of
from selfrag_core.protocols import BackendLike, LLMLike, LLMOutput
from selfrag_core.replay import CachedLLM, CacheMissError
from selfrag_core.retrieval import _aretrieve_safe as _aretrieve_safe  # importable; not in __all__
from selfrag_core.retrieval import _deduplicate, _retrieve_safe
from selfrag_core.strategies import HyDERAG, PlainRAG, RecursiveRAG, SelfHealingRAG, SelfIRAG, Strategy
from selfrag_core.strategies.base import (
    Step,
    StreamEvent,
    arun_query,
    astream_query,
    check_strategy,
    retrieve_or_empty,
    run_query,
    step_of,
    stream_query,
)
from selfrag_core.types import (
    Answer,
    EvaluationResult,
    Grounding,
    HealingAttempt,
    HyDEResult,
    RecursiveRAGResult,
    RefinementStep,
    RetrievedDoc,
    ScoreKind,
    SelfHealingReport,
    SelfRAGResult,
    SubAnswer,
    Trace,
    TraceEvent,
)

__version__ = "0.1.0"

__all__ = [
    "CAPABLE",
    "SMALL_LOCAL",
    "Answer",
    "BackendLike",
    "BudgetExceededError",
    "CacheMissError",
    "CachedLLM",
    "ConfigurationError",
    "ConversationMemory",
    "EvaluationResult",
    "ExecutionConfig",
    "FaithfulnessMetric",
    "FaithfulnessScore",
    "Generate",
    "Grounding",
    "GroundingConfig",
    "HealingAttempt",
    "HyDERAG",
    "HyDEResult",
    "LLMCallError",
    "LLMLike",
    "LLMOutput",
    "LLMTimeoutError",
    "MissingDependencyError",
    "ModelProfile",
    "Note",
    "OpenAICompatibleLLM",
    "Parallel",
    "ParseError",
    "PlainRAG",
    "Plan",
    "QueryTimeoutError",
    "RAGSystemError",
    "RecursiveRAG",
    "RecursiveRAGConfig",
    "RecursiveRAGResult",
    "RefinementStep",
    "RetrievalError",
    "RetrievalTimeoutError",
    "RetrievalWatch",
    "Retrieve",
    "RetrieveMany",
    "RetrievedDoc",
    "Run",
    "ScoreKind",
    "SelfHealingRAG",
    "SelfHealingReport",
    "SelfIRAG",
    "SelfRAGConfig",
    "SelfRAGResult",
    "Step",
    "Strategy",
    "StrategyError",
    "StreamEvent",
    "SubAnswer",
    "Trace",
    "TraceEvent",
    "_call_llm",
    "_deduplicate",
    "_retrieve_safe",
    "arun_query",
    "astream_query",
    "check_strategy",
    "observe_trace",
    "profile_of",
    "retrieve_or_empty",
    "run_query",
    "step_of",
    "stream_query",
]
