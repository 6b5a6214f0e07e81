"""What every call costs a user: the fixed text of each built-in prompt template stays
within a stated budget (issue 33).

Each template is rendered, in English and in Arabic with the instruction to cite (the
default), from fixed small inputs; its fixed text is what the rendered prompt holds
beyond those inputs, the characters every call pays whatever the question and the
documents. The fence of each retrieved document
(:func:`selfrag_core.prompts.document_blocks`) is paid once per document and has its
own budget. The peers' figures are in ``benchmarks/prompt_sizes.py``.
"""

from __future__ import annotations

import pytest

from selfrag_core.prompts import VARIABLES, Prompts, document_blocks

#: characters of fixed text per template, (English, Arabic), the instruction to cite
#: included. These budgets may only go down. A template that grows fails this test: raise
#: its budget here only on purpose, in the same commit, saying why (every character of a
#: template is paid on every call of every query).
BUDGETS: dict[str, tuple[int, int]] = {
    "answer": (159, 139),
    "answer_and_evaluate": (604, 527),
    "evaluate": (484, 438),
    "refine": (283, 245),
    "hyde_document": (97, 77),
    "grounded_answer": (123, 108),
    "decompose": (298, 241),
    "merge": (199, 166),
    "healing_answer": (94, 96),
    "faithfulness": (249, 221),
}

#: characters of a document's fence (its "[n] " and "(source: ...) " label, the line
#: break before the next one), beyond its text and its source; may only go down too
DOCUMENT_FENCE_BUDGET = 15

QUESTION = {"en": "What is the capital of France?", "ar": "ما هي عاصمة فرنسا؟"}
DOCUMENT = {"en": "Paris is the capital of France.", "ar": "باريس هي عاصمة فرنسا."}


def inputs(lang: str) -> dict[str, str]:
    """Small fixed values of every template variable, distinct from any template text."""
    return {
        "context": document_blocks([(DOCUMENT[lang], "paris.md", "")]),
        "question": QUESTION[lang],
        "answer": "Paris [1].",
        "issues": "none",
        "suggestions": "capital",
        "max_sub_questions": "3",
        "sub_answers": "Q1: Paris.",
        "system_prompt": "You answer questions.",
        "history": "",
    }


def fixed_chars(name: str, lang: str) -> int:
    """Characters of the rendered template ``name`` beyond its inputs' own characters."""
    values = inputs(lang)
    template = Prompts().get(name, lang)
    rendered = Prompts().render(name, lang, **{v: values[v] for v in template.variables})
    for v in template.variables:
        assert values[v] in rendered, f"{name} ({lang}) does not show its {v}"
    filled = sum(len(values[v]) * template.template.count("{" + v + "}") for v in template.variables)
    return len(rendered) - filled


def test_every_template_has_a_budget() -> None:
    # a new template needs a budget; a removed one's may stay until the table is tidied
    assert set(VARIABLES) <= set(BUDGETS), f"no budget for {sorted(set(VARIABLES) - set(BUDGETS))}"


@pytest.mark.parametrize("lang", ["en", "ar"])
@pytest.mark.parametrize("name", sorted(VARIABLES))
def test_a_template_stays_within_its_budget(name: str, lang: str) -> None:
    budget = BUDGETS[name][0 if lang == "en" else 1]
    size = fixed_chars(name, lang)
    assert size <= budget, (
        f"the {lang} template {name!r} has {size} characters of fixed text, over its budget of "
        f"{budget}: shorten it, or raise its budget in {__name__}.BUDGETS on purpose"
    )


def test_the_citation_request_costs_nothing_when_left_out() -> None:
    # the instruction to cite is part of the budget: without it no template is longer
    for name in VARIABLES:
        for lang in ("en", "ar"):
            values = inputs(lang)
            names = Prompts().get(name, lang).variables
            cited = Prompts().render(name, lang, **{v: values[v] for v in names})
            plain = Prompts(cite=False).render(name, lang, **{v: values[v] for v in names})
            assert len(plain) <= len(cited)


@pytest.mark.parametrize("count", [1, 5, 12])
def test_a_documents_fence_stays_within_its_budget(count: int) -> None:
    documents = [(f"Document number {i} says Paris is in France.", f"doc-{i}.md", "") for i in range(count)]
    context = document_blocks(documents)
    own = sum(len(text) + len(source) for text, source, _ in documents)
    digits = sum(len(str(i)) for i in range(1, count + 1))  # the numbers the fences carry
    per_document = (len(context) - own - digits + 1) / count  # + 1: no line before the first
    assert per_document <= DOCUMENT_FENCE_BUDGET, (
        f"a document's fence costs {per_document:.1f} characters, over its budget of "
        f"{DOCUMENT_FENCE_BUDGET}: lighten it, or raise the budget on purpose"
    )
    # every document is shown, whole
    assert all(text in context and source in context for text, source, _ in documents)
