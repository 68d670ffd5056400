import numpy as np
import pytest

from paddle_edo.cache import SlotMap


def zipf_batches(count, shape, seed, rows=400):
    rng = np.random.default_rng(seed)
    return [(rng.zipf(1.3, size=shape) % rows).astype(np.int64) for _ in range(count)]


def test_lfu_keeps_the_frequent_row_that_lru_would_evict():
    for policy, evicted in (("lru", 1), ("lfu", 2)):
        slots = SlotMap(10, 2, policy)
        for ids in ([1], [1], [1], [2], [3]):
            slots.admit(np.array(ids), pin=False)
        assert slots.slot_of[evicted] == -1 and slots.slot_of[3] >= 0


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_victims_are_the_lowest_keys_a_full_search_would_pick(policy):
    slots = SlotMap(5000, 300, policy)
    evictions = 0
    for step, batch in enumerate(zipf_batches(300, shape=(64,), seed=1)):
        ids = np.unique(batch * 12 % 5000)
        keys_before = slots.policy.keys.copy()
        hit_slots = slots.slot_of[ids][slots.slot_of[ids] >= 0]
        admission = slots.admit(ids, pin=step % 2 == 0)
        if admission.evictions:
            evictions += admission.evictions
            victims = admission.new_slots[-admission.evictions:]  # after the slots that were still free
            unprotected = np.delete(keys_before[: slots.capacity - len(admission.new_slots) + len(victims)],
                                    hit_slots)
            assert len(np.unique(admission.new_slots)) == len(admission.new_slots)
            assert np.array_equal(np.sort(keys_before[victims]), np.sort(unprotected)[: len(victims)])
        slots.end_step()
    assert evictions > 500
