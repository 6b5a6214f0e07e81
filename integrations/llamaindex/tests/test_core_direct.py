"""The core takes LlamaIndex objects directly, without the adapter, including the
user's own subclasses (a ``CustomLLM`` or ``BaseRetriever`` defined outside
``llama_index``, as these test classes are)."""

import asyncio
import threading

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from selfrag_core import RecursiveRAGConfig, ScoreKind
from selfrag_core.llm import acall_llm_detailed, call_llm_detailed
from selfrag_core.retrieval import _aretrieve_safe, _retrieve_safe
from selfrag_core.strategies import RecursiveRAG

from .li_fakes import ScriptedLLM

pytestmark = pytest.mark.integration


class UserRetriever(BaseRetriever):
    """A retriever of the user's own: no ``similarity_top_k``, eight nodes, one without a score."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.queries.append(query_bundle.query_str)
        scores = [0.9, 0.8, None, 0.6, 0.5, 0.4, 0.3, 0.2]
        return [
            NodeWithScore(node=TextNode(text=f"about {query_bundle.query_str} #{i}", id_=f"n{i}"), score=s)
            for i, s in enumerate(scores)
        ]


class ThreadRecordingLLM(ScriptedLLM):
    """Records the thread each completion runs on."""

    def _reply(self, prompt: str):  # type: ignore[no-untyped-def]
        self._threads.append(threading.get_ident())
        return super()._reply(prompt)

    @property
    def _threads(self) -> list[int]:
        return self.__dict__.setdefault("_seen_threads", [])


def test_a_user_retriever_is_read_as_llamaindex_sync_and_async() -> None:
    retriever = UserRetriever()
    for docs in (_retrieve_safe(retriever, "tides", 3), asyncio.run(_aretrieve_safe(retriever, "tides", 3))):
        assert [d.id for d in docs] == ["n0", "n1", "n2"]  # sliced to top_k, node ids kept
        assert docs[0].text == "about tides #0" and docs[0].score_kind is ScoreKind.SIMILARITY
        assert docs[2].score is None  # score=None stays unknown, never 0
    assert retriever.queries == ["tides", "tides"]


def test_a_user_custom_llm_is_awaited_on_the_event_loop_not_in_a_thread() -> None:
    llm = ThreadRecordingLLM(default="the reply")

    async def main() -> tuple[str, int]:
        reply = await acall_llm_detailed(llm, "say something")
        return reply.text, threading.get_ident()

    text, loop_thread = asyncio.run(main())
    assert text == "the reply" and llm._threads == [loop_thread]
    assert call_llm_detailed(llm, "again").text == "the reply"


def test_a_strategy_runs_on_user_llamaindex_objects_without_the_adapter() -> None:
    decomposition = '{"items": ["What is the tide at Brest?", "What is the tide at Dover?"]}'
    llm = ThreadRecordingLLM(
        rules=[("Sub-question 1:", "merged answer"), ("SUBQUESTIONS:", decomposition)],
        default="a sub-answer",
    )
    strategy = RecursiveRAG(UserRetriever(), llm, RecursiveRAGConfig(max_depth=1, top_k=2))
    question = "Compare the tide at Brest and at Dover, and how it differs"

    async def main() -> tuple[object, int]:
        return await strategy.aquery(question), threading.get_ident()

    result, loop_thread = asyncio.run(main())
    assert result.answer == "merged answer" and result.sub_questions == [
        "What is the tide at Brest?",
        "What is the tide at Dover?",
    ]
    assert {d.id for d in result.sources} == {"n0", "n1"}
    assert set(llm._threads) == {loop_thread}  # 4 calls, none sent to a worker thread
    assert len(llm._threads) == 4 and not result.trace.errors


def test_a_user_custom_llm_streams_the_answer_through_its_own_stream_complete() -> None:
    llm = ScriptedLLM(default="the tides follow the moon")
    strategy = RecursiveRAG(UserRetriever(), llm, RecursiveRAGConfig(top_k=2))

    async def main() -> tuple[list[str], object]:
        tokens, result = [], None
        async for event in strategy.astream("Why are there tides?"):
            if event.kind == "token":
                tokens.append(event.text)
            else:
                result = event.result
        return tokens, result

    tokens, result = asyncio.run(main())
    assert len(tokens) == 5 and "".join(tokens).strip() == "the tides follow the moon"
    assert result.answer == "the tides follow the moon" and [d.id for d in result.sources] == ["n0", "n1"]
    assert [e.text for e in strategy.stream("Why are there tides?") if e.kind == "token"] == tokens
