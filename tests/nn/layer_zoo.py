"""One small instance of every registered layer configuration that runs in dynamic graph, for the tests
that must cover them all (to_static, bad ids). Parameter-server tables exist in static programs only and
are tested in tests/distributed."""
import numpy as np

from paddle_edo.nn import (CachedEmbedding, ClusteredEmbedding, DenseEmbedding, HashEmbedding, MixedDimEmbedding,
                           QREmbedding, QuantizedEmbedding)

ROWS, DIM = 200, 8
FREQUENCIES = np.arange(ROWS)[::-1].astype(np.float64)
STATIC_ONLY = {"ps_sparse"}

LAYERS = {
    "dense": lambda: DenseEmbedding(ROWS, DIM, padding_idx=0, init_std=0.3),
    "quantized_ptq": lambda: QuantizedEmbedding(ROWS, DIM, "int8", padding_idx=0, init_std=0.3),
    "quantized_qat": lambda: QuantizedEmbedding(ROWS, DIM, "int4", padding_idx=0, mode="qat", init_std=0.3,
                                                row_range="min_max"),  # searched ranges: test_qat_search_in_static_programs
    "quantized_low_precision": lambda: QuantizedEmbedding(ROWS, DIM, "int8", padding_idx=0, mode="low_precision",
                                                          init_std=0.3),
    "quantized_packed": lambda: QuantizedEmbedding.from_embedding(DenseEmbedding(ROWS, DIM, padding_idx=0,
                                                                                 init_std=0.3), "int2"),
    "hash": lambda: HashEmbedding(50, DIM, 50, padding_idx=0, init_std=0.3),
    "qr": lambda: QREmbedding(ROWS, DIM, 16, padding_idx=0),
    "mixed_dim": lambda: MixedDimEmbedding(ROWS, DIM, FREQUENCIES, padding_idx=0, init_std=0.3),
    "clustered": lambda: ClusteredEmbedding.from_embedding(DenseEmbedding(ROWS, DIM, init_std=0.3), FREQUENCIES,
                                                           20, 10),
    "cached": lambda: CachedEmbedding(ROWS, DIM, cache_rows=60, padding_idx=0, init_std=0.3),
}
