import pytest

from selfrag_core import (
    ConfigurationError,
    ExecutionConfig,
    LLMCallError,
    RAGSystemError,
    RecursiveRAGConfig,
    RetrievalError,
    SelfRAGConfig,
)


def test_hierarchy() -> None:
    assert issubclass(LLMCallError, RAGSystemError)
    assert issubclass(RetrievalError, RAGSystemError)
    assert issubclass(ConfigurationError, ValueError)


def test_selfrag_defaults_match_spec() -> None:
    c = SelfRAGConfig()
    assert (c.max_refinement_iterations, c.confidence_threshold, c.llm_retries) == (3, 0.80, 2)
    assert c.enable_answer_refinement and c.enable_retrieval_refinement and c.fast_mode
    assert c.skip_refinement_on_high_confidence


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_refinement_iterations": -1},
        {"max_refinement_iterations": 0},
        {"confidence_threshold": 1.5},
        {"confidence_threshold": -0.1},
        {"llm_retries": -1},
        {"max_refinement_iterations": 2.5},
        {"confidence_threshold": "high"},
    ],
)
def test_invalid_selfrag_config(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        SelfRAGConfig(**kwargs)


def test_recursive_defaults_and_validation() -> None:
    c = RecursiveRAGConfig()
    assert (c.max_depth, c.max_sub_questions, c.min_query_length) == (3, 4, 40)
    assert "and" in c.complexity_keywords and "لماذا" in c.complexity_keywords
    with pytest.raises(ValueError):
        RecursiveRAGConfig(max_sub_questions=0)
    with pytest.raises(ValueError):
        RecursiveRAGConfig(complexity_keywords="and or")


def test_execution_validation() -> None:
    with pytest.raises(ValueError):
        ExecutionConfig(max_concurrency=0)
    with pytest.raises(ValueError):
        ExecutionConfig(llm_timeout=-1)
    with pytest.raises(ValueError):
        ExecutionConfig(max_llm_calls=0)
