"""LangChain chat models from ``provider:model`` specs (the CLI's ``--llm``)."""

from __future__ import annotations

import importlib
from typing import Any

from selfrag_core import ConfigurationError, MissingDependencyError

#: provider -> (distribution, module, chat model class), used when ``langchain`` is absent
PROVIDERS: dict[str, tuple[str, str, str]] = {
    "ollama": ("langchain-ollama", "langchain_ollama", "ChatOllama"),
    "openai": ("langchain-openai", "langchain_openai", "ChatOpenAI"),
    "anthropic": ("langchain-anthropic", "langchain_anthropic", "ChatAnthropic"),
    "google_genai": ("langchain-google-genai", "langchain_google_genai", "ChatGoogleGenerativeAI"),
    "mistralai": ("langchain-mistralai", "langchain_mistralai", "ChatMistralAI"),
    "groq": ("langchain-groq", "langchain_groq", "ChatGroq"),
    "huggingface": ("langchain-huggingface", "langchain_huggingface", "ChatHuggingFace"),
}


def parse_spec(spec: str) -> tuple[str, str]:
    if not isinstance(spec, str) or ":" not in spec:
        raise ConfigurationError(
            f"--llm expects provider:model (e.g. ollama:llama3.2, openai:gpt-4o-mini), got {spec!r}"
        )
    provider, model = (part.strip() for part in spec.split(":", 1))
    if not provider or not model:
        raise ConfigurationError(f"--llm expects provider:model with both parts, got {spec!r}")
    return provider.lower(), model


def _missing(provider: str, package: str, e: ImportError) -> MissingDependencyError:
    return MissingDependencyError(
        f"the {provider!r} provider needs the {package} package: pip install {package} ({e})"
    )


def make_chat_model(spec: str, **kwargs: Any) -> Any:
    """A LangChain chat model for ``provider:model`` (keyword arguments go to the model).

    Uses ``langchain.chat_models.init_chat_model`` when ``langchain`` is installed (every
    provider it knows), else the table ``PROVIDERS``. Raises ``MissingDependencyError``
    naming the package to install, ``ConfigurationError`` for a malformed spec or an
    unknown provider.
    """
    provider, model = parse_spec(spec)
    package, module, cls = PROVIDERS.get(provider, (f"langchain-{provider.replace('_', '-')}", "", ""))
    if module:  # a known provider: import its package first, for a clear message when missing
        try:
            provider_module = importlib.import_module(module)
        except ImportError as e:
            raise _missing(provider, package, e) from e
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        pass
    else:
        try:
            return init_chat_model(model, model_provider=provider, **kwargs)
        except ImportError as e:
            raise _missing(provider, package, e) from e
        except ValueError as e:
            raise ConfigurationError(f"cannot make a chat model for {spec!r}: {e}") from e
    if not module:
        raise ConfigurationError(
            f"unknown provider {provider!r}; known without the langchain package: {sorted(PROVIDERS)}. "
            "pip install langchain for every provider init_chat_model supports"
        )
    return getattr(provider_module, cls)(model=model, **kwargs)


def make_llm(spec: str, **kwargs: Any) -> Any:
    """``LangChainLLM(make_chat_model(spec))``: an LLM for the strategies."""
    from selfrag_langchain.llm import LangChainLLM

    return LangChainLLM(make_chat_model(spec, **kwargs))
