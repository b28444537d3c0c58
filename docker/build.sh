#!/usr/bin/env bash
# Builds fgpu/dsim, fgpu/fengine and fgpu/harness (all :latest) with no registry:
#   1. base images if missing (docker/make-base.sh)
#   2. release binaries on the host (Rust is not available inside the images)
#   3. a staging context with only those binaries and two scripts (not the repo and its target/)
#   4. one `docker build --target` per image
# Usage: docker/build.sh [--no-cuda]
#   --no-cuda  engine image on fgpu-base: CPU backends only, skips the ~400 MB CUDA layer
# Env: BASE_IMAGE, ENGINE_BASE_IMAGE (other bases, e.g. official CUDA images where a registry exists);
#      FGPU_TAG (default latest).
set -euo pipefail
cd "$(dirname "$0")/.."

cuda=1
case ${1:-} in
  --no-cuda) cuda=0 ;;
  "") ;;
  *) echo "usage: $0 [--no-cuda]" >&2; exit 2 ;;
esac
base=${BASE_IMAGE:-fgpu-base:bookworm}
engine_base=${ENGINE_BASE_IMAGE:-$([[ $cuda == 1 ]] && echo fgpu-cuda:bookworm || echo "$base")}
tag=${FGPU_TAG:-latest}
# The docker 28 CLI wants the buildx plugin for BuildKit, which is not installed here; the classic
# builder needs nothing and is enough for these COPY-only images.
export DOCKER_BUILDKIT=0

timings=()
t=$SECONDS
lap() { timings+=("$(printf '%-28s %4d s' "$1" $((SECONDS - t)))"); t=$SECONDS; }

# Our own bases are made here when used; a base from elsewhere is the caller's to provide.
if [[ "$base $engine_base" == *fgpu-* ]]; then
  docker/make-base.sh $([[ $engine_base == fgpu-cuda:* ]] && echo --cuda)
  lap "base images"
fi

# The same build as `cargo test --workspace --release` (scripts/test runs it next): its binaries
# have the features the tests' dev-dependencies unify in, so a plain `cargo build` would compile the
# workspace a second time.
echo "== cargo test --workspace --release --no-run (binaries for the images, and the tests)"
cargo test --workspace --release --no-run
lap "cargo build --release"

target_dir=$(cargo metadata --no-deps --format-version 1 |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
ctx=$target_dir/docker-context
rm -rf "$ctx"
mkdir -p "$ctx/bin"
install -m 0755 "$target_dir"/release/{dsim,fengine,harness} "$ctx/bin/"
install -m 0755 docker/fgpu-probe docker/fgpu-antenna docker/schedrr "$ctx/"
echo "== staged $(du -sh "$ctx" | cut -f1) in $ctx"

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain 2>/dev/null) ]] && rev+=-dirty
for target in dsim harness fengine; do
  echo "== docker build --target $target -> fgpu/$target:$tag"
  # Quiet on success (the classic builder's deprecation notice included); everything on failure.
  out=$(docker build --quiet -f docker/Dockerfile --target "$target" -t "fgpu/$target:$tag" \
    --build-arg BASE_IMAGE="$base" --build-arg ENGINE_BASE_IMAGE="$engine_base" \
    --label org.opencontainers.image.revision="$rev" "$ctx" 2>&1) || { echo "$out" >&2; exit 1; }
  lap "image fgpu/$target"
done

echo "== timings"
printf '  %s\n' "${timings[@]}"
docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E "^fgpu[/-]" | sort | sed 's/^/  /' || true
echo "  (engine base: $engine_base)"
