// Host-side stand-in for CANN's platform/soc_spec.h: the NpuArch values (the __NPU_ARCH__ numbers) that
// asc-devkit's tiling sources compare with; the 910B is DAV_2201.
#pragma once
#include <cstdint>
enum class NpuArch : uint32_t { DAV_1001 = 1001, DAV_2002 = 2002, DAV_2201 = 2201, DAV_3002 = 3002, DAV_3003 = 3003, DAV_3510 = 3510, DAV_5102 = 5102 };
