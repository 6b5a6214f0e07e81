"""The LangChain adapter's overhead per query at zero LLM latency, next to a plain LCEL
RAG chain doing the same work (one retrieval of 5 documents, one model call).

Same objects everywhere: the peer harness's 200-document corpus and hashed embedding
(``../shared/bench/peers/``) in an ``InMemoryVectorStore``, and a zero-latency chat
model that replies with a confident judge JSON (so SelfIRAG stops after one call).

* ``floor``: the two LangChain calls by hand (``similarity_search_with_score``,
  ``model.invoke``);
* ``LCEL RAG``: ``{context: retriever | join, question} | prompt | model | parser``;
* ``core, raw objects``: ``SelfIRAG(store, model).query`` (the core's duck typing);
* ``core + adapters``: ``SelfIRAG(as_backend(store), LangChainLLM(model)).query``;
* ``SelfRAGRunnable``: the same strategy through ``invoke`` / ``ainvoke`` (callbacks
  configured, child runs for the retrieval and the model call), with and without a
  callback handler attached.

    python benchmarks/bench_langchain.py [--queries 300]

Printed figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent / "shared" / "bench" / "peers"))

import corpus  # noqa: E402
from adapters_langchain import HashEmbeddings  # noqa: E402
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnablePassthrough  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402

from selfrag_core import SelfIRAG  # noqa: E402
from selfrag_core.testing import first_document, judge_json  # noqa: E402
from selfrag_langchain import LangChainLLM, SelfRAGRunnable, as_backend  # noqa: E402


def reply(prompt: str) -> str:
    """A confident fast-mode judge reply whose answer is the first context passage (so it
    is grounded and SelfIRAG stops after one call)."""
    return judge_json(first_document(prompt, "No context."), 9)


class InstantChatModel(BaseChatModel):
    """Zero latency, with usage."""

    @property
    def _llm_type(self) -> str:
        return "instant"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:  # fmt: skip
        usage = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
        prompt = "\n".join(m.text for m in messages)
        message = AIMessage(reply(prompt), usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


class NoopHandler(BaseCallbackHandler):
    """Attached to measure the cost of callbacks being on (as under a tracer)."""


Sample = tuple[float, float]  # (wall, process CPU) seconds of one query


def timed(fn: Callable[[str], Any], queries: list[str]) -> list[Sample]:
    out = []
    for q in queries:
        wall, cpu = time.perf_counter(), time.process_time()
        fn(q)
        out.append((time.perf_counter() - wall, time.process_time() - cpu))
    return out


def atimed(fn: Callable[[str], Awaitable[Any]], queries: list[str]) -> list[Sample]:
    async def main() -> list[Sample]:
        out = []
        for q in queries:
            wall, cpu = time.perf_counter(), time.process_time()
            await fn(q)
            out.append((time.perf_counter() - wall, time.process_time() - cpu))
        return out

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()

    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents([Document(page_content=d["text"], id=d["id"]) for d in corpus.CORPUS])
    model = InstantChatModel()
    k = corpus.TOP_K
    questions = corpus.single_queries(10)
    queries = [questions[i % len(questions)] for i in range(args.queries)]

    def floor(q: str) -> Any:
        docs = store.similarity_search_with_score(q, k=k)
        return model.invoke("\n".join(d.page_content for d, _ in docs) + "\n" + q)

    prompt = ChatPromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")
    retriever = store.as_retriever(search_kwargs={"k": k})
    join = retriever | (lambda docs: "\n\n".join(d.page_content for d in docs))
    lcel = {"context": join, "question": RunnablePassthrough()} | prompt | model | StrOutputParser()

    raw = SelfIRAG(store, model)
    adapted = SelfIRAG(as_backend(store), LangChainLLM(model))
    runnable = SelfRAGRunnable(strategy=adapted)
    traced = {"callbacks": [NoopHandler()]}

    cases: list[tuple[str, Callable[[list[str]], list[Sample]]]] = [
        ("floor: search + invoke by hand", lambda qs: timed(floor, qs)),
        ("LCEL RAG chain .invoke", lambda qs: timed(lcel.invoke, qs)),
        ("LCEL RAG chain .ainvoke", lambda qs: atimed(lcel.ainvoke, qs)),
        ("core, raw LangChain objects .query", lambda qs: timed(raw.query, qs)),
        ("core + adapters .query", lambda qs: timed(adapted.query, qs)),
        ("core + adapters .aquery", lambda qs: atimed(adapted.aquery, qs)),
        ("SelfRAGRunnable .invoke", lambda qs: timed(runnable.invoke, qs)),
        ("SelfRAGRunnable .ainvoke", lambda qs: atimed(runnable.ainvoke, qs)),
        ("LCEL RAG chain .invoke + handler", lambda qs: timed(lambda q: lcel.invoke(q, traced), qs)),
        ("SelfRAGRunnable .invoke + handler", lambda qs: timed(lambda q: runnable.invoke(q, traced), qs)),
    ]
    for _, run in cases:  # warm-up
        run(questions)
    # blocks of 10 queries, the cases interleaved, so background load hits them alike
    times: dict[str, list[Sample]] = {name: [] for name, _ in cases}
    for start in range(0, len(queries), len(questions)):
        for name, run in cases:
            times[name] += run(queries[start : start + len(questions)])
    wall = {name: statistics.median(w for w, _ in v) * 1e3 for name, v in times.items()}
    cpu = {name: statistics.median(c for _, c in v) * 1e3 for name, v in times.items()}
    base, lcel_cpu = cpu["core, raw LangChain objects .query"], cpu["LCEL RAG chain .invoke"]
    print(f"{args.queries} queries, 1 retrieval (k={k}, 200 docs) + 1 model call each, zero LLM latency")
    print("median per query; CPU = process CPU time (all threads), steadier than wall on a shared machine\n")
    print(f"{'case':38} {'wall ms':>8} {'CPU ms':>8} {'CPU vs core':>12} {'CPU vs LCEL':>12}")
    for name in times:
        ratios = f"{cpu[name] / base:11.2f}x {cpu[name] / lcel_cpu:11.2f}x"
        print(f"{name:38} {wall[name]:8.3f} {cpu[name]:8.3f} {ratios}")
    calls = raw.query(queries[0]).trace
    print(f"(SelfIRAG per query: {calls.llm_calls} model call(s), {calls.retrievals} retrieval(s))")
    adapters = cpu["core + adapters .query"] - base
    layer = cpu["SelfRAGRunnable .invoke"] - cpu["core + adapters .query"]
    print(f"\nCPU overhead per query: adapters {adapters:+.3f} ms, runnable layer {layer:+.3f} ms")


if __name__ == "__main__":
    main()
