#!/usr/bin/env bash
# Creates .venv at the repository root with the official OpenLineage Python client, which
# the lineage tests drive against a running server, the official Segment client
# (segment-analytics-python), which the Segment tests drive through a lossy proxy, and
# schemathesis, which the OpenAPI
# test runs against one. Idempotent and fast when the pinned
# version is already installed. Exits non-zero, loudly, when it cannot: tests never skip.
set -euo pipefail
cd "$(dirname "$0")/.."

OPENLINEAGE_PYTHON_VERSION=1.54.0
SCHEMATHESIS_VERSION=4.32.5
SEGMENT_ANALYTICS_PYTHON_VERSION=2.4.0
VENV=.venv

python_bin() {
  for candidate in python3.11 python3; do
    command -v "$candidate" >/dev/null && { echo "$candidate"; return 0; }
  done
  echo "error: python3 is required for the OpenLineage client tests" >&2
  return 1
}

installed_version() {
  "$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true
}

ready() {
  [ "$(installed_version openlineage-python)" = "$OPENLINEAGE_PYTHON_VERSION" ] \
    && [ "$(installed_version schemathesis)" = "$SCHEMATHESIS_VERSION" ] \
    && [ "$(installed_version segment-analytics-python)" = "$SEGMENT_ANALYTICS_PYTHON_VERSION" ]
}

if ready; then
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  python=$(python_bin)
  if ! "$python" -m venv "$VENV"; then
    # Debian ships venv separately.
    rm -rf "$VENV"
    as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi; }
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv >/dev/null \
      || { as_root apt-get update >/dev/null && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv >/dev/null; }
    "$python" -m venv "$VENV" || { echo "error: cannot create $VENV" >&2; exit 1; }
  fi
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  "openlineage-python==$OPENLINEAGE_PYTHON_VERSION" "schemathesis==$SCHEMATHESIS_VERSION" \
  "segment-analytics-python==$SEGMENT_ANALYTICS_PYTHON_VERSION"
ready || {
  echo "error: openlineage-python $OPENLINEAGE_PYTHON_VERSION, schemathesis $SCHEMATHESIS_VERSION or segment-analytics-python $SEGMENT_ANALYTICS_PYTHON_VERSION did not install into $VENV" >&2
  exit 1
}
echo "python tools ready: $VENV with openlineage-python $OPENLINEAGE_PYTHON_VERSION, schemathesis $SCHEMATHESIS_VERSION, segment-analytics-python $SEGMENT_ANALYTICS_PYTHON_VERSION" >&2
