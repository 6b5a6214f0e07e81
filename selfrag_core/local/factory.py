"""``make_llm(spec)``: the LLM named on the command line.

``local`` / ``smollm2`` (default), ``gemma``, a path to a ``.gguf`` file, ``fake`` (a
deterministic extractive stand-in for tests and dry runs), or ``provider:model`` for
providers registered in ``PROVIDERS`` (integrations add theirs there).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from selfrag_core.errors import ConfigurationError

#: ``provider`` -> factory taking the model name (the part after ``provider:``)
PROVIDERS: dict[str, Callable[[str], Any]] = {}

LLM_CHOICES = ("local", "smollm2", "gemma", "fake", "<path>.gguf", "<provider>:<model>")

_SENTENCE_END = re.compile(r"(?<=[.!?؟])\s")


def _extractive_reply(prompt: str) -> str:
    """The first sentence of the first passage of the prompt's context (or a refusal)."""
    from selfrag_core.testing import prompt_documents

    documents = prompt_documents(prompt)
    lines = documents[0].strip().splitlines() if documents else []
    # skip markdown headings and code comments
    body = " ".join(ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith(("#", "/")))
    if not body:
        return "The information is not available in the indexed documents."
    return _SENTENCE_END.split(body, maxsplit=1)[0]


def fake_llm() -> Any:
    """A scripted, instant LLM: answers with the first sentence of the best passage and
    fills JSON steps with fixed, valid values (no model needed)."""
    from selfrag_core.testing import FakeStructuredLLM

    def reply(prompt: str) -> str:
        if "JSON" not in prompt:
            return _extractive_reply(prompt)
        scores = dict.fromkeys(("relevance", "accuracy", "completeness", "clarity"), 8)
        data = {"answer": _extractive_reply(prompt), **scores, "issues": [], "suggestions": []}
        claims = [{"claim": data["answer"], "supported": True}]
        return json.dumps({**data, "items": [], "claims": claims})

    return FakeStructuredLLM(reply)


def make_llm(spec: str = "local", **options: Any) -> Any:
    """Build the LLM named by ``spec``; ``options`` go to ``LocalLLM`` for local models.

    Raises ConfigurationError for an unknown name or provider, MissingDependencyError
    (with the install command) when the model's packages are missing.
    """
    name = spec.strip()
    if name.lower() == "fake":
        return fake_llm()
    provider, sep, model = name.partition(":")
    if sep and len(provider) > 1:  # "C:\\models\\x.gguf" is a path, not a provider
        factory = PROVIDERS.get(provider.lower())
        if factory is not None:
            return factory(model)
        try:  # LangChain chat models, through the adapter package
            from selfrag_langchain.providers import make_llm as langchain_llm  # type: ignore[import-not-found]
        except ImportError:
            known = ", ".join(sorted(PROVIDERS)) or "none registered"
            raise ConfigurationError(
                f"unknown LLM provider {provider!r} (registered: {known}); for LangChain chat models "
                "install the adapter (pip install -e integrations/langchain) and the provider's package "
                "(e.g. langchain-ollama)"
            ) from None
        return langchain_llm(name)  # MissingDependencyError names the provider package
    from selfrag_core.local.llm import LocalLLM

    return LocalLLM(name, **options)
