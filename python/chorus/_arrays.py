"""numpy in, numpy out; torch in, torch out: the conversions at the package's edge."""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional, Tuple

import numpy as np

Restore = Callable[[np.ndarray], Any]


def _torch() -> Optional[Any]:
    """The torch module if the caller has imported it (a torch tensor implies it has)."""
    return sys.modules.get("torch")


def is_tensor(x: Any) -> bool:
    """True for a torch tensor, without importing torch."""
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def to_numpy(x: Any, what: str) -> Tuple[np.ndarray, Restore]:
    """``x`` as numpy, and a function that turns a result back into ``x``'s kind and device."""
    if is_tensor(x):
        torch = _torch()
        device = x.device
        t = x.detach().to("cpu")
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()  # numpy has no bfloat16
        arr = t.numpy()

        def restore(out: np.ndarray) -> Any:
            return torch.from_numpy(np.ascontiguousarray(out)).to(device)

        return arr, restore
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what}: not an array ({e})") from None
    return arr, lambda out: out


def as_codes(x: Any, what: str = "codes") -> Tuple[np.ndarray, Restore]:
    """Integer codes as contiguous int64; floats are refused rather than truncated."""
    arr, restore = to_numpy(x, what)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what}: expected an integer array, found dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError(f"{what}: expected an array, found a scalar")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{what}: value {int(arr.max())} is out of range")
    return np.ascontiguousarray(arr, dtype=np.int64), restore


def as_latents(x: Any, what: str = "latent") -> Tuple[np.ndarray, Restore]:
    """Float latents as contiguous float32."""
    arr, restore = to_numpy(x, what)
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{what}: expected a float array, found dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float32), restore
