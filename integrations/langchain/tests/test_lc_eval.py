"""A LangChain chain as a contender of ``selfrag_core.evaluation.evaluate``: "is SelfIRAG
better than my current chain?" in one call, with real langchain-core objects."""

from __future__ import annotations

from operator import itemgetter

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from lc_fakes import CORPUS, KeyedChatModel

from selfrag_core.evaluation import EvalData, EvalQuestion, evaluate

QUESTIONS = [
    EvalQuestion(f"q{i}", "What is the capital of France?", ("Paris",), {"paris": 1.0}) for i in range(3)
]


def store() -> InMemoryVectorStore:
    vectors = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    names = [text.split()[0].lower().strip(",.") for text in CORPUS]
    vectors.add_documents([Document(t, metadata={"source": n}) for t, n in zip(CORPUS, names, strict=True)])
    return vectors


def test_an_lcel_chain_is_compared_with_plain_on_the_same_store() -> None:
    vectors = store()
    chat = KeyedChatModel(default="Paris")
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}\nAnswer:")
    retriever = vectors.as_retriever(search_kwargs={"k": 6})
    chain = (
        {"context": retriever, "question": RunnablePassthrough()}
        | RunnablePassthrough.assign(answer=prompt | chat | StrOutputParser())
        | {"answer": itemgetter("answer"), "context": itemgetter("context")}
    )
    report = evaluate(
        EvalData("capitals", QUESTIONS), {"plain": "plain", "my chain": chain}, llm=chat, rag=vectors
    )
    summary = report.summary()
    assert summary["my chain"]["metrics"]["f1"]["mean"] == 1.0 and summary["my chain"]["errors"] == 0
    # counted through LangChain's callbacks: one call a question, the usage the model reported
    assert summary["my chain"]["llm_calls"] == 1.0 and summary["my chain"]["input_tokens"] > 0
    chain_record = report.results[0]["my chain"]
    assert sorted(s["id"] for s in chain_record["sources"]) == sorted(
        text.split()[0].lower().strip(",.") for text in CORPUS
    )  # the six documents the chain put in its context, read from its output
    assert chain_record["metrics"]["recall@10"] == 1.0  # "paris" is among them
    assert report.comparisons()["my chain"]["f1"]["verdict"] == "no detectable difference"


def test_the_runnable_output_has_the_citations_next_to_the_documents() -> None:
    from selfrag_core import PlainRAG
    from selfrag_langchain import LangChainLLM, SelfRAGRunnable, as_backend

    vectors = store()
    model = KeyedChatModel(default="Paris is the capital of France and its largest city [1]. Cats fly [9].")
    runnable = SelfRAGRunnable(strategy=PlainRAG(as_backend(vectors), LangChainLLM(model), top_k=6))
    out = runnable.invoke("What is the capital of France?")
    first, second = out["citations"]
    cited = out["sources"][0].page_content  # [1] is the first document, as the prompt numbered them
    right = cited.startswith("Paris is the capital of France")
    assert first["cited"] == [1] and first["supported_by"] == ([1] if right else [])
    assert ("unsupported" in first["flags"]) is not right
    assert "no_such_source:[9]" in second["flags"] and "unsupported" in second["flags"]
    assert "citations" not in out["details"]
