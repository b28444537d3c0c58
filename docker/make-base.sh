#!/usr/bin/env bash
# Builds the local base images. No registry is reachable here, so nothing can be pulled: the base is
# made from Debian packages with debootstrap and `docker import`, and the CUDA libraries come from
# NVIDIA's PyPI wheels.
#
#   fgpu-base:bookworm  Debian 12 minbase: libc, libgcc, libstdc++, bash (~80 MB). dsim, harness, and
#                       the engine's CPU-only image.
#   fgpu-cuda:bookworm  fgpu-base + NVRTC and cuFFT (~400 MB more). Not the driver: the NVIDIA
#                       container runtime injects libcuda.so.1 when the container gets a GPU.
#
# Usage: docker/make-base.sh [--force] [--cuda]
#   --force  rebuild even if the image exists      --cuda  also build fgpu-cuda:bookworm
# Env: BASE_TAG, CUDA_TAG, DEBIAN_MIRROR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

base_tag=${BASE_TAG:-fgpu-base:bookworm}
cuda_tag=${CUDA_TAG:-fgpu-cuda:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# CUDA 13.0 (update 2) builds: cudarc is built for 13.0 and the GPU hosts run driver 580 (CUDA 13.0).
# A newer NVRTC would emit PTX that driver cannot load, so move these only with the driver.
nvrtc_pkg=nvidia-cuda-nvrtc==13.0.88
cufft_pkg=nvidia-cufft==12.0.0.61

force=0 cuda=0
for a in "$@"; do
  case $a in
    --force) force=1 ;;
    --cuda) cuda=1 ;;
    *) echo "usage: $0 [--force] [--cuda]" >&2; exit 2 ;;
  esac
done

have_image() { docker image inspect "$1" >/dev/null 2>&1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ $force == 1 ]] || ! have_image "$base_tag"; then
  t0=$SECONDS
  if ! command -v debootstrap >/dev/null; then
    echo "== installing debootstrap"
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  fi
  echo "== debootstrap minbase bookworm"
  root=$work/root
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -30 "$work/debootstrap.log"; exit 1; }
  # Security fixes land in bookworm-security between point releases; take them now (a few seconds).
  cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  chroot "$root" apt-get -q update >/dev/null
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get -q -y upgrade >/dev/null 2>&1
  # Same slimming as Debian's official images: no package caches or lists, no docs (copyright
  # files kept), and keep later `apt-get install`s in derived images from bringing them back.
  rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/share/{man,info,locale}/*
  find "$root/usr/share/doc" -type f ! -name copyright -delete
  cat >"$root/etc/dpkg/dpkg.cfg.d/01-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
  echo 'APT::Install-Recommends "false"; APT::Install-Suggests "false";' >"$root/etc/apt/apt.conf.d/01-slim"
  # The build host's resolver and name must not leak into the image (Docker mounts its own).
  : >"$root/etc/resolv.conf"; echo localhost >"$root/etc/hostname"
  echo "== docker import $base_tag"
  tar -C "$root" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["bash"]' \
    --message "debootstrap --variant=minbase bookworm" - "$base_tag" >/dev/null
  echo "== $base_tag built in $((SECONDS - t0)) s"
else
  echo "== $base_tag exists (--force rebuilds it)"
fi

if [[ $cuda == 1 ]] && { [[ $force == 1 ]] || ! have_image "$cuda_tag"; }; then
  t0=$SECONDS
  echo "== downloading $nvrtc_pkg $cufft_pkg from PyPI"
  python3 -m pip download --quiet --no-deps -d "$work/whl" "$nvrtc_pkg" "$cufft_pkg"
  # Only what cudarc dlopens: libnvrtc (+ its builtins, which it dlopens itself) and libcufft.
  # Left out: the .alt variants, libcufftw (FFTW API), and nvJitLink (a declared dependency of the
  # cuFFT wheel, used only for LTO callbacks, which we do not use).
  mkdir -p "$work/ctx/lib"
  python3 - "$work/whl" "$work/ctx/lib" <<'EOF'
import pathlib, re, sys, zipfile
src, dst = map(pathlib.Path, sys.argv[1:])
want = re.compile(r"/lib/(libnvrtc\.so\.\d+|libnvrtc-builtins\.so\.[\d.]+|libcufft\.so\.\d+)$")
for whl in src.glob("*.whl"):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if want.search(name):
                (dst / pathlib.Path(name).name).write_bytes(z.read(name))
EOF
  ls "$work/ctx/lib"
  echo "== docker build $cuda_tag"
  # Quiet on success (the classic builder's deprecation notice included); everything on failure.
  out=$(DOCKER_BUILDKIT=0 docker build --quiet -t "$cuda_tag" --build-arg BASE_IMAGE="$base_tag" \
    -f "$here/cuda.Dockerfile" "$work/ctx" 2>&1) || { echo "$out" >&2; exit 1; }
  echo "== $cuda_tag built in $((SECONDS - t0)) s"
elif [[ $cuda == 1 ]]; then
  echo "== $cuda_tag exists (--force rebuilds it)"
fi
