// The OpenMP threads the kernels run with, as their own OpenMP runtime sees it: Paddle's Intel OpenMP
// where the kernels link it (kernels/__init__.py), so that Paddle's thread setting reaches them.
#include <omp.h>

#include <cstdint>

extern "C" int64_t edo_openmp_threads() { return omp_get_max_threads(); }
