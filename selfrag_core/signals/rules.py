"""Rules an answer is checked with beyond the fitted checks: opt-in and composable.

The fitted checks (:mod:`selfrag_core.signals.fitted`) are learnt from data and scored on
a split nobody tuned them on. A rule is hand-written knowledge of one kind of question
("Who was born first, A or B?": :class:`~selfrag_core.comparison.ComparisonRule`), which
may hold on the questions it was written for and nowhere else. So no rule runs unless a
strategy's config names it (``PlainRAGConfig(rules=(ComparisonRule(),))``), and a rule
only flags an answer unless it is asked to replace it.

A rule is any object with a ``name`` and ``check(question, answer, passages)``, returning
a :class:`Finding` or None::

    class NoDates:
        name = "no_dates"

        def check(self, question, answer, passages):
            if re.search(r"\\b1[0-9]{3}\\b", answer) and "when" not in question.lower():
                return Finding(self.name, "a year the question did not ask for")
            return None

The strategies' final answer check (:func:`~selfrag_core.strategies.base.checked_answer`)
runs a config's rules in order: the first finding with a ``replacement`` replaces the
answer (a ``rule_replaced`` note); the others are ``rule_flagged`` notes in the trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Finding:
    """What a rule found in an answer: its message, and the answer it gives instead
    (None: the answer is only flagged); ``detail``: what the note in the trace holds."""

    rule: str
    message: str
    replacement: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class AnswerRule(Protocol):
    """A check of an answer against its question and passages (see the module's text)."""

    name: str

    def check(self, question: str, answer: str, passages: Sequence[str]) -> Finding | None: ...


def check_rules(rules: object) -> tuple[AnswerRule, ...]:
    """``rules`` as a tuple of rules; a TypeError naming what is not one."""
    if rules is None:
        return ()
    if isinstance(rules, AnswerRule) or not isinstance(rules, (list, tuple)):
        raise TypeError(
            "rules must be a tuple of answer rules (objects with a name and"
            " check(question, answer, passages)), e.g. rules=(ComparisonRule(),)"
        )
    for rule in rules:
        if not isinstance(rule, AnswerRule):
            raise TypeError(
                f"{type(rule).__name__} is not an answer rule: give it a name and"
                " check(question, answer, passages) returning a Finding or None"
            )
    return tuple(rules)
