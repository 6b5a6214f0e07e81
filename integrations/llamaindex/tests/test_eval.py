"""A LlamaIndex query engine as a contender of ``selfrag_core.evaluation.evaluate``,
with real llama-index-core objects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_index.core import VectorStoreIndex

from selfrag_core.evaluation import EvalData, EvalQuestion, evaluate

QUESTIONS = [
    EvalQuestion("q1", "What is the capital of France?", ("Paris",), {"paris": 1.0}),
    EvalQuestion("q2", "What is the capital of Italy?", ("Rome",), {"rome": 1.0}),
]


def test_a_query_engine_is_compared_with_plain(index: VectorStoreIndex, make_llm: Callable[..., Any]) -> None:
    engine = index.as_query_engine(
        llm=make_llm(rules=[("France", "Paris"), ("Italy", "Rome")]), similarity_top_k=2
    )
    report = evaluate(
        EvalData("capitals", QUESTIONS),
        {"plain": lambda question: "I do not know", "llamaindex": engine},
    )
    summary = report.summary()["llamaindex"]
    assert summary["metrics"]["f1"]["mean"] == 1.0 and summary["errors"] == 0
    assert summary["llm_calls"] is None  # unknown for a query engine: never shown as 0
    record = report.results[0]["llamaindex"]
    assert record["answer"] == "Paris" and len(record["sources"]) == 2  # its source nodes
    assert record["metrics"]["recall@10"] == 1.0  # the node "paris" among them


def test_the_response_metadata_has_the_citations_of_the_source_nodes(
    index: VectorStoreIndex, make_llm: Any
) -> None:
    from selfrag_core import PlainRAG
    from selfrag_llamaindex import LlamaIndexLLM, SelfRAGQueryEngine, as_backend

    llm = make_llm(rules=[("France", "Paris is the capital of France [1]. Cats fly [7].")])
    strategy = PlainRAG(as_backend(index.as_retriever(similarity_top_k=2)), LlamaIndexLLM(llm), top_k=2)
    response = SelfRAGQueryEngine(strategy=strategy).query("What is the capital of France?")
    first, second = response.metadata["citations"]
    assert response.source_nodes[0].node.get_content().startswith("Paris is the capital of France")
    assert first["cited"] == [1] and first["supported_by"] == [1] and first["flags"] == []
    assert "no_such_source:[7]" in second["flags"]
