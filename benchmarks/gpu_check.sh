#!/usr/bin/env bash
# gpu_check.sh: the checks that need an NVIDIA GPU, in one run of at most
# 6 minutes. Run from the repository root on a machine with a GPU:
#
#   benchmarks/gpu_check.sh                  # builds build-gpu there
#   benchmarks/gpu_check.sh --bundle DIR     # runs a bundle from gpu_bundle.sh
#
# With --bundle, nothing is configured or built: DIR (made elsewhere by
# benchmarks/gpu_bundle.sh) holds the programs and every library they need
# but CUDA's, glibc and its loader included, for a GPU machine without the
# build dependencies, and the Fashion-MNIST files (DIR/data/fashion-mnist).
# Its programs and big libraries, stored as DIR/bin/NAME.xz and
# DIR/lib/NAME.xz (or .gz), are unpacked into a temporary folder UNPACKED
# (UNPACKED/bin holds every program; xz or gzip, else python3's lzma or
# gzip module), and each program runs as
#   DIR/lib/ld-linux-x86-64.so.2 --library-path DIR/lib:UNPACKED/lib:CUDA_DIRS UNPACKED/bin/NAME
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
# 6. End to end: ps_launch runs a shorter config/fashion_mnist_mlp.yaml
#    (2 shards, 2 workers, MLP 784-100-10, ssp 2, 3000 steps per worker, on
#    free loopback ports) twice, with worker.device cuda and then cpu, each
#    under a timeout (at most 120 s). Its learning rate decays to 0 over the
#    3000 clocks (cosine): at the demo's constant rate the final accuracy
#    moves by +-0.015 from run to run, with the decay by +-0.002 (0.869 to
#    0.873 in 12 cpu runs). With --bundle, ps_launch runs through the
#    bundled loader, and --bin-dir points at two wrapper scripts that exec
#    ps_server and ps_worker the same way; the data is the bundle's, else
#    /usr/share/datasets/fashion-mnist. Passes when the cuda run exits 0,
#    both its workers log "compute backend: cuda", and worker 0's final test
#    accuracy is >= 0.84 and within 0.01 of the cpu run's. Processes of a
#    run still there after it are killed (and reported).
# 7. Speed: benchmarks/gpu_speed.py (python3) trains the wide MLP of
#    config/fashion_mnist_wide_mlp.yaml (784-2048-2048-10, batch 512) for 60
#    steps per worker in one process with no parameter server
#    (ps_worker --standalone) and under ps_launch with 1, 2 and 4 workers on
#    the GPU and 2 and 4 shards, then with batch 4096 in one process and
#    with 1 worker and 2 shards, with device $E2E_DEVICE, in at most 150 s;
#    prints samples/s against the one process, each run's step breakdown
#    (pull, h2d, compute, d2h, push) and the GEMM-bound floor from step 5's
#    SGEMM rate. Fails when a run fails. With --bundle, ps_launch, ps_server
#    and ps_worker run through wrapper scripts like step 6's.
# Prints a summary table; exits non-zero when any step failed. When the
# variable OUT names a folder, copies the logs there: gpu_check.log (all
# steps, the training jobs' output included), gemm.log and speed.md (step
# 7's table).
#
# For testing this script without a GPU (not for real checks): with
# GPU_CHECK_E2E_DEVICE=cpu the first end-to-end run uses device cpu and
# expects that backend, and GPU_CHECK_ONLY_E2E=1 skips steps 4 and 5, e.g.
#   PATH=/tmp/fakebin:$PATH GPU_CHECK_E2E_DEVICE=cpu GPU_CHECK_ONLY_E2E=1 benchmarks/gpu_check.sh --bundle DIR
# with a fake nvidia-smi in /tmp/fakebin that prints "GPU 0: fake".
set -uo pipefail

readonly DEADLINE=$((SECONDS + 360))
readonly SPEED_BUDGET=150
readonly BUILD_DIR=build-gpu
readonly LOADER=ld-linux-x86-64.so.2
readonly PROGRAMS=(backend_test mlp_test sparse_logreg_test mf_test gemm_bench)
# The end-to-end job's programs (a bundle without them fails that step only).
readonly E2E_PROGRAMS=(ps_launch ps_server ps_worker)
readonly E2E_DEVICE=${GPU_CHECK_E2E_DEVICE:-cuda}
readonly ONLY_E2E=${GPU_CHECK_ONLY_E2E:-0}
readonly E2E_MIN_ACCURACY=0.84
readonly E2E_MAX_GAP=0.01
readonly E2E_STEPS=3000 # per worker; the learning rate decays to 0 over them
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

# Seconds left of the 6-minute budget (at least 1).
left() {
  local s=$((DEADLINE - SECONDS))
  ((s > 0)) && echo "$s" || echo 1
}

# Pids of the processes whose command line holds $1 (a job file of step 6:
# the launcher and its servers and workers, wrappers or not), but this shell.
procs_with() {
  local d args
  for d in /proc/[0-9]*; do
    [[ ${d#/proc/} == "$$" ]] && continue
    mapfile -d '' -t args < "$d/cmdline" 2> /dev/null || continue
    [[ " ${args[*]-} " == *"$1"* ]] && echo "${d#/proc/}"
  done
  return 0
}

# Stops the processes of job file $1 that are still there: SIGTERM, 3 s,
# SIGKILL. Prints how many there were.
kill_job() {
  local pids rest i
  mapfile -t pids < <(procs_with "$1")
  if ((${#pids[@]} > 0)); then
    kill -TERM "${pids[@]}" 2> /dev/null
    for ((i = 0; i < 30; i++)); do
      [[ -z $(procs_with "$1") ]] && break
      sleep 0.1
    done
    mapfile -t rest < <(procs_with "$1")
    ((${#rest[@]} == 0)) || kill -KILL "${rest[@]}" 2> /dev/null
  fi
  echo "${#pids[@]}"
}

# On exit, the logs to $OUT (when set): every step's log in one file, and
# gemm.log on its own. A training job still running is stopped; the
# unpacked programs and libraries of a bundle go.
copy_logs() {
  local f
  for f in "$LOG_DIR"/e2e-*.yaml; do
    [[ -e $f ]] && kill_job "$f" > /dev/null
  done
  rm -rf "$LOG_DIR/unpacked" "$LOG_DIR/e2e-bin"
  rmdir "$LOG_DIR" 2> /dev/null # only when empty (a usage error)
  [[ -n ${OUT:-} ]] || return 0
  mkdir -p "$OUT" || return 0
  for f in fail summary env configure build parity gemm e2e-gpu e2e-cpu speed; do
    [[ -s "$LOG_DIR/$f.log" ]] || continue
    echo "===== $f.log"
    cat "$LOG_DIR/$f.log"
    echo
  done > "$OUT/gpu_check.log"
  [[ -f "$LOG_DIR/gemm.log" ]] && cp "$LOG_DIR/gemm.log" "$OUT/gemm.log"
  [[ -s "$LOG_DIR/speed.md" ]] && cp "$LOG_DIR/speed.md" "$OUT/speed.md"
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
    [[ -f $BUNDLE/bin/$p || -f $BUNDLE/bin/$p.xz || -f $BUNDLE/bin/$p.gz ]] ||
      fail "$BUNDLE/bin/$p missing" 2
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

# Unpacks $1 (NAME.xz or NAME.gz) into the file $2: with xz / gzip, else
# python3's lzma / gzip module.
unpack_to() {
  local tool=xz module=lzma
  [[ $1 == *.gz ]] && tool=gzip module=gzip
  if command -v "$tool" > /dev/null 2>&1; then
    "$tool" -dc "$1" > "$2" && return 0
  fi
  command -v python3 > /dev/null 2>&1 &&
    python3 -c "import $module, shutil, sys
with $module.open(sys.argv[1]) as src, open(sys.argv[2], 'wb') as dst:
    shutil.copyfileobj(src, dst)" "$1" "$2"
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
  # The bundle's compressed programs and libraries, unpacked next to the
  # logs; UNPACKED/bin also links to the programs stored as they are.
  unpacked=$LOG_DIR/unpacked
  mkdir -p "$unpacked/bin" "$unpacked/lib"
  unpack_failed=
  for f in "$BUNDLE"/bin/* "$BUNDLE"/lib/*.xz "$BUNDLE"/lib/*.gz; do
    [[ -f $f ]] || continue
    sub=${f%/*}
    sub=${sub##*/}
    name=${f##*/}
    case $name in
      *.xz | *.gz) unpack_to "$f" "$unpacked/$sub/${name%.*}" || unpack_failed+=" $sub/$name" ;;
      *) ln -s "$f" "$unpacked/$sub/$name" ;;
    esac
  done
  [[ -z $unpack_failed ]] ||
    fail "could not unpack$unpack_failed of $BUNDLE (xz: needs xz or python3 with lzma; gz: gzip or python3)"
  RUN=("$BUNDLE/lib/$LOADER" --library-path "$BUNDLE/lib:$unpacked/lib:$cuda_libpath")
  BIN_DIR=$unpacked/bin
  echo "  run as ${RUN[*]} $BIN_DIR/NAME" | tee -a "$LOG_DIR/env.log"
  # Every program's libraries must load (libcuda.so.1 is opened later, by libcudart).
  for p in "${PROGRAMS[@]}" "${E2E_PROGRAMS[@]}"; do
    [[ -e $BIN_DIR/$p ]] || continue # an end-to-end program: that step fails
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
  timeout "$(left)" cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${PROGRAMS[@]}" "${E2E_PROGRAMS[@]}" \
    > "$LOG_DIR/build.log" 2>&1 ||
    { tail -40 "$LOG_DIR/build.log"; fail "build failed (log above)"; }
  [[ -f "$BUILD_DIR/worker/cuda/libps_cuda_backend.a" ]] ||
    fail "the CUDA backend library was not built"
fi

echo "== nvidia-smi"
timeout 30 nvidia-smi 2>&1 | tee -a "$LOG_DIR/env.log" || fail "nvidia-smi failed"
gpu_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)

parity_rc=0
bench_rc=0
passed=0 failed=0 skipped=0 expected_skips=0
if [[ $ONLY_E2E == 1 ]]; then
  echo "== CUDA parity tests and SGEMM throughput: skipped (GPU_CHECK_ONLY_E2E=1)"
else
  echo "== CUDA parity tests"
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
  timeout "$(left)" ${RUN[@]+"${RUN[@]}"} "$BIN_DIR/gemm_bench" --sizes 1024 2048 4096 2>&1 |
    tee "$LOG_DIR/gemm.log" || bench_rc=1
fi

# ---- 6. End to end: the Fashion-MNIST MLP job, device cuda against cpu.

# Prints $1 free TCP ports of 127.0.0.1 in [20000, 40000), checked by
# binding them (python3); without python3, $1 ports from a random base.
free_ports() {
  python3 - "$1" 2> /dev/null << 'PY' && return 0
import random, socket, sys
n = int(sys.argv[1])
held, ports = [], []
for _ in range(2000):
    if len(ports) == n:
        break
    port = random.randrange(20000, 40000)
    if port in ports:
        continue
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        continue
    held.append(s)
    ports.append(port)
if len(ports) < n:
    sys.exit(1)
print(" ".join(map(str, ports)))
PY
  local base=$((20000 + RANDOM % 19000)) i
  for ((i = 0; i < $1; i++)); do printf '%s ' "$((base + i))"; done
  echo
}

# Writes job file $1: config/fashion_mnist_mlp.yaml, shorter ($E2E_STEPS steps
# per worker, the learning rate decaying to 0 over them), on ports $3 and $4,
# with worker.device $2.
e2e_config() {
  local data=${E2E_DATA//\\/\\\\}
  data=${data//\"/\\\"}
  cat > "$1" << EOF
# benchmarks/gpu_check.sh: config/fashion_mnist_mlp.yaml, shorter, device $2
cluster:
  servers: ["127.0.0.1:$3", "127.0.0.1:$4"]
  workers: 2

tables:
  - name: mlp
    rows: 79510
    dim: 1
    init: { type: uniform, scale: 0.05, seed: 7 }
    optimizer: { type: sgd, lr: 0.02, momentum: 0.9, decay: cosine, decay_clocks: $E2E_STEPS }

consistency: { mode: ssp, staleness: 2 }

worker: { device: $2 }

train:
  program: mlp
  table: mlp
  layers: [784, 100, 10]
  batch_size: 64
  iterations: $E2E_STEPS
  eval_every: 1000
  log_every: 1000
  data_dir: "$data"
EOF
}

# Runs the job as e2e-$1 with device $2 on ports $4 $5 for at most $3
# seconds, then sets e2e_rc, e2e_wall, e2e_backends (workers that logged
# the expected backend), e2e_acc (worker 0's final test accuracy), e2e_sps
# (its samples/s), e2e_left (processes still there afterwards, killed) and
# e2e_backend_line.
e2e_run() {
  local label=$1 device=$2 limit=$3 cfg=$LOG_DIR/e2e-$1.yaml log=$LOG_DIR/e2e-$1.log t0 done0
  e2e_config "$cfg" "$device" "$4" "$5"
  echo "== end to end ($label): MLP on Fashion-MNIST, 2 shards + 2 workers, device $device, ports $4 $5, timeout ${limit}s"
  {
    echo "# job file $cfg:"
    sed 's/^/#   /' "$cfg"
    echo "# ${RUN[*]+${RUN[*]} }$BIN_DIR/ps_launch --config $cfg --bin-dir $E2E_BIN_DIR --grace-ms 3000"
  } > "$log"
  t0=$(date +%s.%N)
  timeout -k 10 "$limit" ${RUN[@]+"${RUN[@]}"} "$BIN_DIR/ps_launch" --config "$cfg" \
    --bin-dir "$E2E_BIN_DIR" --grace-ms 3000 >> "$log" 2>&1
  e2e_rc=$?
  e2e_wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  ((e2e_rc == 124 || e2e_rc == 137)) && echo "# timed out after ${limit}s (exit code $e2e_rc)" >> "$log"
  e2e_left=$(kill_job "$cfg")
  ((e2e_left == 0)) || echo "# $e2e_left process(es) of the job were still there; killed" >> "$log"
  e2e_backends=$(grep -c "compute backend: $device" "$log")
  e2e_backend_line=$(grep -m1 -o 'compute backend: .*' "$log")
  done0=$(grep -m1 'worker 0: done:' "$log")
  e2e_acc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' <<< "$done0")
  e2e_sps=$(sed -n 's/.* \([0-9]*\) samples\/s.*/\1/p' <<< "$done0")
  # What the step shows: the backends, the launcher's verdicts, errors, the end.
  grep -E 'compute backend|done:|\[launch\] .*(exit|kill|signal|stopp)| E [a-z]+ ?[0-9]*: ' "$log" |
    cut -c1-300
  echo "exit code $e2e_rc, ${e2e_wall} s"
}

# Is $1 within $3 of $2? Is $1 >= $2?
within() { awk -v a="$1" -v b="$2" -v d="$3" 'BEGIN { x = a - b; exit !(x <= d && -x <= d) }'; }
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
# $1, but at least $2 and at most $3.
clamp() { echo $(($1 < $2 ? $2 : $1 > $3 ? $3 : $1)); }

e2e_result=
e2e_fails=()
for p in "${E2E_PROGRAMS[@]}"; do
  [[ -e $BIN_DIR/$p ]] || e2e_fails+=("no $p in ${BUNDLE:-$BIN_DIR} (rebuild the bundle with benchmarks/gpu_bundle.sh)")
done
if [[ -n $BUNDLE ]]; then
  E2E_DATA=$BUNDLE/data/fashion-mnist
else
  E2E_DATA=/usr/share/datasets/fashion-mnist
fi
[[ -f $E2E_DATA/train-images-idx3-ubyte.gz && -f $E2E_DATA/t10k-labels-idx1-ubyte.gz ]] ||
  e2e_fails+=("no Fashion-MNIST files in $E2E_DATA")
if ((${#e2e_fails[@]} == 0)); then
  if [[ -n $BUNDLE ]]; then
    # ps_launch starts DIR/ps_server and DIR/ps_worker: scripts that run the
    # bundle's programs through its loader.
    E2E_BIN_DIR=$LOG_DIR/e2e-bin
    mkdir -p "$E2E_BIN_DIR"
    for p in ps_launch ps_server ps_worker; do
      {
        echo '#!/bin/sh'
        echo "# benchmarks/gpu_check.sh: the bundle's $p through its loader"
        printf 'exec'
        for a in "${RUN[@]}" "$BIN_DIR/$p"; do printf " '%s'" "${a//\'/\'\\\'\'}"; done
        # shellcheck disable=SC2016 # "$@" is the wrapper's own
        printf ' "$@"\n'
      } > "$E2E_BIN_DIR/$p"
      chmod +x "$E2E_BIN_DIR/$p"
    done
  else
    E2E_BIN_DIR=$(cd "$BIN_DIR" && pwd)
  fi
  read -r -a ports < <(free_ports 4)
  # Each run at most 120 s; the first leaves the second as much time, and
  # both leave step 7 its budget.
  e2e_run gpu "$E2E_DEVICE" "$(clamp $((($(left) - SPEED_BUDGET) / 2)) 1 120)" "${ports[0]}" "${ports[1]}"
  g_rc=$e2e_rc g_wall=$e2e_wall g_backends=$e2e_backends g_line=$e2e_backend_line
  g_acc=$e2e_acc g_sps=$e2e_sps g_left=$e2e_left
  e2e_run cpu cpu "$(clamp $(($(left) - SPEED_BUDGET - 5)) 1 120)" "${ports[2]}" "${ports[3]}"
  c_rc=$e2e_rc c_wall=$e2e_wall c_acc=$e2e_acc c_sps=$e2e_sps c_left=$e2e_left

  if ((g_rc != 0)); then
    why="$E2E_DEVICE run exited with code $g_rc"
    ((g_rc == 124 || g_rc == 137)) && why+=" (timed out)"
    grep -q 'requested but no CUDA device' "$LOG_DIR/e2e-gpu.log" && why+=" (no CUDA device usable: see its log)"
    e2e_fails+=("$why")
  fi
  ((g_backends == 2)) ||
    e2e_fails+=("$g_backends of 2 workers logged 'compute backend: $E2E_DEVICE'${g_line:+ (first: $g_line)}")
  if [[ -z $g_acc ]]; then
    e2e_fails+=("no final test accuracy from worker 0 of the $E2E_DEVICE run")
  elif ! at_least "$g_acc" "$E2E_MIN_ACCURACY"; then
    e2e_fails+=("$E2E_DEVICE accuracy $g_acc < $E2E_MIN_ACCURACY")
  fi
  if ((c_rc != 0)) || [[ -z $c_acc ]]; then
    e2e_fails+=("cpu run (the reference) exited with code $c_rc$([[ -z $c_acc ]] && echo ', no accuracy')")
  elif [[ -n $g_acc ]] && ! within "$g_acc" "$c_acc" "$E2E_MAX_GAP"; then
    e2e_fails+=("$E2E_DEVICE accuracy $g_acc is not within $E2E_MAX_GAP of cpu's $c_acc")
  fi
  # Worker 0's final test accuracy and samples/s, the run's wall time.
  e2e_result="$E2E_DEVICE acc ${g_acc:-?}, ${g_sps:-?} samples/s, $g_wall s; cpu acc ${c_acc:-?}, ${c_sps:-?} samples/s, $c_wall s"
  ((g_left + c_left == 0)) || e2e_result+="; killed $((g_left + c_left)) leftover process(es)"
  [[ -n $g_line ]] && e2e_backend_note=${g_line#compute backend: }

  # ---- 7. Speed: the wide MLP, GPU workers against one process.
  speed_budget=$(clamp $(($(left) - 10)) 1 "$SPEED_BUDGET")
  echo "== speed: wide MLP 784-2048-2048-10, device $E2E_DEVICE, at most ${speed_budget}s: batch 512 (one process, 1/2/4 workers, 2/4 shards), then 4096 (one process, 1 worker, 2 shards)"
  speed_rc=0
  if ! command -v python3 > /dev/null 2>&1; then
    speed_rc=1
    echo "gpu_check: no python3 for benchmarks/gpu_speed.py" | tee "$LOG_DIR/speed.log"
  else
    : > "$LOG_DIR/speed.md"
    # Two thirds of the time for the first table, the rest for the second.
    for table in "512 1,2,4 2,4 $((speed_budget * 2 / 3))" "4096 1 2 $((speed_budget / 3))"; do
      read -r batch workers shards budget <<< "$table"
      timeout -k 10 "$((budget + 20))" python3 benchmarks/gpu_speed.py \
        --bin-dir "$E2E_BIN_DIR" --device "$E2E_DEVICE" --data "$E2E_DATA" \
        --gemm-log "$LOG_DIR/gemm.log" --batch "$batch" --workers "$workers" --shards "$shards" \
        --steps 60 --run-timeout 60 --budget "$budget" --out "$LOG_DIR/speed-$batch" \
        >> "$LOG_DIR/speed.md" 2>> "$LOG_DIR/speed.log" || speed_rc=1
      echo >> "$LOG_DIR/speed.md"
    done
    cat "$LOG_DIR/speed.log" "$LOG_DIR/speed.md"
    # Each run's log, for the record.
    for f in "$LOG_DIR"/speed-*/*.log; do
      [[ -f $f ]] && { echo "----- ${f#"$LOG_DIR"/}"; grep -E 'compute backend|MLP|clock|done:| E ' "$f" | cut -c1-300; } >> "$LOG_DIR/speed.log"
    done
  fi
else
  speed_rc=1
fi

echo
{
  echo "== summary (logs in $LOG_DIR${OUT:+, copied to $OUT})"
  printf '%-16s %s\n' "gpu" "$gpu_line"
  printf '%-16s %s\n' "programs" "${BUNDLE:+bundle $BUNDLE: }${BIN_DIR}"
  if [[ $ONLY_E2E == 1 ]]; then
    printf '%-16s %s\n' "parity tests" "skipped (GPU_CHECK_ONLY_E2E=1)"
    printf '%-16s %s\n' "gemm_bench" "skipped (GPU_CHECK_ONLY_E2E=1)"
  else
    printf '%-16s %s\n' "parity tests" \
      "$([[ $parity_rc == 0 ]] && echo PASS || echo FAIL): $passed passed, $failed failed, $skipped skipped$( ((expected_skips > 0)) && echo " (+$expected_skips expected: no-GPU tests)")"
    printf '%-16s %s\n' "gemm_bench" "$([[ $bench_rc == 0 ]] && echo PASS || echo FAIL)"
    sed -n '/^ *n /,$p' "$LOG_DIR/gemm.log"
  fi
  if ((${#e2e_fails[@]} == 0)); then
    printf '%-16s PASS: %s\n' "e2e mlp" "$e2e_result"
  else
    printf '%-16s FAIL: %s\n' "e2e mlp" "$(printf '%s; ' "${e2e_fails[@]}")${e2e_result:-not run}"
  fi
  [[ -n ${e2e_backend_note:-} ]] && printf '%-16s %s\n' "" "$E2E_DEVICE run: $e2e_backend_note"
  printf '%-16s %s\n' "speed" "$( ((speed_rc == 0)) && echo PASS || echo FAIL): benchmarks/gpu_speed.py"
  [[ -s $LOG_DIR/speed.md ]] && cat "$LOG_DIR/speed.md"
  printf '%-16s %ss of 360s\n' "elapsed" "$SECONDS"
} | tee "$LOG_DIR/summary.log"

((parity_rc == 0 && bench_rc == 0 && ${#e2e_fails[@]} == 0 && speed_rc == 0)) ||
  fail "see the summary above"
echo "gpu_check: OK"
