"""dvar's dtypes (TensorFlow's DataType numbers) and NumPy's."""

from __future__ import annotations

from typing import Dict

import numpy as np

FLOAT32, FLOAT64, INT32, UINT8, INT16, INT8 = 1, 2, 3, 4, 5, 6
STRING = 7  # DVAR_DTYPE_STRING: TensorFlow string tensors, read only
INT64, BOOL, BFLOAT16, UINT16, FLOAT16, UINT32, UINT64 = 9, 10, 14, 17, 19, 22, 23

# dvar dtype -> the NumPy dtype its bytes are stored as (little-endian).
STORAGE: Dict[int, np.dtype] = {
    FLOAT32: np.dtype("<f4"), FLOAT64: np.dtype("<f8"), FLOAT16: np.dtype("<f2"),
    BFLOAT16: np.dtype("<u2"),  # raw bits; NumPy has no bfloat16
    INT8: np.dtype("i1"), INT16: np.dtype("<i2"), INT32: np.dtype("<i4"),
    INT64: np.dtype("<i8"), UINT8: np.dtype("u1"), UINT16: np.dtype("<u2"),
    UINT32: np.dtype("<u4"), UINT64: np.dtype("<u8"), BOOL: np.dtype("?"),
}

NAMES: Dict[int, str] = {
    FLOAT32: "float32", FLOAT64: "float64", FLOAT16: "float16", BFLOAT16: "bfloat16",
    INT8: "int8", INT16: "int16", INT32: "int32", INT64: "int64", UINT8: "uint8",
    UINT16: "uint16", UINT32: "uint32", UINT64: "uint64", BOOL: "bool", STRING: "string",
}
BY_NAME = {v: k for k, v in NAMES.items()}

# NumPy kind+size -> dvar dtype, for writing.
_FROM_NUMPY = {("f", 4): FLOAT32, ("f", 8): FLOAT64, ("f", 2): FLOAT16,
               ("i", 1): INT8, ("i", 2): INT16, ("i", 4): INT32, ("i", 8): INT64,
               ("u", 1): UINT8, ("u", 2): UINT16, ("u", 4): UINT32, ("u", 8): UINT64,
               ("b", 1): BOOL}


def from_numpy(dt: np.dtype) -> int:
    """The dvar dtype that holds NumPy dtype dt; TypeError when none does."""
    code = _FROM_NUMPY.get((dt.kind, dt.itemsize))
    if code is None or dt.fields is not None or dt.subdtype is not None:
        raise TypeError("dvar cannot store NumPy dtype %s (it stores bool, int8-64, uint8-64, "
                        "float16, float32, float64 and, with dtypes={name: 'bfloat16'}, "
                        "bfloat16)" % dt)
    return code


def bfloat16_to_float32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) widened exactly to float32."""
    raw = np.asarray(raw)
    wide = np.ascontiguousarray(raw, dtype=np.uint32).reshape(-1)  # 1-d: 0-d arrays have
    wide <<= np.uint32(16)                                          # no other-itemsize view
    return wide.view(np.float32).reshape(raw.shape)


def float32_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 rounded to bfloat16 bits (uint16), to nearest even; NaN stays NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        # Keep a quiet NaN with the sign: rounding could carry into infinity.
        rounded[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded
