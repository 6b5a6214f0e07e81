import pytest

from selfrag_core import ConfigurationError, ParseError
from selfrag_core.parsing import parse_json, parse_json_object, parse_list
from selfrag_core.prompts import VARIABLES, Prompts, detect_language


@pytest.mark.parametrize(
    "raw,expected",
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('Here you go: {"a": 1} Hope it helps!', {"a": 1}),
        ("{'a': 'it\\'s'}", {"a": "it's"}),
        ("{'a': 'France's capital'}", {"a": "France's capital"}),
        ('{"a": [1, 2,],}', {"a": [1, 2]}),
        ('{"a": "line one\nline two"}', {"a": "line one\nline two"}),
        ("{'ok': True, 'none': None}", {"ok": True, "none": None}),
    ],
)
def test_parse_json_tolerates_model_noise(raw: str, expected: dict) -> None:
    assert parse_json(raw) == expected


def test_parse_json_keeps_raw_on_failure() -> None:
    with pytest.raises(ParseError) as info:
        parse_json("no json here at all")
    assert info.value.raw == "no json here at all"


def test_parse_json_object_rejects_lists() -> None:
    with pytest.raises(ParseError):
        parse_json_object("[1, 2]")


@pytest.mark.parametrize(
    "raw",
    [
        '["What is A?", "What is B?"]',
        '{"items": ["What is A?", "What is B?"]}',
        '{"items": [{"question": "What is A?"}, {"sub_question": "What is B?"}]}',
        "Sub-questions:\n1. What is A?\n2) What is B?",
        "- What is A?\n* What is B?",
        '```json\n{"questions": ["What is A?", "What is B?",]}\n```',
    ],
)
def test_parse_list_formats(raw: str) -> None:
    assert parse_list(raw) == ["What is A?", "What is B?"]


def test_parse_list_nothing() -> None:
    assert parse_list("I cannot help with that.") == []


def test_detect_language() -> None:
    assert detect_language("ما هي أسباب تغير المناخ؟") == "ar"
    assert detect_language("What causes climate change?") == "en"
    assert detect_language("12345 ???") == "en"
    assert detect_language("٤٥٦ ، ١٢٣ abc") == "en"  # Arabic digits and comma are not letters
    assert detect_language("Le Nil, النهر الأطول") == "ar"  # 11 Arabic letters against 5 Latin
    assert detect_language("Café au lait, ما") == "en"
    assert detect_language("ﻻ abc") == "en" and detect_language("ﻻﻻ ab") == "ar"  # presentation forms


def test_every_template_declares_its_variables_in_both_languages() -> None:
    prompts = Prompts()
    for name, variables in VARIABLES.items():
        for lang in ("en", "ar"):
            text = prompts.get(name, lang).template
            for v in variables:
                assert "{" + v + "}" in text, (name, lang, v)


def test_braces_in_documents_do_not_break_formatting() -> None:
    out = Prompts().render("grounded_answer", "en", context="code: {x} and {question}", question="Q?")
    assert "code: {x} and {question}" in out and out.rstrip().endswith("Answer:")


def test_arabic_template_is_used_for_arabic() -> None:
    out = Prompts().render("grounded_answer", "ar", context="c", question="q")
    assert "الوثائق" in out and "السؤال: q" in out


def test_overrides_are_validated() -> None:
    p = Prompts({"grounded_answer": "C: {context} Q: {question}"})
    assert p.render("grounded_answer", "en", context="x", question="y") == "C: x Q: y"
    with pytest.raises(ConfigurationError):
        Prompts({"grounded_answer": "no placeholders"})
    with pytest.raises(ConfigurationError):
        Prompts({"nonexistent": "{question}"})
