// The OpenMP threads the kernels run with, as their own OpenMP runtime sees it: Paddle's Intel OpenMP
// where the kernels link it (kernels/__init__.py), so that Paddle's thread setting reaches them; and the
// instruction set their code paths take on this processor (cpu_isa.h), for reports.
#include <omp.h>

#include <cstdint>

#include "cpu_isa.h"

extern "C" int64_t edo_openmp_threads() { return omp_get_max_threads(); }

extern "C" int64_t edo_kernel_isa() { return static_cast<int64_t>(edo::KernelIsa()); }
