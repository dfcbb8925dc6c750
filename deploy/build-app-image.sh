#!/usr/bin/env bash
# Builds the service image (deploy/app.Dockerfile) as compose.yaml names it, with BuildKit where this machine's docker
# can: BuildKit makes no layer for a settings step and starts no container for one, so on a slow storage driver
# (fuse-overlayfs) the image takes about half the time of the classic builder's 11 steps.
# - `docker buildx` when the plugin is there (Docker 23+ builds with it by default);
# - else a docker CLI older than 23 on PATH (Debian's docker.io 20.10 has BuildKit built in: DOCKER_BUILDKIT=1);
# - else the classic builder, which always works.
# Usage: deploy/build-app-image.sh [TAG]   (run from the repository root; BASE_IMAGE from the environment)
set -euo pipefail
tag=${1:-regrow/app:0.1.0}
base=${REGROW_BASE_IMAGE:-regrow/base:0.1.0-r2}
arguments=(--tag "$tag" --file deploy/app.Dockerfile --build-arg "BASE_IMAGE=$base" .)

if docker buildx version >/dev/null 2>&1; then
  exec docker buildx build --load "${arguments[@]}"
fi
IFS=: read -ra folders <<< "$PATH"
for folder in "${folders[@]}"; do
  cli="$folder/docker"
  [ -x "$cli" ] || continue
  version=$("$cli" version --format '{{.Client.Version}}' 2>/dev/null || true)
  major=${version%%.*}
  if [[ "$major" =~ ^[0-9]+$ ]] && [ "$major" -ge 18 ] && [ "$major" -lt 23 ]; then
    DOCKER_BUILDKIT=1 exec "$cli" build --progress plain "${arguments[@]}"
  fi
done
echo "build-app-image: no docker CLI here builds with BuildKit; the classic builder takes longer" >&2
DOCKER_BUILDKIT=0 exec docker build "${arguments[@]}"
