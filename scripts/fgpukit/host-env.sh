# Sourced by run-fgpu.sh and bench.sh: makes the installed kit importable and finds what
# katgpucbf needs from the host at run time (nvcc for the kernels, libcufft for the FFT).
# SITE (default /tmp/site) is where install.sh put the wheels; it installs them when missing.
kit=${kit:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
SITE=${SITE:-/tmp/site}
PYTHON=${PYTHON:-python3}
# HOST_ENV_WARN_ONLY=1 (run-fgpu.sh's CHECK_ONLY): a missing nvcc or libcufft is only reported.
missing() { echo "host-env: $1" >&2; [[ ${HOST_ENV_WARN_ONLY:-0} == 1 ]]; }
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PYTHON" -c 'import katgpucbf.fgpu' 2>/dev/null; then
  echo "host-env: katgpucbf not importable from $SITE: running install.sh" >&2
  PYTHON=$PYTHON bash "$kit/install.sh" "$SITE" >&2 || return 1
fi

# katsdpsigproc compiles its kernels with pycuda, which runs `nvcc` from PATH.
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13*/bin \
      $("$PYTHON" -c 'import site; print(" ".join(p + "/nvidia/cu13/bin " + p + "/nvidia/cuda_nvcc/bin" for p in site.getsitepackages()))' 2>/dev/null); do
    if [[ -x $d/nvcc ]]; then export PATH="$d:$PATH"; break; fi
  done
fi
command -v nvcc >/dev/null || missing "nvcc not found (set PATH): katgpucbf compiles its kernels with it" || return 1

# katsdpsigproc loads cuFFT with ctypes.util.find_library("cufft"), which reads ldconfig's cache:
# a libcufft that only a Python package carries is not in it, so add its folder to the cache.
if [[ $("$PYTHON" -c 'import ctypes.util; print(ctypes.util.find_library("cufft"))') == None ]]; then
  lib=$(find /usr/local/cuda*/ /usr/lib /usr/lib64 \
      $("$PYTHON" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
      -name 'libcufft.so*' ! -name '*cufftw*' 2>/dev/null | head -1)
  if [[ -n $lib && -w /etc/ld.so.conf.d ]]; then
    echo "host-env: adding $(dirname "$lib") to ldconfig's cache for libcufft" >&2
    echo "$(dirname "$lib")" > /etc/ld.so.conf.d/fgpukit-cufft.conf && ldconfig
  fi
  [[ $("$PYTHON" -c 'import ctypes.util; print(ctypes.util.find_library("cufft"))') != None ]] ||
    missing "libcufft not found: katsdpsigproc needs it for the FFT" || return 1
fi
