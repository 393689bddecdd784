#!/usr/bin/env bash
# Headless Chromium for the HTML report test (Debian's package; no browser download of its own). Idempotent.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "install_chromium: not root; install Debian's 'chromium' package to run the browser test" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
