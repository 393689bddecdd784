"""pypto-tune's run-time probe: what a PyPTO test actually did, recorded from inside its Python process.

Loaded by the ``sitecustomize`` next to this file (which the server puts first on the run's ``PYTHONPATH`` from a
folder it owns, never the workspace) the first time the process looks for ``pypto``. Standard library only: the test's interpreter may not have pypto-tune.

What it records, once ``pypto`` has finished importing (wrapping while pypto is half-initialised raises a circular
import, domain.md G.2), into ``$PYPTO_TUNE_PROBE_DIR/probe-<pid>.json``:

* every call of the tiling and option APIs — ``set_vec_tile_shapes``, ``set_cube_tile_shapes``, ``set_pass_options``,
  ``set_options`` / the other ``set_*_options``, ``experimental.set_operation_options``, ``loop`` / ``loop_unroll``,
  ``view`` / ``reshape`` / ``assemble`` (function and ``Tensor`` method forms), ``Tensor.set_cache_policy`` — with the
  effective arguments, the call site (the first frame outside pypto: file, line, function, and the user frames
  above it), the jit kernel being compiled at that moment, and how often that exact call ran;
* every jit kernel: where it is defined, how often it was called, the shapes and dtypes of the tensors it got, its
  option dicts as pypto holds them (``runtime_options`` after pypto normalised ``run_mode``), whether it compiled
  and whether the call returned;
* the statements of kernel bodies that pypto's parser traced (which branches the test entered);
* for each tile call, how many operations were built while its tile was in force (``ops``: cube operations for a
  cube tile, every other operation for a vector tile) — a tile replaced by a later call before any operation used it
  changes nothing, whatever its value. pypto 0.2.0 builds every operation through ``_op_wrapper``, which calls
  ``set_source_location`` first (``assemble`` builds its copy directly and is counted where it is recorded); where
  that hook is missing the count is absent and nothing is concluded from it; for a vector tile also the largest
  extent, per rank, of the tensors those operations took (``extent``: a tile dimension past it is clamped);
* ``sys.path`` and the files of the imported modules (for the sandbox's hermeticity check).

How the jit's options reach pypto (measured, 0.2.0): the decorator keeps the dicts on the ``JitCallableWrapper``;
each call applies them through ``_set_config_option`` → ``pypto.set_pass_options(**pass_options)`` and
``pypto.set_options(runtime_options=...)``, looked up on the ``pypto`` module at call time. Those calls are recorded
with ``origin = "jit"`` and the kernel they served; the kernel record carries the dicts themselves.

It never changes what the kernel computes: each wrapper records, then calls the original with the same arguments
and returns its result untouched (exceptions pass through unchanged). Any failure of the probe itself is swallowed
and noted in the record's ``faults``; it prints nothing. If it cannot write, the server says the probe did not report.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time

VERSION = 1
DIR_ENV = "PYPTO_TUNE_PROBE_DIR"
_MAX_STACK = 8  # user frames kept per call site
_MAX_STR = 200
_MAX_SITES = 5000  # distinct call sites kept (a runaway loop of views must not grow the record without bound)

# pypto attributes wrapped, by module: (attribute, api name recorded)
_FUNCTIONS = {
    "pypto": ("set_vec_tile_shapes", "set_cube_tile_shapes", "set_pass_options", "set_options", "set_host_options",
              "set_codegen_options", "set_verify_options", "set_debug_options", "loop", "loop_unroll", "view",
              "reshape", "assemble"),
    "pypto._controller": ("set_vec_tile_shapes", "set_cube_tile_shapes", "loop", "loop_unroll"),
    "pypto.config": ("set_pass_options", "set_options", "set_host_options", "set_codegen_options",
                     "set_verify_options", "set_debug_options"),
    "pypto.operation": ("view", "reshape", "assemble"),
    "pypto.experimental": ("set_operation_options",),
}
_TENSOR_METHODS = ("view", "reshape", "set_cache_policy")
_TILE_APIS = {"set_vec_tile_shapes": "vec", "set_cube_tile_shapes": "cube"}
_CUBE_OPS = frozenset({"matmul", "scaled_mm", "transposed_batchmatmul", "conv"})  # what a cube tile shapes
_VIEW_APIS = {"view", "reshape", "assemble", "Tensor.view", "Tensor.reshape"}


class _Probe:
    def __init__(self, out_dir: str, hook_dir: str) -> None:
        self.out_dir = out_dir
        self.path = os.path.join(out_dir, f"probe-{os.getpid()}.json")
        self.hook_dir = hook_dir
        self.this_file = os.path.abspath(__file__)
        self.cwd = os.getcwd()
        self.started = time.time()
        self.sites: dict[tuple, dict] = {}
        self.kernels: dict[str, dict] = {}
        self.active: list[str] = []  # kernels whose call is in progress (innermost last)
        # the loop_unroll variants whose body is being traced (outermost first): [file, line, factor]
        self.unroll: list[list] = []
        self.traced: dict[str, set[int]] = {}  # kernel source file -> statement lines pypto's parser traced
        self.stmt_frames: dict[int, tuple[str, int]] = {}  # id(parser visit frame) -> the statement it visits
        self.depth = 0  # > 0 while a recorded API runs: what it calls internally is not the user's call
        self.in_force: dict[str, dict] = {}  # "vec" / "cube" -> the record of the tile call last made
        self.counts_ops = False  # the operation hook is in place (else no record carries "ops")
        self.faults: list[str] = []
        self.pypto_dir = ""
        self.pypto_version = None
        self.instrumented: list[str] = []
        self.dirty = False
        self.self_s = 0.0  # wall time spent in the probe's own code (recording, writing, wrapping)

    # ------------------------------------------------------------------------------------------- values
    def plain(self, v, depth: int = 0):
        """A JSON-able picture of an argument value (pypto objects by what they are, never by calling them)."""
        if v is None or isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, str):
            return v[:_MAX_STR]
        if depth > 4:
            return {"$repr": type(v).__name__}
        if isinstance(v, (list, tuple)):
            return [self.plain(x, depth + 1) for x in v[:64]]
        if isinstance(v, dict):
            return {str(k): self.plain(x, depth + 1) for k, x in list(v.items())[:64]}
        cls = type(v)
        name = cls.__name__
        mod = getattr(cls, "__module__", "") or ""
        if name == "SymbolicScalar" or name == "SymInt":
            try:
                if v.is_concrete():
                    return int(v.concrete())
            except Exception:
                pass
            return {"$sym": str(v)[:_MAX_STR]}
        if "torch" in mod and name == "Tensor":
            return {"$tensor": [int(d) for d in v.shape], "dtype": str(v.dtype), "device": v.device.type}
        if name == "Tensor" and mod.startswith("pypto"):
            return {"$tensor": self.plain(list(v.shape), depth + 1), "dtype": str(getattr(v, "dtype", ""))}
        enum_name = getattr(v, "name", None)
        if isinstance(enum_name, str) and hasattr(v, "value"):
            return {"$enum": f"{name}.{enum_name}"}
        return {"$repr": name}

    # ------------------------------------------------------------------------------------------- frames
    def user_frames(self, frame) -> list[list]:
        """[file, line, function, jit_body] for the frames outside pypto and this probe, innermost first.

        ``jit_body``: a statement of a kernel body that pypto's parser evaluates. Its expressions are compiled with
        the kernel's file name and run with empty globals (code name ``<module>``); statements pypto handles itself
        (``out[...] = y`` becomes ``pypto.assemble`` called from the parser) are found through the parser frames
        this probe wraps, so they too are named by their own line. Nested statements give the loop nesting."""
        out: list[list] = []
        f = frame
        stmts = self.stmt_frames
        while f is not None and len(out) < _MAX_STACK:
            code = f.f_code
            name = code.co_filename
            if stmts and id(f) in stmts:
                file, line = stmts[id(f)]
                if not out or out[-1][0] != file or out[-1][1] != line:
                    out.append([file, line, "<jit>", True])
            elif not (name.startswith(self.pypto_dir) or name == self.this_file or name.startswith("<")):
                jit_body = code.co_name == "<module>" and "__name__" not in f.f_globals
                if not (out and out[-1][0] == name and out[-1][1] == f.f_lineno):
                    out.append([name, f.f_lineno, "<jit>" if jit_body else code.co_name, jit_body])
            f = f.f_back
        return out

    # ------------------------------------------------------------------------------------------- records
    def call(self, api: str, args: tuple, kwargs: dict, frame, result=None, has_result: bool = False) -> None:
        stack = self.user_frames(frame)
        origin = "direct"
        caller = frame.f_code.co_filename if frame is not None else ""
        if caller.startswith(self.pypto_dir):
            # pypto called it on the user's behalf: the jit applying its option dicts, a slice becoming a view
            origin = "pypto"
        kernel = self.active[-1] if self.active else None
        pargs = [self.plain(a) for a in args]
        pkw = {k: self.plain(v) for k, v in kwargs.items()}
        site = stack[0] if stack else ["", 0, "", False]
        entry = {"api": api, "file": site[0], "line": site[1], "function": site[2], "jit_body": site[3],
                 "kernel": kernel, "origin": origin, "args": pargs, "kwargs": pkw}
        if has_result and api in _VIEW_APIS:
            shape = getattr(result, "shape", None)
            if shape is not None:
                entry["result_shape"] = self.plain(list(shape))
        if self.unroll:
            entry["unroll"] = [list(u) for u in self.unroll]
        key = (api, site[0], site[1], kernel, origin, json.dumps([pargs, pkw, entry.get("result_shape"),
                                                                  entry.get("unroll")], sort_keys=True, default=str))
        rec = self.sites.get(key)
        if rec is None:
            if len(self.sites) >= _MAX_SITES:
                return
            entry["count"] = 0
            entry["stack"] = stack
            if api in _TILE_APIS and self.counts_ops:
                entry["ops"] = 0
            rec = self.sites[key] = entry
        rec["count"] += 1
        if api in _TILE_APIS:
            self.in_force[_TILE_APIS[api]] = rec
        elif api == "assemble":
            self.op("assemble", args)
        self.dirty = True

    def op(self, name: str, args: "tuple | list" = (), kwargs: "dict | None" = None) -> None:
        """An operation was built: it counts for the tile of its kind in force (global state in pypto, like the tile
        itself: a tile set in a helper stays in force after it returns); a vector operation's tensors widen the
        tile's ``extent``; the first matmul under a cube tile leaves its operands' shapes and transposes (what M, K
        and N the tile cuts)."""
        cube = name in _CUBE_OPS
        rec = self.in_force.get("cube" if cube else "vec")
        if rec is not None and "ops" in rec:
            rec["ops"] += 1
            if not cube:
                _widen(rec.setdefault("extent", {}), args)
            elif name == "matmul" and "operands" not in rec:
                _operands(rec, args, kwargs or {})

    def kernel_key(self, wrapper) -> str:
        fn = getattr(wrapper, "_original_func", None)
        code = getattr(fn, "__code__", None)
        if code is None:
            return f"?:{id(wrapper)}"
        return f"{code.co_filename}:{code.co_firstlineno}:{getattr(fn, '__qualname__', code.co_name)}"

    def kernel(self, wrapper) -> dict:
        key = self.kernel_key(wrapper)
        k = self.kernels.get(key)
        if k is None:
            fn = getattr(wrapper, "_original_func", None)
            code = getattr(fn, "__code__", None)
            k = self.kernels[key] = {
                "key": key, "name": getattr(fn, "__name__", "?"), "qualname": getattr(fn, "__qualname__", "?"),
                "file": code.co_filename if code else "", "line": code.co_firstlineno if code else 0,
                "calls": 0, "compiled": None, "ran": False, "error": None, "inputs": [], "options": {},
                "called_from": [],
            }
        return k

    def kernel_call_begin(self, wrapper, args, kwargs, frame) -> str:
        k = self.kernel(wrapper)
        k["calls"] += 1
        inputs = [self.plain(a) for a in args] + [{"$kw": n, "value": self.plain(v)} for n, v in kwargs.items()]
        if inputs not in k["inputs"] and len(k["inputs"]) < 8:
            k["inputs"].append(inputs)
        where = self.user_frames(frame)
        if where and where not in k["called_from"] and len(k["called_from"]) < 8:
            k["called_from"].append(where)
        self.active.append(k["key"])
        self.dirty = True
        return k["key"]

    def kernel_call_end(self, wrapper, key: str, error: BaseException | None) -> None:
        k = self.kernels.get(key)
        if self.active and self.active[-1] == key:
            self.active.pop()
        if k is None:
            return
        opts = {}
        for group in ("runtime_options", "pass_options", "debug_options", "host_options", "codegen_options",
                      "verify_options"):
            value = getattr(wrapper, f"_{group}", None)
            if value is not None:
                opts[group] = self.plain(value)
        k["options"] = opts
        if error is None:
            k["ran"] = True
        else:
            k["error"] = f"{type(error).__name__}: {str(error)[:_MAX_STR]}"
        self.dirty = True

    def compiled(self, wrapper, ok: bool) -> None:
        k = self.kernel(wrapper)
        if ok or k["compiled"] is None:
            k["compiled"] = ok
        self.dirty = True

    def fault(self, where: str) -> None:
        exc = sys.exc_info()[1]
        if len(self.faults) < 20:
            self.faults.append(f"{where}: {type(exc).__name__}: {str(exc)[:_MAX_STR]}")

    # ------------------------------------------------------------------------------------------- output
    def snapshot(self) -> dict:
        modules = []
        for name, mod in list(sys.modules.items()):
            f = getattr(mod, "__file__", None)
            if isinstance(f, str):
                modules.append(f)
        return {
            "version": VERSION, "pid": os.getpid(), "argv": list(sys.argv), "cwd": self.cwd,
            "python": sys.executable, "pypto_version": self.pypto_version, "started": self.started,
            "written": time.time(), "instrumented": self.instrumented, "faults": self.faults,
            "self_s": round(self.self_s, 6),
            "sys_path": [p for p in sys.path if os.path.abspath(p or ".") != self.hook_dir],
            "modules": sorted(set(modules)),
            "kernels": list(self.kernels.values()),
            "calls": list(self.sites.values()),
            "traced": {f: sorted(lines) for f, lines in self.traced.items()},
        }

    def write(self) -> None:
        """Atomic: a reader never sees half a record (temporary file, then rename)."""
        if not self.instrumented:
            return  # pypto never imported in this process: nothing to say (pypto's helper scripts, python3 -c …)
        try:
            data = json.dumps(self.snapshot(), default=str)
            tmp = f"{self.path}.tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(data)
            os.replace(tmp, self.path)
            self.dirty = False
        except Exception:
            pass


_P: _Probe | None = None


def _timed(method):
    """Adds the method's wall time to the probe's own cost (``self_s`` in the record: what the probe took)."""

    @functools.wraps(method)
    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.self_s += time.perf_counter() - t0

    return timed


for _name in ("call", "kernel_call_begin", "kernel_call_end", "compiled", "write"):
    setattr(_Probe, _name, _timed(getattr(_Probe, _name)))


# ----------------------------------------------------------------------------------------------- wrappers


def _unroll_variants(p: "_Probe", gen, frame):
    """``loop_unroll`` traces its body once per unroll factor (``(idx, factor)`` per variant); while the body of one
    variant is traced, every recorded call carries that variant (file, line of the loop, factor). Whether a variant
    executes at the test's shapes is the trip count of the ``loop`` pypto opens for it (recorded as its own call)."""
    site = p.user_frames(frame)[:1]
    where = [site[0][0], site[0][1]] if site else ["", 0]
    for item in gen:
        factor = item[1] if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], int) else None
        p.unroll.append([*where, factor])
        try:
            yield item
        finally:
            p.unroll.pop()


def _wrap_function(api: str, fn):
    if getattr(fn, "__pypto_tune_probe__", False):
        return fn
    recorded = _wrap_call(api, fn)
    if api != "loop_unroll":
        return recorded

    @functools.wraps(fn)
    def probe_unroll(*args, **kwargs):
        gen = recorded(*args, **kwargs)  # recorded as any other call; its variants on top
        p = _P
        if p is None or p.depth:
            return gen
        try:
            return _unroll_variants(p, gen, sys._getframe(1))
        except Exception:
            p.fault("loop_unroll variants")
            return gen

    probe_unroll.__pypto_tune_probe__ = True
    return probe_unroll


def _wrap_call(api: str, fn):
    records_result = api in _VIEW_APIS

    @functools.wraps(fn)
    def probe_wrapper(*args, **kwargs):
        p = _P
        if p is None or p.depth:
            return fn(*args, **kwargs)  # inside another recorded call (set_debug_options → set_options)
        p.depth += 1
        try:
            if not records_result:
                try:
                    p.call(api, args, kwargs, sys._getframe(1))
                except Exception:
                    p.fault(api)
                return fn(*args, **kwargs)
            result = fn(*args, **kwargs)
            try:
                p.call(api, args, kwargs, sys._getframe(1), result, True)
            except Exception:
                p.fault(api)
            return result
        finally:
            p.depth -= 1

    probe_wrapper.__pypto_tune_probe__ = True
    return probe_wrapper


def _widen(extent: dict, args: "tuple | list") -> None:
    """``extent``: rank (as text) -> the largest extent of each dimension over the tensors the vector operations under
    one tile worked on (null: a dimension only known at run time). A tile dimension at or past it is clamped to the
    data, so two tiles that agree up to it run alike (domain H.1)."""
    for a in args:
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            shape = getattr(t, "shape", None)
            if shape is None:
                continue
            if not isinstance(shape, (list, tuple)):
                extent["?"] = []  # a tensor whose shape cannot be read: no bound can be claimed (the reader drops it)
                continue
            dims = [d if type(d) is int else None for d in shape]
            key = str(len(dims))
            old = extent.get(key)
            extent[key] = dims if old is None else [None if x is None or y is None else max(x, y)
                                                    for x, y in zip(old, dims)]


def _operands(rec: dict, args: "tuple | list", kwargs: dict) -> None:
    """A matmul's A and B shapes (null: a dimension only known at run time) and its a_trans / b_trans."""
    shapes = []
    for t in list(args)[:2]:
        shape = getattr(t, "shape", None)
        if not isinstance(shape, (list, tuple)):
            return
        shapes.append([d if type(d) is int else None for d in shape])
    if len(shapes) == 2:
        rec["operands"] = {"a": shapes[0], "b": shapes[1], "a_trans": bool(kwargs.get("a_trans")),
                           "b_trans": bool(kwargs.get("b_trans"))}


def _count_operations(p: "_Probe") -> None:
    """Every operation pypto builds passes ``_op_wrapper``'s wrapper, which calls ``set_source_location()`` (looked
    up in that module at call time) with the operation function in its closure as ``func``."""
    mod = sys.modules.get("pypto._op_wrapper")
    original = getattr(mod, "set_source_location", None) if mod is not None else None
    if original is None or getattr(original, "__pypto_tune_probe__", False):
        return

    @functools.wraps(original)
    def probe_op(level=1, filename=None, lineno=None):
        q = _P
        if q is not None:
            try:
                caller = sys._getframe(1).f_locals
                q.op(getattr(caller.get("func"), "__name__", ""), caller.get("args") or (), caller.get("kwargs"))
            except Exception:
                q.fault("count an operation")
        # one frame more between the original and the operation's caller: the location pypto records (and writes
        # into program.json) must stay the user's line
        return original(level + 1, filename, lineno)

    probe_op.__pypto_tune_probe__ = True
    mod.set_source_location = probe_op
    p.counts_ops = True
    p.instrumented.append("pypto._op_wrapper.set_source_location")


def _wrap_jit(cls) -> None:
    call, compile_ = cls.__call__, getattr(cls, "compile", None)

    @functools.wraps(call)
    def probe_jit_call(self, *args, **kwargs):
        p = _P
        key = None
        try:
            key = p.kernel_call_begin(self, args, kwargs, sys._getframe(1))
        except Exception:
            p.fault("jit.__call__")
        try:
            result = call(self, *args, **kwargs)
        except BaseException as exc:
            try:
                if key is not None:
                    p.kernel_call_end(self, key, exc)
                p.write()
            except Exception:
                pass
            raise
        try:
            if key is not None:
                p.kernel_call_end(self, key, None)
            p.write()  # after every kernel call: a process that dies later still leaves what it did
        except Exception:
            p.fault("jit.__call__ end")
        return result

    cls.__call__ = probe_jit_call
    if compile_ is not None:
        @functools.wraps(compile_)
        def probe_jit_compile(self, *args, **kwargs):
            try:
                result = compile_(self, *args, **kwargs)
            except BaseException:
                try:
                    _P.compiled(self, False)
                except Exception:
                    pass
                raise
            try:
                _P.compiled(self, True)
            except Exception:
                _P.fault("jit.compile")
            return result

        cls.compile = probe_jit_compile


def _wrap_parser(cls) -> None:
    """Record the kernel-body statements pypto's parser traces: which branches of a kernel the test entered."""
    import ast

    visit = cls.visit

    @functools.wraps(visit)
    def probe_visit(self, node):
        if not isinstance(node, ast.stmt):
            return visit(self, node)
        p = _P
        key = None
        t0 = time.perf_counter()
        try:
            source = self.diag.source.source_name
            lines = p.traced.get(source)
            if lines is None:
                lines = p.traced[source] = set()
            lines.add(node.lineno)
            key = id(sys._getframe())
            p.stmt_frames[key] = (source, node.lineno)
        except Exception:
            p.fault("parser.visit")
        p.self_s += time.perf_counter() - t0
        try:
            return visit(self, node)
        finally:
            if key is not None:
                p.stmt_frames.pop(key, None)

    cls.visit = probe_visit


def instrument() -> None:
    """Wrap pypto's tiling and option APIs. Runs once, right after ``import pypto`` finished."""
    p = _P
    if p is None or p.instrumented:
        return
    t0 = time.perf_counter()
    try:
        _instrument(p)
    finally:
        p.self_s += time.perf_counter() - t0


def _instrument(p: "_Probe") -> None:
    pypto = sys.modules.get("pypto")
    if pypto is None:
        return
    p.pypto_dir = os.path.dirname(os.path.abspath(pypto.__file__)) + os.sep
    try:
        from importlib import metadata

        p.pypto_version = metadata.version("pypto")
    except Exception:
        p.pypto_version = getattr(pypto, "__version__", None)
    originals: dict[int, object] = {}
    for modname, attrs in _FUNCTIONS.items():
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        for attr in attrs:
            fn = getattr(mod, attr, None)
            if fn is None or not callable(fn):
                continue
            try:
                # one wrapper per original function, shared by every module that re-exports it
                wrapped = originals.get(id(fn))
                if wrapped is None:
                    wrapped = originals[id(fn)] = _wrap_function(attr, fn)
                setattr(mod, attr, wrapped)
                p.instrumented.append(f"{modname}.{attr}")
            except Exception:
                p.fault(f"wrap {modname}.{attr}")
    tensor = getattr(pypto, "Tensor", None)
    for attr in _TENSOR_METHODS:
        fn = getattr(tensor, attr, None) if tensor is not None else None
        if fn is None:
            continue
        try:
            setattr(tensor, attr, _wrap_function(f"Tensor.{attr}", fn))
            p.instrumented.append(f"pypto.Tensor.{attr}")
        except Exception:
            p.fault(f"wrap Tensor.{attr}")
    try:
        _count_operations(p)
    except Exception:
        p.fault("count operations")
    try:
        from pypto.frontend.parser.entry import JitCallableWrapper

        _wrap_jit(JitCallableWrapper)
        p.instrumented.append("JitCallableWrapper")
    except Exception:
        p.fault("wrap JitCallableWrapper")
    try:
        from pypto.frontend.parser.parser import Parser

        _wrap_parser(Parser)
        p.instrumented.append("Parser.visit")
    except Exception:
        p.fault("wrap Parser.visit")
    p.dirty = True


class _AfterPypto:
    """A meta-path finder that lets ``pypto`` import normally and instruments it the moment its import finished."""

    def find_spec(self, name, path=None, target=None):
        if name != "pypto":
            return None
        import importlib.util

        try:
            sys.meta_path.remove(self)  # once: the rest of the import system finds pypto as it would without us
        except ValueError:
            pass
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)  # pypto's own import, exceptions and all
            try:
                instrument()
            except Exception:
                if _P is not None:
                    _P.fault("instrument")

        loader.exec_module = exec_module
        return spec


def install(hook_dir: str) -> bool:
    """Called by the hook's sitecustomize when the process first looks for ``pypto``. Does nothing without
    ``$PYPTO_TUNE_PROBE_DIR``. Instruments at once if pypto is already imported."""
    global _P
    out_dir = os.environ.get(DIR_ENV)
    if not out_dir or _P is not None:
        return False
    _P = _Probe(os.path.abspath(out_dir), os.path.abspath(hook_dir))
    import atexit

    atexit.register(_at_exit)
    if "pypto" in sys.modules:
        instrument()
        return False
    return True


def after_pypto_finder() -> "_AfterPypto":
    """The finder that imports pypto as it would be imported anyway, and instruments it once that finished."""
    return _AfterPypto()


def _at_exit() -> None:
    p = _P
    if p is not None and (p.dirty or not os.path.exists(p.path)):
        p.write()
