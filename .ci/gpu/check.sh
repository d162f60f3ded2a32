#!/usr/bin/env bash
# One-shot GPU check for localspec on a rented CUDA machine (no network there). Runs on an
# H200, 2026-12-04: the build takes 265-317 s and works; the tiny pair loads on the GPU and
# greedy speculation equals plain decoding there (step d), `tune --save-profile` works, but
# pytest and `bench --quick` segfault at their first model load, inside llama.cpp's
# print_info in libstdc++ code bound from libggml-cuda.so (step d0 says more and tries fixes).
#
#   bash .gpu/check.sh               # on the device, from the repo root; writes under $OUT
#                                    # (.ci/gpu/prepare makes .gpu/ and copies this script there)
#   DRYRUN=1 bash .gpu/check.sh      # here: no nvidia-smi, no wheels on the path, no build;
#                                    # the venv's python and its (CPU) llama-cpp-python
#
# Steps (each timed, each under `timeout`, everything tee'd to $OUT/check.log):
#   a  machine info            b  carried wheels -> /tmp/site
#   c  llama-cpp-python with CUDA -> /tmp/site: the wheel `localspec build-cuda --arch 90
#      --wheel-dir` made on the CPU machine, carried in .gpu/cuda-wheel/ (seconds), else built
#      here from .gpu/src (265-317 s on an H200)                          ($OUT/build.log)
#   d0 the model load in fresh processes, after each import set that crashed before
#                                                                    ($OUT/load_variants.log)
#   d  build_info / devices / tiny-model offload / `localspec doctor --json` ($OUT/doctor.json)
#   p  models of the real shapes (random weights, Q4_K_M), their step costs and `tune`'s
#      profile                                   ($OUT/gpu_profile.json, $OUT/tune_profile.json)
#   e  pytest on the tiny generated models (the import-then-load test among them), then
#      tests/test_gpu.py -m gpu                                             ($OUT/tests.log)
#   f  `localspec tune` and `bench --quick` on two tiny GGUFs                ($OUT/cli.log)
#   g  summary table
# d-f are skipped if no CUDA build is there. A global deadline (TOTAL_S, default 575 s) shrinks the
# later steps' timeouts so that the whole script ends inside one 600 s device command.
# At most 8 files are written under $OUT (the device returns no more).

set -u
shopt -s extglob
export PYTHONUNBUFFERED=1
export PYTHONFAULTHANDLER=1  # a segfault prints the Python stack
export PYTHONDONTWRITEBYTECODE=1
REPO=$(pwd)
DRYRUN=${DRYRUN:-0}
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}
TOTAL_S=${TOTAL_S:-575}
MAXFAIL=${MAXFAIL:-10}
T0=$(date +%s)
LOG="$OUT/check.log"

if [ "$DRYRUN" = 1 ]; then
  PY=${PY:-$REPO/.venv/bin/python}
else
  PY=${PY:-python3}
fi

# the tests this check runs (595 tests, 65 s on the 2-core CPU machine with the CPU build)
TESTS_CORE=(
  tests/speculative tests/llama tests/constraints
  tests/server/test_slots.py tests/test_tiny_models.py tests/test_runtime_auto.py tests/test_fim.py
  tests/observe/test_guard_runtime.py tests/bench/test_reuse_numerics.py tests/bench/test_runner.py
)
# these start `localspec` processes: they need the console script beside sys.executable
TESTS_PROC=(
  tests/server/test_slots_api.py tests/server/test_scheduling.py tests/server/test_cache_reuse.py
  tests/server/test_prompt_cache.py tests/cli/test_doctor.py tests/cli/test_doctor_cache_shift.py
)

declare -A STEP_S STEP_RC
STEPS=()
now() { date +%s; }
left() { echo $((TOTAL_S - ($(now) - T0))); }
# the timeout a step gets: its nominal one, cut to what the deadline leaves (minus a reserve)
budget() { # nominal reserve
  local l=$(($(left) - $2))
  if [ "$l" -lt 1 ]; then l=1; fi  # timeout 0 would mean no limit
  if [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi
}
hdr() { echo; echo "=== [$(($(now) - T0))s] $* ==="; }
record() { STEPS+=("$1"); STEP_S[$1]=$2; STEP_RC[$1]=$3; }

# CMAKE_ARGS for the CUDA build. cuBLAS: the toolkit's; else a pip wheel's (nvidia/cu13/...,
# as torch's venv has), handed to CMake explicitly, with its lib folder on LD_LIBRARY_PATH.
# CUBLAS_SEARCH: extra folders to search first (a local test of this logic).
cuda_cmake_args() {
  local CUBLAS_ARGS="" NVCC CUDA_ROOT roots hdr_file inc libdir lib liblt
  NVCC=$(command -v nvcc)
  # nvcc may be a wrapper script: ask it where it lives
  CUDA_ROOT=$(nvcc --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -1)
  CUDA_ROOT=$(readlink -f "${CUDA_ROOT:-$(dirname "$(readlink -f "$NVCC")")}/..")
  echo "nvcc: $NVCC -> CUDA root $CUDA_ROOT"
  if [ -z "${CUBLAS_SEARCH:-}" ] && [ -n "$(ls "$CUDA_ROOT"/include/cublas_v2.h "$CUDA_ROOT"/targets/*/include/cublas_v2.h 2>/dev/null)" ]; then
    echo "cuBLAS headers in the toolkit"
  else
    roots="${CUBLAS_SEARCH:-} $("$PY" -c 'import site,sys; print(" ".join(p for p in site.getsitepackages()+sys.path[1:] if p))' 2>/dev/null) /usr/local /usr/include /opt"
    hdr_file=$(timeout 60 find $roots -maxdepth 6 -name cublas_v2.h 2>/dev/null | head -1)
    if [ -n "$hdr_file" ]; then
      inc=$(dirname "$hdr_file")
      libdir=$(dirname "$inc")/lib
      [ -d "$libdir" ] || libdir=$(dirname "$inc")/lib64
      lib=$(ls "$libdir"/libcublas.so* 2>/dev/null | head -1)
      liblt=$(ls "$libdir"/libcublasLt.so* 2>/dev/null | head -1)
      echo "cuBLAS outside the toolkit: $inc, $lib, $liblt"
      if [ -n "$lib" ] && [ -n "$liblt" ]; then
        CUBLAS_ARGS="-DCUDA_cublas_LIBRARY=$lib -DCUDA_cublasLt_LIBRARY=$liblt -DCMAKE_CUDA_FLAGS=-I$inc"
        export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      fi
    else
      echo "no cublas_v2.h found anywhere: the build will fail at CUDA::cublas"
    fi
  fi
  # the driver library ggml-cuda links for VMM: the toolkit's stub, else the driver's own
  local drv="" f
  for f in ${CUDA_DRIVER_SEARCH:-} "$CUDA_ROOT"/lib64/stubs/libcuda.so "$CUDA_ROOT"/lib/stubs/libcuda.so \
      "$CUDA_ROOT"/targets/*/lib/stubs/libcuda.so "$CUDA_ROOT"/lib64/libcuda.so "$CUDA_ROOT"/lib/libcuda.so \
      /usr/lib/x86_64-linux-gnu/libcuda.so /usr/local/nvidia/lib64/libcuda.so /usr/lib64/libcuda.so \
      /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib64/libcuda.so.1; do
    if [ -e "$f" ]; then drv=$f; break; fi
  done
  if [ -n "$drv" ]; then
    echo "CUDA driver library to link: $drv"
    CUBLAS_ARGS="$CUBLAS_ARGS -DCUDA_cuda_driver_LIBRARY=$drv"
  else
    echo "no libcuda.so found: building with GGML_CUDA_NO_VMM=on (the legacy memory pool)"
    CUBLAS_ARGS="$CUBLAS_ARGS -DGGML_CUDA_NO_VMM=on"
  fi
  CUDA_ROOT_DIR=$CUDA_ROOT
  export CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real -DLLAVA_BUILD=off \
-DGGML_NATIVE=off -DGGML_CCACHE=off -DGGML_CUDA_NCCL=off -DGGML_CUDA_COMPRESSION_MODE=none \
-DLLAMA_OPENSSL=off -DCMAKE_BUILD_TYPE=Release $CUBLAS_ARGS"
}

[ "${CHECK_FUNCS_ONLY:-0}" = 1 ] && return 0

main() {
# ---------------------------------------------------------------- a: machine info
hdr "a: machine"
t=$(now)
if [ "$DRYRUN" = 1 ]; then
  echo "DRYRUN: nvidia-smi and nvcc skipped"
else
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_cap \
    --format=csv,noheader || echo "nvidia-smi failed"
  timeout 20 nvcc --version | tail -2 || echo "nvcc failed"
fi
echo "cmake: $(cmake --version 2>/dev/null | head -1); ninja: $(ninja --version 2>/dev/null)"
echo "gcc: $(gcc -dumpfullversion 2>/dev/null); cores: $(nproc); $("$PY" --version 2>&1) at $("$PY" -c 'import sys; print(sys.executable)')"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); lists AMX: $(grep -qw amx_int8 /proc/cpuinfo && echo yes || echo no)"
echo "repo: $(git -C "$REPO" log -1 --format='%h %s' 2>/dev/null | cut -c1-80) (changes: $(git -C "$REPO" status --short 2>/dev/null | wc -l))"
timeout 30 "$PY" -m pip show numpy anyio click idna h11 hf-xet jinja2 pytest pytest-timeout scipy \
  hypothesis prometheus-client attrs typing-extensions scikit-build-core cmake ninja 2>/dev/null \
  | awk '/^Name:/{n=$2} /^Version:/{printf "%s=%s ", n, $2} END{print ""}'
record a_info $(($(now) - t)) 0

# ---------------------------------------------------------------- b: wheels
hdr "b: carried wheels"
t=$(now)
if [ "$DRYRUN" = 1 ]; then
  # install them somewhere harmless to prove the set installs; the venv has its own copies
  rm -rf /tmp/site-dry
  timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site-dry --python-version 3.12 --implementation cp --only-binary=:all: \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any .gpu/wheels/*.whl
  rc=$?
  export PYTHONPATH=$REPO
else
  mkdir -p "$SITE"
  timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$SITE" .gpu/wheels/*.whl
  rc=$?
  export PYTHONPATH=$REPO:$SITE
fi
ls .gpu/wheels | sed 's/^/  /'
record b_wheels $(($(now) - t)) $rc

# ---------------------------------------------------------------- c: build
hdr "c: llama-cpp-python with CUDA"
t=$(now)
BUILD_OK=0
CARRIED_WHEEL=$(ls .gpu/cuda-wheel/llama_cpp-cuda.tar.xz 2>/dev/null)
if [ "$DRYRUN" = 1 ]; then
  echo "DRYRUN: build skipped; using $("$PY" -c 'import llama_cpp; print(llama_cpp.__file__)' 2>&1)"
  [ -n "$CARRIED_WHEEL" ] && echo "DRYRUN: the carried wheel $CARRIED_WHEEL would be installed"
  BUILD_OK=1
  rc=0
else
  if [ -n "$CARRIED_WHEEL" ]; then
    # built on the CPU machine by `localspec build-cuda --arch 90 --wheel-dir` (docs/gpu.md),
    # with CUDA 13.5's runtime beside it (.gpu/cuda-wheel/lib: the image's may be older than
    # what it was compiled against; a 580 driver runs 13.x); cuBLAS is the image's
    echo "unpacking the carried CUDA build $CARRIED_WHEEL ($(du -h "$CARRIED_WHEEL" | cut -f1))"
    mkdir -p "$SITE" && timeout 120 tar -xJf "$CARRIED_WHEEL" -C "$SITE"
    rc=$?
    LD_LIBRARY_PATH=$REPO/.gpu/cuda-wheel/lib
    for d in $("$PY" -c 'import site; print(" ".join(site.getsitepackages()))') /usr/local/cuda/lib64; do
      [ -d "$d/nvidia/cu13/lib" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d/nvidia/cu13/lib
      [ -d "$d" ] && [ -e "$d/libcublas.so.13" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
    done
    export LD_LIBRARY_PATH
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldd "$SITE/llama_cpp/lib/libggml-cuda.so" 2>&1 | grep -E 'not found|cublas|cudart|libcuda\.' | sed 's/^/ /'
    if [ $rc -eq 0 ] && timeout 60 "$PY" -c 'import llama_cpp; print("llama_cpp imports:", llama_cpp.llama_supports_gpu_offload())'; then
      BUILD_OK=1
    else
      echo "the carried wheel does not load here (rc=$rc): building from .gpu/src instead"
      rm -rf "$SITE/llama_cpp" "$SITE"/llama_cpp_python-*.dist-info
    fi
  fi
fi
if [ "$DRYRUN" != 1 ] && [ $BUILD_OK = 0 ]; then
  cuda_cmake_args
  export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
  echo "CMAKE_ARGS=$CMAKE_ARGS"
  build() {
    tb=$(budget 430 130)
    echo "build timeout ${tb}s"
    # -v streams cmake/ninja to the log (progress survives a timeout); only its tail is shown
    timeout -k 10 "$tb" "$PY" -m pip install -v --no-build-isolation --no-deps --no-index \
      --no-cache-dir --config-settings=build-dir=/tmp/lcp-build --target "$SITE" .gpu/src \
      >>"$OUT/build.log" 2>&1
  }
  : >"$OUT/build.log"
  build
  rc=$?
  # one retry where CMake could not find cuBLAS or the driver library (a configure failure)
  if [ $rc -ne 0 ] && [ $(($(now) - t)) -lt 150 ] && grep -q -E 'CUDA::(cublas|cuda_driver)' "$OUT/build.log"; then
    echo "configure failed on CUDA::cublas or CUDA::cuda_driver: retrying with a wider search, no VMM"
    grep -B2 -A3 'CUDA::' "$OUT/build.log" | head -12
    rm -rf /tmp/lcp-build
    CUBLAS_SEARCH=${CUBLAS_SEARCH:-/usr/local} cuda_cmake_args
    CMAKE_ARGS="${CMAKE_ARGS/-DCUDA_cuda_driver_LIBRARY=*([^ ])/} -DGGML_CUDA_NO_VMM=on"
    echo "CMAKE_ARGS=$CMAKE_ARGS"
    echo "===== retry" >>"$OUT/build.log"
    build
    rc=$?
  fi
  grep -o '\[[0-9]*/[0-9]*\]' "$OUT/build.log" | tail -1 | sed 's/^/last ninja step: /'
  if [ $rc -eq 0 ] && [ -e "$SITE/llama_cpp/lib/libggml-cuda.so" ]; then
    BUILD_OK=1
    ls -la "$SITE/llama_cpp/lib" | awk '{print "  " $5, $9}'
    missing=$(ldd "$SITE/llama_cpp/lib/libggml-cuda.so" | grep 'not found')
    if [ -n "$missing" ]; then
      echo "unresolved libraries: $missing"
      for d in "$CUDA_ROOT_DIR/lib64" "$CUDA_ROOT_DIR/lib" $(find $("$PY" -c 'import site; print(" ".join(site.getsitepackages()))') -maxdepth 4 -type d -path '*nvidia*' -name lib 2>/dev/null); do
        [ -d "$d" ] && LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      done
      export LD_LIBRARY_PATH
      echo "after LD_LIBRARY_PATH=$LD_LIBRARY_PATH:"
      ldd "$SITE/llama_cpp/lib/libggml-cuda.so" | grep -E 'not found|cublas|cudart|libcuda\.' | sed 's/^/ /'
    else
      ldd "$SITE/llama_cpp/lib/libggml-cuda.so" | grep -E 'cublas|cudart|libcuda\.' | sed 's/^/ /'
    fi
  else
    [ $rc -eq 124 ] && echo "BUILD TIMED OUT after ${tb}s"
    echo "BUILD FAILED (rc=$rc); tail of build.log:"
    grep -n -i -E 'error|fatal' "$OUT/build.log" | grep -v -i -E 'Werror|error_|-Wno' | head -20
    tail -40 "$OUT/build.log"
  fi
fi
BUILD_S=$(($(now) - t))
record c_build $BUILD_S $rc

# ---------------------------------------------------------------- d0: which model load crashes
# The first runs (2026-12-04) segfaulted at the first llama_model_load_from_file of pytest and
# bench. The second run found (cuda-gdb): a fresh process loads every variant; one that first
# imports localspec.cli.bench crashes inside llama_model::print_info, in std::ostream::_M_insert
# <long> resolved in libggml-cuda.so (libstdc++ code that library exports), so the crash depends
# on which libstdc++ copy the process bound first, not on localspec's load parameters. Each
# variant below loads the tiny target in a process of its own (rc 139: a segfault), with
# llama.cpp's log on stderr; the first crashing one runs again under cuda-gdb. A variant that
# loads where the bench-import one crashes lends its environment to the steps after it.
LOAD_LINE="not run"
if [ $BUILD_OK = 1 ]; then
  hdr "d0: model load variants"
  t=$(now)
  mkdir -p /tmp/tiny-models
  "$PY" -c "
from pathlib import Path
from tests.tiny_models import PARTIAL_DRAFT_NOISE, TinySpec, write_tiny_model
write_tiny_model(Path('/tmp/tiny-models/target.gguf'), TinySpec(seed=0))
print('tiny target written')"
  cat >/tmp/load_variant.py <<'EOF'
import logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(message)s")
kind, layers = sys.argv[1], int(sys.argv[2])
path = "/tmp/tiny-models/target.gguf"
if kind.startswith("bench"):  # what crashed in the second run: bench's imports first
    import localspec.cli.bench  # noqa: F401
    kind = "ours"
if kind == "lcpimport":  # of bench's imports, the one outside localspec that loads C++ code
    from llama_cpp import Llama  # noqa: F401
    from llama_cpp.llama_speculative import LlamaDraftModel  # noqa: F401
    kind = "ours"
if kind == "lcp":  # llama-cpp-python's own class, its own params and log
    import llama_cpp
    m = llama_cpp.Llama(model_path=path, n_gpu_layers=layers, n_ctx=256, verbose=True)
    print("LOADED lcp", m.n_vocab(), m.eval([1, 2, 3]) is None)
else:
    from localspec.llama.model import LlamaModel, ModelSettings
    if kind == "nolog":  # llama.cpp's own stderr logger instead of the Python callback
        import ctypes
        import llama_cpp.llama_cpp as lc
        from localspec.llama.backend import init_backend
        init_backend()
        lc.llama_log_set(ctypes.cast(None, lc.llama_log_callback), ctypes.c_void_p(0))
    from localspec.llama.context import LlamaContext
    model = LlamaModel(path, ModelSettings(n_gpu_layers=layers, use_mmap=kind == "mmap"))
    print("LOADED model", model.n_vocab)
    with LlamaContext(model, 256) as ctx:
        cached, logits = ctx.prefill_logits([1, 2, 3])
        print("LOADED context; decoded, logits:", logits is not None)
EOF
  declare -a V_NAMES=(lcp-gpu ours-cpu ours-gpu ours-gpu-nolog lcpimport-gpu bench-gpu bench-gpu-preload-stdcxx bench-gpu-lc-c bench-gpu-nopinned)
  declare -a V_ARGS=("lcp -1" "ours 0" "ours -1" "nolog -1" "lcpimport -1" "bench -1" "bench -1" "bench -1" "bench -1")
  STDCXX=$(g++ -print-file-name=libstdc++.so.6 2>/dev/null); STDCXX=$(readlink -f "${STDCXX:-libstdc++.so.6}")
  declare -a V_ENV=("" "" "" "" "" "" "LD_PRELOAD=$STDCXX" "LC_ALL=C LANG=C" "GGML_CUDA_NO_PINNED=1")
  echo "libstdc++ symbols libggml-cuda.so defines: $(nm -D --defined-only "$SITE/llama_cpp/lib/libggml-cuda.so" 2>/dev/null | grep -c -E '_ZNS|_ZNKS|_ZSt') (codecvt: $(nm -D --defined-only "$SITE/llama_cpp/lib/libggml-cuda.so" 2>/dev/null | grep -c codecvt))"
  FIRST_CRASH=""; FIX_ENV=""; DEFAULT_OK=0
  LOAD_LINE=""
  for i in "${!V_NAMES[@]}"; do
    [ "$(left)" -lt 200 ] && { echo "variants cut short: $(left)s left"; break; }
    timeout -k 5 40 env ${V_ENV[$i]} "$PY" /tmp/load_variant.py ${V_ARGS[$i]} >/tmp/v_$i.out 2>/tmp/v_$i.err
    vrc=$?
    echo "--- ${V_NAMES[$i]} (${V_ENV[$i]:-default env}): rc=$vrc $(grep -h LOADED /tmp/v_$i.out | tr '\n' ' ')"
    if [ $vrc -ne 0 ]; then
      grep -v -E '^\s*$' /tmp/v_$i.err | tail -12 | cut -c1-220 | sed 's/^/    /'
      [ -z "$FIRST_CRASH" ] && FIRST_CRASH=$i
    else
      [ "${V_NAMES[$i]}" = bench-gpu ] && DEFAULT_OK=1
      if [ -z "$FIX_ENV" ] && [ -n "${V_ENV[$i]}" ] && [ $DEFAULT_OK = 0 ]; then FIX_ENV=${V_ENV[$i]}; fi
    fi
    LOAD_LINE="$LOAD_LINE ${V_NAMES[$i]}=$vrc"
  done
  if [ -n "$FIRST_CRASH" ] && command -v cuda-gdb >/dev/null && [ "$(left)" -gt 200 ]; then
    i=$FIRST_CRASH
    echo "--- cuda-gdb backtrace of ${V_NAMES[$i]}"
    timeout -k 5 90 env ${V_ENV[$i]} cuda-gdb -q -batch -ex 'set pagination off' \
      -ex 'set cuda api_failures ignore' -ex run -ex 'bt 30' -ex 'info sharedlibrary' \
      --args "$PY" /tmp/load_variant.py ${V_ARGS[$i]} >/tmp/gdb.out 2>&1
    echo "cuda-gdb rc=$?"
    grep -E '^#[0-9]+|signal|SIG' /tmp/gdb.out | head -40 | cut -c1-240
  fi
  if [ $DEFAULT_OK = 0 ] && [ -n "$FIX_ENV" ]; then
    echo "the default load failed; the steps below run with $FIX_ENV"
    export $FIX_ENV
  fi
  for i in "${!V_NAMES[@]}"; do [ -e /tmp/v_$i.err ] && { echo "===== ${V_NAMES[$i]}"; cat /tmp/v_$i.out /tmp/v_$i.err; }; done >"$OUT/load_variants.log" 2>&1
  [ -e /tmp/gdb.out ] && { echo "===== cuda-gdb"; cat /tmp/gdb.out; } >>"$OUT/load_variants.log"
  record d0_load $(($(now) - t)) 0
fi

# ---------------------------------------------------------------- d: build info, offload, doctor
GPU_OFFLOAD="?"
TINY=/tmp/tiny-models
export XDG_CONFIG_HOME=/tmp/ls-xdg/config XDG_CACHE_HOME=/tmp/ls-xdg/cache \
  XDG_DATA_HOME=/tmp/ls-xdg/data XDG_STATE_HOME=/tmp/ls-xdg/state XDG_RUNTIME_DIR=/tmp/ls-xdg/run
if [ $BUILD_OK = 1 ]; then
  hdr "d: build info, devices, tiny-model offload, doctor"
  t=$(now)
  rm -rf /tmp/ls-xdg && mkdir -p /tmp/ls-xdg/{config,cache,data,state,run} && chmod 700 /tmp/ls-xdg/run
  timeout "$(budget 60 100)" "$PY" - <<EOF 2>&1 | tee /tmp/step_d.txt
import time
t = time.perf_counter()
import llama_cpp
from localspec.llama.backend import build_info
info = build_info()
print(f"llama_cpp {llama_cpp.__version__} from {llama_cpp.__file__}")
print(f"GPU_OFFLOAD={info.gpu_offload}")
print(f"system_info: {info.system_info}")
from pathlib import Path
from tests.tiny_models import PARTIAL_DRAFT_NOISE, TinySpec, write_tiny_model
d = Path("$TINY"); d.mkdir(parents=True, exist_ok=True)
target = write_tiny_model(d / "target.gguf", TinySpec(seed=0))
draft = write_tiny_model(d / "draft-noisy.gguf", TinySpec(seed=0, noise=PARTIAL_DRAFT_NOISE))
from localspec.llama.devices import devices, measure_offload
for dev in devices():
    print(f"device {dev.name} ({dev.description}, {dev.kind}): {dev.free_bytes/2**30:.1f} of {dev.total_bytes/2**30:.1f} GiB free")
m = measure_offload([target, draft], 512, -1)  # the tests' default: n_gpu_layers=-1, all layers
for o in m.models:
    print(f"tiny {o.path.name}: {o.layers_on_gpu}/{o.layers} layers on the GPU, {o.vram_bytes/2**20:.1f} MiB of VRAM taken")
print(f"contexts (n_ctx 512): {m.context_vram_bytes/2**20:.1f} MiB of VRAM")
# a greedy smoke: plain decoding vs speculation on the tiny pair, token for token
from localspec import Runtime, RuntimeSettings, SpecMode, SpecSettings
from tests.test_real_pair import generate
with Runtime(RuntimeSettings(target=target, draft=draft, n_ctx=512)) as rt:
    rt.load_draft()
    for prompt in ("def merge(a, b):", "Explain what a Python generator is."):
        plain = generate(rt, prompt, SpecSettings(SpecMode.OFF)).tokens
        for mode, k in ((SpecMode.NGRAM, 4), (SpecMode.DRAFT, 4), (SpecMode.HYBRID, 8)):
            spec = generate(rt, prompt, SpecSettings(mode, draft_max=k, ngram_draft_max=k)).tokens
            print(f"smoke {mode.value} k={k}: {len(spec)} tokens, same as plain: {spec == plain}")
print(f"step d python: {time.perf_counter() - t:.1f}s")
EOF
  rc=${PIPESTATUS[0]}
  GPU_OFFLOAD=$(grep -o 'GPU_OFFLOAD=[A-Za-z]*' /tmp/step_d.txt | tail -1 | cut -d= -f2)
  timeout "$(budget 40 90)" "$PY" -m localspec doctor --json >"$OUT/doctor.json" 2>"$OUT/doctor.err"
  drc=$?
  echo "doctor --json rc=$drc: $("$PY" -c "import json; r=json.load(open('$OUT/doctor.json')); print('gpu_offload', r['gpu_offload'], '| gpu', r['gpu'], '| devices', [d['name'] for d in (r['gpu_offload_report'] or {}).get('devices', [])], '| flash_attn_auto:', r['flash_attn_auto'])" 2>&1)"
  head -c 2000 "$OUT/doctor.err"; rm -f "$OUT/doctor.err"
  [ $rc -eq 0 ] && rc=$drc
  record d_info $(($(now) - t)) $rc
fi

# ---------------------------------------------------------------- p: GPU profile, real shapes
# Models of the real pair's shapes with random weights (Q4_K_M by llama.cpp's quantizer:
# a decode costs the same whatever the weights), written here, then every step cost for
# each pair (localspec.bench.step_costs) into $OUT/gpu_profile.json, and `tune`'s profile of
# the 1.5B+0.5B shapes for `localspec whatif --profile` into $OUT/tune_profile.json.
# DRYRUN: the "mini" shape, so that every command runs on the CPU in CI.
PROFILE_LINE="not run"
if [ $BUILD_OK = 1 ]; then
  hdr "p: step costs on models of the real shapes (random weights)"
  t=$(now)
  SHAPES=/tmp/shapes
  mkdir -p $SHAPES
  if [ "$DRYRUN" = 1 ]; then PAIRS="mini+mini"; TUNE_PAIR="mini+mini"; else PAIRS="1.5b+0.5b 7b+0.5b"; TUNE_PAIR="1.5b+0.5b"; fi
  PROFILE_LINE=""
  for pair in $PAIRS; do
    tgt=${pair%+*}; dft=${pair#*+}
    if [ "$(left)" -lt 200 ]; then PROFILE_LINE="$PROFILE_LINE $pair=skipped($(left)s)"; continue; fi
    for shape in $dft $tgt; do
      [ -e $SHAPES/$shape.gguf ] || timeout -k 5 "$(budget 240 150)" "$PY" -m localspec.bench.random_models \
        $shape $SHAPES/$shape.gguf 2>&1 | tail -1
    done
    timeout -k 5 "$(budget 180 120)" "$PY" -m localspec.bench.step_costs $SHAPES/$tgt.gguf \
      --draft $SHAPES/$dft.gguf --out /tmp/costs-$pair.json 2>&1 | tail -3
    PROFILE_LINE="$PROFILE_LINE $pair=$?"
  done
  "$PY" - "$OUT/gpu_profile.json" /tmp/costs-*.json <<'EOF2'
import json, sys
out, files = sys.argv[1], sys.argv[2:]
json.dump({f.split("costs-")[1][:-5]: json.load(open(f)) for f in files}, open(out, "w"), indent=1)
EOF2
  tgt=${TUNE_PAIR%+*}; dft=${TUNE_PAIR#*+}
  if [ -e $SHAPES/$tgt.gguf ] && [ -e $SHAPES/$dft.gguf ] && [ "$(left)" -gt 150 ]; then
    timeout -k 5 "$(budget 90 120)" "$PY" -m localspec tune --recalibrate --offline \
      --save-profile "$OUT/tune_profile.json" --target $SHAPES/$tgt.gguf --draft $SHAPES/$dft.gguf \
      --ctx-size 4096 2>&1 | tail -4
    PROFILE_LINE="$PROFILE_LINE tune=${PIPESTATUS[0]}"
  fi
  record p_profile $(($(now) - t)) 0
fi

# ---------------------------------------------------------------- e: tests
PYTEST_LINE="not run"
GPU_TIER_LINE="not run"
if [ $BUILD_OK = 1 ]; then
  hdr "e: tests on the tiny models (all layers on the GPU: n_gpu_layers=-1 by default)"
  t=$(now)
  # the console script that tests/test_cli.py and tests/server/conftest.py expect beside python
  exe=$("$PY" -c 'import sys; print(sys.executable)')
  script=$(dirname "$exe")/localspec
  if [ ! -x "$script" ]; then
    printf '#!/bin/sh\nexport PYTHONPATH="%s"\nexec "%s" -m localspec "$@"\n' "$PYTHONPATH" "$exe" >"$script" 2>/dev/null \
      && chmod +x "$script" && echo "wrote $script" || echo "cannot write $script"
  fi
  if [ "$DRYRUN" = 1 ]; then  # CI runs them all in its own suite: here, that the step runs
    SELECTED=(tests/llama/test_import_then_load.py tests/cli/test_doctor.py)
  elif [ -x "$script" ]; then
    SELECTED=("${TESTS_CORE[@]}" "${TESTS_PROC[@]}")
  else
    echo "no localspec script beside $exe: process tests left out (${TESTS_PROC[*]})"
    SELECTED=("${TESTS_CORE[@]}")
  fi
  tt=$(budget 240 40)
  echo "pytest timeout ${tt}s; ${SELECTED[*]}"
  "$PY" -c 'import importlib.metadata as m; print("pytest plugins:", sorted(f"{e.name}={e.value}" for e in m.entry_points(group="pytest11")))' | cut -c1-1500
  echo "PYTEST_ENV=${PYTEST_ENV:-} PYTEST_ARGS=${PYTEST_ARGS:-}"
  timeout -k 10 "$tt" env ${PYTEST_ENV:-} "$PY" -m pytest -p no:cacheprovider ${PYTEST_ARGS:-} -q -rfEs --maxfail="$MAXFAIL" --timeout 120 \
    --durations=15 "${SELECTED[@]}" >"$OUT/tests.log" 2>&1
  rc=$?
  [ $rc -eq 124 ] && echo "PYTEST TIMED OUT after ${tt}s" | tee -a "$OUT/tests.log"
  PYTEST_LINE=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)|^=+ .*(passed|failed|error).* in ' "$OUT/tests.log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')
  [ -n "$PYTEST_LINE" ] || PYTEST_LINE="no summary (rc=$rc)"
  grep -E '^(FAILED|ERROR) ' "$OUT/tests.log" | head -20
  tail -25 "$OUT/tests.log"
  record e_pytest $(($(now) - t)) $rc

  tg=$(budget 30 35)
  if [ "$tg" -ge 10 ]; then
    t=$(now)
    echo; echo "--- tests/test_gpu.py -m gpu on the tiny pair (LOCALSPEC_GPU_PAIR=tiny; skips on a CPU build)"
    echo "===== tests/test_gpu.py -m gpu =====" >>"$OUT/tests.log"
    timeout -k 5 "$tg" env LOCALSPEC_GPU_PAIR=tiny "$PY" -m pytest -p no:cacheprovider -q -rfEs \
      -m gpu --timeout 60 tests/test_gpu.py >>"$OUT/tests.log" 2>&1
    rc=$?
    GPU_TIER_LINE=$(tail -1 "$OUT/tests.log" | sed 's/=//g; s/^ *//; s/ *$//')
    grep -E 'not in the Hugging Face cache|SKIPPED' "$OUT/tests.log" | head -2 | cut -c1-200
    echo "$GPU_TIER_LINE"
    record e_test_gpu $(($(now) - t)) $rc
  else
    GPU_TIER_LINE="skipped: ${tg}s left"
  fi
fi

# ---------------------------------------------------------------- f: tune and bench on the tiny pair
TUNE_RC="-"; BENCH_RC="-"; BENCH_DIFF="?"
if [ $BUILD_OK = 1 ] && [ -e $TINY/target.gguf ]; then
  hdr "f: localspec tune / bench --quick on the tiny pair"
  : >"$OUT/cli.log"
  MODEL_ARGS=(--target $TINY/target.gguf --draft $TINY/draft-noisy.gguf --ctx-size 2048 --offline)
  tf=$(budget 60 25)
  if [ "$tf" -ge 15 ]; then
    t=$(now)
    echo "tune timeout ${tf}s"
    { echo "===== tune"; timeout -k 5 "$tf" "$PY" -m localspec tune --recalibrate \
        --save-profile /tmp/tiny_tune_profile.json "${MODEL_ARGS[@]}"; echo "rc=$?"; } >>"$OUT/cli.log" 2>&1
    TUNE_RC=$(grep '^rc=' "$OUT/cli.log" | tail -1 | cut -d= -f2)
    grep -v '^rc=' "$OUT/cli.log" | tail -8 | cut -c1-400
    record f_tune $(($(now) - t)) "$TUNE_RC"
  else
    echo "tune skipped: ${tf}s left"
  fi
  tf=$(budget 90 5)
  if [ "$tf" -ge 15 ]; then
    t=$(now)
    echo "bench timeout ${tf}s"
    { echo "===== bench"; timeout -k 5 "$tf" "$PY" -m localspec bench --quick \
        --modes off,ngram,draft:4,hybrid,auto --json /tmp/tiny_bench.json "${MODEL_ARGS[@]}"; echo "rc=$?"; } >>"$OUT/cli.log" 2>&1
    BENCH_RC=$(grep '^rc=' "$OUT/cli.log" | tail -1 | cut -d= -f2)
    sed -n '/===== bench/,$p' "$OUT/cli.log" | grep -E '^\| (category|all) ' | cut -c1-200
    BENCH_DIFF=$("$PY" - <<EOF 2>/dev/null
import json
def counts(t):
    if isinstance(t, dict):
        return [int(v) for k, v in t.items() if k == "outputs_differing_from_off"] + [n for v in t.values() for n in counts(v)]
    if isinstance(t, list):
        return [n for v in t for n in counts(v)]
    return []
print(sum(counts(json.load(open("/tmp/tiny_bench.json"))["report"])))
EOF
)
    echo "bench: outputs differing from off: ${BENCH_DIFF:-?}"
    record f_bench $(($(now) - t)) "$BENCH_RC"
  else
    echo "bench skipped: ${tf}s left"
  fi
fi

# ---------------------------------------------------------------- g: summary
hdr "g: summary"
printf '%-12s %8s %6s\n' step seconds rc
for s in "${STEPS[@]}"; do printf '%-12s %8s %6s\n' "$s" "${STEP_S[$s]}" "${STEP_RC[$s]}"; done
echo "build: $([ $BUILD_OK = 1 ] && echo ok || echo FAILED) in ${BUILD_S}s (DRYRUN=$DRYRUN)"
echo "model load variants (rc):$LOAD_LINE"
echo "gpu_offload: $GPU_OFFLOAD"
echo "profile (real shapes, random weights):$PROFILE_LINE"
echo "pytest (tiny models): $PYTEST_LINE"
echo "pytest -m gpu tests/test_gpu.py: $GPU_TIER_LINE"
echo "tune rc: $TUNE_RC; bench rc: $BENCH_RC; bench outputs differing from off: $BENCH_DIFF"
echo "total: $(($(now) - T0))s; files: $(ls "$OUT" | tr '\n' ' ')"
failed=""
for s in "${STEPS[@]}"; do [ "${STEP_RC[$s]}" = 0 ] || failed="$failed $s"; done
echo "${failed:-none}" >"$FAILED_FILE"
echo "steps that failed: ${failed:-none}"
}

# CI runs the dry run (.ci/run): there a failed step fails the run; on the device the log is
# the result, whatever failed
FAILED_FILE=$(mktemp)
main 2>&1 | tee "$LOG"
if [ "$DRYRUN" = 1 ] && [ "$(cat "$FAILED_FILE")" != none ]; then exit 1; fi
