import numpy as np
import paddle
import pytest

from paddle_edo.errors import DataError
from paddle_edo.nn import HashEmbedding
from paddle_edo.quant import FORMATS, codecs
from paddle_edo.serving.format import decode_rows, hashed_buckets, open_packed, write_packed


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_numpy_decoding_is_the_codecs_decoding(name, tmp_path):
    fmt = FORMATS[name]
    rows = paddle.to_tensor(np.random.default_rng(0).normal(0, 0.3, (50, 13)).astype("float32"))
    codes, params = codecs.encode(rows, fmt)
    expected = codecs.decode(codes, params, fmt, 13).numpy()
    stored = codes.numpy() if not fmt.is_float else codes.view("uint16").numpy() if fmt.float_dtype == "bfloat16" \
        else codes.numpy().view(np.uint16)
    write_packed(tmp_path / "t.bin", stored, None if params is None else params.numpy(),
                 {"format": name, "rows": 50, "dim": 13, "padding_idx": None})
    header, mapped_codes, mapped_params = open_packed(tmp_path / "t.bin")
    assert header["format"] == name and isinstance(mapped_codes, np.memmap)
    np.testing.assert_array_equal(decode_rows(mapped_codes[[3, 0, 49]], None if mapped_params is None else
                                              mapped_params[[3, 0, 49]], name, 13), expected[[3, 0, 49]])


def test_truncated_and_foreign_files_are_refused(tmp_path):
    write_packed(tmp_path / "t.bin", np.zeros((100, 8), np.int8), np.ones((100, 2), np.float16),
                 {"format": "int8", "rows": 100, "dim": 8})
    data = (tmp_path / "t.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:-10])
    with pytest.raises(DataError, match=r"cut.bin is truncated: .* bytes where the header says"):
        open_packed(tmp_path / "cut.bin")
    (tmp_path / "other.bin").write_bytes(b"PK\x03\x04 not a table")
    with pytest.raises(DataError, match="other.bin is not a paddle_edo packed table"):
        open_packed(tmp_path / "other.bin")


def test_hash_buckets_match_the_layer_for_any_id():
    layer = HashEmbedding(10**6, 8, 1000, num_hashes=3, seed=5)
    ids = np.concatenate([np.arange(20), np.random.default_rng(1).integers(0, 2**63 - 1, 2000), [2**63 - 1]])
    expected = layer.bucket_ids(paddle.to_tensor(ids)).numpy()
    np.testing.assert_array_equal(hashed_buckets(ids, layer.coefficients.numpy(), 1000), expected)
