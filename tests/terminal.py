"""A real terminal for the tests of the CLI's interrupts: a private tmux server running one command.

The command runs under ``bash -c``, never the account's login shell: Ctrl-C reaches the whole foreground group, shell
included, and dash (Debian's ``/bin/sh``, the shell when ``SHELL`` is unset) dies of it at once — the pane closed
and the test saw an empty screen — while bash waits for the command and goes on when the command handled the
signal, as an interactive shell's job would."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path


class Tmux:
    """A private tmux server (its own socket) with one window running ``command``."""

    def __init__(self, name: str, command: str, cwd: Path) -> None:
        self.base = ["tmux", "-L", f"pypto-tune-test-{os.getpid()}-{name}"]
        subprocess.run(self.base + ["new-session", "-d", "-s", name, "-x", "220", "-y", "50", "-c", str(cwd),
                                    "bash", "-c", f"{command}; echo EXIT=$?; sleep 600"], check=True)
        self.name = name

    def screen(self) -> str:
        out = subprocess.run(self.base + ["capture-pane", "-p", "-J", "-t", self.name, "-S", "-5000"],
                             capture_output=True, text=True)
        if out.returncode != 0:  # the pane is gone: say so rather than wait on an empty screen
            raise AssertionError(f"the terminal is gone: {out.stderr.strip()}")
        return out.stdout

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.screen())
            if m:
                return m
            time.sleep(0.5)
        raise AssertionError(f"{pattern!r} not shown within {timeout} s:\n{self.screen()[-3000:]}")

    def keys(self, *keys: str) -> None:
        subprocess.run(self.base + ["send-keys", "-t", self.name, *keys], check=True)

    def close(self) -> None:
        subprocess.run(self.base + ["kill-server"], capture_output=True)
