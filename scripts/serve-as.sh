#!/bin/sh
# Start `pypto-tune serve` under the server's own account, for an MCP client (the agent) that runs under another.
#
#   scripts/serve-as.sh ACCOUNT [serve options...]     e.g.  scripts/serve-as.sh pyptotune --workspace /srv/tune/ws
#
# stdin and stdout pass through untouched (the MCP stdio stream). The server gets the account's own HOME (its ledger
# seal key lives there, unreadable to the agent) and a fresh environment: only what the options name reaches it.
#   * as root (a CI job, a launcher run by a person): setpriv (util-linux) switches user, group and supplementary
#     groups, and resets the environment to the account's;
#   * as any other account: sudo, which needs one drop-in line, e.g. /etc/sudoers.d/pypto-tune (mode 0440):
#         agent ALL=(pyptotune) NOPASSWD: /opt/pypto-tune/.venv/bin/pypto-tune serve *
#     so the agent's account may start exactly this program as pyptotune, and nothing else.
# PYPTO_TUNE_EXE names the pypto-tune program (default: the .venv beside this script's checkout).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 ACCOUNT [pypto-tune serve options...]" >&2; exit 2; }
account=$1
shift
here=$(cd "$(dirname "$0")/.." && pwd)
exe=${PYPTO_TUNE_EXE:-$here/.venv/bin/pypto-tune}
if [ "$(id -u)" = 0 ]; then
    exec setpriv --reuid="$account" --regid="$(id -g "$account")" --init-groups --reset-env -- "$exe" serve "$@"
fi
exec sudo -n -u "$account" -H -- "$exe" serve "$@"
