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

#endif  // TILEGEN_TWIN_KERNEL_OPERATOR_H
