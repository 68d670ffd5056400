"""The kernels' loops keep their software prefetches in the built code (kernels/prefetch.h): GCC's mod/ref
analysis deletes a call to a function whose only statements are prefetches, which once left the lookup and
collection loops without any, twice as slow on an AVX2 processor, with the same bits. Read off the
disassembly of the built library, each loop's function by name (grouped by the source that holds it)."""
import shutil
import subprocess
from collections import Counter

import pytest

import paddle_edo.kernels as kernels

PREFETCHING = {  # source -> demangled names of its functions whose loops prefetch rows
    "quantized.cc": ["WriteRows<float, QuantizedLookup(", "WriteRows<unsigned short, QuantizedLookupHalf<0>(",
                    "QuantizedLookupHalf<0>(", "QuantizedLookupHalf<1>("],
    "collection.cc": ["CollectionLookup(", "CollectionUpdate("],
    "lookups.cc": ["DenseLookup(", "HashLookup(", "MixedDimLookup("],
    "bags.cc": ["PackedBagPool(", "SumBagsAvx2<false, false, (anonymous namespace)::Fp32LaneSource>",
               "SumBagsAvx2<false, false, (anonymous namespace)::Int8LaneSource>"],
}


def prefetches_by_function(library) -> Counter:
    listing = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", str(library)], capture_output=True,
                             text=True, check=True).stdout
    counts, function = Counter(), None
    for line in listing.splitlines():
        if line.endswith(">:") and "<" in line:
            function = line[line.index("<") + 1:-2]
            counts[function] += 0
        elif "prefetch" in line and function is not None:
            counts[function] += 1
    return counts


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils, beside the compiler) is missing")
@pytest.mark.parametrize("source", sorted(PREFETCHING))
def test_every_prefetching_loop_keeps_its_prefetches(source):
    library = kernels.library_path()
    assert library is not None, "the kernels did not build"
    counts = prefetches_by_function(library)
    for name in PREFETCHING[source]:
        functions = {function: n for function, n in counts.items() if name in function}
        assert functions, f"no function {name}... of {source} in {library}"
        assert sum(functions.values()) > 0, f"{name}... of {source} issues no prefetch: {functions}"
