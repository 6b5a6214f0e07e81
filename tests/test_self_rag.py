"""SelfIRAG: the loop, call budgets, fallbacks, grounding, concurrency, bad input."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from selfrag_core import ExecutionConfig, GroundingConfig, PlainRAG, SelfIRAG, SelfRAGConfig
from selfrag_core.store import RAG
from selfrag_core.strategies.base import NOT_ENOUGH_ANSWER
from selfrag_core.strategies.self_rag import GENERATION_FAILED_ANSWER
from selfrag_core.testing import FakeLLM, FakeRetriever, FakeStructuredLLM
from selfrag_core.testing import judge_json as judged

Q = "What is the capital of France?"
GOOD = "Paris is the capital of France."


def script(fast: list[str], evaluate: list[str] | None = None, refine: list[str] | None = None,
           answer: list[str] | None = None) -> Any:  # fmt: skip
    """A prompt-keyed script: each step type pops its own queue (last one repeats)."""
    queues = {"fast": list(fast), "evaluate": list(evaluate or []), "refine": list(refine or []),
              "answer": list(answer or [])}  # fmt: skip

    def pop(kind: str) -> str:
        q = queues[kind]
        return q.pop(0) if len(q) > 1 else q[0]

    def reply(prompt: str) -> str:
        if "Improve the answer" in prompt:
            return pop("refine")
        if "then judge your own answer" in prompt:
            return pop("fast")
        if "Judge the answer" in prompt:
            return pop("evaluate")
        return pop("answer")

    return reply


def make(llm: Any, backend: Any, instant: ExecutionConfig, **cfg: Any) -> SelfIRAG:
    return SelfIRAG(backend, llm, SelfRAGConfig(**cfg), execution=instant)


def test_stops_at_threshold_with_one_call(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    llm = FakeLLM(judged(GOOD, 9))
    result = make(llm, backend, instant).query(Q)
    assert result.answer == GOOD and result.iterations == 1 and llm.n_calls == 1
    assert result.confidence == pytest.approx(0.9)
    assert "threshold" in result.steps[0].reason and result.steps[0].step == 1
    assert result.sources and "Paris" in result.sources[0].text


def test_confidence_is_geometric_mean_clamped(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    reply = json.dumps({"answer": GOOD, "relevance": 10, "accuracy": 4, "completeness": 25, "clarity": 0.9,
                        "issues": [], "suggestions": []})  # fmt: skip
    result = make(FakeLLM(reply), backend, instant, max_refinement_iterations=1).query(Q)
    ev = result.history[0].evaluation
    # one scale, 0 to 10, clamped: 25 is 1.0 (it read as a percentage before)
    assert (ev.relevance, ev.accuracy, ev.completeness, ev.clarity) == (1.0, 0.4, 1.0, 0.9)
    assert result.confidence == pytest.approx((1.0 * 0.4 * 1.0 * 0.9) ** 0.25)


def test_runs_all_iterations_below_threshold(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    llm = FakeLLM(
        script(
            [judged(GOOD, 5, suggestions=["Seine", "river"])],
            evaluate=[judged(None, 5, suggestions=["Seine"])],
            refine=[GOOD + " It lies on the Seine."],
        )
    )
    result = make(llm, backend, instant, max_refinement_iterations=3).query(Q)
    assert result.iterations == 3 and len(result.history) == 3
    assert [s.action for s in result.history] == ["generate", "evaluate_refined", "evaluate_refined"]
    # fast mode, refinement on: 1 generate+evaluate, then (refine, evaluate) twice = 5 <= 3 x 2
    assert llm.n_calls == 5
    assert result.history[1].answer.endswith("Seine.")  # the refined answer was kept, not discarded
    assert result.history[1].query == f"{Q} Seine river"  # expanded with the top-2 suggestions
    assert "iteration cap" in result.history[-1].reason


@pytest.mark.parametrize(
    "fast_mode,refine,expected_calls,spec_max",
    [(True, True, 5, 6), (True, False, 3, 6), (False, True, 6, 9), (False, False, 6, 9)],
)
def test_call_budget_table(
    backend: FakeRetriever,
    instant: ExecutionConfig,
    fast_mode: bool,
    refine: bool,
    expected_calls: int,
    spec_max: int,
) -> None:
    llm = FakeLLM(script([judged(GOOD, 5)], evaluate=[judged(None, 5)], refine=[GOOD], answer=[GOOD]))
    result = make(llm, backend, instant, fast_mode=fast_mode, enable_answer_refinement=refine).query(Q)
    assert result.iterations == 3
    assert llm.n_calls == expected_calls <= spec_max
    assert result.trace.llm_calls == expected_calls


def test_best_step_when_last_is_worse(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    llm = FakeLLM(script([judged("Paris.", 6)], evaluate=[judged(None, 7), judged(None, 5)],
                         refine=["Paris is the capital.", "Paris, France."]))  # fmt: skip
    result = make(llm, backend, instant).query(Q)
    assert [round(s.confidence, 2) for s in result.history] == [0.6, 0.7, 0.5]
    assert result.answer == "Paris is the capital." and result.best_iteration == 2
    assert result.initial_quality == pytest.approx(0.6) and result.final_quality == pytest.approx(0.5)
    assert "selected" in result.history[1].reason


def test_fast_mode_parse_failure_falls_back_to_two_step(
    backend: FakeRetriever, instant: ExecutionConfig
) -> None:
    llm = FakeLLM(script(["I think the answer is Paris but I won't give JSON"], evaluate=[judged(None, 9)],
                         answer=[GOOD]))  # fmt: skip
    result = make(llm, backend, instant).query(Q)
    assert result.answer == GOOD and llm.n_calls == 3  # failed fast call + answer + evaluate
    assert [e.name for e in result.trace.fallbacks] == ["fast_mode_parse_failed"]
    assert "JSON" in result.trace.fallbacks[0].detail["raw"]


def test_unparsable_evaluation_gets_neutral_scores(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    llm = FakeLLM(script(["garbage"], evaluate=["still garbage"], answer=[GOOD]))
    result = make(llm, backend, instant, max_refinement_iterations=1).query(Q)
    assert result.confidence == 0.5 and not result.history[0].evaluation.parsed
    assert "evaluation_parse_failed" in [e.name for e in result.trace.fallbacks]


def test_llm_outage_returns_fallback_answer_with_trace(
    backend: FakeRetriever, instant: ExecutionConfig
) -> None:
    llm = FakeLLM("x", fail_on=range(1, 100))
    result = make(llm, backend, instant, llm_retries=2).query(Q)
    assert result.answer == GOOD_FALLBACK and result.confidence == 0.0
    assert llm.n_calls == 3  # retries + 1, then the loop stops: nothing to refine
    assert result.trace.errors and "simulated LLM outage" in (result.trace.errors[0].error or "")
    assert result.trace.fallbacks[0].name == "generation_failed"


GOOD_FALLBACK = GENERATION_FAILED_ANSWER


def test_backend_failure_degrades(instant: ExecutionConfig) -> None:
    broken = FakeRetriever(["x"], fail=ConnectionError("vector db down"))
    llm = FakeLLM(judged("I do not know: the information is not available.", 9))
    result = make(llm, broken, instant).query(Q)
    # nothing to answer from: PlainRAG's answer, no LLM call, and the failure says why
    assert result.answer == NOT_ENOUGH_ANSWER and result.sources == [] and llm.n_calls == 0
    assert result.no_answer == "retrieval_failed"
    assert result.trace.fallbacks[0].name == "retrieval_failed"
    assert "vector db down" in (result.trace.fallbacks[0].error or "")


@pytest.mark.parametrize("fast_mode", [True, False])
def test_no_documents_is_no_answer_without_an_llm_call(instant: ExecutionConfig, fast_mode: bool) -> None:
    """Retrieval finds nothing: SelfIRAG answers as the other strategies do (PlainRAG's
    text, ``no_answer="no_documents"``) and asks the LLM nothing, sync, async and streamed."""
    llm = FakeLLM(judged("The information is not available in the indexed documents.", 9))
    strategy = make(llm, FakeRetriever([]), instant, fast_mode=fast_mode)
    plain = PlainRAG(FakeRetriever([]), llm, execution=instant).query(Q)
    results = [strategy.query(Q), asyncio.run(strategy.aquery(Q))]
    results += [e.result for e in strategy.stream(Q) if e.result is not None]
    assert len(results) == 3 and llm.n_calls == 0
    for result in results:
        assert result.answer == plain.answer == NOT_ENOUGH_ANSWER
        assert result.no_answer == plain.no_answer == "no_documents"
        assert result.to_dict()["no_answer"] == "no_documents"
        assert result.sources == [] and result.iterations == 0 and result.history == []
        assert [f.name for f in result.trace.fallbacks] == ["not_enough_information"]


def test_an_empty_store_is_no_answer_without_an_llm_call(instant: ExecutionConfig) -> None:
    llm = FakeLLM(judged("The information is not available in the indexed documents.", 9))
    result = make(llm, RAG(), instant).query(Q)
    assert result.answer == NOT_ENOUGH_ANSWER and result.no_answer == "no_documents"
    assert llm.n_calls == 0


def test_grounding_rejects_confident_degenerate_answer(
    backend: FakeRetriever, instant: ExecutionConfig
) -> None:
    # the judge loves "Yes." (a weak model's habit); the grounded answer scores lower
    llm = FakeLLM(script([judged("Yes.", 10)], evaluate=[judged(None, 7)], refine=[GOOD]))
    result = make(llm, backend, instant).query(Q)
    first = result.history[0]
    assert first.evaluation.grounding.degenerate == "bare_yes_no"
    # a perfect score for an answer the context does not support: the judge is ignored
    assert "maximum" in (first.evaluation.ignored or "") and "degenerate" in first.reason
    assert result.answer == GOOD and result.best_iteration == 2
    assert "step 2 is grounded" in result.history[1].reason
    # the refined answer was judged without the LLM: answer+judge, refine, no second judge
    assert llm.n_calls == 2
    assert not result.trace.fallbacks  # expected of a small model: a decision, no WARNING line
    assert "judge_uninformative" in [e.name for e in result.trace.events if e.kind == "decision"]


def test_an_answer_with_mostly_unsupported_sentences_loses_to_a_supported_one(
    backend: FakeRetriever, instant: ExecutionConfig
) -> None:
    # most of its words are in the context (the old, whole-answer signal certified it), but
    # two of its three sentences are in no source; the judge likes it better than the plain,
    # supported answer. The verifier checks sentence by sentence: it is unsupported.
    mixed = (
        "Paris is the capital of France and the city lies on the river Seine. "
        "Cats bark at France. Dogs purr in Paris."
    )
    llm = FakeLLM(script([judged(mixed, 7)], evaluate=[judged(None, 6)], refine=[GOOD]))
    result = make(llm, backend, instant, max_refinement_iterations=2).query(Q)
    assert result.history[0].evaluation.grounding.token_support >= 0.5
    assert [s.evaluation.grounding.supported for s in result.history] == [False, True]
    assert [round(s.confidence, 2) for s in result.history] == [0.7, 0.6]
    assert result.answer == GOOD and result.best_iteration == 2


def test_grounding_can_be_disabled(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    llm = FakeLLM(script([judged("Yes.", 10)], evaluate=[judged(None, 7)], refine=[GOOD]))
    cfg = SelfRAGConfig(grounding=GroundingConfig(enabled=False))
    result = SelfIRAG(backend, llm, cfg, execution=instant).query(Q)
    assert result.answer == "Yes." and result.iterations == 1  # the spec's behaviour


def test_unsupported_answer_loses_to_supported(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    llm = FakeLLM(script([judged("Lyon, famous for its silk weavers and bouchons.", 9)],
                         evaluate=[judged(None, 6)], refine=[GOOD]))  # fmt: skip
    result = make(llm, backend, instant).query(Q)
    g0 = result.history[0].evaluation.grounding
    assert not g0.supported and g0.token_support < 0.5
    assert result.answer == GOOD


def test_degenerate_refinement_is_discarded(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    llm = FakeLLM(script([judged(GOOD, 5)], refine=["Yes."]))
    result = make(llm, backend, instant, max_refinement_iterations=2).query(Q)
    assert "refinement_discarded" in [e.name for e in result.trace.fallbacks]
    assert result.history[1].action == "regenerate" and result.answer == GOOD


def test_two_step_regeneration_after_a_discarded_refinement_answers(
    backend: FakeRetriever, instant: ExecutionConfig
) -> None:
    """Two-step mode: the second iteration regenerates from the ``answer`` prompt when the
    refinement was discarded (its template must exist, in both languages)."""
    llm = FakeLLM(script(["unused"], evaluate=[judged(None, 5)], refine=["Yes."], answer=[GOOD]))
    result = make(llm, backend, instant, fast_mode=False, max_refinement_iterations=2).query(Q)
    assert "refinement_discarded" in [e.name for e in result.trace.fallbacks]
    assert [s.action for s in result.history] == ["generate", "regenerate"]
    assert result.answer == GOOD and not result.no_answer
    answers = [p for p in llm.prompts if "Judge the answer" not in p and "Improve the answer" not in p]
    assert len(answers) == 2 and answers[0] != answers[1]  # grounded_answer, then the answer prompt


def test_arabic_query_uses_arabic_prompts(instant: ExecutionConfig) -> None:
    backend = FakeRetriever(["باريس هي عاصمة فرنسا."])
    llm = FakeLLM(judged("باريس هي عاصمة فرنسا.", 9))
    result = make(llm, backend, instant).query("ما هي عاصمة فرنسا؟")
    assert "الوثائق" in llm.prompts[0] and result.answer == "باريس هي عاصمة فرنسا."


def test_structured_llm_receives_schema(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    llm = FakeStructuredLLM(judged(GOOD, 9))
    make(llm, backend, instant).query(Q)
    assert llm.calls[0].schema is not None and "answer" in llm.calls[0].schema["properties"]


def test_llm_call_budget(backend: FakeRetriever) -> None:
    llm = FakeLLM(script([judged(GOOD, 5)], evaluate=[judged(None, 5)], refine=[GOOD]))
    rag = SelfIRAG(backend, llm, execution=ExecutionConfig(max_llm_calls=2))
    result = rag.query(Q)
    assert llm.n_calls == 2 and result.answer == GOOD
    assert any("budget" in (e.error or "") for e in result.trace.fallbacks)


def test_query_timeout_bounds_a_hung_model(backend: FakeRetriever) -> None:
    llm = FakeLLM(judged(GOOD, 9), latency=5.0)
    rag = SelfIRAG(backend, llm, execution=ExecutionConfig(query_timeout=0.3, retry_initial_wait=0))
    start = time.perf_counter()
    result = rag.query(Q)
    assert time.perf_counter() - start < 2.0
    assert result.answer == GENERATION_FAILED_ANSWER and result.trace.errors


async def test_aquery_timeout(backend: FakeRetriever) -> None:
    llm = FakeLLM(judged(GOOD, 9), latency=5.0)
    rag = SelfIRAG(backend, llm, execution=ExecutionConfig(llm_timeout=0.1, retry_initial_wait=0))
    start = time.perf_counter()
    result = await rag.aquery(Q)
    assert time.perf_counter() - start < 2.0 and result.answer == GENERATION_FAILED_ANSWER
    assert result.trace.events[-2].attempts == 3  # timed-out attempts were retried per policy


async def test_sync_query_inside_running_loop(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    result = make(FakeLLM(judged(GOOD, 9)), backend, instant).query(Q)  # like a Jupyter cell
    assert result.answer == GOOD

    async def async_only(prompt: str) -> str:
        await asyncio.sleep(0)
        return judged(GOOD, 9)

    assert make(async_only, backend, instant).query(Q).answer == GOOD


async def test_concurrent_aqueries_do_not_share_state(instant: ExecutionConfig) -> None:
    backend = FakeRetriever(["Paris is the capital of France.", "Berlin is the capital of Germany."])

    def reply(prompt: str) -> str:
        city = "Paris" if "France" in prompt.split("Question:")[-1] else "Berlin"
        return judged(f"{city} is the capital.", 9)

    llm = FakeLLM(reply, latency=0.05)
    rag = make(llm, backend, instant)
    questions = ["What is the capital of France?", "What is the capital of Germany?"] * 8
    results = await asyncio.gather(*(rag.aquery(q) for q in questions))
    for q, r in zip(questions, results, strict=True):
        assert r.answer.startswith("Paris" if "France" in q else "Berlin")
        assert r.trace.llm_calls == 1 and r.trace.retrievals == 1


async def test_aquery_is_truly_async(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    llm = FakeLLM(judged(GOOD, 9), latency=0.2)
    rag = make(llm, backend, instant)
    start = time.perf_counter()
    await asyncio.gather(*(rag.aquery(Q) for _ in range(20)))
    assert time.perf_counter() - start < 1.5  # 20 x 0.2 s sequential would be 4 s
    assert all(c.is_async for c in llm.calls)


@pytest.mark.parametrize(
    "bad,exc",
    [
        (None, TypeError),
        (123, TypeError),
        ("", ValueError),
        ("   \n\t", ValueError),
        ("x" * 1_000_000, ValueError),
    ],
)
def test_bad_queries(backend: FakeRetriever, instant: ExecutionConfig, bad: Any, exc: type) -> None:
    rag = make(FakeLLM(judged(GOOD, 9)), backend, instant)
    with pytest.raises(exc, match="query"):
        rag.query(bad)


async def test_bad_queries_async(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    with pytest.raises(TypeError, match="query"):
        await make(FakeLLM("x"), backend, instant).aquery(None)  # type: ignore[arg-type]


def test_control_characters_are_cleaned(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    llm = FakeLLM(judged(GOOD, 9))
    make(llm, backend, instant).query("What is the\x00 capital\x07 of France?")
    assert "\x00" not in llm.prompts[0] and "\x07" not in llm.prompts[0]


def test_constructor_validation(backend: FakeRetriever) -> None:
    for falsy in (None, "", 0):
        with pytest.raises(ValueError, match="llm"):
            SelfIRAG(backend, falsy)
    with pytest.raises(TypeError):
        SelfIRAG(backend, FakeLLM(), config={"max_refinement_iterations": 2})  # type: ignore[arg-type]


def test_get_stats_and_add_document(backend: FakeRetriever) -> None:
    rag = SelfIRAG(backend, FakeLLM(), SelfRAGConfig(confidence_threshold=0.85))
    assert rag.get_stats() == {
        "max_refinement_iterations": 3, "confidence_threshold": 0.85, "enable_answer_refinement": True,
        "enable_retrieval_refinement": True, "llm_retries": 2, "fast_mode": True,
    }  # fmt: skip
    rag.add_document("Rome is the capital of Italy.")
    assert backend.metadata[-1] == {}
    with pytest.raises(ValueError):
        rag.add_document("  ")


def test_to_dict_is_json_safe(backend: FakeRetriever, instant: ExecutionConfig) -> None:
    result = make(FakeLLM(judged(GOOD, 9)), backend, instant).query(Q)
    data = json.loads(json.dumps(result.to_dict()))
    for key in ("answer", "confidence", "iterations", "initial_quality", "final_quality", "history", "trace"):
        assert key in data
    assert data["trace"]["llm_calls"] == 1 and data["trace"]["events"][0]["kind"] == "retrieval"
    assert result.final_answer == result.answer and result.refinement_steps == result.iterations


@pytest.mark.parametrize(
    "raw,expected",
    [
        (1, 0.1),
        (0, 0.0),
        (7, 0.7),
        (10, 1.0),
        (85, 1.0),
        (0.9, 0.9),
        (1.0, 1.0),
        (7.5, 0.75),
        ("8", 0.8),
        (-3, 0.0),
    ],
)
def test_judge_scales(raw: Any, expected: float) -> None:
    from selfrag_core.strategies.self_rag import _unit

    assert _unit(raw) == pytest.approx(expected)
    assert _unit(True) is None and _unit("high") is None and _unit(None) is None


@pytest.mark.parametrize(
    ("answer", "refusal"),
    [
        ("I CANNOT ANSWER that from the context.", True),
        ("The context does Not Provide enough; the answer is Not Available.", True),
        ("لا أعرف الإجابة.", True),
        ("Paris is the capital of France.", False),
        ("Knowing the answer is not hard: Paris.", False),
    ],
)
def test_refusals_are_recognised_in_any_case(answer: str, refusal: bool) -> None:
    from selfrag_core.grounding import degenerate_reason, is_refusal

    assert is_refusal(answer) is refusal
    context = "Paris is the capital of France."
    reason = degenerate_reason(answer, "What is the capital of France?", context)
    assert (reason == "refusal_with_evidence") is refusal


def test_skip_refinement_on_high_confidence_false_runs_every_iteration(
    backend: FakeRetriever, instant: ExecutionConfig
) -> None:
    """The specification's flag (it reserved it; True, the default, stops at the threshold)."""
    llm = FakeLLM(
        script([judged(GOOD, 9)], evaluate=[judged(None, 9)], refine=[GOOD + " It lies on the Seine."])
    )
    eager = make(llm, backend, instant, max_refinement_iterations=3, skip_refinement_on_high_confidence=False)
    result = eager.query(Q)
    assert result.iterations == 3 and "refining anyway" in result.history[0].reason
    assert (
        make(FakeLLM(judged(GOOD, 9)), backend, instant, max_refinement_iterations=3).query(Q).iterations == 1
    )


def test_an_unreadable_judge_is_unknown_in_the_result_schema(
    backend: FakeRetriever, instant: ExecutionConfig
) -> None:
    """The 0.5 that stands in for an unreadable judge is not a score: to_dict() says null."""
    llm = FakeLLM(script(["not json"], evaluate=["still not json"], answer=[GOOD]))
    result = make(llm, backend, instant, max_refinement_iterations=1).query(Q)
    assert result.confidence == 0.5 and not result.history[0].evaluation.parsed
    data = result.to_dict()
    assert data["confidence"] is None and data["history"][0]["confidence"] is None
    assert data["history"][0]["evaluation"]["confidence"] is None
    assert data["trace"]["schema"] == "selfrag.trace/1"
    assert data["trace"]["fallbacks"] == [e.name for e in result.trace.fallbacks]
    assert "evaluation_parse_failed" in data["trace"]["fallbacks"]


# ----------------------------------------------------------------------------- completeness

TWO_PARTS = "What makes a volcano erupt, and how do vaccines train the immune system?"
VOLCANO = "A volcano erupts when gas pressure drives magma up through the crust."
VACCINE = "Vaccines train the immune system to recognise a pathogen without causing the disease."


class _Topical:
    """A backend that returns the documents sharing a word with the query, best first."""

    def __init__(self, docs: list[str]) -> None:
        self.docs, self.queries = docs, []

    def retrieve(self, query: str, top_k: int) -> list[tuple[str, float]]:
        self.queries.append(query)
        words = set(query.lower().replace("?", "").split()) - {"what", "how", "do", "a", "the", "and"}
        scored = [(d, float(len(words & set(d.lower().rstrip(".").split())))) for d in self.docs]
        return [(d, s) for d, s in sorted(scored, key=lambda x: -x[1]) if s > 0][:top_k]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_part_of_the_question_the_answer_leaves_out_is_answered_too(
    mode: str, instant: ExecutionConfig
) -> None:
    def reply(prompt: str) -> str:
        question = prompt.rsplit("Question:", 1)[-1]
        if "then judge your own answer" in prompt:  # fast mode: answers the second part only
            return judged("Vaccines train the immune system to recognise a pathogen.", 9)
        if "volcano" in question and "vaccines" not in question:
            return "A volcano erupts when gas pressure drives magma up."
        return "unexpected"

    backend = _Topical([VOLCANO, VACCINE])  # the whole question finds the vaccine document first
    llm = FakeLLM(reply)
    strategy = make(llm, backend, instant, top_k=1)
    result = strategy.query(TWO_PARTS) if mode == "sync" else asyncio.run(strategy.aquery(TWO_PARTS))
    assert result.answer == (
        "Vaccines train the immune system to recognise a pathogen.\n\n"
        "A volcano erupts when gas pressure drives magma up."
    )
    assert llm.n_calls == 2 and [d.text for d in result.sources] == [VACCINE, VOLCANO]
    assert "What makes a volcano erupt?" in backend.queries
    notes = [e for e in result.trace.events if e.name == "incomplete_answer"]
    assert notes and notes[0].detail["parts"] == ["What makes a volcano erupt?"]
    assert [c.supported_by for c in result.citations] == [[1], [2]]


def test_an_answer_that_covers_every_part_costs_nothing_more(instant: ExecutionConfig) -> None:
    both = "Vaccines train the immune system. A volcano erupts when gas pressure drives magma up."
    llm = FakeLLM(judged(both, 9))
    result = make(llm, _Topical([VOLCANO, VACCINE]), instant, top_k=2).query(TWO_PARTS)
    assert result.answer == both and llm.n_calls == 1


def test_completeness_can_be_turned_off(instant: ExecutionConfig) -> None:
    llm = FakeLLM(judged("Vaccines train the immune system to recognise a pathogen.", 9))
    strategy = make(llm, _Topical([VOLCANO, VACCINE]), instant, top_k=1, complete_parts=False)
    result = strategy.query(TWO_PARTS)
    assert "volcano" not in result.answer and llm.n_calls == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_unusable_plain_answer_gives_way_to_a_quote_as_plains_does(
    mode: str, instant: ExecutionConfig
) -> None:
    question = "What is the capital of France?"
    llm = FakeLLM(script([judged(None, 5)], evaluate=[judged(None, 5)], answer=[question]))  # an echo
    strategy = make(llm, FakeRetriever(["Paris is the capital of France."]), instant, fast_mode=False,
                    stop_when_supported=True)  # fmt: skip
    result = strategy.query(question) if mode == "sync" else asyncio.run(strategy.aquery(question))
    assert result.answer == "\u201cParis is the capital of France.\u201d [1]" and llm.n_calls == 1
    assert [e.detail["then"] for e in result.trace.fallbacks if e.name == "answer_rejected"] == ["a quote"]


# ------------------------------------------------------------ what a refinement is shown
CITIES = ["Paris is the capital of France.", "Berlin is the capital of Germany.", "Rome is in Italy."]


def _refine_and_evaluate_prompts(llm: FakeLLM) -> tuple[str, list[str]]:
    refine = next(p for p in llm.prompts if "Improve the answer" in p)
    return refine, [p for p in llm.prompts if p.startswith("Documents (data") and "Judge the answer" in p]


def test_a_refinement_is_shown_the_documents_the_answer_used_when_nothing_is_missing(
    instant: ExecutionConfig,
) -> None:
    # complete, but not accurate enough: no search keywords, so the answer's own document suffices
    first = judged("Paris is the capital of France [1].", 9, accuracy=4, issues=["state it plainly"])
    llm = FakeLLM(script([first], evaluate=[judged(None, 9)], refine=["Paris is the capital of France [1]."]))
    result = make(llm, FakeRetriever(CITIES), instant).query(Q)
    refine, evaluations = _refine_and_evaluate_prompts(llm)
    assert "Paris is the capital" in refine and "Berlin" not in refine and "Rome" not in refine
    assert "Issues: state it plainly" in refine
    # the refined answer is judged on what it was written from: its [1] is Paris's document
    assert len(evaluations) == 1 and "Berlin" not in evaluations[0]
    assert result.best_iteration == 2 and [d.text for d in result.sources] == [CITIES[0]]
    assert result.citations and result.citations[0].cited == [1]


@pytest.mark.parametrize(
    "first",
    [
        judged("Paris is the capital of France [1].", 9, accuracy=4, suggestions=["Seine"]),  # keywords
        judged("Paris is the capital of France [1].", 5),  # completeness below the threshold
        "no JSON at all",  # unreadable judge: neutral scores
    ],
)
def test_a_refinement_is_shown_every_document_when_something_may_be_missing(
    first: str, instant: ExecutionConfig
) -> None:
    llm = FakeLLM(
        script([first], evaluate=[judged(None, 5)], refine=["Paris is the capital of France [1]."],
               answer=["Paris is the capital of France [1]."])
    )  # fmt: skip
    make(llm, FakeRetriever(CITIES), instant, max_refinement_iterations=2).query(Q)
    refine, _ = _refine_and_evaluate_prompts(llm)
    assert all(city in refine for city in CITIES)


def test_the_expanded_querys_new_documents_wait_for_the_next_refinement(instant: ExecutionConfig) -> None:
    docs = [*CITIES[:2], "The Seine river is the river of Paris in France."]
    llm = FakeLLM(
        script(
            [judged("Paris is the capital of France [1].", 5, suggestions=["Seine", "river"])],
            evaluate=[judged(None, 5, suggestions=["Seine"])],
            refine=["Paris is the capital of France [1]."],
        )
    )
    result = make(llm, FakeRetriever(docs), instant, top_k=2, max_refinement_iterations=3).query(Q)
    refines = [p for p in llm.prompts if "Improve the answer" in p]
    evaluations = [p for p in llm.prompts if p.startswith("Documents (data") and "Judge the answer" in p]
    assert len(refines) == 2 and len(evaluations) == 2
    # the refined answer is judged on the first retrieval it was written from
    assert "The Seine" not in refines[0] and "The Seine" not in evaluations[0]
    assert "[3] (source: doc-2) The Seine river" in refines[1]  # the expanded query's, shown next
    assert "The Seine" in evaluations[1] and result.iterations == 3
