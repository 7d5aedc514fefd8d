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
#    H100/H200) with the CUDA backend; only backend_test, mlp_test,
#    sparse_logreg_test, mf_test and gemm_bench. Fails if the CUDA toolkit
#    was not found (the backend would be missing).
# 2. DIR/bin: those five programs, stripped. DIR/lib: real copies (no links)
#    of every shared library they need per ldd, glibc (libc, libm, libpthread,
#    libdl, librt), libstdc++, libgcc_s and the dynamic loader
#    ld-linux-x86-64.so.2 included. Left out, since they must match the GPU
#    machine's driver and come from there: libcuda*, libcublas*, libcudart*,
#    libnvidia*, anything else under the CUDA toolkit, and linux-vdso.
#    Libraries of 8 MiB or more (OpenBLAS, RocksDB: 46 MiB of the 61) are
#    stored gzipped as DIR/lib/NAME.gz, to be unpacked into a folder UNPACKED
#    before a run (gpu_check.sh --bundle does it). A program then runs as
#      DIR/lib/ld-linux-x86-64.so.2 --library-path DIR/lib:UNPACKED:CUDA_DIRS DIR/bin/NAME ...
#    DIR/MANIFEST says what was packed, from where, and with which CUDA.
# 3. Checks that each program's non-CUDA libraries all resolve inside DIR/lib
#    (or UNPACKED) through the bundled loader, and that each starts (test
#    listing / --help).
# 4. Fails if DIR is over 60 MiB (the device machine takes at most 64 MiB of
#    working tree and carried paths together); prints its size.
# 5. Adds /.gpu-bundle/ to .gitignore unless git ignores .gpu-bundle already
#    (the device tool carries ignored paths named in its carry list).
set -euo pipefail

readonly BUILD_DIR=build-gpu
readonly PROGRAMS=(backend_test mlp_test sparse_logreg_test mf_test gemm_bench)
readonly MAX_MIB=60
# Libraries that must come from the GPU machine (its driver and CUDA).
readonly CUDA_LIB_RE='^(libcuda|libcublas|libcudart|libnvidia|linux-vdso)'
# glibc's pieces and the C++ runtime: always packed, also when no program
# needs them directly (the GPU machine's CUDA libraries load some of them).
readonly RUNTIME_LIBS=(libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1
  libstdc++.so.6 libgcc_s.so.1)
readonly LOADER=ld-linux-x86-64.so.2
# Libraries at least this big are stored gzipped (lib/NAME.gz).
readonly GZIP_MIB=8

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
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"

for p in "${PROGRAMS[@]}"; do
  [[ -x "$BUILD_DIR/bin/$p" ]] || fail "$BUILD_DIR/bin/$p was not built"
  cp -L "$BUILD_DIR/bin/$p" "$BUNDLE/bin/$p"
  strip "$BUNDLE/bin/$p"
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
gzipped=()
for name in "${!lib_path[@]}"; do
  if (($(stat -c %s "$BUNDLE/lib/$name") >= GZIP_MIB * 1048576)); then
    gzip -9n "$BUNDLE/lib/$name"
    gzipped+=("$name")
  fi
done

glibc_version=$(getconf GNU_LIBC_VERSION 2> /dev/null | awk '{ print $2 }')
{
  echo "gpu-bundle: benchmarks/gpu_bundle.sh; run with benchmarks/gpu_check.sh --bundle $BUNDLE"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2> /dev/null | tr -d '"'), glibc ${glibc_version:-unknown}"
  echo "commit: $(git rev-parse --short HEAD 2> /dev/null || echo unknown)$(git diff --quiet HEAD -- 2> /dev/null || echo ' (working tree changed)')"
  echo "cuda: built with toolkit $cuda_version, architecture 90; the GPU machine must provide libcudart.so.13, libcublas.so.13, libcublasLt.so.13 (>= $cuda_version) and libcuda.so.1"
  echo "bin:"
  for p in "${PROGRAMS[@]}"; do echo "  $p"; done
  echo "lib:"
  echo "  $LOADER <- $loader_path"
  for name in "${!lib_path[@]}"; do
    if [[ -f $BUNDLE/lib/$name.gz ]]; then
      echo "  $name.gz (gzipped; gunzip before a run) <- ${lib_path[$name]}"
    else
      echo "  $name <- ${lib_path[$name]}"
    fi
  done | sort
  echo "left out (from the GPU machine):"
  for name in "${!left_out[@]}"; do echo "  $name (here: ${left_out[$name]})"; done | sort
} > "$BUNDLE/MANIFEST"

echo "== check the bundle"
# With the CUDA libraries of this machine, if any (only to let ldd list them):
# every other library must resolve inside the bundle.
bundle_abs=$(cd "$BUNDLE" && pwd)
unpacked=$LOG_DIR/unpacked
mkdir -p "$unpacked"
for name in ${gzipped[@]+"${gzipped[@]}"}; do
  gzip -dc "$bundle_abs/lib/$name.gz" > "$unpacked/$name"
done
libpath=$bundle_abs/lib:$unpacked
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && libpath+=:$d
done
for p in "${PROGRAMS[@]}"; do
  env -i "$bundle_abs/lib/$LOADER" --list --library-path "$libpath" "$bundle_abs/bin/$p" \
    > "$LOG_DIR/list.txt" 2>&1 || { cat "$LOG_DIR/list.txt"; fail "the bundled loader cannot load bin/$p"; }
  mapfile -t listed < "$LOG_DIR/list.txt"
  for line in "${listed[@]}"; do
    read -r name arrow path _ <<< "$line"
    [[ $arrow == '=>' ]] || continue
    [[ $name =~ $CUDA_LIB_RE ]] && continue
    [[ $path == "$bundle_abs/lib/"* || $path == "$unpacked/"* ]] ||
      { printf '%s\n' "${listed[@]}"; fail "bin/$p: $name resolves to $path, outside $BUNDLE/lib"; }
  done
done
# Each program starts: GoogleTest lists its tests, gemm_bench prints its help.
if [[ -e /usr/local/cuda/lib64/libcublas.so.13 ]]; then
  for p in "${PROGRAMS[@]}"; do
    if [[ $p == gemm_bench ]]; then args=(--help); else args=(--gtest_list_tests); fi
    env -i "$bundle_abs/lib/$LOADER" --library-path "$libpath" "$bundle_abs/bin/$p" "${args[@]}" \
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
echo "gpu_bundle: OK: $BUNDLE is $size_mib MiB (${#PROGRAMS[@]} programs, $((${#lib_path[@]} + 1)) libraries with the loader, ${#gzipped[@]} of them gzipped; CUDA $cuda_version)"
echo "left out, to come from the GPU machine: $(printf '%s ' "${!left_out[@]}" | tr ' ' '\n' | grep -v '^linux-vdso' | sort | tr '\n' ' ')"
echo "on the GPU machine, from the repository root: benchmarks/gpu_check.sh --bundle $BUNDLE"
