"""What the ``selfrag`` command and the HTTP service build: the four strategies by
name, and the embedded index in a directory.

One factory and one index opener, below both the CLI (``selfrag_core.cli``) and the
server (``selfrag_core.serve``), so that neither imports the other to get them. This is
an application module: it may use the library (the strategies, the configs) and the
store and local models, and the library never imports it (pyproject's import-linter
contracts).

    build_strategy(name, rag, llm, *, preset="small", top_k=3, verifier=None, ...)  # one strategy
    default_strategies(rag, llm)                                      # create_app's four
    load_verifier(spec)                  # --verifier: a Verifier of your own, package.module:factory
    open_index(directory, *, create, embed="auto", ...)               # the embedded index
    open_backend(spec)                   # --backend: a directory, SCHEME://..., module:factory, or memory
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selfrag_core.backends.registry import EMBEDDER_CHOICES, backend_embedder, open_url, url_scheme
from selfrag_core.config import ExecutionConfig, StrategyConfig
from selfrag_core.errors import ConfigurationError, MissingDependencyError
from selfrag_core.profiles import CAPABLE, SMALL_LOCAL, ModelProfile, profile_of
from selfrag_core.prompts import Prompts
from selfrag_core.retrieval import resolve_backend
from selfrag_core.signals.fitted import Checks
from selfrag_core.strategies import Strategy
from selfrag_core.strategies.registry import BUILT_IN, compared
from selfrag_core.validation import check_verifier
from selfrag_core.verify import LexicalVerifier, Verifier

logger = logging.getLogger("selfrag")

#: the strategies compared by default (the demo's, ``selfrag eval``'s, ``adaptive``'s candidates);
#: every built-in strategy, these and the two below, is an entry of ``BUILT_IN``
#: (:mod:`selfrag_core.strategies.registry`): the CLI's ``--strategy``, the server's URL names
STRATEGIES = compared()
#: one retrieval, one answer (``PlainRAG``): the baseline of ``selfrag eval``, and a strategy too
BASELINE = "plain"
#: per question, plain or the strategy of ``STRATEGIES`` expected to gain most for its cost (``AdaptiveRAG``)
ADAPTIVE = "adaptive"
#: how the strategies are sized, by name: "small" for a small local model
#: (``SMALL_LOCAL``: two-step Self-RAG with at most two iterations, one hypothetical
#: document, no decomposition, one healing retry: the CLI's and ``selfrag serve``'s),
#: "standard" for a capable one (``CAPABLE``: each strategy's own defaults,
#: ``create_app``'s and ``python -m selfrag_core.serve``'s); ``build_strategy`` takes a
#: :class:`~selfrag_core.profiles.ModelProfile` too
PRESETS = ("small", "standard")
#: seconds one LLM attempt may take, and one question, unless --llm-timeout / --timeout say otherwise
DEFAULT_LLM_TIMEOUT = 120.0
DEFAULT_QUERY_TIMEOUT = 600.0
#: the embedder of a new index: MiniLM when installed (else lexical), MiniLM, hashing, none (lexical)
EMBEDDERS = EMBEDDER_CHOICES


# ----------------------------------------------------------------------------- strategies


def preset_for(llm_spec: str) -> str:
    """The preset that fits the LLM named on the command line: "small" for the embedded
    models (``local``, ``smollm2``, ``gemma``, a ``.gguf`` file) and ``fake``, whose answers
    get worse with more context and more rounds; "standard" for a ``provider:model``, a
    capable model that the strategies' own defaults are made for."""
    name = llm_spec.strip()
    provider, sep, _ = name.partition(":")
    return "standard" if sep and len(provider) > 1 and not name.lower().endswith(".gguf") else "small"


def preset_of(llm: Any) -> str:
    """The preset that fits an LLM object: "small" when the profile it declares
    (:func:`~selfrag_core.profiles.profile_of`: the embedded ``LocalLLM`` declares
    ``SMALL_LOCAL``) does not follow JSON, else "standard": a model that declares nothing
    (a LangChain chat model, a LlamaIndex LLM, an OpenAI-compatible server) is taken to be
    capable, and the strategies' own defaults are made for it."""
    return "standard" if profile_of(llm).follows_json else "small"


def profile_for(preset: str | ModelProfile) -> ModelProfile:
    """The model profile a preset names ("small": ``SMALL_LOCAL``, "standard": ``CAPABLE``),
    or ``preset`` itself when it is one. Raises ConfigurationError for another value."""
    if isinstance(preset, ModelProfile):
        return preset
    if preset == "small":
        return SMALL_LOCAL
    if preset == "standard":
        return CAPABLE
    raise ConfigurationError(
        f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)} or pass a ModelProfile"
    )


def build_strategy(
    name: str,
    rag: Any,
    llm: Any,
    *,
    top_k: int | None = 3,
    max_llm_calls: int | None = 12,
    llm_timeout: float | None = DEFAULT_LLM_TIMEOUT,
    query_timeout: float | None = DEFAULT_QUERY_TIMEOUT,
    preset: str | ModelProfile = "small",
    router: Any = None,
    call_budget: float | None = None,
    verifier: Verifier | None = None,
) -> Strategy[Any]:
    """The strategy ``name`` (an entry of ``BUILT_IN``: ``BASELINE``, one of ``STRATEGIES``,
    ``ADAPTIVE``..., or one of your own named ``"package.module:Name"`` or
    ``"path/to/file.py:Name"``: see :func:`load_strategy`) over ``rag`` and ``llm``, bounded
    in time.

    ``preset`` sizes it: a :class:`~selfrag_core.profiles.ModelProfile`, or one named in
    ``PRESETS`` (default "small", ``SMALL_LOCAL``, for a small local model; "standard" is
    ``CAPABLE``, whose sizes are each strategy's own defaults). Each strategy's config
    sizes itself for the profile (``SelfRAGConfig.for_profile(profile)``, ...): Self-RAG's
    ``fast_mode`` and refinement rounds, HyDE's hypothetical documents, the healing
    retries, and whether RecursiveRAG decomposes (a profile that does not follow JSON,
    such as ``SMALL_LOCAL``, splits only a question of several parts, by rule, one level
    deep, and joins the sub-answers, no merge call); the profile also decides whether the
    instruction to cite is given. ``top_k`` passages are retrieved per search (None: the
    profile's, 3 in a small context window, else 5, every strategy's own default); in a
    small context window HyDE's fused passages are capped at ``top_k`` too. The query
    runs under ``ExecutionConfig(max_llm_calls, llm_timeout, query_timeout)`` (None: no
    limit). ``healing`` tries plain retrieval, then HyDE. ``ADAPTIVE`` routes each
    question between plain and the ``STRATEGIES``, sized the same, with ``router`` (a
    router file, see ``AdaptiveRAG``; None: the default rules) within ``call_budget``
    (the most LLM calls a question is expected to cost); other strategies ignore both.
    ``verifier`` (a :class:`~selfrag_core.verify.Verifier`; None: the LLM-free
    ``LexicalVerifier``) decides support for the strategy and every strategy it is made
    of (its config's ``verifier``); a strategy of your own gets it as ``verifier=`` when
    its factory takes that keyword, else in its config when that is a ``StrategyConfig``.
    Raises ConfigurationError for an unknown name or preset, TypeError for a ``verifier``
    that is not one.
    """
    check_verifier(verifier)
    profile = profile_for(preset)
    # a small model never writes [n] markers and can end its answer at one: its citations
    # are attributed instead (the instruction stays for models that cite)
    prompts = Prompts(cite=profile.cites)
    limits: dict[str, Any] = {
        "max_llm_calls": max_llm_calls,
        "llm_timeout": llm_timeout,
        "query_timeout": query_timeout,
    }
    execution = ExecutionConfig(**limits)
    shared: dict[str, Any] = {"execution": execution, "prompts": prompts}
    if ":" in name:
        return load_strategy(name, rag, llm, execution=execution, verifier=verifier)
    entry = BUILT_IN.get(name)
    if entry is None:
        raise ConfigurationError(f"unknown strategy {name!r}; choose one of {', '.join(BUILT_IN)}")
    config = entry.config.for_profile(profile, top_k=top_k, verifier=verifier)

    def sized(other: str) -> Strategy[Any]:
        return build_strategy(other, rag, llm, top_k=top_k, preset=profile, verifier=verifier, **limits)

    return entry.build(rag, llm, config, sized, shared, {"router": router, "call_budget": call_budget})


def _import_attribute(spec: str, what: str, name: str, others: str) -> Any:
    """The object ``"package.module:name"`` or ``"path/to/file.py:name"`` names (``name``
    may be dotted). Raises ConfigurationError saying which ``what`` cannot be loaded and
    what to give instead (``others``: other choices)."""
    try:
        where, _, attribute = spec.rpartition(":")
        if where.endswith(".py"):
            module_spec = importlib.util.spec_from_file_location(Path(where).stem, where)
            if module_spec is None or module_spec.loader is None or not Path(where).is_file():
                raise FileNotFoundError(where)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
        found: Any = module
        for part in attribute.split("."):
            found = getattr(found, part)
        return found
    except (ImportError, OSError, AttributeError) as e:
        raise ConfigurationError(
            f"cannot load the {what} {spec!r} ({type(e).__name__}: {e}); give 'package.module:{name}' "
            f"or 'path/to/file.py:{name}', {others}"
        ) from e


def load_strategy(
    spec: str,
    rag: Any,
    llm: Any,
    *,
    execution: ExecutionConfig | None = None,
    verifier: Verifier | None = None,
) -> Strategy[Any]:
    """A strategy of your own: ``spec`` names a ``Strategy`` subclass (or any callable
    ``f(rag_system, llm, ...)`` returning a strategy) as ``"package.module:Name"`` or
    ``"path/to/file.py:Name"``; it is built with the backend and the LLM, and with
    ``execution`` and ``verifier`` where it takes them (a ``verifier`` it does not take
    goes into its config when that is a ``StrategyConfig`` without one). Raises
    ConfigurationError naming what is missing."""
    factory = _import_attribute(spec, "strategy", "Name", f"or one of {', '.join(STRATEGIES)}")
    takes = inspect.signature(factory).parameters
    keywords = any(p.kind is p.VAR_KEYWORD for p in takes.values())
    given = {"execution": execution, "verifier": verifier}
    options = {k: v for k, v in given.items() if v is not None and (k in takes or keywords)}
    strategy: Strategy[Any] = factory(rag, llm, **options)
    if not isinstance(strategy, Strategy):
        raise ConfigurationError(
            f"{spec!r} made a {type(strategy).__name__}, which is not a Strategy: "
            "subclass selfrag_core.Strategy (its plan is _plan(query, context))"
        )
    config = strategy.config
    if verifier is not None and isinstance(config, StrategyConfig) and config.verifier is None:
        strategy.config = config.replace(verifier=verifier)
    return strategy


def load_verifier(spec: str) -> Verifier:
    """A verifier of your own (``selfrag ... --verifier SPEC``): ``spec`` names, as
    ``"package.module:name"`` or ``"path/to/file.py:name"``, a
    :class:`~selfrag_core.verify.Verifier` (``verify(sentences, passages, question)`` and a
    ``threshold``), or a class or factory called with no arguments that returns one (one
    that loads an NLI model and wraps it in a ``CrossEncoderVerifier``, say); or a checks
    file (``FILE.json``, written by ``selfrag eval --fit-verifier FILE.json``): the
    lexical verifier with those fitted checks (``LexicalVerifier(checks=Checks.load(FILE))``).
    Raises ConfigurationError naming what is missing."""
    if spec.casefold().endswith(".json"):
        return LexicalVerifier(checks=Checks.load(spec))
    found = _import_attribute(spec, "verifier", "factory", "a Verifier or a factory that returns one")
    verifier: Verifier = found
    if isinstance(found, type) or (callable(found) and not callable(getattr(found, "verify", None))):
        verifier = found()  # a class or a factory
    try:
        check_verifier(verifier)
    except TypeError as e:
        raise ConfigurationError(f"{spec!r} gave no verifier: {e}") from e
    return verifier


def default_strategies(rag: Any, llm: Any, *, verifier: Verifier | None = None) -> dict[str, Strategy[Any]]:
    """The four strategies over one backend and LLM, by their URL names, each with its
    own defaults (the "standard" preset and ``ExecutionConfig()``'s limits) and
    ``verifier`` (None: the LLM-free ``LexicalVerifier``): what ``create_app`` serves when
    given no strategies.

    ``healing`` tries plain retrieval first, then HyDE, keeping the first answer
    whose faithfulness clears its threshold.
    """
    limits = ExecutionConfig()
    own: dict[str, Any] = {
        "top_k": None,
        "max_llm_calls": limits.max_llm_calls,
        "llm_timeout": limits.llm_timeout,
        "query_timeout": limits.query_timeout,
    }
    return {
        name: build_strategy(name, rag, llm, preset="standard", verifier=verifier, **own)
        for name in STRATEGIES
    }


# ----------------------------------------------------------------------------- the index


def _stored_embedder(directory: Path) -> str | None:
    """The embedder name recorded in an index's manifest (None when lexical or unreadable:
    loading then reports the problem)."""
    try:
        identity = json.loads((directory / "manifest.json").read_text(encoding="utf-8")).get("embedder")
    except (OSError, ValueError, AttributeError):
        return None
    return identity.get("name") if isinstance(identity, dict) else None


def check_embedder(choice: object) -> str:
    """``choice`` when it names one of ``EMBEDDERS``, else a ConfigurationError naming them."""
    if not isinstance(choice, str) or choice not in EMBEDDERS:
        raise ConfigurationError(f"unknown embedder {choice!r}; choose one of {', '.join(EMBEDDERS)}")
    return choice


def _new_embedder(choice: str) -> Any:
    from selfrag_core.local.embeddings import LocalEmbeddings, default_embeddings

    check_embedder(choice)
    if choice == "auto":
        return default_embeddings()
    if choice == "minilm":
        return LocalEmbeddings()
    return "hashing" if choice == "hashing" else None


@dataclass(frozen=True)
class _UnloadedEmbedder:
    """Stands for an index's embedder where nothing is embedded (``stats``): the model
    is not loaded."""

    name: str

    def embed_documents(self, texts: list[str]) -> Any:
        raise RuntimeError(f"{self.name} is not loaded")

    embed_query = embed_documents


def _store() -> Any:
    try:
        from selfrag_core.store import RAG
    except ImportError as e:
        raise MissingDependencyError(
            f"the embedded backend needs bm25s ({e}): pip install 'selfrag[store]'"
        ) from e
    return RAG


def open_index(
    directory: Path, *, create: bool, embed: str = "auto", chunk_size: int = 600, read_only: bool = False
) -> Any:
    """Load the index in ``directory`` with the embedder it was built with (not loaded
    with ``read_only``: for counting, not searching); with ``create``, start a new one
    there when it holds none (``embed``, one of ``EMBEDDERS``, and ``chunk_size`` size it).

    Raises ConfigurationError when ``directory`` is a file, or holds no index and
    ``create`` is false.
    """
    from selfrag_core.local.embeddings import LocalEmbeddings

    rag_class = _store()
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ConfigurationError(f"{directory} is a file, not an index directory; pass --index DIR")
    if not (directory / "manifest.json").exists():
        if not create:
            raise ConfigurationError(
                f"no index at {directory}; run `selfrag index PATH...` first (or pass --index DIR)"
            )
        return rag_class(
            _new_embedder(embed), path=directory, chunk_size=chunk_size, chunk_overlap=chunk_size // 6
        )
    stored = _stored_embedder(directory)
    if stored != LocalEmbeddings.name:
        return rag_class.load(directory)  # lexical, or an embedder the store recreates itself
    return rag_class.load(directory, embed=_UnloadedEmbedder(stored) if read_only else LocalEmbeddings())


#: what a ``--backend`` spec names (:func:`backend_kind`): "url" is a backend registered by its
#: URL scheme (``chroma://...``: :mod:`selfrag_core.backends.registry`)
BACKEND_KINDS = ("memory", "directory", "url", "factory")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


def backend_kind(spec: str | os.PathLike[str] | None) -> str:
    """What a ``--backend`` spec names, one of ``BACKEND_KINDS``: None is "memory"; a
    ``SCHEME://`` URL (``chroma://...``, or any registered scheme) "url";
    ``"package.module:factory"`` or ``"path/file.py:factory"`` "factory" (the part before
    the last ":" a dotted name or a ``.py`` path, the part after it a dotted name, and no
    directory of that name exists); anything else, and every ``Path``, an index "directory"."""
    if spec is None:
        return "memory"
    if not isinstance(spec, str):
        return "directory"
    if url_scheme(spec) is not None:
        return "url"
    where, sep, attribute = spec.rpartition(":")
    if (
        sep
        and _DOTTED.match(attribute)
        and (where.endswith(".py") or (_DOTTED.match(where) and len(where) > 1))
        and not Path(spec).expanduser().is_dir()
    ):
        return "factory"
    return "directory"


def load_backend(spec: str, *, embed: str = "auto") -> Any:
    """The backend a factory of your own makes: ``spec`` names a callable as
    ``"package.module:factory"`` or ``"path/to/file.py:factory"``; it is called with no
    arguments, or with ``embedder=`` (``backend_embedder(embed)``) when it takes one. Its
    object may be anything retrieval calls (a LangChain vector store or retriever, a
    LlamaIndex retriever, an object with ``retrieve(query, top_k)``...); an object that
    only has ``as_retriever()`` (a LlamaIndex index) is asked for its retriever.
    Raises ConfigurationError naming what is missing."""
    others = "a chroma://HOST:PORT/COLLECTION URL, or an index directory"
    factory = _import_attribute(spec, "backend", "factory", others)
    if not callable(factory):
        raise ConfigurationError(f"{spec!r} is a {type(factory).__name__}, not a factory to call")
    try:
        takes = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        takes = {}  # type: ignore[assignment]
    wants = "embedder" in takes or any(p.kind is p.VAR_KEYWORD for p in takes.values())
    backend = factory(embedder=backend_embedder(embed)) if wants else factory()
    if not resolve_backend(backend).retrieves and callable(getattr(backend, "as_retriever", None)):
        backend = backend.as_retriever()  # a LlamaIndex index
    if not resolve_backend(backend).retrieves:
        raise ConfigurationError(
            f"{spec!r} made a {type(backend).__name__}, which cannot retrieve: return a vector store, a "
            "retriever, an index with as_retriever(), or an object with retrieve(query, top_k)"
        )
    return backend


def open_backend(spec: str | os.PathLike[str] | None, *, embed: str = "auto", chunk_size: int = 600) -> Any:
    """The backend ``spec`` names (:func:`backend_kind`): None, the embedded index in
    memory; a URL, the backend registered for its scheme, made with ``embed`` and
    ``chunk_size`` (:func:`~selfrag_core.backends.registry.open_url`; ``chroma://HOST:PORT/COLLECTION``
    is a :class:`~selfrag_core.backends.chroma.ChromaBackend` embedding with
    ``backend_embedder(embed)``); ``"package.module:factory"``
    or ``"path/to/file.py:factory"``, the object the factory makes (:func:`load_backend`);
    anything else, the embedded index in that directory, created when missing
    (``open_index(spec, create=True, embed=embed, chunk_size=chunk_size)``)."""
    kind = backend_kind(spec)
    if kind == "memory":
        logger.info("no --index: the documents live in memory only")
        return _store()()
    if kind == "url":
        return open_url(str(spec), embed=embed, chunk_size=chunk_size)
    if kind == "factory":
        return load_backend(str(spec), embed=embed)
    assert spec is not None
    return open_index(Path(spec).expanduser(), create=True, embed=embed, chunk_size=chunk_size)
