"""The closure a run may read (tools/running/closure.py) and the recorded world of a session
(tools/running/recorded_env.py): found from the interpreter itself, compared item by item on resume."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pypto_tune.tools.running import closure as closure_mod
from pypto_tune.tools.running.recorded_env import RunWorld, differences
from pypto_tune.tools.running.runner import build_child_env
from pypto_tune.tools.running.sandbox import Closure

import pytest

pytestmark = pytest.mark.process


def test_the_closure_is_what_the_interpreter_imports_from_not_a_list(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    extra = tmp_path / "extra_site"
    extra.mkdir()
    env = build_child_env(run_mode="sim", extra={"PYTHONPATH": f"{extra}{os.pathsep}{ws / 'lib'}"})
    clo, info = closure_mod.find_sync(sys.executable, env, workspace=ws)
    assert str(extra) in info["path"] and str(extra) in clo.roots and str(extra) in clo.fingerprinted
    assert not any(r == str(ws) or r.startswith(f"{ws}/") for r in clo.roots)  # the recorded tree covers it
    # the interpreter's own prefixes: the venv (pyvenv.cfg, bin/python3) and the base installation
    assert any(sys.prefix == r or sys.prefix.startswith(r + "/") for r in clo.roots)
    assert any(sys.base_prefix == r or sys.base_prefix.startswith(r + "/") for r in clo.roots)
    assert os.path.realpath(sys.executable) in clo.fingerprinted
    # the system is mounted anyway: never a root, never fingerprinted
    assert not any(r == "/usr" or r.startswith("/usr/") for r in clo.roots + clo.fingerprinted)


def test_a_path_folder_of_links_brings_their_targets(tmp_path: Path) -> None:
    tool = tmp_path / "toolchain" / "bin"
    tool.mkdir(parents=True)
    (tool / "npu-smi").write_text("#!/bin/sh\n")
    links = tmp_path / "box" / "bin"
    links.mkdir(parents=True)
    (links / "npu-smi").symlink_to(tool / "npu-smi")
    env = {"PATH": f"{links}{os.pathsep}/usr/bin"}
    clo = closure_mod.build({"path": [], "prefixes": [], "exe": ""}, env, workspace=tmp_path / "ws")
    assert str(links) in clo.roots and str(tool) in clo.roots
    assert str(tool / "npu-smi") in clo.fingerprinted  # the program itself, not its whole folder


def _world(**kw) -> RunWorld:
    base = dict(environment={"PATH": "/venv/bin:/usr/bin", "HOME": "/root", "PYTHONPATH": ""},
                python="/venv/bin/python", closure=Closure(roots=("/venv",), devices=()), sandbox="bubblewrap 0.8.0")
    base.update(kw)
    return RunWorld(**base)


def test_every_difference_is_named_for_a_person() -> None:
    recorded = _world()
    now = _world(environment={"PATH": "/venv/bin:/usr/bin", "HOME": "/root", "PYTHONPATH": "/tmp/site",
                              "TILE_FWK_DEVICE_ID": "3", "ASCEND_HOME_PATH": "/opt/cann"},
                 closure=Closure(roots=("/venv", "/tmp/site"), devices=("/dev/davinci0",)),
                 sandbox="none", sandbox_note="bubblewrap (bwrap) is not installed")
    found = differences(recorded, now)
    assert found == [
        "ASCEND_HOME_PATH is now '/opt/cann' (unset when the session started)",
        "PYTHONPATH was '', now '/tmp/site'",
        "interpreter/toolchain roots added: /tmp/site",
        "device paths were none, now ['/dev/davinci0']",
        "runs were sandboxed (bubblewrap 0.8.0), now unsandboxed: bubblewrap (bwrap) is not installed",
    ]  # the chip (TILE_FWK_DEVICE_ID) is the server's choice per run, never a difference
    assert differences(recorded, _world()) == []
    assert differences(recorded, _world(python="/other/bin/python")) == [
        "the interpreter was /venv/bin/python, now /other/bin/python"]


def test_a_world_survives_the_ledger() -> None:
    w = _world(probe={"path": ["/venv/lib/site-packages"]})
    back = RunWorld.from_json(w.as_json())
    assert back.as_json() == w.as_json() and back.sandboxed and back.run_env("2")["TILE_FWK_DEVICE_ID"] == "2"


def test_the_package_folders_an_interpreter_does_not_use_are_hidden(tmp_path: Path) -> None:
    """A venv's base installation is mounted whole (interpreter, standard library), but its own site-packages is not
    on the venv's sys.path: hidden. Folders holding anything the run uses stay, and so does a folder reached through
    a link (a venv's ``lib64 -> lib``: a mount there would land on the site-packages the run does use)."""
    base, venv, ws = tmp_path / "base", tmp_path / "venv", tmp_path / "ws"
    for d in (base / "lib/python3.11/site-packages", base / "lib/python3.11/dist-packages/src/pkg",
              venv / "lib/python3.11/site-packages", ws):
        d.mkdir(parents=True)
    (venv / "lib64").symlink_to("lib")
    info = {"path": [str(base / "lib/python3.11"), str(venv / "lib/python3.11/site-packages")],
            # sys.prefix, sys.base_prefix, then an editable install's source folder (closure.py's probe)
            "prefixes": [str(venv), str(base), str(base / "lib/python3.11/dist-packages/src")],
            "exe": str(base / "bin/python3.11")}
    clo = closure_mod.build(info, {"PATH": "/usr/bin"}, workspace=ws)
    assert clo.hidden == (str(base / "lib/python3.11/site-packages"),)
    assert Closure.from_json(clo.as_json()) == clo
    # recorded before hidden folders existed: hides nothing (its scans keep covering everything)
    assert Closure.from_json({"roots": ["/venv"]}).hidden == ()


def test_this_machines_base_site_packages_is_hidden_from_a_venv(tmp_path: Path) -> None:
    import sysconfig

    base_site = sysconfig.get_path("purelib", vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    ws = tmp_path / "ws"
    ws.mkdir()
    clo, info = closure_mod.find_sync(sys.executable, build_child_env(run_mode="sim"), workspace=ws)
    expected = (sys.prefix != sys.base_prefix and os.path.isdir(base_site) and base_site not in info["path"]
                and os.path.realpath(base_site) == base_site)
    assert (base_site in clo.hidden) == expected, (base_site, clo.hidden)
    assert not set(clo.hidden) & set(info["path"])
