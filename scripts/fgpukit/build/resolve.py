"""Download pinned wheels for fgpu's runtime, following Requires-Dist (no extras) recursively."""
import re, subprocess, sys, zipfile, pathlib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as cn
from packaging.markers import default_environment

req, dest = sys.argv[1], pathlib.Path(sys.argv[2]); dest.mkdir(exist_ok=True)
pins = {}
for line in open(req):
    line = line.split("#")[0].strip()
    if "==" in line:
        n, v = line.split("==")
        pins[cn(n)] = v.strip()
# Provided by the GPU host, or built here, or not on fgpu's import path.
skip = {cn(x) for x in sys.argv[3].split(",")}
env = default_environment(); env.update(python_version="3.12", python_full_version="3.12.1", sys_platform="linux", platform_system="Linux", platform_machine="x86_64", implementation_name="cpython")
todo = [cn(x) for x in sys.argv[4].split(",")]
done = {}
while todo:
    n = todo.pop()
    if n in done or n in skip: continue
    spec = f"{n}=={pins[n]}" if n in pins else n
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "-d", str(dest), spec], check=True)
    whl = [w for w in dest.glob("*.whl") if cn(w.name.split("-")[0]) == n]
    assert len(whl) == 1, (n, whl)
    meta = zipfile.ZipFile(whl[0]).read([f for f in zipfile.ZipFile(whl[0]).namelist() if f.endswith(".dist-info/METADATA")][0]).decode()
    deps = []
    for l in meta.splitlines():
        if l.startswith("Requires-Dist:"):
            r = Requirement(l.split(":", 1)[1].strip())
            e = dict(env, extra="")
            if r.marker is None or r.marker.evaluate(e):
                deps.append(cn(r.name)); todo.append(cn(r.name))
    done[n] = (whl[0].name, pins.get(n), deps)
    print(f"{whl[0].name:70s} pinned={pins.get(n)} deps={deps}")
