"""Priority order, version 1, computed with numpy from its definition (docs/design.md §4.1), not
from the C code: the oracle of tests/test_layout.py and what a cellucid.prepare()-style fixture
generator orders its cells with.

    splitmix64(x): z = x + 0x9E3779B97F4A7C15
                   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
                   z = (z ^ (z >> 27)) * 0x94D049BB133111EB
                   return z ^ (z >> 31)                       (all modulo 2^64)
    key(i) = splitmix64(splitmix64(seed) ^ i); order = rows sorted by (key(i), i)
    levels = [1024 * 4^k while 1024 * 4^k < n] + [n]
"""
import numpy as np

U64 = np.uint64


def splitmix64(x):
    x = np.asarray(x, dtype=U64)
    with np.errstate(over="ignore"):
        z = x + U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        return z ^ (z >> U64(31))


def reference_order(n, seed=0):
    """order[j] = the original row stored at row j."""
    i = np.arange(n, dtype=U64)
    key = splitmix64(splitmix64(U64(seed)) ^ i)
    return np.lexsort((i, key)).astype(np.int64)


def reference_levels(n):
    out, k = [], 0
    while 1024 * 4 ** k < n:
        out.append(1024 * 4 ** k)
        k += 1
    return np.array(out + [n], dtype=np.int64)
