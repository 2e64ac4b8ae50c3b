"""PyTorch helpers: load a checkpoint as a ``state_dict``-like dict of
``torch.Tensor`` and save one. PyTorch is optional for the rest of the
package; this module needs it (``import dvar.torch`` raises ImportError,
saying so, where it is missing).

    import dvar.torch
    sd = dvar.torch.load("ckpt")                 # every numeric variable
    model.load_state_dict(sd)
    dvar.torch.save("out", model.state_dict(), shards={"emb.weight": 4})
"""

from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional, Union

import numpy as np

try:
    import torch as _torch
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError("dvar.torch needs PyTorch, which is not installed (pip install torch, "
                      "or on Debian apt-get install python3-torch): %s" % e) from None

from ._checkpoint import Checkpoint
from ._write import save as _save

__all__ = ["load", "save"]


def load(path, names: Optional[Iterable[str]] = None,
         device: Union[str, "_torch.device"] = "cpu", *,
         cache: bool = False) -> Dict[str, "_torch.Tensor"]:
    """Read variables of a checkpoint as torch tensors.

    Args:
        path: a dvar checkpoint, a root (its latest) or a TensorFlow
            checkpoint.
        names: the variables to read; None reads every numeric one (string
            tensors, which torch cannot hold, are left out; naming one is
            a TypeError).
        device: where the tensors go (``"cpu"``, ``"cuda:0"``, ...).
        cache: read through the page cache, as :func:`dvar.open` does with
            it: a process that loads the same checkpoint again (a server
            restarting) then reads it from memory.

    Returns:
        name -> tensor, in the checkpoint's name order (or ``names``' order).
        bfloat16 comes back as ``torch.bfloat16``; every array is read
        into fresh memory and shared with torch without another copy
        (``torch.from_numpy``) before it moves to ``device``.
    """
    out: Dict[str, _torch.Tensor] = {}
    with Checkpoint(path, raw_bfloat16=True, cache=cache) as ck:
        wanted = list(ck) if names is None else ([names] if isinstance(names, str)
                                                  else list(names))
        numeric = []
        for name in wanted:
            if ck[name].dvar_dtype != "string":
                numeric.append(name)
            elif names is not None:
                raise TypeError("'%s' is a string tensor, which torch cannot hold" % name)
        arrays = ck.read_many(numeric)  # every read in flight together
        for name in numeric:
            t, a = ck[name], arrays[name]
            if t.dvar_dtype == "bfloat16":
                x = _torch.from_numpy(a.view(np.int16)).view(_torch.bfloat16)
            else:
                x = _from_numpy(name, a)
            out[name] = x.to(device) if str(device) != "cpu" else x
    return out


def _from_numpy(name: str, a: np.ndarray) -> "_torch.Tensor":
    try:
        return _torch.from_numpy(a)
    except TypeError:
        # Older torch has no uint16/32/64: keep the bits in the signed type.
        if a.dtype.kind == "u":
            raise TypeError("'%s' is %s, which this PyTorch (%s) cannot hold"
                            % (name, a.dtype, _torch.__version__)) from None
        raise


def save(path, state_dict: Mapping[str, "_torch.Tensor"], *,
         shards: Optional[Mapping[str, int]] = None, **kwargs) -> str:
    """Write a ``state_dict`` (name -> tensor, on any device, any strides)
    as a dvar checkpoint; :func:`dvar.save`'s keywords apply (compress,
    attributes, step, ...). bfloat16 tensors are stored as bfloat16."""
    arrays = {}
    dtypes = dict(kwargs.pop("dtypes", None) or {})
    for name, x in state_dict.items():
        if not isinstance(x, _torch.Tensor):
            arrays[name] = x
            continue
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if x.dtype == _torch.bfloat16:
            arrays[name] = x.view(_torch.int16).numpy().view(np.uint16)
            dtypes[name] = "bfloat16"
        else:
            arrays[name] = x.numpy()
    return _save(path, arrays, shards=shards, dtypes=dtypes, **kwargs)
