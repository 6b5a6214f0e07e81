"""RecursiveRAG: complexity check, decomposition parsing and junk, fallbacks, depth, concurrency."""

from __future__ import annotations

import asyncio
import itertools
import json
import time

import pytest

from selfrag_core import ConfigurationError, RecursiveRAGConfig, TraceEvent, observe_trace
from selfrag_core.strategies.recursive import NOT_ENOUGH_ANSWER, RecursiveRAG, matched_keywords
from selfrag_core.testing import FakeLLM, FakeRetriever, FakeStructuredLLM

COMPLEX = "What are the causes and effects of climate change, and how do they compare to deforestation?"
SUBS = ["What causes climate change?", "What are the effects of climate change?", "What is deforestation?"]
DOCS = [
    "Climate change is caused by greenhouse gas emissions.",
    "Effects of climate change include rising seas.",
    "Deforestation is the clearing of forests.",
]


def decomposition(items: list[str]) -> str:
    return json.dumps({"items": items})


def llm_for(decomp: str, **kw: object) -> FakeLLM:
    return FakeLLM(
        {"SUBQUESTIONS:": decomp, "Combine the answers": "merged answer"}, default="leaf answer", **kw
    )


def rag(llm: object, docs: list[str] | None = None, **cfg: object) -> RecursiveRAG:
    return RecursiveRAG(FakeRetriever(list(DOCS if docs is None else docs)), llm, RecursiveRAGConfig(**cfg))


# ---------------------------------------------------------------------- complexity


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (COMPLEX, True),
        ("What is photosynthesis?", False),  # short
        ("Tell me everything about the history of England and its kings in detail", False),  # one keyword
        ("Please show the Andes mountains to the whole group of hikers now", False),  # substrings only
        ("ما هي أسباب ونتائج الثورة الصناعية وكيف أثرت على المجتمع؟", True),  # proclitic و
        ("ما هي أسباب الثورة الصناعية و نتائجها على المجتمع الأوروبي؟", True),  # standalone و
        ("ما هي وظائف الوزارة الجديدة في المملكة العربية السعودية اليوم؟", False),  # no keyword
    ],
)
def test_complexity_check(query: str, expected: bool) -> None:
    assert rag(FakeLLM()).is_complex(query) is expected


def test_keywords_match_whole_words_and_multiword() -> None:
    assert matched_keywords("How and why", ["how", "why", "and"]) == ["how", "why", "and"]
    assert matched_keywords("showcase android", ["how", "and"]) == []
    assert matched_keywords("pros and cons compared", ["pros and cons"]) == ["pros and cons"]
    assert matched_keywords("وكيف", ["و", "كيف"]) == ["كيف"]  # attached و is not the keyword "و"


# ---------------------------------------------------------------------- the spec's paths


def test_simple_query_is_answered_directly_with_one_call() -> None:
    llm = llm_for(decomposition(SUBS))
    result = rag(llm).query("What is deforestation?")
    assert llm.n_calls == 1 and result.answer == "leaf answer"
    assert not result.decomposed and result.sub_questions == [] and result.depth == 0
    assert result.reason.startswith("simple query")


def test_complex_query_decomposes_answers_and_merges() -> None:
    llm = llm_for(decomposition(SUBS))
    result = rag(llm).query(COMPLEX)
    assert result.decomposed and result.sub_questions == SUBS
    assert [s.answer for s in result.sub_answers] == ["leaf answer"] * 3
    assert all(s.depth == 1 and s.error is None for s in result.sub_answers)
    assert result.answer == "merged answer"
    assert llm.n_calls == 1 + 3 + 1  # decompose + leaves + merge
    merge_prompt = llm.prompts[-1]
    assert all(s in merge_prompt for s in SUBS)
    d = result.to_dict()
    assert d["decomposed"] is True and len(d["sub_answers"]) == 3 and d["sub_answers"][0]["depth"] == 1
    assert len(result.sources) > 0


def test_structured_llm_gets_the_decomposition_schema() -> None:
    llm = FakeStructuredLLM({"SUBQUESTIONS:": decomposition(SUBS), "Combine": "m"}, default="a")
    rag(llm).query(COMPLEX)
    schemas = [c.schema for c in llm.calls if c.schema is not None]
    assert len(schemas) == 1 and "items" in schemas[0]["properties"]


def test_regex_fallback_for_a_numbered_list() -> None:
    raw = "Here you go:\n1. What causes climate change?\n2) What is deforestation?\n- How do they compare?"
    result = rag(llm_for(raw)).query(COMPLEX)
    assert result.sub_questions == [
        "What causes climate change?",
        "What is deforestation?",
        "How do they compare?",
    ]


def test_truncation_to_max_sub_questions() -> None:
    many = [f"What is climate change factor number {i}?" for i in range(6)]
    llm = llm_for(decomposition(many))
    result = rag(llm, max_sub_questions=2).query(COMPLEX)
    assert result.sub_questions == many[:2]
    assert "past max_sub_questions" in result.reason


@pytest.mark.parametrize(
    ("items", "why"),
    [
        ([], "0 usable"),
        (["What causes climate change?"], "1 usable"),
        ([COMPLEX, COMPLEX.lower()], "a copy of the question"),
        (["", "  ", "What causes climate change?"], "1 usable"),
        (["What causes climate change?", "what causes climate change"], "a duplicate"),
    ],
)
def test_junk_decompositions_are_answered_directly(items: list[str], why: str) -> None:
    llm = llm_for(decomposition(items))
    result = rag(llm).query(COMPLEX)
    assert not result.decomposed and result.answer == "leaf answer"
    assert "junk decomposition" in result.reason and why in result.reason
    assert llm.n_calls == 2  # decompose + direct answer
    assert "decomposition_unusable" in [e.name for e in result.trace.fallbacks]


@pytest.mark.parametrize("copy", [COMPLEX.replace("?", ""), f"Aspect 2 of: {COMPLEX}"])
def test_near_copy_item_is_dropped_but_the_rest_is_used(copy: str) -> None:
    items = [copy, *SUBS[:2]]
    result = rag(llm_for(decomposition(items))).query(COMPLEX)
    assert result.decomposed and result.sub_questions == SUBS[:2]
    assert "a copy of the question" in result.reason


def test_unreadable_decomposition_is_answered_directly() -> None:
    result = rag(llm_for("I cannot split this question, sorry.")).query(COMPLEX)
    assert not result.decomposed and "0 usable" in result.reason
    assert result.reason.endswith("): answered") and result.reason.count("answered") == 1


def test_decomposition_call_failure_is_answered_directly() -> None:
    llm = llm_for(decomposition(SUBS), fail_on=[1])
    result = rag(llm, llm_retries=0).query(COMPLEX)
    assert not result.decomposed and result.answer == "leaf answer"
    assert "decomposition_failed" in [e.name for e in result.trace.fallbacks]
    assert result.reason == "decomposition failed: answered"  # why, then what was done, once


def test_empty_retrieval_gives_not_enough_information() -> None:
    llm = llm_for(decomposition(SUBS))
    result = rag(llm, docs=[]).query("What is deforestation?")
    assert result.answer == NOT_ENOUGH_ANSWER == "There is not enough information."
    assert not result.decomposed and llm.n_calls == 0


def test_failed_retrieval_gives_not_enough_information() -> None:
    backend = FakeRetriever(list(DOCS), fail=OSError("index down"))
    result = RecursiveRAG(backend, llm_for("x")).query("What is deforestation?")
    assert result.answer == NOT_ENOUGH_ANSWER
    assert {"retrieval_failed", "not_enough_information"} <= {e.name for e in result.trace.fallbacks}


def test_merge_failure_concatenates_sub_answers() -> None:
    def reply(prompt: str) -> str:
        if "SUBQUESTIONS:" in prompt:
            return decomposition(SUBS[:2])
        if "Combine the answers" in prompt:
            raise ConnectionError("merge down")
        return "answer for " + prompt.rsplit("Question: ", 1)[1].split("\n")[0]

    result = rag(FakeLLM(reply), llm_retries=0).query(COMPLEX)
    assert result.answer == f"answer for {SUBS[0]}\n\nanswer for {SUBS[1]}"
    assert "merge_failed" in [e.name for e in result.trace.fallbacks]


def second_leaf_down(prompt: str) -> str:
    """Decomposes into SUBS; the second sub-question's answer call fails; others answer
    "answer <index>"; the merge answers "merged"."""
    if "SUBQUESTIONS:" in prompt:
        return decomposition(SUBS)
    if "Combine the answers" in prompt:
        return "merged"
    if SUBS[1] in prompt:
        raise ConnectionError("leaf down")
    return f"answer {next(i for i, s in enumerate(SUBS) if s in prompt)}"


def test_failed_sub_question_is_kept_with_its_error() -> None:
    result = rag(FakeLLM(second_leaf_down), llm_retries=0).query(COMPLEX)
    assert result.answer == "merged" and len(result.sub_answers) == 3
    failed = result.sub_answers[1]
    assert failed.question == SUBS[1] and failed.answer == "" and "leaf down" in (failed.error or "")
    assert result.to_dict()["sub_answers"][1]["error"] == failed.error
    assert SUBS[1] not in result.trace.events[-1].detail.get("prompt", "")


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_sub_questions_are_reported_live_as_progress(mode: str) -> None:
    seen: list[tuple[str, str, str]] = []  # (kind, name, status) in the order they happened

    def listener(event: TraceEvent) -> None:
        seen.append((event.kind, event.name, str(event.detail.get("status", ""))))

    strategy = rag(FakeLLM(second_leaf_down), llm_retries=0)
    with observe_trace(listener):
        result = strategy.query(COMPLEX) if mode == "sync" else await strategy.aquery(COMPLEX)
    progress = [e for e in result.trace.events if e.kind == "progress"]
    assert sorted((e.detail["question"], e.detail["status"]) for e in progress) == sorted(
        [(s, "started") for s in SUBS] + [(SUBS[0], "answered"), (SUBS[1], "failed"), (SUBS[2], "answered")]
    )
    by_question = {e.detail["question"]: e for e in progress if e.detail["status"] != "started"}
    assert by_question[SUBS[2]].detail["answer"] == "answer 2" and "leaf down" in (
        by_question[SUBS[1]].error or ""
    )
    assert not result.trace.fallbacks or all(e.kind == "fallback" for e in result.trace.fallbacks)
    assert [e.name for e in result.trace.fallbacks] == ["sub_question_failed"]
    # the listener saw them as they happened: every sub-question ended before the merge call
    merge = seen.index(("llm", "merge", ""))
    assert sum(1 for k, n, st in seen[:merge] if n == "sub_question" and st != "started") == 3
    assert len(seen) == len(result.trace.events)


def test_direct_answer_failure_returns_the_generation_fallback() -> None:
    result = rag(FakeLLM([ConnectionError("down")]), llm_retries=0).query("What is deforestation?")
    assert result.answer == "error in generating answer"
    assert "generation_failed" in [e.name for e in result.trace.fallbacks]


def test_recursion_stops_at_max_depth() -> None:
    # every sub-question is complex again, so depth 2 is reached and answered directly
    counter = itertools.count()

    def reply(prompt: str) -> str:
        if "SUBQUESTIONS:" in prompt:
            n, m = next(counter), next(counter)
            return decomposition(
                [
                    f"Why and how do alpha{n} causes differ from beta{n} effects today?",
                    f"Why and how do gamma{m} causes differ from delta{m} effects today?",
                ]
            )
        return "merged" if "Combine the answers" in prompt else "leaf"

    llm = FakeLLM(reply)
    result = rag(llm, max_depth=2).query(COMPLEX)
    level1 = result.sub_answers[0].result
    assert level1 is not None and level1.decomposed and level1.depth == 1
    level2 = level1.sub_answers[0].result
    assert level2 is not None and not level2.decomposed and level2.depth == 2
    assert "max_depth 2 reached" in level2.reason
    # decompositions: 1 + 2; leaves: 2 x 2; merges: 1 + 2
    assert llm.n_calls == 3 + 4 + 3


def test_max_depth_zero_never_decomposes() -> None:
    llm = llm_for(decomposition(SUBS))
    result = rag(llm, max_depth=0).query(COMPLEX)
    assert not result.decomposed and llm.n_calls == 1


def test_depth_is_not_a_public_parameter() -> None:
    with pytest.raises(TypeError):
        rag(FakeLLM()).query(COMPLEX, None, 5)  # type: ignore[call-arg]


def test_validation() -> None:
    with pytest.raises(ValueError):
        RecursiveRAG(FakeRetriever(), None)
    with pytest.raises(TypeError):
        RecursiveRAG(FakeRetriever(), FakeLLM(), config={"max_depth": 2})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        RecursiveRAG(FakeRetriever(), FakeLLM(), leaf=object())  # type: ignore[arg-type]


def test_arabic_decomposition() -> None:
    query = "ما هي أسباب ونتائج الثورة الصناعية وكيف أثرت على المجتمع؟"
    subs = [
        "ما هي أسباب الثورة الصناعية؟",
        "ما هي نتائج الثورة الصناعية؟",
        "كيف أثرت الثورة الصناعية على المجتمع؟",
    ]
    llm = FakeLLM({"SUBQUESTIONS:": decomposition(subs), "اجمع إجابات": "إجابة مدمجة"}, default="إجابة")
    docs = ["بدأت الثورة الصناعية في بريطانيا.", "من نتائج الثورة الصناعية نمو المدن."]
    result = RecursiveRAG(FakeRetriever(docs), llm).query(query)
    assert result.decomposed and result.sub_questions == subs and result.answer == "إجابة مدمجة"
    assert "قسّم السؤال" in llm.prompts[0]
    assert "السؤال الفرعي 1" in llm.prompts[-1]


# ---------------------------------------------------------------------- concurrency


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_three_way_decomposition_costs_three_rounds(mode: str) -> None:
    llm = llm_for(decomposition(SUBS), latency=0.3)
    strategy = RecursiveRAG(FakeRetriever(list(DOCS), latency=0.05), llm)
    start = time.perf_counter()
    result = strategy.query(COMPLEX) if mode == "sync" else await strategy.aquery(COMPLEX)
    elapsed = time.perf_counter() - start
    assert result.decomposed and len(result.sub_answers) == 3
    assert elapsed < 1.2, f"{elapsed:.2f}s: sequential would take 1.5 s"
    assert llm.n_calls == 5 and llm.rounds() == 3


async def test_sixteen_concurrent_aqueries_do_not_mix() -> None:
    def reply(prompt: str) -> str:
        if "SUBQUESTIONS:" in prompt:
            topic = prompt.split("topic", 1)[1].split()[0]
            return decomposition([f"What causes topic {topic}?", f"What follows topic {topic}?"])
        if "Combine the answers" in prompt:
            return "merged " + prompt.split("Main question: ", 1)[1].split("\n")[0]
        return "leaf " + prompt.rsplit("Question: ", 1)[1].split("\n")[0]

    strategy = RecursiveRAG(
        FakeRetriever(
            ["each topic has causes and effects, what follows, and how they compare"], latency=0.01
        ),
        FakeLLM(reply, latency=0.02),
    )
    queries = [f"What are the causes and effects of topic {i} and how do they compare?" for i in range(16)]
    results = await asyncio.gather(*(strategy.aquery(q) for q in queries))
    for i, (q, r) in enumerate(zip(queries, results, strict=True)):
        assert r.answer == f"merged {q}"
        assert [s.answer for s in r.sub_answers] == [
            f"leaf What causes topic {i}?",
            f"leaf What follows topic {i}?",
        ]
        assert r.trace.llm_calls == 4


# ---------------------------------------------------------------------- split by rule (small models)

TWO_PARTS = "What makes a volcano erupt, and how do vaccines train the immune system?"
PARTS_DOCS = [
    "A volcano erupts when gas pressure drives magma up through the crust.",
    "Vaccines train the immune system to recognise a pathogen without causing the disease.",
]


def parts_llm() -> FakeLLM:
    def reply(prompt: str) -> str:
        question = prompt.rsplit("Question:", 1)[-1]
        if "volcano" in question:
            return "Gas pressure drives magma up through the crust."
        if "vaccines" in question:
            return "Vaccines train the immune system to recognise a pathogen."
        return "unexpected prompt"

    return FakeLLM(reply)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_rules_split_a_two_part_question_and_join_both_answers_without_a_decomposition_call(
    driver: str,
) -> None:
    llm = parts_llm()
    strategy = rag(llm, PARTS_DOCS, max_depth=1, decomposition="rules", merge=False)
    result = strategy.query(TWO_PARTS) if driver == "sync" else asyncio.run(strategy.aquery(TWO_PARTS))
    assert result.decomposed and result.sub_questions == [
        "What makes a volcano erupt?", "How do vaccines train the immune system?",
    ]  # fmt: skip
    assert llm.n_calls == 2  # one answer per part, no decomposition, no merge
    assert "magma" in result.answer and "immune system" in result.answer
    assert result.reason.startswith("split by rule into 2 questions")
    assert {d.text for d in result.sources} == set(PARTS_DOCS)
    assert not any("SUBQUESTIONS" in p or "Combine the answers" in p for p in llm.prompts)


def test_rules_answer_a_single_question_directly() -> None:
    llm = parts_llm()
    result = rag(llm, PARTS_DOCS, max_depth=1, decomposition="rules", merge=False).query(
        "What makes a volcano erupt when the gas pressure in its chamber rises?"
    )
    assert not result.decomposed and llm.n_calls == 1 and result.reason.startswith("one question")


def test_auto_splits_by_rule_first_and_asks_the_llm_otherwise() -> None:
    llm = llm_for(decomposition(SUBS))
    rag(llm, decomposition="auto", max_depth=1).query(TWO_PARTS)
    assert not any("SUBQUESTIONS" in p for p in llm.prompts)  # two parts found by rule
    single = "Why is the climate changing so fast and what are the causes of the change"
    llm = llm_for(decomposition(SUBS))
    result = rag(llm, decomposition="auto", max_depth=1).query(single.replace(" and what", ", plus what"))
    assert any("SUBQUESTIONS" in p for p in llm.prompts) and result.decomposed


def test_a_joined_answer_leaves_out_parts_that_failed() -> None:
    def reply(prompt: str) -> str:
        if "vaccines" in prompt.rsplit("Question:", 1)[-1]:
            raise TimeoutError("model down")
        return "Gas pressure drives magma up through the crust."

    llm = FakeLLM(reply)
    result = rag(llm, PARTS_DOCS, max_depth=1, decomposition="rules", merge=False, llm_retries=0).query(
        TWO_PARTS
    )
    assert result.answer == "Gas pressure drives magma up through the crust."
    assert [s.error is not None for s in result.sub_answers] == [False, True]


def test_decomposition_is_validated() -> None:
    with pytest.raises(ConfigurationError, match="decomposition must be"):
        RecursiveRAGConfig(decomposition="magic")
    with pytest.raises(TypeError, match="merge must be"):
        RecursiveRAGConfig(merge="no")  # type: ignore[arg-type]
