"""Launch one specialisation of a ``@triton.jit`` kernel without Triton's JIT binder on later calls.

What this relies on in Triton (launch convention, specialisation, addresses) and what a caller must keep:
docs/triton_launch.md.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any, Callable, Optional, Sequence

from .... import env

__all__ = ["FastLaunch", "fast_launch_supported", "VERIFIED_TRITON"]

# (major, minor) versions whose launch convention was read (docs/triton_launch.md).
VERIFIED_TRITON = frozenset({(3, 3), (3, 4), (3, 5), (3, 6), (3, 7), (3, 9)})
# Backends whose argument specialisation is only dtype + 16-byte divisibility (BaseBackend's).
_BACKENDS = ("cuda", "xpu")

# The binder's launch statement, whitespace removed, per hook style (docs/triton_launch.md gives the lines).
_LAUNCH_SRC = {
    "knobs": "kernel.run(grid_0,grid_1,grid_2,stream,kernel.function,kernel.packed_metadata,launch_metadata,"
    "knobs.runtime.launch_enter_hook,knobs.runtime.launch_exit_hook,*bound_args.values())",
    "class": "kernel.run(grid_0,grid_1,grid_2,stream,kernel.function,kernel.packed_metadata,launch_metadata,"
    "self.CompiledKernel.launch_enter_hook,self.CompiledKernel.launch_exit_hook,*bound_args.values())",
}
_METADATA_SRC = "launch_metadata=kernel.launch_metadata(grid,stream,*bound_args.values())"


@functools.lru_cache(maxsize=None)
def _static_support() -> tuple[bool, str, Optional[str]]:
    """(ok, reason, hook style) for the installed Triton, independent of the interpreter switch."""
    try:
        import triton
        from triton.compiler import CompiledKernel
        from triton.runtime.jit import JITFunction
    except Exception as e:  # noqa: BLE001
        return False, f"triton not importable: {type(e).__name__}: {e}", None
    version = getattr(triton, "__version__", "?")
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m or (int(m.group(1)), int(m.group(2))) not in VERIFIED_TRITON:
        return False, f"triton {version}: its launch API was not verified (verified: 3.3-3.7, 3.9)", None
    try:  # the installed binder must launch exactly the way FastLaunch mirrors
        run_src = re.sub(r"\s+", "", inspect.getsource(JITFunction.run))
        ck_src = inspect.getsource(CompiledKernel)
    except Exception as e:  # noqa: BLE001
        return False, f"triton {version}: cannot read JITFunction.run's source to verify it ({e})", None
    style = next((s for s, src in _LAUNCH_SRC.items() if src in run_src), None)
    if style is None or _METADATA_SRC not in run_src:
        return False, f"triton {version}: JITFunction.run does not launch as expected (API changed?)", None
    if "self.packed_metadata" not in ck_src or "def launch_metadata" not in ck_src:
        return False, f"triton {version}: CompiledKernel lacks packed_metadata / launch_metadata", None
    return True, f"triton {version}: launcher called directly ({style} hooks)", style


def fast_launch_supported() -> tuple[bool, str]:
    """Whether FastLaunch can skip the binder here, and why (not): (ok, reason)."""
    if not env.flag(env.FAST_LAUNCH):
        return False, f"{env.FAST_LAUNCH}=0: fast launch disabled"
    if env.triton_interpreting():
        return False, "TRITON_INTERPRET=1: the interpreter has no compiled kernel; normal launch path"
    ok, reason, _ = _static_support()
    return ok, reason


def _kernel_params(fn) -> list[tuple[str, bool, Any]]:
    """(name, is_constexpr, default) per parameter. JITFunction.params (3.3+) or the Python signature."""
    params = getattr(fn, "params", None)
    if params is not None and all(hasattr(p, "is_constexpr") for p in params):
        return [(p.name, bool(p.is_constexpr), p.default) for p in params]
    inner = getattr(fn, "fn", fn)
    out = []
    for p in inspect.signature(inner).parameters.values():
        out.append((p.name, "constexpr" in str(p.annotation), p.default))
    return out


_EMPTY = inspect.Parameter.empty
# Per argument kind: how the generated guard checks a later call against the first one.
_KIND_STATIC, _KIND_FLOAT, _KIND_TENSOR = "s", "f", "t"
_launcher_code_cache: dict[tuple, Callable] = {}


def _launch_lines(hk: str, full: str) -> list[str]:
    """The generated closures' common end: stream, hooks, and the launcher call with ``full`` (source text)."""
    return [
        "        stream = get_stream(dev)",
        f"        enter = {hk}.launch_enter_hook",
        f"        leave = {hk}.launch_exit_hook",
        # an absent hook or an empty HookChain does nothing: skip building the launch metadata
        "        if (enter is None or (enter.__class__ is _HC and not enter.calls)) and \\",
        "                (leave is None or (leave.__class__ is _HC and not leave.calls)):",
        f"            run(gx, gy, gz, stream, function, meta, None, None, None, {full})",
        "        else:  # hooks installed (a profiler): exactly the binder's call",
        f"            full = ({full},)",
        "            run(gx, gy, gz, stream, function, meta, lmeta(grid, stream, *full), enter, leave, *full)",
        "    return launch",
    ]


def _make_factory(kinds: tuple[str, ...], layout: tuple[tuple[str, int], ...], check: bool, style: str):
    """Compile (once per argument structure) a factory for the fast launch closure.

    ``kinds``: one kind per runtime argument; ``layout``: the kernel's parameters in order, each
    ("a", i) for runtime argument i or ("c", j) for constant j. The generated closure checks the guard,
    reads the device, stream and hooks, and calls the launcher with every parameter inline.
    """
    key = (kinds, layout, check, style)
    factory = _launcher_code_cache.get(key)
    if factory is not None:
        return factory
    n = len(kinds)
    argl = ", ".join(f"a{i}" for i in range(n))
    conds, unpack = [], []
    for i, k in enumerate(kinds):
        if k == _KIND_TENSOR:
            unpack += [f"t{i}", f"d{i}", f"al{i}"]
            conds.append(f"a{i}.__class__ is t{i} and a{i}.dtype is d{i} and ((a{i}.data_ptr() & 15) == 0) is al{i}")
        elif k == _KIND_FLOAT:
            conds.append(f"a{i}.__class__ is float")
        else:  # int / bool / None: identical value and type
            unpack += [f"t{i}", f"v{i}"]
            conds.append(f"a{i}.__class__ is t{i} and a{i} == v{i}")
    guard = " and ".join(conds) if (check and conds) else "True"
    full = ", ".join(f"a{j}" if src == "a" else f"c{j}" for src, j in layout)
    nconst = sum(1 for src, _ in layout if src == "c")
    hk = "_H.runtime" if style == "knobs" else "_H"
    lines = [
        "def factory(run, function, meta, grid, get_device, device, get_stream, _H, _HC, slow, lmeta, E, C):",
        f"    {''.join(x + ', ' for x in unpack)}= E" if unpack else "    pass",
        f"    {''.join(f'c{j}, ' for j in range(nconst))}= C" if nconst else "    pass",
        "    gx, gy, gz = grid",
        f"    def launch({argl}):",
        f"        if not ({guard}):",
        f"            return slow(({argl}{',' if n == 1 else ''}))",
        "        dev = get_device()",
        "        if dev != device:",
        f"            return slow(({argl}{',' if n == 1 else ''}))",
        *_launch_lines(hk, full),
    ]
    ns: dict[str, Any] = {}
    exec(compile("\n".join(lines), f"<FastLaunch {len(layout)} params>", "exec"), ns)  # noqa: S102
    factory = ns["factory"]
    _launcher_code_cache[key] = factory
    return factory


class _NoHookChain:  # stands in for knobs.HookChain on Triton versions without it
    pass


class FastLaunch:
    """Launch one specialisation of a @triton.jit kernel without the JIT binder on later calls.

    ``FastLaunch(fn, grid, constexprs, num_warps, num_stages)(*args)`` with ``args`` = the kernel's
    non-constexpr parameters in declaration order (every one of them), ``constexprs`` = the constexpr
    parameters by name (those with defaults may be left out). The first call goes through
    ``fn[grid](...)`` and keeps the CompiledKernel it returns; later calls invoke its launcher directly
    while the arguments keep the first call's specialisation (docs/triton_launch.md); ``check=False`` trusts the
    caller to guarantee that. ``reason`` says why the fast path is off (None while it is on);
    ``slow_calls`` counts calls that took the normal path.
    """

    __slots__ = (
        "fn",
        "grid",
        "constexprs",
        "num_warps",
        "num_stages",
        "check",
        "reason",
        "slow_calls",
        "_names",
        "_params",
        "_launch",
        "_disabled",
        "kernel",
        "_misses",
        "options",
        "_bound",
        "_recipes",
    )

    def __init__(
        self,
        fn,
        grid: tuple[int, int, int],
        constexprs: dict[str, object],
        num_warps: int,
        num_stages: int,
        *,
        check: bool = True,
        options: Optional[dict] = None,
    ):
        grid = tuple(int(g) for g in grid)
        if not 1 <= len(grid) <= 3:
            raise ValueError(f"grid must have 1 to 3 dimensions, got {grid}")
        self.grid = grid + (1,) * (3 - len(grid))
        self.fn = fn
        self.constexprs = dict(constexprs)
        self.num_warps, self.num_stages = int(num_warps), int(num_stages)
        # other compile options, e.g. Intel's grf_mode; the compiled kernel carries them on the fast path
        self.options = dict(options or {})
        self.check = bool(check)
        self._params = _kernel_params(fn)
        names = [p[0] for p in self._params]
        unknown = sorted(set(self.constexprs) - set(names))
        if unknown:
            raise TypeError(f"FastLaunch: {unknown} are not parameters of {getattr(fn, '__name__', fn)}")
        missing = [n for n, is_c, d in self._params if is_c and n not in self.constexprs and d is _EMPTY]
        if missing:
            raise TypeError(f"FastLaunch: constexpr parameters {missing} need a value in constexprs")
        # runtime arguments: every parameter that is neither given in constexprs nor a constexpr (a
        # constexpr left out keeps its default, on both paths)
        self._names = tuple(n for n, is_c, _ in self._params if n not in self.constexprs and not is_c)
        self.reason: Optional[str] = "not launched yet"
        self.slow_calls = 0
        self.kernel = None
        self._launch: Optional[Callable] = None
        self._disabled = False
        self._misses = 0
        self._bound: dict[str, Any] = {}  # what bind() needs from arming
        self._recipes: dict[tuple, tuple] = {}  # bind(): per set of fixed indices

    # -- the normal path ----------------------------------------------------------------------------
    def _slow(self, args: tuple):
        if len(args) != len(self._names):
            raise TypeError(f"FastLaunch: expected {len(self._names)} runtime arguments {self._names}, got {len(args)}")
        self.slow_calls += 1
        return self.fn[self.grid](
            **dict(zip(self._names, args)),
            **self.constexprs,
            num_warps=self.num_warps,
            num_stages=self.num_stages,
            **self.options,
        )

    def _miss(self, args: tuple):
        """The guard refused a call (its arguments' specialisation differs from the armed one): run it
        through the binder, and after a second such call re-arm on the new specialisation, so a launcher
        kept across steps follows a changed layout instead of staying on the slow path."""
        kernel = self._slow(args)
        self._misses += 1
        if self._misses >= 2 and not self._disabled:
            self._misses = 0
            try:
                self._arm(args, kernel)
            except Exception as e:  # noqa: BLE001 - an API surprise must never break the launch
                self._launch, self._disabled = None, True
                self.reason = f"fast path off: {type(e).__name__}: {e}"
        return kernel

    def __call__(self, *args) -> None:
        launch = self._launch
        if launch is not None:
            launch(*args)
            return
        kernel = self._slow(args)
        if not self._disabled:
            try:
                self._arm(args, kernel)
            except Exception as e:  # noqa: BLE001 - an API surprise must never break the launch
                self._launch, self._disabled = None, True
                self.reason = f"fast path off: {type(e).__name__}: {e}"

    @property
    def armed(self) -> bool:
        return self._launch is not None

    @property
    def takes_addresses(self) -> bool:
        """Armed and unchecked: ``bind`` can fix arguments as device addresses (docs/triton_launch.md)."""
        return self._launch is not None and not self.check

    def bind(self, fixed: dict[int, Any], slots: Optional[dict[int, int]] = None) -> Callable:
        """A launch closure with runtime arguments ``fixed`` {index: value} baked in (tensors as their device
        addresses); it takes the other runtime arguments, in order, tensors or addresses.

        ``slots`` {index: k}: arguments read from the closure's first parameter ``S`` (a tuple) as ``S[k]``
        on every call instead: the per-step device addresses of a closure kept across steps (the provider
        passes each step's page table / lengths addresses; its keys fix their dtype and alignment).

        For a per-step plan whose layers differ only in a few pointers: fewer Python arguments per call and
        no per-pointer conversion in the launcher. Only on an armed, unchecked FastLaunch. A call made while
        another device is current raises (the baked addresses belong to the armed device; the binder
        cannot be used with addresses in place of tensors).
        """
        if not self.takes_addresses:
            raise RuntimeError(f"FastLaunch.bind needs an armed, unchecked launch ({self.reason or 'checked'})")
        slots = slots or {}
        which = (tuple(sorted(fixed)), tuple(sorted(slots.items())))
        recipe = self._recipes.get(which)
        if recipe is None:  # once per FastLaunch and set of fixed indices; per step only the values below
            recipe = self._recipes[which] = self._bind_recipe(*which)
        factory, base, arg_slots = recipe
        vals = list(base)
        for slot, i in arg_slots:
            v = fixed[i]
            vals[slot] = v.data_ptr() if hasattr(v, "data_ptr") else v
        b = self._bound
        return factory(
            b["get_device"],
            b["device"],
            b["get_stream"],
            b["hooks"],
            b["hook_chain"],
            b["run"],
            b["function"],
            b["meta"],
            b["lmeta"],
            self.grid,
            *vals,
        )

    @property
    def names(self) -> tuple[str, ...]:
        """The runtime parameters' names, in the order a call passes them."""
        return self._names

    def call_named(self, args: dict[str, Any]) -> None:
        """Launch with every runtime argument given by name (the checked path's call)."""
        self(*[args[n] for n in self._names])

    def bind_named(self, args: dict[str, Any], free: Sequence[str], slots: Optional[dict[str, int]] = None) -> Callable:
        """``bind`` by parameter name: every runtime argument of ``args`` is baked in except those named in
        ``free`` (the closure takes them, in parameter order) and ``slots`` {name: k} (read from ``S[k]``)."""
        index = {n: i for i, n in enumerate(self._names)}
        unknown = sorted((set(free) | set(slots or ())) - set(index))
        if unknown:
            raise KeyError(
                f"FastLaunch.bind_named: {unknown} are not runtime parameters of "
                f"{getattr(self.fn, '__name__', self.fn)}"
            )
        skip = set(free) | set(slots or ())
        fixed = {index[n]: args[n] for n in self._names if n not in skip}
        return self.bind(fixed, {index[n]: k for n, k in (slots or {}).items()})

    def _bind_recipe(self, which: tuple[int, ...], slots: tuple[tuple[int, int], ...] = ()):
        """(factory, constant values with holes, [(hole, runtime index)]) for ``bind`` with these fixed
        indices and step slots."""
        n = len(self._names)
        slot_of = dict(slots)
        if any(not 0 <= i < n for i in (*which, *slot_of)) or set(which) & set(slot_of):
            raise IndexError(
                f"FastLaunch.bind: indices {list(which)} / slots {sorted(slot_of)} out of range for {n} "
                "runtime arguments, or overlapping"
            )
        fixed = set(which)
        free = [i for i in range(n) if i not in fixed and i not in slot_of]
        b = self._bound
        full, names, base, arg_slots = [], [], [], []
        index = {name: i for i, name in enumerate(self._names)}
        for name, _, default in self._params:  # the launcher's positional layout, constexprs included
            i = index.get(name)
            if i is not None and i in slot_of:
                full.append(f"S[{slot_of[i]}]")
                continue
            if i is not None and i not in fixed:
                full.append(f"a{i}")
                continue
            c = f"k{i}" if i is not None else f"k_{name}"
            full.append(c)
            names.append(c)
            if i is not None:
                arg_slots.append((len(base), i))
                base.append(None)
            else:
                base.append(self.constexprs[name] if name in self.constexprs else default)
        key = ("bind", tuple(full), tuple(free), bool(slot_of), b["style"])
        factory = _launcher_code_cache.get(key)
        if factory is None:  # generated once per argument structure
            argl = ", ".join((["S"] if slot_of else []) + [f"a{i}" for i in free])
            hk = "_H.runtime" if b["style"] == "knobs" else "_H"
            lines = [
                "def factory(get_device, device, get_stream, _H, _HC, run, function, meta, lmeta, grid, "
                + "".join(f"{c}, " for c in names)
                + "):",
                "    gx, gy, gz = grid",
                f"    def launch({argl}):",
                "        dev = get_device()",
                "        if dev != device:",
                "            raise RuntimeError(f'vllm-xpu-attn: device {dev} is current but this step was planned on '",  # noqa: E501
                "                               f'device {device}; keep that device current while its layers run')",
                *_launch_lines(hk, ", ".join(full)),
            ]
            ns: dict[str, Any] = {}
            exec(compile("\n".join(lines), f"<FastLaunch.bind {len(free)} free>", "exec"), ns)  # noqa: S102
            factory = _launcher_code_cache[key] = ns["factory"]
        return factory, tuple(base), tuple(arg_slots)

    # -- building the fast path from the first call -------------------------------------------------
    def _arm(self, args: tuple, kernel) -> None:
        ok, why = fast_launch_supported()
        if not ok:
            self.reason, self._disabled = why, True
            return
        from triton.compiler import CompiledKernel
        from triton.runtime.driver import driver
        from triton.runtime.jit import JITFunction

        fn = self.fn
        if not isinstance(fn, JITFunction):
            self.reason, self._disabled = f"{type(fn).__name__} is not a plain JITFunction", True
            return
        if getattr(fn, "pre_run_hooks", None):
            self.reason, self._disabled = "the kernel has pre_run_hooks, which must see every call", True
            return
        if kernel is None:  # e.g. a jit_cache_hook skipped the compile: try again next call
            self.reason = "the binder returned no compiled kernel (yet)"
            return
        if hasattr(kernel, "result") and not isinstance(kernel, CompiledKernel):
            kernel = kernel.result()  # async compile (3.5+) hands back a future
        if not isinstance(kernel, CompiledKernel):
            self.reason, self._disabled = f"the binder returned {type(kernel).__name__}, not a CompiledKernel", True
            return
        backend = getattr(getattr(kernel.metadata, "target", None), "backend", None)
        if backend not in _BACKENDS:
            self.reason, self._disabled = f"backend {backend!r}: its argument specialisation is not verified", True
            return

        import torch

        kinds, expected = [], []
        for name, a in zip(self._names, args):
            t = type(a)
            if isinstance(a, torch.Tensor):
                kinds.append(_KIND_TENSOR)
                expected += [t, a.dtype, (a.data_ptr() & 15) == 0]
            elif t is float:
                kinds.append(_KIND_FLOAT)
            elif t is int or t is bool or a is None:
                kinds.append(_KIND_STATIC)
                expected += [t, a]
            else:
                self.reason, self._disabled = (
                    f"argument {name} is a {t.__name__}: only tensors, ints, floats, bools and None take the fast path",
                    True,
                )
                return
        layout, consts, pos = [], [], 0
        for name, _, default in self._params:
            if name in self._names:
                layout.append(("a", pos))
                pos += 1
            else:
                layout.append(("c", len(consts)))
                consts.append(self.constexprs[name] if name in self.constexprs else default)
        _, _, style = _static_support()
        if style == "knobs":
            from triton import knobs as hooks_owner

            hook_chain = getattr(hooks_owner, "HookChain", _NoHookChain)
        else:
            hooks_owner, hook_chain = CompiledKernel, _NoHookChain
        drv = driver.active
        get_device = drv.get_current_device
        device = get_device()  # the device the binder just launched on
        # torch's own current-device query when it names the device Triton's query returned (a cheaper call)
        fast_dev = getattr(torch._C, "_cuda_getDevice", None) if backend == "cuda" else None
        try:
            if fast_dev is not None and fast_dev() == device:
                get_device = fast_dev
        except Exception:  # noqa: BLE001 - e.g. a CPU-only torch: keep Triton's own query
            pass
        run = kernel.run  # 3.3: materialised by __getattribute__ -> _init_handles(); 3.4+: a property
        function, meta = kernel.function, kernel.packed_metadata
        if function is None or meta is None:
            self.reason, self._disabled = "the compiled kernel has no loaded function", True
            return
        factory = _make_factory(tuple(kinds), tuple(layout), self.check, style)
        self._launch = factory(
            run,
            function,
            meta,
            self.grid,
            get_device,
            device,
            drv.get_current_stream,
            hooks_owner,
            hook_chain,
            self._miss,
            kernel.launch_metadata,
            tuple(expected),
            tuple(consts),
        )
        self._bound = dict(
            run=run,
            function=function,
            meta=meta,
            get_device=get_device,
            device=device,
            get_stream=drv.get_current_stream,
            hooks=hooks_owner,
            hook_chain=hook_chain,
            lmeta=kernel.launch_metadata,
            style=style,
        )
        self.kernel = kernel
        self.reason = None
