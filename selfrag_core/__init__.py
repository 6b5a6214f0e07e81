"""selfrag: self-improving retrieval-augmented generation over any backend and LLM.

The layers, each importing only those below it (pyproject's import-linter contract):

* application: ``cli/`` (parser, commands, evaluate, output, files), ``mcp_server``,
  ``serve/``, ``evaluation/``, ``presets`` (the one strategy factory and index opener);
* backends and models: ``backends/`` (by URL scheme), ``store/`` (the embedded index),
  ``local/`` (the local LLMs and embedder);
* display: ``display``, ``progress``;
* the library, exported here: the engine (``engine``: effects and drivers; ``runner``:
  run, stream and retrieve with a strategy), the strategies (``strategies/``), the edges
  (``retrieval``: backends, ``llm``: LLMs, ``config``, ``types``: results, ``ingest``:
  writing), and the signals (``verify``, ``citations``, ``grounding``, ``comparison``).

The adapters (``selfrag_langchain``, ``selfrag_llamaindex``) import these names, and
``selfrag_core.backends`` (its ``__all__``: the embedder they wrap), never a module under
them: where a module lives is not part of the API (pyproject's contract ``adapters-public``).
"""

from selfrag_core.comparison import ComparisonRule
from selfrag_core.config import (
    AdaptiveRAGConfig,
    DraftsRAGConfig,
    ExecutionConfig,
    GroundingConfig,
    HyDERAGConfig,
    PlainRAGConfig,
    RecursiveRAGConfig,
    SelfHealingRAGConfig,
    SelfRAGConfig,
    StrategyConfig,
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
from selfrag_core.ingest import WritableBackend, aingest, chunk_id, content_source, document_parts, ingest
from selfrag_core.llm import _acall_llm as _acall_llm  # importable; not in __all__ (no spec name)
from selfrag_core.llm import _call_llm
from selfrag_core.memory import ConversationMemory
from selfrag_core.metrics import FaithfulnessMetric, FaithfulnessScore
from selfrag_core.openai_llm import OpenAICompatibleLLM
from selfrag_core.profiles import CAPABLE, SMALL_LOCAL, ModelProfile, profile_of
from selfrag_core.protocols import BackendLike, LLMLike, LLMOutput
from selfrag_core.replay import CachedLLM, CacheMissError
from selfrag_core.retrieval import _aretrieve_safe as _aretrieve_safe  # importable; not in __all__
from selfrag_core.retrieval import (
    _deduplicate,
    _retrieve_safe,
    astore_search,
    normalize_results,
    store_search,
)
from selfrag_core.runner import (
    Step,
    StreamEvent,
    aretrieve_documents,
    arun_query,
    astream_query,
    check_strategy,
    retrieve_documents,
    run_query,
    step_of,
    stream_query,
)
from selfrag_core.signals.rules import AnswerRule, Finding
from selfrag_core.strategies import (
    AdaptiveRAG,
    DraftsRAG,
    HyDERAG,
    PlainRAG,
    RecursiveRAG,
    SelfHealingRAG,
    SelfIRAG,
    Strategy,
)
from selfrag_core.strategies.base import retrieve_or_empty
from selfrag_core.types import (
    NO_ANSWER_REASONS,
    Answer,
    EvaluationResult,
    Grounding,
    HealingAttempt,
    HyDEResult,
    RecursiveRAGResult,
    RefinementStep,
    Result,
    RetrievedDoc,
    ScoreKind,
    SelfHealingReport,
    SelfRAGResult,
    SubAnswer,
    Trace,
    TraceEvent,
)
from selfrag_core.verify import verify_answer
from selfrag_core.workers import shutting_down

__version__ = "0.1.0"

__all__ = [
    "CAPABLE",
    "NO_ANSWER_REASONS",
    "SMALL_LOCAL",
    "AdaptiveRAG",
    "AdaptiveRAGConfig",
    "Answer",
    "AnswerRule",
    "BackendLike",
    "BudgetExceededError",
    "CacheMissError",
    "CachedLLM",
    "ComparisonRule",
    "ConfigurationError",
    "ConversationMemory",
    "DraftsRAG",
    "DraftsRAGConfig",
    "EvaluationResult",
    "ExecutionConfig",
    "FaithfulnessMetric",
    "FaithfulnessScore",
    "Finding",
    "Generate",
    "Grounding",
    "GroundingConfig",
    "HealingAttempt",
    "HyDERAG",
    "HyDERAGConfig",
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
    "PlainRAGConfig",
    "Plan",
    "QueryTimeoutError",
    "RAGSystemError",
    "RecursiveRAG",
    "RecursiveRAGConfig",
    "RecursiveRAGResult",
    "RefinementStep",
    "Result",
    "RetrievalError",
    "RetrievalTimeoutError",
    "RetrievalWatch",
    "Retrieve",
    "RetrieveMany",
    "RetrievedDoc",
    "Run",
    "ScoreKind",
    "SelfHealingRAG",
    "SelfHealingRAGConfig",
    "SelfHealingReport",
    "SelfIRAG",
    "SelfRAGConfig",
    "SelfRAGResult",
    "Step",
    "Strategy",
    "StrategyConfig",
    "StrategyError",
    "StreamEvent",
    "SubAnswer",
    "Trace",
    "TraceEvent",
    "WritableBackend",
    "_call_llm",
    "_deduplicate",
    "_retrieve_safe",
    "aingest",
    "aretrieve_documents",
    "arun_query",
    "astore_search",
    "astream_query",
    "check_strategy",
    "chunk_id",
    "content_source",
    "document_parts",
    "ingest",
    "normalize_results",
    "observe_trace",
    "profile_of",
    "retrieve_documents",
    "retrieve_or_empty",
    "run_query",
    "shutting_down",
    "step_of",
    "store_search",
    "stream_query",
    "verify_answer",
]
