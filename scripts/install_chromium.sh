#!/usr/bin/env bash
# Headless Chromium for the HTML report tests (Debian's package; no browser download of its own), and a CJK font:
# without one the zh report renders every Chinese character as an empty box (.notdef). The report's CSS names
# "Noto Sans CJK SC" first in its font stack, which is what fonts-noto-cjk installs. Idempotent.
set -euo pipefail
need=()
if ! command -v chromium >/dev/null 2>&1 && [ ! -x /usr/bin/chromium ]; then
  need+=(chromium)
fi
if ! fc-list :lang=zh family 2>/dev/null | grep -qi "Noto Sans CJK"; then
  need+=(fonts-noto-cjk)
fi
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "install_chromium: not root; install Debian's ${need[*]} package(s) to run the browser tests" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${need[@]}" >/dev/null
