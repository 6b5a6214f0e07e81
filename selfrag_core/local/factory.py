"""``make_llm(spec)``: the LLM named on the command line.

``local`` / ``smollm2`` (default), ``gemma``, a path to a ``.gguf`` file, ``fake`` (a
deterministic extractive stand-in for tests and dry runs), or ``provider:model``.

``openai:MODEL`` is the core's own :class:`~selfrag_core.openai_llm.OpenAICompatibleLLM`
(any OpenAI-compatible server; see :func:`openai_llm`) as soon as a server is named: a
``base_url`` / ``api_key`` option, or ``$SELFRAG_LLM_BASE_URL``, ``$OPENAI_BASE_URL`` or
``$OPENAI_API_KEY``. Otherwise (nothing to reach a server with) it is resolved like any
other provider, and the error says what to set.

Providers. ``provider:model`` is resolved by the first of:

1. ``PROVIDERS[provider]``: a factory taking the model name (and the generation options
   given, as keywords), added in-process (``PROVIDERS["echo"] = lambda model: ...``);
2. the entry point named ``provider`` in the group ``selfrag.llm_providers``;
3. the entry points named ``*`` in that group: resolvers for any provider not named
   (the LangChain adapter registers one, reaching every chat model its
   ``init_chat_model`` knows), tried in the order of their distributions' names.

An entry point refers to a callable that takes the whole spec, ``"provider:model"``
(one resolver may serve many providers, and a model name may itself hold colons), and
the generation options given (``max_tokens``, ``temperature``: keyword arguments, passed
only when set; the LangChain adapter's resolver hands them to the chat model), and
returns an LLM (anything the strategies can call), or raises ``ConfigurationError``
(malformed spec, unknown provider or model: a ``*`` resolver's refusal passes the spec
to the next one) or ``MissingDependencyError`` naming the package to install. Entry
points are listed only for a spec that ``PROVIDERS`` lacks, and only the chosen one is
imported, so the core never imports an adapter it does not use. A distribution
registers one in its ``pyproject.toml``::

    [project.entry-points."selfrag.llm_providers"]
    "*" = "selfrag_langchain.providers:make_llm"   # any provider
    myvendor = "my_package.llms:from_spec"         # "myvendor:<model>" only
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable
from importlib import metadata
from typing import Any

from selfrag_core.errors import ConfigurationError, MissingDependencyError

#: ``provider`` -> factory taking the model name (the part after ``provider:``)
PROVIDERS: dict[str, Callable[[str], Any]] = {}
#: the entry-point group of LLM providers (see the module docstring)
PROVIDER_GROUP = "selfrag.llm_providers"
#: the name of an entry point that resolves any provider not registered by name
ANY_PROVIDER = "*"

LLM_CHOICES = ("local", "smollm2", "gemma", "fake", "<path>.gguf", "openai:<model>", "<provider>:<model>")
#: the provider name of the core's OpenAI-compatible LLM
OPENAI = "openai"
#: the environment variable naming the base URL of ``openai:MODEL`` (before ``OPENAI_BASE_URL``)
BASE_URL_ENV = "SELFRAG_LLM_BASE_URL"

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
        # a JSON step's prompt ends with its reply instruction; a document or question that
        # mentions JSON does not make an answer step one
        if "JSON" not in prompt.rstrip().rsplit("\n", 1)[-1]:
            return _extractive_reply(prompt)
        scores = dict.fromkeys(("relevance", "accuracy", "completeness", "clarity"), 8)
        data = {"answer": _extractive_reply(prompt), **scores, "issues": [], "suggestions": []}
        claims = [{"claim": data["answer"], "supported": True}]
        return json.dumps({**data, "items": [], "claims": claims})

    return FakeStructuredLLM(reply)


def openai_llm(model: str, *, base_url: str | None = None, **options: Any) -> Any:
    """``openai:MODEL``: an :class:`~selfrag_core.openai_llm.OpenAICompatibleLLM` for ``model``
    at ``base_url``, else ``$SELFRAG_LLM_BASE_URL``, else ``$OPENAI_BASE_URL``, else OpenAI's
    API; the key is ``$OPENAI_API_KEY`` (a server at a base URL may need none). ``options``
    go to its constructor (``api_key``, ``max_tokens``, ``temperature``, ...)."""
    from selfrag_core.openai_llm import OpenAICompatibleLLM

    if not model.strip():
        raise ConfigurationError("--llm openai:MODEL needs a model name, e.g. openai:gpt-4o-mini")
    url = base_url or os.environ.get(BASE_URL_ENV) or os.environ.get("OPENAI_BASE_URL") or None
    return OpenAICompatibleLLM(model, base_url=url, **options)


def _names_a_server(options: dict[str, Any]) -> bool:
    """Whether ``openai:MODEL`` can reach a server: a base URL or an API key is given."""
    if options.get("base_url") or options.get("api_key"):
        return True
    return any(os.environ.get(name) for name in (BASE_URL_ENV, "OPENAI_BASE_URL", "OPENAI_API_KEY"))


#: the options of ``make_llm`` that only local models take (dropped for ``openai:MODEL``)
_LOCAL_ONLY = frozenset({"n_threads", "n_ctx", "chat", "verbose", "repeat_penalty", "hold_end_after_colon"})
#: the options of ``make_llm`` that every LLM takes: the local models, ``openai:MODEL``, and
#: providers (as keyword arguments of their factory or entry point, when given)
GENERATION_OPTIONS = ("max_tokens", "temperature")


def _accepts(factory: Callable[..., Any], names: list[str]) -> bool:
    """Whether ``factory`` takes the keyword arguments ``names`` (True when its signature is unknown)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return True
    keywords = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return set(names) <= keywords


def _provider_llm(factory: Callable[..., Any], arg: str, options: dict[str, Any], what: str) -> Any:
    """``factory(arg, **generation options)``; ConfigurationError when it does not take them."""
    generation = {k: options[k] for k in GENERATION_OPTIONS if k in options}
    if generation and not _accepts(factory, list(generation)):
        raise ConfigurationError(
            f"the LLM provider {what} takes no {' or '.join(generation)} option; leave it out "
            "(--llm-max-tokens, --llm-temperature) or set it in the provider's own configuration"
        )
    return factory(arg, **generation)


def make_llm(spec: str = "local", **options: Any) -> Any:
    """Build the LLM named by ``spec``; ``options`` go to ``LocalLLM`` for local models, and
    to :func:`openai_llm` for ``openai:MODEL`` (``base_url``, ``api_key``, ...; the local
    models' ``n_threads`` and the like are dropped). A provider gets the generation options
    (``max_tokens``, ``temperature``) as keyword arguments, and no others; ``fake`` takes none.

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
            return _provider_llm(factory, model, options, repr(provider.lower()))
        if provider.lower() == OPENAI and _names_a_server(options):
            return openai_llm(model, **{k: v for k, v in options.items() if k not in _LOCAL_ONLY})
        return _from_entry_points(name, provider.lower(), options)
    from selfrag_core.local.llm import LocalLLM

    return LocalLLM(name, **options)


def provider_entry_points() -> list[metadata.EntryPoint]:
    """The installed entry points of ``PROVIDER_GROUP`` (not loaded), one per name and
    target, sorted by distribution and name."""
    unique = {(ep.name, ep.value): ep for ep in metadata.entry_points(group=PROVIDER_GROUP)}
    return sorted(unique.values(), key=lambda ep: (_distribution(ep), ep.name))


def _distribution(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return str(getattr(dist, "name", "") or "")


def _load(ep: metadata.EntryPoint) -> Callable[[str], Any]:
    try:
        resolver: Callable[[str], Any] = ep.load()
    except (ImportError, AttributeError) as e:
        dist = _distribution(ep) or ep.value.partition(".")[0]
        raise MissingDependencyError(
            f"the LLM provider entry point {ep.name!r} ({ep.value}) cannot be loaded: {e}; "
            f"reinstall its package (pip install {dist}) or uninstall it"
        ) from e
    return resolver


def _from_entry_points(spec: str, provider: str, options: dict[str, Any] | None = None) -> Any:
    """The LLM of ``spec`` from the entry point named ``provider``, else from the ``*`` ones
    (each given the generation options of ``options``)."""
    options = options or {}
    entry_points = provider_entry_points()
    for ep in entry_points:
        if ep.name.lower() == provider:
            return _provider_llm(_load(ep), spec, options, f"{ep.name!r} ({ep.value})")
    refusals: list[ConfigurationError] = []
    for ep in (ep for ep in entry_points if ep.name == ANY_PROVIDER):
        try:
            return _provider_llm(_load(ep), spec, options, f"{ep.name!r} ({ep.value})")
        except ConfigurationError as e:
            refusals.append(e)
    if len(refusals) == 1:
        raise refusals[0]
    if refusals:
        raise ConfigurationError(f"no LLM provider accepts {spec!r}: " + "; ".join(map(str, refusals)))
    named = sorted({*PROVIDERS, *(ep.name for ep in entry_points)})
    raise ConfigurationError(
        f"unknown LLM provider {provider!r} (registered: {', '.join(named) or 'none'}); for LangChain "
        "chat models install the adapter (pip install -e integrations/langchain) and the provider's "
        "package (e.g. langchain-ollama)"
        + (
            f"; for an OpenAI-compatible server set {BASE_URL_ENV} (or OPENAI_BASE_URL) to its URL, "
            "or OPENAI_API_KEY for OpenAI's API, and pip install 'selfrag[openai]'"
            if provider == OPENAI
            else ""
        )
    )
