import numpy as np
import pytest

from paddle_edo.cache import belady_hit_rate


def test_belady_on_the_textbook_trace():
    trace = np.array([1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5])
    assert belady_hit_rate(trace, 3) == pytest.approx(5 / 12)  # MIN: 7 faults with 3 frames
    assert belady_hit_rate(trace, 5) == pytest.approx(7 / 12)  # only the 5 first uses miss
