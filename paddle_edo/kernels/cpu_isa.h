// The widest instruction set the kernels use: the processor's, capped by PADDLE_EDO_MAX_CPU_ISA ("avx512",
// "avx2" or "portable", as oneDNN's ONEDNN_MAX_CPU_ISA caps its own), so that every path can be run and
// tested on a machine that has the widest (kernels/__init__.py checks the value before the first build).
#pragma once

#include <cstdlib>
#include <cstring>

namespace edo {

enum class Isa { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };  // AVX2 with FMA and F16C; AVX-512 F, BW, DQ, VL on top

inline Isa ProcessorIsa() {
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))) {
    return Isa::kPortable;
  }
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512vl")
             ? Isa::kAvx512
             : Isa::kAvx2;
}

inline Isa KernelIsa() {
  static const Isa isa = [] {
    const Isa processor = ProcessorIsa();
    const char* cap = std::getenv("PADDLE_EDO_MAX_CPU_ISA");
    Isa most = Isa::kAvx512;
    if (cap != nullptr && std::strcmp(cap, "avx2") == 0) most = Isa::kAvx2;
    if (cap != nullptr && std::strcmp(cap, "portable") == 0) most = Isa::kPortable;
    return processor < most ? processor : most;
  }();
  return isa;
}

inline bool HasAvx2() { return KernelIsa() >= Isa::kAvx2; }
inline bool HasAvx512() { return KernelIsa() >= Isa::kAvx512; }

}  // namespace edo
