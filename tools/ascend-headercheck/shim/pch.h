// What asc_check.sh --emit-pch precompiles (after the shim): the Ascend C API as kernels include it.
#include "kernel_operator.h"
