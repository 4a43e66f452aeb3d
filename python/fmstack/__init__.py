"""fmstack for Python programs: checkpoints through fmstack's engine and the
marks a supervised run (`fmstack run`) books as goodput.

    import fmstack
    ckpt = fmstack.Checkpointer("ckpt")              # rank/world from RANK/WORLD_SIZE
    found = ckpt.load(like={"model": model.state_dict(), "optim": opt.state_dict()})
    if found:
        step, state = found
        model.load_state_dict(state["model"]); opt.load_state_dict(state["optim"])
    ...
    ckpt.save(step, {"model": model.state_dict(), "optim": opt.state_dict()})

A save blocks only while the tensors are copied into the engine's staging
pool (contiguous CPU tensors are read in place, no extra copy); files,
checksums and the commit happen on the engine's threads. Each of `world`
ranks saves 1/world of every tensor (a DDP state is the same on every rank),
and any world size restores it. Binds libfmstack (src/capi/fmstack.h) with
ctypes; needs numpy, and torch for torch tensors.
"""

import ctypes
import json
import os
import time

import numpy as np

__all__ = ["Checkpointer", "Run", "Error", "CheckpointMismatch", "API_VERSION"]

API_VERSION = 2


class Error(RuntimeError):
    """A failure inside libfmstack: the text names the file, tensor or rank."""


class CheckpointMismatch(ValueError):
    """A checkpoint whose tensors are not those of the state it should fill."""


# ----------------------------------------------------------------- library

class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("begin", ctypes.c_int64),
                ("data", ctypes.c_void_p), ("nbytes", ctypes.c_int64)]


class _Options(ctypes.Structure):
    _fields_ = [("dir", ctypes.c_char_p), ("shared_dir", ctypes.c_char_p),
                ("rank", ctypes.c_int32), ("world", ctypes.c_int32), ("keep", ctypes.c_int32),
                ("pool_bytes", ctypes.c_int64), ("commit_timeout_seconds", ctypes.c_double)]


def _candidates():
    if os.environ.get("FMSTACK_LIB"):
        yield os.environ["FMSTACK_LIB"]
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for build in (os.environ.get("FMSTACK_BUILD_DIR"), os.path.join(here, "..", "..", "build")):
        if build:
            yield os.path.join(build, "libfmstack.so.1")
    yield "libfmstack.so.1"


def _load():
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            tried.append(f"{path}: {e}")
    else:
        raise ImportError("fmstack: cannot load libfmstack (set FMSTACK_LIB to its path; "
                          "scripts/build.sh builds it): " + "; ".join(tried))
    if lib.fmstack_c_api_version() != API_VERSION:
        raise ImportError(f"fmstack: {path} speaks C API version "
                          f"{lib.fmstack_c_api_version()}, this module version {API_VERSION}")
    P, I64, D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
    sig = {
        "fmstack_ckpt_open": (P, [ctypes.POINTER(_Options), ctypes.c_char_p, ctypes.c_size_t]),
        "fmstack_ckpt_close": (None, [P]),
        "fmstack_ckpt_error": (ctypes.c_char_p, [P]),
        "fmstack_ckpt_save": (ctypes.c_int, [P, I64, ctypes.POINTER(_Tensor), ctypes.c_size_t,
                                             ctypes.c_char_p, ctypes.POINTER(D)]),
        "fmstack_ckpt_save_live": (ctypes.c_int, [P, I64, ctypes.POINTER(_Tensor),
                                                  ctypes.c_size_t, ctypes.c_char_p,
                                                  ctypes.POINTER(D)]),
        "fmstack_ckpt_release": (ctypes.c_int, [P, ctypes.POINTER(D)]),
        "fmstack_ckpt_wait": (ctypes.c_int, [P]),
        "fmstack_ckpt_latest": (ctypes.c_int, [P, ctypes.POINTER(I64)]),
        "fmstack_ckpt_manifest": (I64, [P, I64, ctypes.c_char_p, ctypes.c_size_t]),
        "fmstack_ckpt_restore": (ctypes.c_int, [P, I64, ctypes.POINTER(_Tensor),
                                                ctypes.c_size_t, ctypes.POINTER(I64)]),
        "fmstack_worker_open": (P, [ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t]),
        "fmstack_worker_close": (None, [P]),
        "fmstack_worker_active": (ctypes.c_int, [P]),
        "fmstack_worker_progress": (None, [P, I64, ctypes.c_char_p]),
        "fmstack_worker_step": (None, [P, I64, D, I64]),
        "fmstack_worker_checkpoint": (None, [P, I64, D]),
        "fmstack_worker_restored": (None, [P, I64, D]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_lib = _load()

# ------------------------------------------------------------------ tensors

_CODES = {"F32": 0, "BF16": 1, "F16": 2, "I64": 3, "I32": 4, "U8": 5}
_NUMPY = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64",
          np.dtype(np.int32): "I32", np.dtype(np.uint8): "U8"}
_SUPPORTED = "float32, bfloat16, float16, int64, int32, uint8"

try:
    import torch
    _TORCH = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
              torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"}
    _FROM_CODE = {v: k for k, v in _TORCH.items()}
except ImportError:  # numpy arrays only
    torch = None


def _is_tensor(x):
    return (torch is not None and isinstance(x, torch.Tensor)) or isinstance(x, np.ndarray)


def _describe(path, x):
    """(dtype name, shape, address, bytes) of a leaf, or TypeError naming its path."""
    if isinstance(x, np.ndarray):
        code = _NUMPY.get(x.dtype)
        if code is None:
            raise TypeError(f"{path}: numpy dtype {x.dtype} is not supported ({_SUPPORTED})")
        if not x.flags["C_CONTIGUOUS"]:
            raise ValueError(f"{path}: the array is not C-contiguous "
                             "(save np.ascontiguousarray(x) instead)")
        return code, tuple(x.shape), x.ctypes.data, x.nbytes
    if x.device.type != "cpu":
        raise ValueError(f"{path}: the tensor is on {x.device}; fmstack's Python module saves "
                         "CPU tensors (move it with .cpu(), or use the GPU trainer's engine)")
    if x.is_sparse or x.layout != torch.strided:
        raise ValueError(f"{path}: {x.layout} tensors are not supported (use .to_dense())")
    code = _TORCH.get(x.dtype)
    if code is None:
        raise TypeError(f"{path}: dtype {x.dtype} is not supported ({_SUPPORTED}); "
                        "convert it (e.g. .float()) before saving")
    if not x.is_contiguous():
        raise ValueError(f"{path}: the tensor is not contiguous (strides {x.stride()} for shape "
                         f"{tuple(x.shape)}); save x.contiguous() instead")
    return code, tuple(x.shape), x.data_ptr(), x.numel() * x.element_size()


def _flatten(obj, path, leaves, name=""):
    """The JSON skeleton of a state: tensors become {"@t": name}, in `leaves`
    as (name, tensor, path). Names are dotted ("model.fc.weight"); `path`
    spells the Python expression for errors."""
    if _is_tensor(obj):
        if any(n == name for n, _, _ in leaves):
            raise ValueError(f"{path}: its name '{name}' is taken by another tensor")
        leaves.append((name, obj, path))
        return {"@t": name}
    join = (lambda k: f"{name}.{k}") if name else str
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(f"{path}: key {k!r} is neither str nor int")
            items.append([k, _flatten(v, f"{path}[{k!r}]", leaves, join(k))])
        return {"@d": items}
    if isinstance(obj, (list, tuple)):
        kind = "@l" if isinstance(obj, list) else "@u"
        return {kind: [_flatten(v, f"{path}[{i}]", leaves, join(i)) for i, v in enumerate(obj)]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"@v": obj}
    raise TypeError(f"{path}: a {type(obj).__name__!r} object cannot be saved (tensors, numpy "
                    "arrays, dicts, lists, tuples, numbers, strings and None can)")


def _unflatten(node, tensors):
    if "@t" in node:
        return tensors[node["@t"]]
    if "@d" in node:
        return {k: _unflatten(v, tensors) for k, v in node["@d"]}
    if "@l" in node:
        return [_unflatten(v, tensors) for v in node["@l"]]
    if "@u" in node:
        return tuple(_unflatten(v, tensors) for v in node["@u"])
    return node["@v"]


def _struct(name, code, shape, begin, address, nbytes, keep):
    dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    raw = name.encode()
    keep.extend([dims, raw])
    return _Tensor(raw, _CODES[code], len(shape), dims, begin, address, nbytes)


def _elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _empty(code, shape):
    if torch is not None:
        return torch.empty(shape, dtype=_FROM_CODE[code])
    if code == "BF16":
        raise Error("restoring a bfloat16 tensor needs torch")
    inverse = {v: k for k, v in _NUMPY.items()}
    return np.empty(shape, dtype=inverse[code])


def _address(t):
    return t.ctypes.data if isinstance(t, np.ndarray) else t.data_ptr()


# ---------------------------------------------------------------- classes

class Run:
    """The supervised run this process belongs to (inactive outside `fmstack run`)."""

    def __init__(self, heartbeat_ms=1000):
        err = ctypes.create_string_buffer(1024)
        self._h = _lib.fmstack_worker_open(heartbeat_ms, err, len(err))
        if not self._h:
            raise Error(err.value.decode(errors="replace"))

    @property
    def active(self):
        return bool(_lib.fmstack_worker_active(self._h))

    def progress(self, step, phase="step"):
        _lib.fmstack_worker_progress(self._h, step, phase.encode())

    def step(self, step, seconds, tokens=0):
        _lib.fmstack_worker_step(self._h, step, float(seconds), tokens)

    def checkpoint(self, step, blocking_seconds):
        _lib.fmstack_worker_checkpoint(self._h, step, float(blocking_seconds))

    def restored(self, step, seconds):
        _lib.fmstack_worker_restored(self._h, step, float(seconds))

    def close(self):
        if getattr(self, "_h", None) and _lib is not None:
            _lib.fmstack_worker_close(self._h)
            self._h = None

    __del__ = close


class Checkpointer:
    """Saves and restores nested states (state_dicts) through fmstack's engine.

    dir: the first tier (every rank of the job must see the same directory);
    shared_dir: a slower tier the engine copies each committed step to;
    rank/world: default RANK and WORLD_SIZE; shard: each rank writes 1/world
    of every tensor (False: rank 0 alone writes whole tensors, the others
    write nothing); run: a Run that books each save's blocking time.
    """

    def __init__(self, dir, rank=None, world=None, keep=3, shared_dir=None, shard=True,
                 run=None, pool_bytes=0, commit_timeout=600.0):
        self.rank = int(os.environ.get("RANK", 0)) if rank is None else rank
        self.world = int(os.environ.get("WORLD_SIZE", 1)) if world is None else world
        self.dir, self.shard, self.run = str(dir), shard, run
        opts = _Options(self.dir.encode(), shared_dir.encode() if shared_dir else None,
                        self.rank, self.world, keep, pool_bytes, commit_timeout)
        err = ctypes.create_string_buffer(4096)
        self._live = None  # a pending live save: (step, seconds it blocked, what it reads)
        self._h = _lib.fmstack_ckpt_open(ctypes.byref(opts), err, len(err))
        if not self._h:
            raise Error(err.value.decode(errors="replace"))

    def _check(self, rc):
        if rc < 0:
            raise Error(_lib.fmstack_ckpt_error(self._h).decode(errors="replace"))
        return rc

    def save(self, step, state, live=False):
        """Starts saving `state` as `step`; returns the seconds it blocked.

        With live=True nothing is copied: the engine reads the tensors while
        the script goes on (its next forward and backward pass), and they must
        not change until release() returns. Call release() before anything
        writes them (optimizer.step()); the next save, a load and close()
        release it too.
        """
        leaves = []
        tree = _flatten(state, "state", leaves)
        keep, structs = [], []
        for name, x, path in leaves:  # every leaf is checked before anything is written
            code, shape, address, nbytes = _describe(path, x)
            n = _elements(shape)
            lo, hi = 0, n
            if self.shard:
                lo, hi = n * self.rank // self.world, n * (self.rank + 1) // self.world
            elif self.rank != 0:
                lo = hi = 0
            size = nbytes // n if n else 0
            structs.append(_struct(name, code, shape, lo, address + lo * size if n else address,
                                   (hi - lo) * size, keep))
        meta = json.dumps({"fmstack_python": 1, "tree": tree}).encode()
        array = (_Tensor * max(1, len(structs)))(*structs)
        blocked = ctypes.c_double(0)
        save = _lib.fmstack_ckpt_save_live if live else _lib.fmstack_ckpt_save
        self._check(save(self._h, step, array, len(structs), meta, ctypes.byref(blocked)))
        # The engine reads the values made for the call until the release.
        self._live = (step, blocked.value, (keep, array)) if live else None
        if self.run is not None and not live:
            self.run.checkpoint(step, blocked.value)
        return blocked.value

    def release(self):
        """Ends a live save's reads of the tensors: copies what the engine has
        not written yet and waits for the writes still reading them. Returns
        the seconds it took (0 when no live save is pending)."""
        seconds = ctypes.c_double(0)
        self._check(_lib.fmstack_ckpt_release(self._h, ctypes.byref(seconds)))
        if self._live is not None:
            step, blocked, _ = self._live
            self._live = None
            if self.run is not None:  # the save's blocking time and the release's
                self.run.checkpoint(step, blocked + seconds.value)
        return seconds.value

    def wait(self):
        """Returns once every save so far is committed on the first tier."""
        self._check(_lib.fmstack_ckpt_wait(self._h))

    def latest(self):
        """The newest committed step, or None."""
        step = ctypes.c_int64(0)
        return step.value if self._check(_lib.fmstack_ckpt_latest(self._h, ctypes.byref(step))) \
            else None

    def manifest(self, step):
        n = self._check(_lib.fmstack_ckpt_manifest(self._h, step, None, 0))
        buf = ctypes.create_string_buffer(n + 1)
        self._check(_lib.fmstack_ckpt_manifest(self._h, step, buf, n + 1))
        return json.loads(buf.value)

    def load(self, step=None, like=None):
        """(step, state) of the newest valid checkpoint (at most `step`), or None.

        With `like` (a state of the same structure, e.g. a fresh model's), the
        checkpoint must hold each of its tensors with the same shape and dtype,
        and no others beside them (top-level keys where `like` has no tensor,
        such as a fresh optimizer's state, are free), or CheckpointMismatch is
        raised before anything is read.
        """
        begin = time.monotonic()
        want = self.latest() if step is None else step
        for _ in range(8):  # a damaged copy falls back to an older step
            if want is None:
                return None
            m = self.manifest(want)
            if not isinstance(m.get("meta"), dict) or m["meta"].get("fmstack_python") != 1:
                raise CheckpointMismatch(f"{self.dir}: step {want} was not saved by fmstack's "
                                         "Python module (fmstack train's checkpoints load with "
                                         "`fmstack ckpt export`)")
            if like is not None:
                self._compare(like, m, want)
            tensors, keep, structs = {}, [], []
            for name, e in m["tensors"].items():
                t = _empty(e["dtype"], tuple(e["shape"]))
                tensors[name] = t
                nbytes = _elements(e["shape"]) * t.itemsize if isinstance(t, np.ndarray) \
                    else t.numel() * t.element_size()
                structs.append(_struct(name, e["dtype"], tuple(e["shape"]), 0, _address(t),
                                       nbytes, keep))
            array = (_Tensor * max(1, len(structs)))(*structs)
            got = ctypes.c_int64(0)
            if not self._check(_lib.fmstack_ckpt_restore(self._h, want, array, len(structs),
                                                         ctypes.byref(got))):
                return None
            if got.value == want:
                state = _unflatten(m["meta"]["tree"], tensors)
                if self.run is not None:
                    self.run.restored(want, time.monotonic() - begin)
                return want, state
            want = got.value
        raise Error(f"{self.dir}: checkpoints kept changing while being restored")

    @staticmethod
    def _compare(like, m, step):
        leaves = []
        _flatten(like, "state", leaves)
        expected = {name: _describe(path, x)[:2] for name, x, path in leaves}
        saved = {n: (e["dtype"], tuple(e["shape"])) for n, e in m["tensors"].items()}
        problems = [f"{n}: missing from the checkpoint" for n in expected if n not in saved]
        # Extra tensors are expected where `like` has none yet (a fresh
        # optimizer's state), not beside tensors it has (another model).
        tops = {n.split(".")[0] for n in expected}
        problems += [f"{n}: in the checkpoint, not in the state" for n in saved
                     if n not in expected and n.split(".")[0] in tops]
        problems += [f"{n}: saved {saved[n][0]} {list(saved[n][1])}, expected "
                     f"{expected[n][0]} {list(expected[n][1])}"
                     for n in expected if n in saved and saved[n] != expected[n]]
        if problems:
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise CheckpointMismatch(f"step {step} is not a checkpoint of this state: "
                                     + "; ".join(problems[:5]) + more)

    def close(self):
        """Waits for saves in flight (use wait() first to see their errors)."""
        if getattr(self, "_h", None) and _lib is not None:
            _lib.fmstack_ckpt_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.wait()
        self.close()

    __del__ = close
