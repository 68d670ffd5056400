import numpy as np
import pyarrow as pa

from paddle_edo.data.hashing import stable_hash


def reference_hash(text: str) -> int:
    """FNV-1a 64 over UTF-8 bytes, then splitmix64's finaliser, top bit cleared (written independently)."""
    mask = (1 << 64) - 1
    h = 0xCBF29CE484222325
    for byte in text.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & mask
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & mask
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & mask
    h ^= h >> 31
    return (h & 0x7FFFFFFFFFFFFFFF) or 1


def test_hashes_match_the_reference_for_mixed_lengths_and_text():
    values = ["", "a", "68fd1e64", "80e26c9b", "北京", "量子计算机", "x" * 37]
    np.testing.assert_array_equal(stable_hash(pa.array(values)), [reference_hash(v) for v in values])


def test_one_width_fast_path_equals_the_general_path():
    hexes = [f"{i * 2654435761 % 2**32:08x}" for i in range(500)]
    fast = stable_hash(pa.array(hexes))
    mixed = stable_hash(pa.array(hexes + ["zz"]))[:-1]
    np.testing.assert_array_equal(fast, mixed)
    np.testing.assert_array_equal(fast[:3], [reference_hash(h) for h in hexes[:3]])


def test_nulls_are_zero_numbers_hash_as_text_and_slices_and_chunks_agree():
    values = pa.array(["a", None, "bc", "d"])
    np.testing.assert_array_equal(stable_hash(values), [reference_hash("a"), 0, reference_hash("bc"), reference_hash("d")])
    np.testing.assert_array_equal(stable_hash(pa.array([12, None])), [reference_hash("12"), 0])
    np.testing.assert_array_equal(stable_hash(values.slice(2)), stable_hash(pa.array(["bc", "d"])))
    chunked = pa.chunked_array([["a"], ["bc", "d"]])
    np.testing.assert_array_equal(stable_hash(chunked), stable_hash(pa.array(["a", "bc", "d"])))
    assert stable_hash(pa.array([], pa.string())).shape == (0,)
    assert (stable_hash(pa.array([str(i) for i in range(10_000)])) > 0).all()
