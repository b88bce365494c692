// tilegen CPU twin of the Ascend C API subset used by tilegen's FlashAttention kernels
// (Atlas A2 / 910B, __NPU_ARCH__ 2201). Generated kernels `#include "kernel_operator.h"` and build with
//     g++ -std=c++17 -O1 -pthread -I tilegen/twin/include kernel.cpp host.cpp
// See tilegen/twin/README.md for what is emulated, what is checked and the sources.
#ifndef TILEGEN_TWIN_KERNEL_OPERATOR_H
#define TILEGEN_TWIN_KERNEL_OPERATOR_H

#include "twin/base.h"
#include "twin/numeric.h"
#include "twin/gm.h"
#include "twin/tensor.h"
#include "twin/launch.h"
#include "twin/sync.h"
#include "twin/pipe.h"
#include "twin/datacopy.h"
#include "twin/cube.h"
#include "twin/vector.h"

// The device headers include <cmath> only under ASCENDC_CPU_DEBUG (impl/utils/std/cmath/abs.h:18, sqrt.h at
// asc-devkit@0da921b9), so under bisheng nothing guarantees INFINITY or NAN to kernel code. The twin's own
// <cmath> must not hand them out either: kernels spell infinities as constants of their own
// (tilegen_runtime.h: __builtin_huge_valf()).
#undef INFINITY
#undef NAN
#pragma GCC poison INFINITY NAN

#endif  // TILEGEN_TWIN_KERNEL_OPERATOR_H
