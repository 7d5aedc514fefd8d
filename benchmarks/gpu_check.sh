#!/usr/bin/env bash
# gpu_check.sh: the checks that need an NVIDIA GPU, in one run of at most
# 5 minutes. Run from the repository root on a machine with a GPU:
#
#   benchmarks/gpu_check.sh                  # builds build-gpu there
#   benchmarks/gpu_check.sh --bundle DIR     # runs a bundle from gpu_bundle.sh
#
# With --bundle, nothing is configured or built: DIR (made elsewhere by
# benchmarks/gpu_bundle.sh) holds the programs and every library they need
# but CUDA's, glibc and its loader included, for a GPU machine without the
# build dependencies. Its big libraries, stored as DIR/lib/NAME.gz, are
# unpacked into a temporary folder UNPACKED (gzip, else python3), and each
# program runs as
#   DIR/lib/ld-linux-x86-64.so.2 --library-path DIR/lib:UNPACKED:CUDA_DIRS DIR/bin/NAME
# where CUDA_DIRS are this machine's folders of libcublas.so.13,
# libcublasLt.so.13, libcudart.so.13 (CUDA toolkit, ldconfig, or Python's
# nvidia-* packages) and libcuda.so.1 (the driver).
#
# 1. Fails at once (exit 2) when nvidia-smi is missing or lists no GPU.
# 2. Configures and builds build-gpu (Release) with the CUDA backend; fails
#    if the CUDA toolkit was not found (the backend would be missing).
#    With --bundle: finds the CUDA libraries instead and prints them; fails
#    if one is missing or a program cannot load its libraries.
# 3. nvidia-smi: GPU, driver, memory.
# 4. The CUDA parity tests: backend_test --gtest_filter='*Cuda*:BackendFactoryTest.*',
#    and every model's gradient checks and training steps on the GPU
#    (mlp_test, sparse_logreg_test, mf_test)
#    (every op against a float64 reference, relative error < 1e-4); a
#    skipped CUDA case counts as a failure here, except a skip that says
#    "a CUDA device is present" (a test of the no-GPU path).
# 5. gemm_bench: SGEMM GFLOP/s for 1024/2048/4096 on cpu and cuda.
# Prints a summary table; exits non-zero when any step failed. When the
# variable OUT names a folder, copies the logs there: gpu_check.log (all
# steps) and gemm.log.
set -uo pipefail

readonly DEADLINE=$((SECONDS + 300))
readonly BUILD_DIR=build-gpu
readonly LOADER=ld-linux-x86-64.so.2
readonly PROGRAMS=(backend_test mlp_test sparse_logreg_test mf_test gemm_bench)
LOG_DIR=$(mktemp -d)
readonly LOG_DIR

fail() {
  echo "gpu_check: FAIL: $1" >&2
  echo "gpu_check: FAIL: $1" >> "$LOG_DIR/fail.log"
  exit "${2:-1}"
}

usage() {
  echo "usage: benchmarks/gpu_check.sh [--bundle DIR]" >&2
  exit 2
}

# Seconds left of the 5-minute budget (at least 1).
left() {
  local s=$((DEADLINE - SECONDS))
  ((s > 0)) && echo "$s" || echo 1
}

# On exit, the logs to $OUT (when set): every step's log in one file, and
# gemm.log on its own. The unpacked libraries of a bundle go.
copy_logs() {
  rm -rf "$LOG_DIR/unpacked"
  rmdir "$LOG_DIR" 2> /dev/null # only when empty (a usage error)
  [[ -n ${OUT:-} ]] || return 0
  mkdir -p "$OUT" || return 0
  local f
  for f in fail summary env configure build parity gemm; do
    [[ -s "$LOG_DIR/$f.log" ]] || continue
    echo "===== $f.log"
    cat "$LOG_DIR/$f.log"
    echo
  done > "$OUT/gpu_check.log"
  [[ -f "$LOG_DIR/gemm.log" ]] && cp "$LOG_DIR/gemm.log" "$OUT/gemm.log"
  return 0
}
trap copy_logs EXIT

BUNDLE=
while (($# > 0)); do
  case $1 in
    --bundle)
      (($# >= 2)) || usage
      BUNDLE=$2
      shift 2
      ;;
    --bundle=*)
      BUNDLE=${1#--bundle=}
      shift
      ;;
    -h | --help) usage ;;
    *) usage ;;
  esac
done

[[ -f CMakeLists.txt && -d worker/cuda ]] || fail "run from the repository root" 2

if [[ -n $BUNDLE ]]; then
  [[ -d $BUNDLE ]] || fail "no bundle folder $BUNDLE (make it with benchmarks/gpu_bundle.sh)" 2
  BUNDLE=$(cd "$BUNDLE" && pwd)
  [[ -f "$BUNDLE/lib/$LOADER" ]] || fail "$BUNDLE/lib/$LOADER missing: not a gpu_bundle.sh bundle" 2
  # (The programs need no execute bit: the loader reads them.)
  [[ -x "$BUNDLE/lib/$LOADER" ]] || chmod +x "$BUNDLE/lib/$LOADER" ||
    fail "$BUNDLE/lib/$LOADER is not executable" 2
  for p in "${PROGRAMS[@]}"; do
    [[ -f "$BUNDLE/bin/$p" ]] || fail "$BUNDLE/bin/$p missing" 2
  done
fi

if ! command -v nvidia-smi > /dev/null 2>&1; then
  fail "nvidia-smi not found: no NVIDIA driver on this machine, so no GPU to check" 2
fi
if ! gpus=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<< "$gpus"; then
  fail "nvidia-smi lists no GPU: ${gpus}" 2
fi

# ldconfig -p, also where ldconfig is not on PATH (/sbin).
ldconfig_p() {
  local c
  for c in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
    if command -v "$c" > /dev/null 2>&1; then
      "$c" -p 2> /dev/null
      return 0
    fi
  done
  return 0
}

# Prints the folders holding $1 (x86-64) that ldconfig knows.
ldconfig_dirs() {
  ldconfig_p | awk -v n="$1" '$1 == n && /x86-64/ { print $NF }' | xargs -r -n1 dirname
}

# Prints the folders holding $1 among the candidate folders given after it,
# in that order, each once.
dirs_of() {
  local name=$1 d
  shift
  for d in "$@"; do
    [[ -e $d/$name ]] && echo "$d"
  done | awk '!seen[$0]++'
}

# The Python site-packages folders of python3, if any.
site_dirs() {
  command -v python3 > /dev/null 2>&1 || return 0
  python3 - 2> /dev/null << 'PY' || true
import site, sys
dirs = []
try:
    dirs += site.getsitepackages()
except Exception:
    pass
try:
    dirs.append(site.getusersitepackages())
except Exception:
    pass
dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
seen = set()
for d in dirs:
    if d not in seen:
        seen.add(d)
        print(d)
PY
}

RUN=()
BIN_DIR=$BUILD_DIR/bin
if [[ -n $BUNDLE ]]; then
  echo "== CUDA libraries (bundle $BUNDLE)"
  # The toolkit's folders first, then ldconfig's, then Python's nvidia-*
  # packages (CUDA 13 wheels put everything in nvidia/cu13/lib).
  shopt -s nullglob
  toolkit_dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib
    /usr/local/cuda*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib)
  python_dirs=()
  while read -r sp; do
    [[ -n $sp ]] && python_dirs+=("$sp"/nvidia/cublas/lib "$sp"/nvidia/cu13/lib "$sp"/nvidia/*/lib)
  done < <(site_dirs)
  shopt -u nullglob
  mapfile -t ld_cublas < <(ldconfig_dirs libcublas.so.13)
  mapfile -t ld_cudart < <(ldconfig_dirs libcudart.so.13)
  mapfile -t ld_cuda < <(ldconfig_dirs libcuda.so.1)
  # libcublas and libcublasLt must be one release: the first folder holding
  # both; libcudart from the same folder when it is there.
  cublas_dir=
  while read -r d; do
    if [[ -e $d/libcublasLt.so.13 ]]; then
      cublas_dir=$d
      break
    fi
  done < <(dirs_of libcublas.so.13 "${toolkit_dirs[@]}" ${ld_cublas[@]+"${ld_cublas[@]}"} \
    ${python_dirs[@]+"${python_dirs[@]}"})
  cudart_dir=$cublas_dir
  if [[ -z $cublas_dir || ! -e $cublas_dir/libcudart.so.13 ]]; then
    cudart_dir=$(dirs_of libcudart.so.13 "${toolkit_dirs[@]}" ${ld_cudart[@]+"${ld_cudart[@]}"} \
      ${python_dirs[@]+"${python_dirs[@]}"} | head -1)
  fi
  # The driver's libcuda.so.1, which libcudart opens; never a stubs folder.
  driver_dir=$(dirs_of libcuda.so.1 /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
    /usr/lib/x86_64-linux-gnu /usr/lib64 /lib/x86_64-linux-gnu /lib64 \
    ${ld_cuda[@]+"${ld_cuda[@]}"} | grep -v '/stubs$' | head -1)
  missing=0
  cuda_libpath=
  for entry in "libcublas.so.13:$cublas_dir" "libcublasLt.so.13:$cublas_dir" \
    "libcudart.so.13:$cudart_dir" "libcuda.so.1:$driver_dir"; do
    name=${entry%%:*}
    dir=${entry#*:}
    if [[ -n $dir ]]; then
      printf '  %-18s %s\n' "$name" "$(readlink -f "$dir/$name")"
      [[ :$cuda_libpath: == *":$dir:"* ]] || cuda_libpath+=${cuda_libpath:+:}$dir
    elif [[ $name == libcuda.so.1 ]]; then
      # libcudart still looks for it in ld.so.cache and the system folders.
      printf '  %-18s not found in the usual folders (libcudart will look once more)\n' "$name"
    else
      printf '  %-18s NOT FOUND\n' "$name"
      missing=1
    fi
  done > "$LOG_DIR/env.log"
  cat "$LOG_DIR/env.log"
  [[ -f "$BUNDLE/MANIFEST" ]] &&
    sed -n 's/^\(built\|commit\|cuda\): /  bundle \1: /p' "$BUNDLE/MANIFEST" | tee -a "$LOG_DIR/env.log"
  ((missing == 0)) ||
    fail "CUDA 13 libraries missing on this machine (above); looked in /usr/local/cuda*, ldconfig -p and python3's nvidia/*/lib"
  # The bundle's gzipped libraries, unpacked next to the logs.
  unpacked=$LOG_DIR/unpacked
  mkdir -p "$unpacked"
  for gz in "$BUNDLE"/lib/*.gz; do
    [[ -e $gz ]] || continue
    name=${gz##*/}
    name=${name%.gz}
    if command -v gzip > /dev/null 2>&1; then
      gzip -dc "$gz" > "$unpacked/$name"
    else
      python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$gz" "$unpacked/$name"
    fi || fail "could not unpack $gz (no gzip, no python3?)"
  done
  RUN=("$BUNDLE/lib/$LOADER" --library-path "$BUNDLE/lib:$unpacked:$cuda_libpath")
  BIN_DIR=$BUNDLE/bin
  echo "  run as ${RUN[*]} $BIN_DIR/NAME" | tee -a "$LOG_DIR/env.log"
  # Every program's libraries must load (libcuda.so.1 is opened later, by libcudart).
  for p in "${PROGRAMS[@]}"; do
    if ! "${RUN[@]}" --list "$BIN_DIR/$p" > "$LOG_DIR/list.txt" 2>&1 ||
      grep -q 'not found' "$LOG_DIR/list.txt"; then
      tee -a "$LOG_DIR/env.log" < "$LOG_DIR/list.txt"
      fail "$p cannot load its libraries through the bundled loader (above)"
    fi
  done
  echo "  every program's libraries load" | tee -a "$LOG_DIR/env.log"
else
  # The toolkit is often installed but not on PATH.
  if ! command -v nvcc > /dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi

  echo "== configure and build ($BUILD_DIR)"
  timeout "$(left)" cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release > "$LOG_DIR/configure.log" 2>&1 ||
    { tail -30 "$LOG_DIR/configure.log"; fail "cmake configure failed (log above)"; }
  grep -q 'CUDA toolkit found' "$LOG_DIR/configure.log" ||
    fail "cmake did not find the CUDA toolkit (nvcc on PATH?), so the CUDA backend would not be built"
  # Only the programs this check runs: the full tree takes longer than the budget allows.
  timeout "$(left)" cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${PROGRAMS[@]}" \
    > "$LOG_DIR/build.log" 2>&1 ||
    { tail -40 "$LOG_DIR/build.log"; fail "build failed (log above)"; }
  [[ -f "$BUILD_DIR/worker/cuda/libps_cuda_backend.a" ]] ||
    fail "the CUDA backend library was not built"
fi

echo "== nvidia-smi"
timeout 30 nvidia-smi 2>&1 | tee -a "$LOG_DIR/env.log" || fail "nvidia-smi failed"
gpu_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)

echo "== CUDA parity tests"
parity_rc=0
timeout "$(left)" ${RUN[@]+"${RUN[@]}"} "$BIN_DIR/backend_test" --gtest_filter='*Cuda*:BackendFactoryTest.*' \
  --gtest_color=no 2>&1 | tee "$LOG_DIR/parity.log" || parity_rc=1
# Models' training steps on the GPU: gradient checks and SGD (softmax
# regression, MLP, sparse logistic regression, matrix factorization).
for model_test in mlp_test sparse_logreg_test mf_test; do
  timeout "$(left)" ${RUN[@]+"${RUN[@]}"} "$BIN_DIR/$model_test" --gtest_filter='*Cuda*' \
    --gtest_color=no 2>&1 | tee -a "$LOG_DIR/parity.log" || parity_rc=1
done
passed=$(grep -c '^\[       OK \]' "$LOG_DIR/parity.log")
failed=$(grep -c '^\[  FAILED  \] .*(' "$LOG_DIR/parity.log")
# Skips, less those of tests that run only without a GPU (their message
# says "a CUDA device is present").
read -r skipped expected_skips < <(awk '
  /^\[ RUN      \]/ { present = 0 }
  /a CUDA device is present/ { present = 1 }
  /^\[  SKIPPED \] .*\(/ { if (present) e++; else s++ }
  END { print s + 0, e + 0 }' "$LOG_DIR/parity.log")
if ((skipped > 0)); then
  echo "gpu_check: $skipped test(s) skipped: the tests did not see the GPU" >&2
  parity_rc=1
fi
if ((passed == 0)); then
  echo "gpu_check: no test passed" >&2
  parity_rc=1
fi

echo "== SGEMM throughput"
bench_rc=0
timeout "$(left)" ${RUN[@]+"${RUN[@]}"} "$BIN_DIR/gemm_bench" --sizes 1024 2048 4096 2>&1 |
  tee "$LOG_DIR/gemm.log" || bench_rc=1

echo
{
  echo "== summary (logs in $LOG_DIR${OUT:+, copied to $OUT})"
  printf '%-16s %s\n' "gpu" "$gpu_line"
  printf '%-16s %s\n' "programs" "${BUNDLE:+bundle }${BIN_DIR}"
  printf '%-16s %s\n' "parity tests" \
    "$([[ $parity_rc == 0 ]] && echo PASS || echo FAIL): $passed passed, $failed failed, $skipped skipped$( ((expected_skips > 0)) && echo " (+$expected_skips expected: no-GPU tests)")"
  printf '%-16s %s\n' "gemm_bench" "$([[ $bench_rc == 0 ]] && echo PASS || echo FAIL)"
  sed -n '/^ *n /,$p' "$LOG_DIR/gemm.log"
  printf '%-16s %ss of 300s\n' "elapsed" "$SECONDS"
} | tee "$LOG_DIR/summary.log"

((parity_rc == 0 && bench_rc == 0)) || fail "see the summary above"
echo "gpu_check: OK"
