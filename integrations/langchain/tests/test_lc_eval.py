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
