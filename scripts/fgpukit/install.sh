#!/usr/bin/env bash
# Installs the kit's wheels (katgpucbf patched, pycuda built against CUDA 13.0 headers, and the
# pure-Python and manylinux wheels fgpu imports) into a target folder, without the network and
# without touching the host's own numpy, scipy, numba or cupy.
#
#   source scripts/fgpukit/install.sh [TARGET]     (TARGET defaults to /tmp/site)
#
# Sourcing it exports PYTHONPATH (and PATH for the `fgpu` script) into the calling shell;
# running it instead (bash install.sh) installs and verifies, and prints the export line.
# PYTHON names the interpreter (default python3).
kit=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
target=${1:-/tmp/site}
python=${PYTHON:-python3}

"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$target" "$kit"/wheels/*.whl || { echo "install.sh: pip install failed" >&2; return 1 2>/dev/null || exit 1; }

export PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$target/bin:$PATH"
# The --target install writes console scripts with the installing interpreter's path; fgpu's
# script is what run-fgpu.sh starts.
echo "install.sh: installed $(ls "$kit"/wheels/*.whl | wc -l) wheels into $target"

# What the host must provide itself (not in the kit): numpy, scipy, numba (with llvmlite),
# libcuda.so.1 (the driver), nvcc (katsdpsigproc compiles the kernels at start-up) and libcufft.
"$python" - <<'EOF' || { echo "install.sh: verification failed (see above)" >&2; return 1 2>/dev/null || exit 1; }
import importlib
for name in ("numpy", "scipy", "numba"):
    m = importlib.import_module(name)
    print(f"host {name} {m.__version__}")
import katgpucbf, katsdpsigproc, spead2, aiokatcp, pycuda
print(f"katgpucbf {katgpucbf.__version__}, katsdpsigproc {katsdpsigproc.__version__}, "
      f"spead2 {spead2.__version__}, aiokatcp {aiokatcp.__version__}, pycuda {pycuda.VERSION_TEXT}")
import pycuda.driver as drv  # needs libcuda.so.1
drv.init()
print(f"CUDA driver {drv.get_driver_version()}, pycuda built for CUDA {drv.get_version()}, "
      f"{drv.Device.count()} device(s): {drv.Device(0).name()}")
import katgpucbf.fgpu.main  # noqa: F401  (imports the engine, the patched mapped_array and spead2's numba glue)
import katgpucbf.fgpu
print("import katgpucbf.fgpu: ok")
EOF
echo "export PYTHONPATH=$target\${PYTHONPATH:+:\$PYTHONPATH} PATH=$target/bin:\$PATH"
