#!/usr/bin/env bash
# bubblewrap (bwrap), the run sandbox every measured or verified run executes in (tools/running/sandbox.py; Debian's
# package). Idempotent. Without it (and without root to install it) the server refuses to measure unless started with
# `pypto-tune serve --unsandboxed`.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "install_bubblewrap: not root; install Debian's 'bubblewrap' package (apt-get install bubblewrap) to run the" \
       "sandboxed runs the server requires" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq bubblewrap >/dev/null
