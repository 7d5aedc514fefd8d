#!/usr/bin/env bash
# gpu_bundle.sh: builds the programs of benchmarks/gpu_check.sh here and packs
# them into a folder that runs on a GPU machine lacking this machine's
# packages (ZeroMQ, protobuf, RocksDB, yaml-cpp, GoogleTest...) and network,
# whatever its glibc. Run from the repository root on an x86-64 machine with
# the build dependencies and the CUDA toolkit (nvcc; /usr/local/cuda/bin is
# added to PATH):
#
#   benchmarks/gpu_bundle.sh [DIR]                # DIR defaults to .gpu-bundle
#
# then, on the GPU machine, from the repository root with DIR copied there:
#
#   benchmarks/gpu_check.sh --bundle DIR
#
# 1. Configures and builds build-gpu (Release, CUDA architecture 90 for the
#    H100/H200) with the CUDA backend; only the programs below. Fails if the
#    CUDA toolkit was not found (the backend would be missing).
# 2. DIR/bin: backend_test, mlp_test, sparse_logreg_test, mf_test and
#    gemm_bench (the CUDA checks) and ps_launch, ps_server, ps_worker (the
#    end-to-end training job), stripped. DIR/lib: real copies (no links) of
#    every shared library they need per ldd, glibc (libc, libm, libpthread,
#    libdl, librt), libstdc++, libgcc_s and the dynamic loader
#    ld-linux-x86-64.so.2 included. Left out, since they must match the GPU
#    machine's driver and come from there: libcuda*, libcublas*, libcudart*,
#    libnvidia*, anything else under the CUDA toolkit, and linux-vdso.
#    DIR/data/fashion-mnist: the four gzipped Fashion-MNIST IDX files, as
#    they are (from FASHION_MNIST_DIR, default /usr/share/datasets/fashion-mnist).
#    Every program and library of 64 KiB or more but the loader is stored
#    compressed, as NAME.xz (xz -9 with the x86 filter; NAME.gz, gzip -9,
#    where this machine has no xz), to be unpacked into a folder UNPACKED
#    (UNPACKED/bin, UNPACKED/lib) before a run; gpu_check.sh --bundle does it
#    with xz or gzip, else python3's lzma or gzip module. A program then runs as
#      DIR/lib/ld-linux-x86-64.so.2 --library-path DIR/lib:UNPACKED/lib:CUDA_DIRS UNPACKED/bin/NAME ...
#    DIR/MANIFEST says what was packed, from where, and with which CUDA.
# 3. Checks that each program's non-CUDA libraries all resolve inside DIR/lib
#    (or UNPACKED/lib) through the bundled loader, and that each starts (test
#    listing / --help).
# 4. Fails if DIR is over 60 MiB (the device machine takes at most 64 MiB of
#    working tree and carried paths together); prints its size.
# 5. Adds /.gpu-bundle/ to .gitignore unless git ignores .gpu-bundle already
#    (the device tool carries ignored paths named in its carry list).
set -euo pipefail

readonly BUILD_DIR=build-gpu
readonly PROGRAMS=(backend_test mlp_test sparse_logreg_test mf_test gemm_bench
  ps_launch ps_server ps_worker)
readonly MAX_MIB=60
# Libraries that must come from the GPU machine (its driver and CUDA).
readonly CUDA_LIB_RE='^(libcuda|libcublas|libcudart|libnvidia|linux-vdso)'
# glibc's pieces and the C++ runtime: always packed, also when no program
# needs them directly (the GPU machine's CUDA libraries load some of them).
readonly RUNTIME_LIBS=(libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1
  libstdc++.so.6 libgcc_s.so.1)
readonly LOADER=ld-linux-x86-64.so.2
# Programs and libraries (but the loader) at least this big are stored
# compressed (NAME.xz, or NAME.gz without xz).
readonly PACK_KIB=64
# The Fashion-MNIST files of the end-to-end job (train.data_dir).
readonly DATA_FILES=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz
  t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
DATA_SRC=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

fail() {
  echo "gpu_bundle: FAIL: $1" >&2
  exit "${2:-1}"
}

usage() {
  echo "usage: benchmarks/gpu_bundle.sh [DIR]   (DIR defaults to .gpu-bundle)" >&2
  exit 2
}

[[ $# -le 1 ]] || usage
[[ ${1:-} != -* ]] || usage
[[ -f CMakeLists.txt && -d worker/cuda && -f benchmarks/gpu_check.sh ]] ||
  fail "run from the repository root" 2
[[ $(uname -m) == x86_64 ]] || fail "builds for x86-64 only; this is $(uname -m)" 2

BUNDLE=${1:-.gpu-bundle}
BUNDLE=${BUNDLE%/}
[[ -n $BUNDLE ]] || usage

# Rebuilding the folder deletes it: refuse anything this script did not make.
if [[ -e $BUNDLE ]]; then
  [[ -d $BUNDLE ]] || fail "$BUNDLE exists and is not a folder" 2
  if [[ -n $(ls -A "$BUNDLE") && $(head -1 "$BUNDLE/MANIFEST" 2> /dev/null) != gpu-bundle* ]]; then
    fail "$BUNDLE is not empty and holds no gpu-bundle MANIFEST; not deleting it" 2
  fi
fi

for f in "${DATA_FILES[@]}"; do
  [[ -f $DATA_SRC/$f ]] ||
    fail "$DATA_SRC/$f missing: the Fashion-MNIST files (Debian package dataset-fashion-mnist, or set FASHION_MNIST_DIR)" 2
done

# How the big files are stored: xz -9 with the x86 filter (code shrinks
# further), else gzip -9.
if command -v xz > /dev/null 2>&1; then
  PACK_EXT=xz
  pack() { xz -T1 --x86 --lzma2=preset=9 "$1"; }
  unpack() { xz -dc "$1"; }
else
  PACK_EXT=gz
  pack() { gzip -9n "$1"; }
  unpack() { gzip -dc "$1"; }
fi

LOG_DIR=$(mktemp -d)
readonly LOG_DIR
trap 'rm -rf "$LOG_DIR"' EXIT

if [[ -d /usr/local/cuda/bin ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

echo "== configure ($BUILD_DIR)"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  > "$LOG_DIR/configure.log" 2>&1 ||
  { tail -30 "$LOG_DIR/configure.log"; fail "cmake configure failed (log above)"; }
grep -q 'CUDA toolkit found' "$LOG_DIR/configure.log" ||
  { grep -i 'cuda' "$LOG_DIR/configure.log" || true
    fail "cmake did not find the CUDA toolkit (nvcc on PATH? /usr/local/cuda/bin is added), so the CUDA backend would not be built"; }
cuda_version=$(awk '/CUDA toolkit found:/ { print $5; exit }' "$LOG_DIR/configure.log")

echo "== build (${PROGRAMS[*]}; takes minutes)"
cmake --build "$BUILD_DIR" -j2 --target "${PROGRAMS[@]}" > "$LOG_DIR/build.log" 2>&1 ||
  { tail -40 "$LOG_DIR/build.log"; fail "build failed (log above)"; }
[[ -f "$BUILD_DIR/worker/cuda/libps_cuda_backend.a" ]] ||
  fail "the CUDA backend library was not built"

echo "== bundle ($BUNDLE)"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/data/fashion-mnist"

for p in "${PROGRAMS[@]}"; do
  [[ -x "$BUILD_DIR/bin/$p" ]] || fail "$BUILD_DIR/bin/$p was not built"
  cp -L "$BUILD_DIR/bin/$p" "$BUNDLE/bin/$p"
  strip "$BUNDLE/bin/$p"
done
for f in "${DATA_FILES[@]}"; do
  cp -L "$DATA_SRC/$f" "$BUNDLE/data/fashion-mnist/$f"
done

# Every library the programs load, by the name they ask for (the soname),
# from ldd; the loader under its usual name.
declare -A lib_path=()
declare -A left_out=()
loader_path=
for p in "${PROGRAMS[@]}"; do
  ldd "$BUILD_DIR/bin/$p" > "$LOG_DIR/ldd.txt" || fail "ldd $BUILD_DIR/bin/$p failed"
  while read -r name arrow path _; do
    if [[ $name == /* && $arrow == \(* ]]; then
      # The loader: "/lib64/ld-linux-x86-64.so.2 (0x...)".
      [[ ${name##*/} == "$LOADER" ]] || fail "unexpected loader $name (x86-64 glibc only)"
      loader_path=$name
      continue
    fi
    [[ $arrow == '=>' ]] || { left_out[$name]=vdso; continue; }
    if [[ $name =~ $CUDA_LIB_RE || $path == /usr/local/cuda* || $path == */nvidia/* ]]; then
      left_out[$name]=$path
      continue
    fi
    [[ $path == /* ]] || fail "$p needs $name, which ldd did not find ($path)"
    lib_path[$name]=$path
  done < "$LOG_DIR/ldd.txt"
done
[[ -n $loader_path ]] || fail "ldd named no dynamic loader"
[[ -n ${lib_path[libc.so.6]:-} ]] || fail "ldd named no libc.so.6"

libc_dir=$(dirname "${lib_path[libc.so.6]}")
for name in "${RUNTIME_LIBS[@]}"; do
  if [[ -z ${lib_path[$name]:-} ]]; then
    for d in "$libc_dir" /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64; do
      if [[ -e $d/$name ]]; then
        lib_path[$name]=$d/$name
        break
      fi
    done
  fi
  [[ -n ${lib_path[$name]:-} ]] || fail "$name not found next to ${lib_path[libc.so.6]}"
done

cp -L "$loader_path" "$BUNDLE/lib/$LOADER"
chmod 755 "$BUNDLE/lib/$LOADER"
for name in "${!lib_path[@]}"; do
  cp -L "${lib_path[$name]}" "$BUNDLE/lib/$name"
done
# Compress the big ones (two at a time: xz -9 takes a while on OpenBLAS).
lib_names=("${!lib_path[@]}")
packed=()
for f in "${PROGRAMS[@]/#/bin/}" "${lib_names[@]/#/lib/}"; do
  if (($(stat -c %s "$BUNDLE/$f") >= PACK_KIB * 1024)); then
    packed+=("$f")
  fi
done
pids=()
for f in ${packed[@]+"${packed[@]}"}; do
  if ((${#pids[@]} >= 2)); then
    wait "${pids[0]}" || fail "could not compress a file of $BUNDLE"
    pids=("${pids[@]:1}")
  fi
  pack "$BUNDLE/$f" &
  pids+=($!)
done
for pid in ${pids[@]+"${pids[@]}"}; do
  wait "$pid" || fail "could not compress a file of $BUNDLE"
done
for f in ${packed[@]+"${packed[@]}"}; do
  [[ -f $BUNDLE/$f.$PACK_EXT && ! -e $BUNDLE/$f ]] || fail "compressing $BUNDLE/$f failed"
done
# Stored name: NAME or NAME.xz / NAME.gz.
stored() {
  if [[ -f $BUNDLE/$1.$PACK_EXT ]]; then
    echo "${1##*/}.$PACK_EXT ($PACK_EXT; unpack before a run)"
  else
    echo "${1##*/}"
  fi
}

glibc_version=$(getconf GNU_LIBC_VERSION 2> /dev/null | awk '{ print $2 }')
{
  echo "gpu-bundle: benchmarks/gpu_bundle.sh; run with benchmarks/gpu_check.sh --bundle $BUNDLE"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2> /dev/null | tr -d '"'), glibc ${glibc_version:-unknown}"
  echo "commit: $(git rev-parse --short HEAD 2> /dev/null || echo unknown)$(git diff --quiet HEAD -- 2> /dev/null || echo ' (working tree changed)')"
  echo "cuda: built with toolkit $cuda_version, architecture 90; the GPU machine must provide libcudart.so.13, libcublas.so.13, libcublasLt.so.13 (>= $cuda_version) and libcuda.so.1"
  echo "bin:"
  for p in "${PROGRAMS[@]}"; do echo "  $(stored "bin/$p")"; done
  echo "lib:"
  echo "  $LOADER <- $loader_path"
  for name in "${!lib_path[@]}"; do
    echo "  $(stored "lib/$name") <- ${lib_path[$name]}"
  done | sort
  echo "data:"
  for f in "${DATA_FILES[@]}"; do echo "  fashion-mnist/$f <- $DATA_SRC/$f"; done
  echo "left out (from the GPU machine):"
  for name in "${!left_out[@]}"; do echo "  $name (here: ${left_out[$name]})"; done | sort
} > "$BUNDLE/MANIFEST"

echo "== check the bundle"
# Unpacked as gpu_check.sh does it: UNPACKED/bin holds every program.
bundle_abs=$(cd "$BUNDLE" && pwd)
unpacked=$LOG_DIR/unpacked
mkdir -p "$unpacked/bin" "$unpacked/lib"
for f in ${packed[@]+"${packed[@]}"}; do
  unpack "$bundle_abs/$f.$PACK_EXT" > "$unpacked/$f" || fail "could not unpack $BUNDLE/$f.$PACK_EXT"
  if [[ $f == lib/* ]]; then
    cmp -s "$unpacked/$f" "${lib_path[${f#lib/}]}" ||
      fail "$BUNDLE/$f.$PACK_EXT does not unpack to a copy of ${lib_path[${f#lib/}]}"
  fi
done
for p in "${PROGRAMS[@]}"; do
  [[ -f $unpacked/bin/$p ]] || ln -s "$bundle_abs/bin/$p" "$unpacked/bin/$p"
done
# With the CUDA libraries of this machine, if any (only to let ldd list them):
# every other library must resolve inside the bundle.
libpath=$bundle_abs/lib:$unpacked/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && libpath+=:$d
done
for p in "${PROGRAMS[@]}"; do
  env -i "$bundle_abs/lib/$LOADER" --list --library-path "$libpath" "$unpacked/bin/$p" \
    > "$LOG_DIR/list.txt" 2>&1 || { cat "$LOG_DIR/list.txt"; fail "the bundled loader cannot load bin/$p"; }
  mapfile -t listed < "$LOG_DIR/list.txt"
  for line in "${listed[@]}"; do
    read -r name arrow path _ <<< "$line"
    [[ $arrow == '=>' ]] || continue
    [[ $name =~ $CUDA_LIB_RE ]] && continue
    [[ $path == "$bundle_abs/lib/"* || $path == "$unpacked/lib/"* ]] ||
      { printf '%s\n' "${listed[@]}"; fail "bin/$p: $name resolves to $path, outside $BUNDLE/lib"; }
  done
done
# Each program starts: GoogleTest lists its tests, the others print their help.
if [[ -e /usr/local/cuda/lib64/libcublas.so.13 ]]; then
  for p in "${PROGRAMS[@]}"; do
    if [[ $p == *_test ]]; then args=(--gtest_list_tests); else args=(--help); fi
    env -i "$bundle_abs/lib/$LOADER" --library-path "$libpath" "$unpacked/bin/$p" "${args[@]}" \
      > "$LOG_DIR/start.txt" 2>&1 || { cat "$LOG_DIR/start.txt"; fail "bin/$p does not start through the bundled loader"; }
  done
else
  echo "(no libcublas.so.13 here: not starting the programs)"
fi

size_bytes=$(du -sb "$BUNDLE" | cut -f1)
size_mib=$(awk -v b="$size_bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
((size_bytes <= MAX_MIB * 1048576)) ||
  fail "$BUNDLE is $size_mib MiB, over $MAX_MIB MiB (the device machine takes 64 MiB with the working tree)"

if git rev-parse --is-inside-work-tree > /dev/null 2>&1 &&
  ! git check-ignore -q --no-index .gpu-bundle/; then
  [[ -z $(tail -c1 .gitignore 2> /dev/null) ]] || echo >> .gitignore
  echo '/.gpu-bundle/' >> .gitignore
  echo "added /.gpu-bundle/ to .gitignore"
fi
if git rev-parse --is-inside-work-tree > /dev/null 2>&1 && [[ $BUNDLE != /* ]] &&
  ! git check-ignore -q --no-index "$BUNDLE/"; then
  echo "gpu_bundle: note: git does not ignore $BUNDLE; it travels to the device machine as untracked files" >&2
fi

echo
echo "gpu_bundle: OK: $BUNDLE is $size_mib MiB (${#PROGRAMS[@]} programs, $((${#lib_path[@]} + 1)) libraries with the loader, ${#packed[@]} files stored as .$PACK_EXT, Fashion-MNIST $(du -sh "$BUNDLE/data" | cut -f1); CUDA $cuda_version)"
echo "left out, to come from the GPU machine: $(printf '%s ' "${!left_out[@]}" | tr ' ' '\n' | grep -v '^linux-vdso' | sort | tr '\n' ' ')"
echo "on the GPU machine, from the repository root: benchmarks/gpu_check.sh --bundle $BUNDLE"
