// Host-side stand-in for CANN's graph/types.h: the ge::DataType values the asc-devkit tiling sources name
// (numbering of CANN's DataType enum: DT_FLOAT 0, DT_FLOAT16 1, DT_INT8 2, DT_INT32 3, DT_BF16 27).
#pragma once
#include <cstdint>
namespace ge {
enum DataType { DT_FLOAT = 0, DT_FLOAT16 = 1, DT_INT8 = 2, DT_INT32 = 3, DT_BF16 = 27 };
}
