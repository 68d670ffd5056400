"""SOT made to compile graphs of every size within a block, as the tests that check SOT's own graphs need
(by default it runs graphs under 10 ops in dynamic graph)."""
import contextlib
from typing import Iterator

from paddle.jit.sot.opcode_translator.executor.executor_cache import OpcodeExecutorCache
from paddle.jit.sot.utils import min_graph_size_guard


@contextlib.contextmanager
def compile_every_graph() -> Iterator[None]:
    """Within the block SOT compiles every graph; after it, SOT forgets the translations it made. Paddle
    2.6.2's SOT reuses a translation made under another minimum graph size and then simulates a table's
    forward it should run in dynamic graph (a later test's DeepFM failed in check_ids); Paddle 3.3.1 does
    not, but forgetting costs only a retranslation."""
    try:
        with min_graph_size_guard(0):
            yield
    finally:
        OpcodeExecutorCache().clear()
