// tilegen real-API twin: the CCE intrinsic layer under Huawei's public Ascend C headers.
// Force-included (-include) before a kernel built against asc-devkit include/ and impl/ in device mode
// for dav-c220; see README.md in this folder.
#ifndef TILEGEN_CCE_H
#define TILEGEN_CCE_H

#include "cce_types.h"
#include "core.h"
#include "rules.h"
#include "sync.h"
#include "dma.h"
#include "kfc.h"
#include "regs.h"
#include "datacopy.h"
#include "cube.h"
#include "load3d.h"
#include "vector.h"
#include "vector_more.h"
#include "unmodelled.h"

// builtins whose result type matters to the headers: the system workspace the launch set (kfc.h)
inline __gm__ uint8_t* __get_kfc_workspace_addr() { return cce_rt::KfcWorkspace(); }

#endif  // TILEGEN_CCE_H
