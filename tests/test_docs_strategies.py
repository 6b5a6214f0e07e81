"""The documentation's lists of strategies are the registry's (issue #52: the README said
"four strategies", the MCP how-to's ``ask`` row, the OpenAI how-to's models and the
tutorial's ``--strategy`` comment named four or five of the seven the code serves). Each
list is read from its page and compared with ``strategies.registry.BUILT_IN``, so that a
strategy added there fails here until the pages name it."""

from __future__ import annotations

import re
from pathlib import Path

import selfrag_core.cli
from selfrag_core.strategies.registry import BUILT_IN, compared

ROOT = Path(__file__).resolve().parents[1]
NAMES = list(BUILT_IN)  # plain, self, hyde, recursive, healing, adaptive, drafts
CLASSES = {entry.strategy.__name__ for entry in BUILT_IN.values()}
NUMBERS = dict(
    enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"])
)


def page(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def intro(text: str) -> str:
    """The first paragraph after the title."""
    return text.split("\n\n")[1]


def test_the_readme_counts_and_names_every_strategy() -> None:
    paragraph = intro(page("README.md"))
    assert f"{NUMBERS[len(BUILT_IN)]} strategies:" in paragraph, paragraph
    assert f"{NUMBERS[len(compared())]} that check and improve their own answers" in paragraph
    assert set(re.findall(r"`(\w+RAG)`", paragraph)) == CLASSES


def test_the_sites_home_counts_and_tables_every_strategy() -> None:
    text = page("docs/index.md")
    assert f"{NUMBERS[len(BUILT_IN)]} strategies (" in intro(text)
    rows = set(re.findall(r"^\| `(\w+RAG)` \|", text, re.MULTILINE))
    assert rows == CLASSES, rows ^ CLASSES


def test_the_demo_runs_the_compared_strategies_as_the_pages_say() -> None:
    for name in ("README.md", "docs/index.md", "docs/tutorial.md"):
        counts = re.findall(r"(\w+)\s+self-improving\s+strategies", page(name))
        assert counts and set(counts) == {NUMBERS[len(compared())]}, (name, counts)
    assert f"{NUMBERS[len(compared())]} self-improving strategies" in (selfrag_core.cli.__doc__ or "")


def test_the_tutorials_strategy_comment_names_every_strategy() -> None:
    line = next(ln for ln in page("docs/tutorial.md").splitlines() if ln.startswith("# --strategy:"))
    listed = [name.strip() for name in line.split(":", 1)[1].split("|")]
    assert sorted(listed) == sorted(NAMES), listed


def test_the_cli_docstring_names_every_strategy() -> None:
    usage = re.search(r"--strategy ([\w|]+)", selfrag_core.cli.__doc__ or "")
    assert usage and sorted(usage.group(1).split("|")) == sorted(NAMES)


def test_the_mcp_ask_tools_strategies_are_every_strategy() -> None:
    row = next(ln for ln in page("docs/how-to/mcp.md").splitlines() if ln.startswith("| `ask` |"))
    choices = re.search(r"`strategy` \((.*?)\), `max_llm_calls`", row)
    assert choices, row
    assert re.findall(r"`(\w+)`", choices.group(1)) == NAMES  # in the order the tool lists them


def test_the_openai_how_tos_models_are_every_strategy() -> None:
    paragraph = page("docs/how-to/openai-endpoint.md").split("```")[0]
    models = re.findall(r"`selfrag-(\w+)`", paragraph)
    assert models == NAMES, models
