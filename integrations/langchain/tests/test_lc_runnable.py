"""SelfRAGRunnable: LCEL composition, input validation, batching, streaming, callbacks."""

from __future__ import annotations

import time
from operator import itemgetter
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnablePassthrough
from lc_fakes import ANSWER, CORPUS, RunTree, keyed_model, vector_store

from selfrag_core import ExecutionConfig, SelfIRAG
from selfrag_core.testing import FakeLLM, FakeRetriever, judge_json
from selfrag_langchain import LangChainLLM, SelfRAGRunnable, as_backend

QUERY = "What is the capital of France?"


def runnable(model: Any = None, *, execution: ExecutionConfig | None = None) -> SelfRAGRunnable:
    model = model or keyed_model(structured=True)
    return SelfRAGRunnable(
        strategy=SelfIRAG(as_backend(vector_store()), LangChainLLM(model), execution=execution)
    )


def test_the_documented_lcel_chain_works() -> None:
    chain = {"question": RunnablePassthrough()} | runnable() | itemgetter("answer") | StrOutputParser()
    assert chain.invoke(QUERY) == ANSWER


def test_output_dict() -> None:
    out = runnable().invoke({"question": QUERY})
    assert out["answer"] == ANSWER and out["question"] == QUERY
    assert out["strategy"] == "SelfRAGResult"
    assert out["confidence"] == pytest.approx(0.9)
    assert out["sources"] and all(isinstance(d, Document) for d in out["sources"])
    assert out["sources"][0].metadata["score_kind"] == "similarity"
    assert out["trace"]["llm_calls"] == 1 and out["trace"]["retrievals"] == 1
    assert out["details"]["iterations"] == 1 and "answer" not in out["details"]


def test_context_is_passed_to_the_strategy() -> None:
    """The input's context reaches the backend (a fake that takes the filter and records it)."""
    seen: list[Any] = []

    class Filtering(FakeRetriever):
        def retrieve(self, query: str, top_k: int = 5, metadata_filter: Any = None) -> Any:
            seen.append(metadata_filter)
            return super().retrieve(query, top_k)

    r = SelfRAGRunnable(strategy=SelfIRAG(Filtering(CORPUS), FakeLLM(judge_json(ANSWER))))
    assert r.invoke({"query": QUERY, "context": {"metadata_filter": {"n": 1}}})["answer"] == ANSWER
    assert seen == [{"n": 1}]
    r.invoke({"query": QUERY})
    assert seen == [{"n": 1}, None]


@pytest.mark.parametrize("store", [True, False])
def test_a_filter_a_langchain_backend_does_not_take_is_in_the_fallbacks(store: bool) -> None:
    backend = vector_store() if store else as_backend(vector_store())  # the store itself, or our wrapper
    r = SelfRAGRunnable(strategy=SelfIRAG(backend, LangChainLLM(keyed_model(structured=True))))

    def fallbacks(out: dict[str, Any]) -> list[str]:
        return [e["name"] for e in out["trace"]["events"] if e["kind"] == "fallback"]

    out = r.invoke({"query": QUERY, "context": {"metadata_filter": {"n": 1}}})
    assert out["answer"] == ANSWER and fallbacks(out) == ["retrieval_options_ignored"]
    assert fallbacks(r.invoke({"query": QUERY})) == []


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (42, TypeError, "input must be a str or a dict"),
        (["q"], TypeError, "input must be a str or a dict"),
        ({"text": QUERY}, ValueError, "no question"),
        ({"question": 3}, TypeError, r"input\['question'\] must be a str"),
        ({"question": QUERY, "context": "x"}, TypeError, "context"),
        ("   ", ValueError, "empty"),
    ],
)
def test_wrong_inputs_raise_clear_typed_errors(value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        runnable().invoke(value)


async def test_wrong_input_raises_in_ainvoke_too() -> None:
    with pytest.raises(TypeError, match="input must be"):
        await runnable().ainvoke(42)  # type: ignore[arg-type]


async def test_ainvoke_and_astream() -> None:
    r = runnable()
    assert (await r.ainvoke(QUERY))["answer"] == ANSWER
    chunks = [c async for c in r.astream(QUERY)]
    assert chunks[0] == {"answer": ANSWER} and "answer" not in chunks[-1]
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert total["answer"] == ANSWER and total["sources"] and total["trace"]["llm_calls"] == 1


def test_stream_chunks_add_up_to_invoke() -> None:
    chunks = list(runnable().stream({"question": QUERY}))
    assert [c.get("answer") for c in chunks] == [ANSWER, None]
    total = chunks[0] + chunks[1]
    expected = runnable().invoke({"question": QUERY})
    assert total["answer"] == expected["answer"] and total.keys() == expected.keys()


def test_final_answer_is_streamed_token_by_token() -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from selfrag_core import HyDERAG

    passage = "Paris is the capital and largest city of France, on the Seine river."
    model = GenericFakeChatModel(
        messages=iter([AIMessage(content=passage), AIMessage(content="Paris is the capital")])
    )
    hyde = HyDERAG(FakeRetriever(CORPUS), LangChainLLM(model), num_hypothetical_docs=1)
    chunks = list(SelfRAGRunnable(strategy=hyde).stream(QUERY))
    tokens = [c["answer"] for c in chunks if "answer" in c]
    assert len(tokens) > 1 and "".join(tokens) == "Paris is the capital"


def test_strategy_is_validated() -> None:
    with pytest.raises(TypeError, match="is not a selfrag strategy"):
        SelfRAGRunnable(strategy="SelfIRAG")
    assert runnable().get_name() == "SelfRAG[SelfIRAG]"


@pytest.mark.parametrize("limit", [1, 2])
def test_batch_honours_max_concurrency(limit: int) -> None:
    model = keyed_model(structured=True, latency=0.05)
    outs = runnable(model).batch([QUERY] * 4, config={"max_concurrency": limit})
    assert [o["answer"] for o in outs] == [ANSWER] * 4
    assert len(model.prompts) == 4


@pytest.mark.parametrize("limit", [1, 3])
async def test_abatch_honours_max_concurrency(limit: int) -> None:
    model = keyed_model(latency=0.05, default=judge_json(ANSWER))
    outs = await runnable(model).abatch([QUERY] * 6, config={"max_concurrency": limit})
    assert [o["answer"] for o in outs] == [ANSWER] * 6
    assert model.peak == limit


def test_batch_peak_concurrency_is_the_limit() -> None:
    model = keyed_model(latency=0.05, default=judge_json(ANSWER))
    runnable(model).batch([QUERY] * 6, config={"max_concurrency": 3})
    assert model.peak == 3


async def test_abatch_runs_queries_concurrently() -> None:
    model = keyed_model(latency=0.3, default=judge_json(ANSWER))
    start = time.perf_counter()
    await runnable(model).abatch([QUERY] * 4)
    assert time.perf_counter() - start < 0.9  # sequential would take 1.2 s


def _assert_children_of_the_chain(tree: RunTree, chain_name: str = "SelfRAG[SelfIRAG]") -> None:
    assert tree.of_kind("llm") and tree.of_kind("retriever")
    for run_id in tree.of_kind("llm") + tree.of_kind("retriever"):
        assert chain_name in tree.ancestors(run_id), tree.runs[run_id]
    assert len(tree.roots()) == 1


@pytest.mark.parametrize("execution", [None, ExecutionConfig(llm_timeout=30)], ids=["plain", "timeout"])
def test_llm_calls_and_retrievals_are_child_runs(
    run_tree: RunTree, execution: ExecutionConfig | None
) -> None:
    runnable(execution=execution).invoke(QUERY, {"callbacks": [run_tree]})
    _assert_children_of_the_chain(run_tree)
    names = {name for kind, name, _ in run_tree.runs.values() if kind == "retriever"}
    assert names == {"VectorStoreSearch"}


async def test_async_calls_are_child_runs_too(run_tree: RunTree) -> None:
    chain = {"question": RunnablePassthrough()} | runnable() | itemgetter("answer")
    await chain.ainvoke(QUERY, {"callbacks": [run_tree]})
    _assert_children_of_the_chain(run_tree)


def test_batched_runs_keep_their_own_trees(run_tree: RunTree) -> None:
    runnable().batch([QUERY, QUERY], config={"callbacks": [run_tree]})
    chains = [rid for rid, (kind, name, _) in run_tree.runs.items() if name == "SelfRAG[SelfIRAG]"]
    assert len(chains) == 2
    for run_id in run_tree.of_kind("llm") + run_tree.of_kind("retriever"):
        assert "SelfRAG[SelfIRAG]" in run_tree.ancestors(run_id)


def test_a_failing_model_gives_the_fallback_answer_visible_in_the_output() -> None:
    model = keyed_model(default="")  # every reply is an empty message
    execution = ExecutionConfig(retry_initial_wait=0, retry_max_wait=0)
    out = runnable(model, execution=execution).invoke(QUERY)
    assert out["answer"] == "error in generating answer"
    assert out["trace"]["fallbacks"] == ["generation_failed"] and out["confidence"] is None
    assert any("empty message" in e.get("error", "") for e in out["trace"]["events"])


class RetryDiffers:
    """Writes passages plainly; the answer's stream breaks after two words, and its retry
    says something else (a model sampling at a temperature)."""

    def __init__(self) -> None:
        self.streams = 0

    def generate(self, prompt: str) -> str:
        return "A passage about Paris, the capital of France, which lies on the Seine river."

    def stream(self, prompt: str) -> Any:
        self.streams += 1
        if self.streams == 1:
            yield "Paris "
            yield "is "
            raise ConnectionError("stream lost")
        yield "The capital "
        yield "is Paris."


def test_a_restarted_stream_adds_a_blank_line_then_the_answer_and_says_so() -> None:
    from selfrag_core import HyDERAG

    hyde = HyDERAG(
        FakeRetriever(CORPUS),
        RetryDiffers(),
        num_hypothetical_docs=1,
        execution=ExecutionConfig(retry_initial_wait=0.001),
    )
    chunks = list(SelfRAGRunnable(strategy=hyde).stream(QUERY))
    assert [c.get("answer") for c in chunks] == ["Paris ", "is ", "\n\n", "The capital is Paris.", None]
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert total["stream_restarted"] is True and total["answer"].split("\n\n")[-1] == "The capital is Paris."
    assert total["trace"]["llm_calls"] == 3  # the passage, the broken stream, its retry


@pytest.mark.parametrize("use_async", [False, True])
def test_a_models_own_config_callbacks_join_the_runnables_run(use_async: bool) -> None:
    """``LangChainLLM(model, config={"callbacks": [...]})``: the calls stay child runs of
    the chain (the given config used to replace the inherited callbacks)."""
    import asyncio

    from selfrag_core import HyDERAG

    outer, own = RunTree(), RunTree()
    llm = LangChainLLM(keyed_model(), config={"callbacks": [own]})
    runnable = SelfRAGRunnable(strategy=HyDERAG(as_backend(vector_store()), llm, num_hypothetical_docs=1))
    config = {"callbacks": [outer]}
    asyncio.run(runnable.ainvoke(QUERY, config)) if use_async else runnable.invoke(QUERY, config)
    assert len(outer.of_kind("llm")) == len(own.of_kind("llm")) == 2  # the passage and the answer
    chain = [rid for rid, (kind, _, parent) in outer.runs.items() if kind == "chain" and parent is None]
    assert len(chain) == 1 and all(own.runs[rid][2] == chain[0] for rid in own.of_kind("llm"))


async def test_one_chain_shared_by_two_users_never_mixes_their_conversations() -> None:
    """A chain is built once and shared by every user (issue 16 §5): user B's prompts
    never carry user A's question or answer."""
    from langchain_core.runnables import RunnableLambda

    from selfrag_core import SelfHealingRAG

    prompts: list[str] = []

    def model(prompt: Any) -> str:
        prompts.append(str(prompt))
        return ANSWER

    chain = SelfRAGRunnable(strategy=SelfHealingRAG(RunnableLambda(model), [as_backend(vector_store())]))
    chain.invoke({"question": "What is the secret project code name of Alice?"})
    before = len(prompts)
    await chain.abatch([{"question": QUERY}, {"question": "Where does the Seine flow?"}])
    chain.invoke(QUERY)
    later = prompts[before:]
    assert later and not any("secret project" in p or "Conversation so far" in p for p in later)


def test_a_strategy_of_ones_own_runs_in_a_chain_and_streams() -> None:
    """The guide's example (examples/corrective_rag.py) over a real LangChain store and
    model: invoke, stream, and composed inside SelfHealingRAG (issue 17)."""
    import importlib.util
    from pathlib import Path

    from selfrag_core import SelfHealingRAG, SelfHealingRAGConfig

    path = Path(__file__).resolve().parents[3] / "examples" / "corrective_rag.py"
    spec = importlib.util.spec_from_file_location("corrective_rag_lc", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    grading = keyed_model(rules={"Is the document": "yes", "Write a passage": ANSWER})
    ours = module.CorrectiveRAG(as_backend(vector_store()), LangChainLLM(grading), top_k=2)
    out = SelfRAGRunnable(strategy=ours).invoke(QUERY)
    assert out["answer"] == ANSWER and out["strategy"] == "Answer" and out["details"]["relevant"] == 2
    chunks = list(SelfRAGRunnable(strategy=ours).stream(QUERY))
    assert "".join(c.get("answer", "") for c in chunks).strip() == ANSWER
    healer = SelfHealingRAG(
        LangChainLLM(grading), [ours], config=SelfHealingRAGConfig(confidence_threshold=0.0)
    )
    assert SelfRAGRunnable(strategy=healer).invoke(QUERY)["answer"] == ANSWER
