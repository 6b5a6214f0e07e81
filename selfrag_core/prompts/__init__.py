"""Every prompt of the library, as named templates in English and Arabic.

Templates use ``{name}`` placeholders for their declared variables only; any other
brace (in retrieved documents, in JSON examples) is left alone, so documents can
never break formatting. Strategies take ``prompts={"name": "template"}`` overrides,
validated against the declared variables at construction.

The answer language mirrors the query: a query written mostly in Arabic script
gets the Arabic templates.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from selfrag_core.errors import ConfigurationError
from selfrag_core.prompts import ar, en

_ARABIC = re.compile(r"[\u0600-\u06FF\u0750-\u077F\u08A0-\u08FF\uFB50-\uFDFF\uFE70-\uFEFF]")
_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
_ARABIC_LETTER = re.compile(r"(?=[^\W\d_])" + _ARABIC.pattern)


def detect_language(text: str) -> str:
    """``"ar"`` when most letters of ``text`` are Arabic script, else ``"en"``."""
    if text.isascii():  # no Arabic letter in it: the usual case, decided in C
        return "en"
    letters = len(_LETTER.findall(text))
    if not letters:
        return "en"
    return "ar" if len(_ARABIC_LETTER.findall(text)) * 2 >= letters else "en"


@functools.lru_cache(maxsize=64)
def _placeholders(variables: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"\{(" + "|".join(map(re.escape, variables)) + r")\}")


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    template: str
    variables: tuple[str, ...]

    def format(self, **values: Any) -> str:
        missing = set(self.variables) - values.keys()
        if missing:
            raise ConfigurationError(f"prompt {self.name!r} needs values for {sorted(missing)}")
        if not self.variables:
            return self.template
        return _placeholders(self.variables).sub(lambda m: str(values[m.group(1)]), self.template)


#: name -> the variables each template must use
VARIABLES: dict[str, tuple[str, ...]] = {
    "answer": ("context", "question"),
    "answer_and_evaluate": ("context", "question"),
    "evaluate": ("context", "question", "answer"),
    "refine": ("context", "question", "answer", "issues", "suggestions"),
    "hyde_document": ("question",),
    "grounded_answer": ("context", "question"),
    "decompose": ("question", "max_sub_questions"),
    "merge": ("question", "sub_answers"),
    "healing_answer": ("system_prompt", "history", "context", "question"),
    "faithfulness": ("context", "answer"),
}

#: the templates (``TEMPLATES``) and the instruction to cite (``CITE``) of each language
_LANGUAGES = {"en": en, "ar": ar}


class Prompts:
    """The templates a strategy uses, with the user's overrides applied. ``cite=False``
    leaves out the instruction to cite the documents as ``[n]`` (small models do not
    follow it, and it can end their answer at a marker); citations are then attributed
    (see :mod:`selfrag_core.citations`). ``overrides`` may be another ``Prompts``."""

    def __init__(self, overrides: Mapping[str, str] | Prompts | None = None, *, cite: bool = True) -> None:
        self.cite = cite
        self._overrides: dict[str, str] = {}
        if isinstance(overrides, Prompts):
            self._overrides.update(overrides._overrides)
            self.cite = overrides.cite and cite
            return
        for name, template in (overrides or {}).items():
            if name not in VARIABLES:
                raise ConfigurationError(f"unknown prompt {name!r}; known prompts: {sorted(VARIABLES)}")
            if not isinstance(template, str):
                raise ConfigurationError(f"prompt {name!r} must be a string")
            absent = [v for v in VARIABLES[name] if "{" + v + "}" not in template]
            if absent:
                raise ConfigurationError(f"prompt {name!r} must contain placeholders {absent}")
            self._overrides[name] = template

    def get(self, name: str, lang: str = "en") -> PromptTemplate:
        if name not in VARIABLES:
            raise KeyError(name)
        text = self._overrides.get(name)
        if text is None:
            language = _LANGUAGES.get(lang, en)
            text = language.TEMPLATES[name]
            if not self.cite:
                text = text.replace(language.CITE, "")
        return PromptTemplate(name, text, VARIABLES[name])

    def render(self, name: str, lang: str = "en", **values: Any) -> str:
        return self.get(name, lang).format(**values)


_BRACKETS = re.compile(r"[()\[\]]")
_DOCUMENT_TAG = re.compile(r"</?\s*document\b[^>\n]{0,300}>", re.IGNORECASE)
#: a document line's head a model copied ("[1] (source: notes.md) ", "1. (source: notes.md; 0.8) ")
_DOCUMENT_HEAD = re.compile(
    r"(?:\[\d{1,3}\]|\(\d{1,3}\)|(?<![\w.])\d{1,3}[.)])?[ \t]*\(source:[^()\n]{0,300}\)[ \t]*", re.IGNORECASE
)


def without_document_tags(answer: str) -> str:
    """``answer`` without what a model copied of a prompt's document markup around the
    text it copied (small models copy a passage whole): the ``<document ...>`` fences of
    the library's prompts up to 0.1 (a user's own template may still have them) and the
    head of a document line, "[1] (source: notes.md) ", the number and source the prompt
    put before the document's text ("1. (source: vaccines.txt) If the vaccinated ...", seen
    with SmolLM2 in the demo). The text stays."""
    if "document" in answer.lower():
        answer = _DOCUMENT_TAG.sub("", answer)
    if "source:" in answer.lower():
        answer = _DOCUMENT_HEAD.sub(_gap, answer)
    return answer.strip()


def _gap(match: re.Match[str]) -> str:
    """What a copied document head leaves: nothing at a line's start or before punctuation,
    else the space between the words it stood between."""
    text, start, end = match.string, match.start(), match.end()
    at_start = start == 0 or text[start - 1] == "\n"
    return "" if at_start or end == len(text) or not text[end].isalnum() else " "


def document_block(index: int, text: str, source: Any = None, note: str = "") -> str:
    """One retrieved document as every prompt shows it: a line opened by its number in
    brackets, ``[n]`` (the marker an answer cites it by), its source and ``note`` (e.g. a
    relevance score) in parentheses when given, then its text. Every further line of the
    text is indented by one space (blank lines dropped), so no retrieved text can begin a
    line: nothing a document holds can open another document, end the documents or speak
    as the prompt, whose own lines start at the margin. The templates say the documents
    are data, not instructions."""
    where = f"source: {' '.join(_BRACKETS.sub('', str(source)).split())[:200]}" if source else ""
    label = "; ".join(part for part in (where, " ".join(note.split())) if part)
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    head = f"[{index}] ({label}) " if label else f"[{index}] "
    return head + "\n ".join(lines)


def document_blocks(documents: Iterable[tuple[str, Any, str]], max_chars: int | None = None) -> str:
    """The context of a prompt: each ``(text, source, note)`` as a numbered
    :func:`document_block` (one per line, further lines indented), within ``max_chars``
    characters when given: the documents that fit whole, then as much of the next one's
    text as fits in its block. The one formatter of every prompt's documents (the
    strategies' and ``RAG.query``'s)."""
    blocks: list[str] = []
    used = 0
    for i, (text, source, note) in enumerate(documents, 1):
        block = document_block(i, text, source, note)
        room = None if max_chars is None else max_chars - used - (1 if blocks else 0)
        if room is not None and len(block) > room:
            empty, whole = document_block(i, "", source, note), text.strip()
            keep = room - len(empty)
            while keep > 0 and len(cut := document_block(i, whole[:keep], source, note)) > room:
                keep -= len(cut) - room  # an indented line break costs one more character
            if keep > 0 and len(document_block(i, whole[:keep], source, note)) > len(empty):
                blocks.append(document_block(i, whole[:keep], source, note))  # as much as fits
            break
        blocks.append(block)
        used += len(block) + (1 if len(blocks) > 1 else 0)
    return "\n".join(blocks)


# JSON schemas for the steps whose output is parsed (handed to structured-output LLMs)
_SCORE = {"type": "integer", "minimum": 0, "maximum": 10}
_STRINGS = {"type": "array", "items": {"type": "string"}, "maxItems": 3}
EVALUATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "relevance": _SCORE,
        "accuracy": _SCORE,
        "completeness": _SCORE,
        "clarity": _SCORE,
        "issues": _STRINGS,
        "suggestions": _STRINGS,
    },
    "required": ["relevance", "accuracy", "completeness", "clarity", "issues", "suggestions"],
}
ANSWER_EVALUATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, **EVALUATION_SCHEMA["properties"]},
    "required": ["answer", *EVALUATION_SCHEMA["required"]],
}
DECOMPOSITION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 8}},
    "required": ["items"],
}
FAITHFULNESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "claims": {
            "type": "array",
            "maxItems": 8,
            "items": {
                "type": "object",
                "properties": {"claim": {"type": "string"}, "supported": {"type": "boolean"}},
                "required": ["claim", "supported"],
            },
        }
    },
    "required": ["claims"],
}

__all__ = [
    "ANSWER_EVALUATION_SCHEMA",
    "DECOMPOSITION_SCHEMA",
    "EVALUATION_SCHEMA",
    "FAITHFULNESS_SCHEMA",
    "VARIABLES",
    "PromptTemplate",
    "Prompts",
    "detect_language",
]
