#!/usr/bin/env bash
# Builds the stand-in for the compose files' broker image (apache/kafka:3.9.1) from a Debian base, a JRE
# from apt and the Kafka jars edgestream resolves from Maven Central (scripts/testbed/kafka/Dockerfile), for
# machines that cannot pull from an image registry. Cached: skipped when the tag exists with the same recipe
# hash (label edgestream.recipe: the recipe files, the jar list, the base image's id).
#   scripts/testbed/kafka-image.sh [BASE]     BASE: a Debian bookworm image (default: bases.sh's python stand-in)
# Prints the tag on stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BASE=${1:-edgestream-base/python:3.11-bookworm}
TAG=${KAFKA_STANDIN_TAG:-edgestream-standin/kafka:3.9.1}
EDGESTREAM=${EDGESTREAM:-$ROOT/.venv/bin/edgestream}
say() { echo "kafka-image.sh: $*" >&2; }

"$EDGESTREAM" broker fetch >/dev/null
LIBS=${EDGESTREAM_CACHE:-$HOME/.cache/edgestream}/kafka-3.9.1/libs
[ -d "$LIBS" ] || { say "no Kafka jars at $LIBS"; exit 1; }
base_id=$(docker image inspect -f '{{.Id}}' "$BASE")
hash=$( { cat "$ROOT"/scripts/testbed/kafka/*; ls -l "$LIBS" | awk '{print $5, $9}'; echo "$base_id"; } | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{index .Config.Labels "edgestream.recipe"}}' "$TAG" 2>/dev/null || true)" = "$hash" ]; then
    say "$TAG is up to date ($hash)"
    echo "$TAG"
    exit 0
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp -r "$ROOT"/scripts/testbed/kafka/. "$ctx"/
cp -rl "$LIBS" "$ctx/libs" 2>/dev/null || cp -r "$LIBS" "$ctx/libs"
t0=$(date +%s)
docker build -q --build-arg BASE="$BASE" --label edgestream.recipe="$hash" -t "$TAG" "$ctx" >/dev/null
say "$TAG built in $(( $(date +%s) - t0 )) s ($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.2f GB", $1/1e9}'))"
echo "$TAG"
