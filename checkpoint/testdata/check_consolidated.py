"""Checks deepgo's consolidated checkpoint with Python's safetensors.

usage: python3 check_consolidated.py CONSOLIDATED.safetensors EXPECTED.json [DTYPES.safetensors DTYPES.json]

EXPECTED.json maps each parameter name to {"shape": [...], "values": [...]}
(float32 values as written by the Go test). DTYPES.json maps tensor names
of DTYPES.safetensors to {"dtype": numpy dtype name, "shape", "values"}.
Exits non-zero with a message on the first difference.
"""
import json
import sys

import numpy as np
from safetensors.numpy import load_file


def check(path, expected, default_dtype):
    got = load_file(path)
    if set(got) != set(expected):
        sys.exit(f"{path}: tensors {sorted(got)} != expected {sorted(expected)}")
    for name, want in expected.items():
        dtype = np.dtype(want.get("dtype", default_dtype))
        arr = got[name]
        ref = np.array(want["values"], dtype=dtype).reshape(want["shape"])
        if arr.dtype != dtype or arr.shape != ref.shape:
            sys.exit(f"{path}: {name}: {arr.dtype}{arr.shape} != {dtype}{ref.shape}")
        if not np.array_equal(arr, ref):
            sys.exit(f"{path}: {name}: values differ, first at {np.argwhere(arr != ref)[0]}")
    print(f"{path}: {len(expected)} tensors equal")


def main():
    with open(sys.argv[2]) as f:
        check(sys.argv[1], json.load(f), "float32")
    if len(sys.argv) > 4:
        with open(sys.argv[4]) as f:
            check(sys.argv[3], json.load(f), None)


if __name__ == "__main__":
    main()
