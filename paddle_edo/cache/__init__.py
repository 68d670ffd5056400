"""The parts of the device/host embedding cache: host stores, eviction policies, the slot map,
the prefetcher, statistics, and Belady's offline optimum for judging the policies."""
from .belady import belady_hit_rate
from .host import HostStore
from .policies import POLICIES, LFUPolicy, LRUPolicy
from .prefetch import Prefetcher
from .slots import SlotMap
from .stats import CacheStatistics

__all__ = ["CacheStatistics", "HostStore", "LFUPolicy", "LRUPolicy", "POLICIES",
           "Prefetcher", "SlotMap", "belady_hit_rate"]
