#!/usr/bin/env bash
# Installs Segment's official browser library (@segment/analytics-next, pinned with its
# dependencies by tools/browser/package-lock.json) into tools/browser/node_modules, from
# the npm registry; the browser test loads it into headless Chromium. Installs Node.js
# and npm from Debian's packages when absent. Idempotent and fast when the pinned version
# is already installed. Exits non-zero, loudly, when it cannot: tests never skip.
set -euo pipefail
cd "$(dirname "$0")/../tools/browser"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "installing nodejs npm from Debian's packages" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm >/dev/null \
    || { as_root apt-get update >/dev/null && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm >/dev/null; }
fi

wanted=$(node -p 'require("./package.json").dependencies["@segment/analytics-next"]')
installed() {
  node -p 'require("./node_modules/@segment/analytics-next/package.json").version' 2>/dev/null || true
}
if [ "$(installed)" != "$wanted" ] || [ ! -f node_modules/@segment/analytics-next/dist/umd/index.js ]; then
  npm ci --no-audit --no-fund --loglevel=error >&2
fi
[ "$(installed)" = "$wanted" ] || {
  echo "error: @segment/analytics-next $wanted did not install into tools/browser/node_modules" >&2
  exit 1
}
echo "browser tools ready: @segment/analytics-next $wanted" >&2
