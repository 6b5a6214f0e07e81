"""The built-in strategies by name: the one table everything that names a strategy reads.

``selfrag ask --strategy NAME`` (and its help), ``selfrag serve``'s ``/query/NAME`` and
OpenAI model ``selfrag-NAME``, ``selfrag mcp``'s ``ask`` tool, ``selfrag eval``'s
contenders, ``presets.build_strategy`` and the name a summary gives a SelfHealingRAG
attempt all come from :data:`BUILT_IN`. An entry gives the class, its config (sized for a
model by ``config.for_profile(profile, top_k=...)``: :mod:`selfrag_core.config`), the words
``selfrag ask --help`` shows after the name, and whether the strategy is one of those
compared by default (``compared``: the demo's, ``selfrag eval``'s default contenders,
``adaptive``'s candidates, ``create_app``'s defaults). Adding a built-in strategy is its
module and one entry here (docs/how-to/custom-strategy.md; tests/test_new_strategy_exercise.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from selfrag_core.config import (
    AdaptiveRAGConfig,
    DraftsRAGConfig,
    HyDERAGConfig,
    PlainRAGConfig,
    RecursiveRAGConfig,
    SelfHealingRAGConfig,
    SelfRAGConfig,
    StrategyConfig,
)
from selfrag_core.strategies.adaptive import AdaptiveRAG, candidates_from, load_router
from selfrag_core.strategies.base import Strategy
from selfrag_core.strategies.hyde import HyDERAG
from selfrag_core.strategies.plain import DraftsRAG, PlainRAG
from selfrag_core.strategies.recursive import RecursiveRAG
from selfrag_core.strategies.self_healing import SelfHealingRAG
from selfrag_core.strategies.self_rag import SelfIRAG
from selfrag_core.types import name_strategies_by

Sized = Callable[[str], Strategy[Any]]
Options = Mapping[str, Any]
#: builds a strategy made of others: ``compose(rag, llm, config, sized, shared, routing)``, where
#: ``sized(name)`` is the entry ``name`` built with the same model profile, ``top_k`` and limits,
#: ``shared`` holds ``execution`` and ``prompts``, ``routing`` ``router`` and ``call_budget``
#: (adaptive's)
Compose = Callable[[Any, Any, Any, Sized, Options, Options], Strategy[Any]]


@dataclass(frozen=True)
class BuiltIn:
    """One built-in strategy: built as ``strategy(rag, llm, config=config.for_profile(...),
    execution=..., prompts=...)``, or by ``compose`` when it is made of others."""

    strategy: type[Strategy[Any]]
    config: type[StrategyConfig]
    #: what ``selfrag ask --help`` says of it, in parentheses after its name ("" for nothing)
    about: str = ""
    #: one of the strategies compared by default (see the module docstring)
    compared: bool = False
    compose: Compose | None = None

    def build(
        self, rag: Any, llm: Any, config: Any, sized: Sized, shared: Options, routing: Options
    ) -> Strategy[Any]:
        """The strategy with ``config``, ``shared`` (``execution``, ``prompts``) and, made of
        others, those ``sized(name)`` builds (``routing``: adaptive's)."""
        if self.compose is not None:
            return self.compose(rag, llm, config, sized, shared, routing)
        make: Callable[..., Strategy[Any]] = self.strategy
        return make(rag, llm, config=config, **shared)


def compared() -> tuple[str, ...]:
    """The names of the strategies compared by default, in the table's order."""
    return tuple(name for name, entry in BUILT_IN.items() if entry.compared)


def name_of(class_name: str) -> str | None:
    """The name of the built-in strategy whose class is called ``class_name`` (None: not one)."""
    return next((name for name, e in BUILT_IN.items() if e.strategy.__name__ == class_name), None)


def _healing(
    rag: Any, llm: Any, config: Any, sized: Sized, shared: Options, routing: Options
) -> Strategy[Any]:
    """Plain retrieval first, then HyDE."""
    return SelfHealingRAG(llm, [rag, sized("hyde")], config=config, **shared)


def _adaptive(
    rag: Any, llm: Any, config: Any, sized: Sized, shared: Options, routing: Options
) -> Strategy[Any]:
    """Plain, or one of the :func:`compared` strategies, chosen per question."""
    names = [*compared(), *(n for n in _routed_to(routing.get("router")) if n in BUILT_IN and n != "plain")]
    candidates = {name: sized(name) for name in dict.fromkeys(names)}
    return AdaptiveRAG(rag, llm, config, strategies=candidates, **routing, **shared)


def _routed_to(router: Any) -> list[str]:
    """The strategies a fitted router's file routes to (a built-in one that is not compared
    by default, such as ``drafts``, becomes a candidate too); [] for no file or no router."""
    if not isinstance(router, (str, os.PathLike)):
        return []
    return list(getattr(load_router(router), "strategies", {}) or {})


#: by name, in the order the server lists them (its routes, its OpenAI models, the MCP tool's
#: choices): ``plain``, the compared four, ``adaptive``, ``drafts``
BUILT_IN: dict[str, BuiltIn] = {
    "plain": BuiltIn(PlainRAG, PlainRAGConfig, "one retrieval, one answer"),
    "self": BuiltIn(SelfIRAG, SelfRAGConfig, compared=True),
    "hyde": BuiltIn(HyDERAG, HyDERAGConfig, compared=True),
    "recursive": BuiltIn(RecursiveRAG, RecursiveRAGConfig, compared=True),
    "healing": BuiltIn(SelfHealingRAG, SelfHealingRAGConfig, compared=True, compose=_healing),
    "adaptive": BuiltIn(
        AdaptiveRAG,
        AdaptiveRAGConfig,
        "plain, or the strategy expected to gain most for its cost; see --router",
        compose=_adaptive,
    ),
    "drafts": BuiltIn(DraftsRAG, DraftsRAGConfig, "plain, and drafts over single documents in one round"),
}

# the summaries name a SelfHealingRAG attempt's strategy by this table, and AdaptiveRAG
# takes its default candidates from it
name_strategies_by(name_of)
candidates_from(BUILT_IN)
