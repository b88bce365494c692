// tilegen real-API twin: what a kernel built on the high-level Matmul API needs on 2201 (MIX, the matmul
// server): its AIC runs a server (AscendC::KfcServer, impl/adv_api/detail/kfc/kernel_kfc.h) that polls
// message queues in the system workspace, and each AIV posts requests there (AscendC::KfcCommClient,
// impl/basic_api/dav_c220/kfc/kfc_comm_client.h; queue layout and polling in kfc_comm.h).
//
// Builtins (bisheng's; the launch stub CANN generates calls AscendC::SetSysWorkspaceForce(workspace) before
// the kernel body, asc-devkit cmake/asc/legacy_modules/util/extract_host_stub.py _generate_sub_source):
//  - __set_kfc_workspace_addr(p) / __get_kfc_workspace_addr(): the launch's system workspace (GM), per core;
//    GetSysWorkSpacePtr() and GetUserWorkspace() (= it + RESERVED_WORKSPACE) read it
//    (include/basic_api/kernel_operator_swap_mem_intf.h, impl/basic_api/dav_c220/kernel_operator_common_impl.h).
//    A core whose kernel set it may use cross-core flag 15, the matmul server's KFC_SYNC_ID /
//    WORKSPACE_SYNC_ID (kfc_comm.h:113, kernel_kfc.h:29); the twin refuses 15 to every other kernel.
//    In such a launch the server's mode-2 notifications addressed to one AIV (flag 2 * instance + sub,
//    impl/adv_api/detail/matmul/kfc/matmul_server_impl_c220.h NotifyEvent) raise both AIVs' counters, as
//    mode 2 is documented to (核间同步/关键特性说明.md); the other AIV never waits on that flag, so its counter
//    is left raised: the twin lets such a counter stay at 15 instead of failing on a 16th set, and does not
//    report it at the kernel's end (Huawei's kernels run on the NPU with these counts).
//  - dc_preload(addr, offset): a data-cache preload of the line at addr (RcvMessageImpl, kfc_comm.h): no data
//    effect here (the cores' scalar GM accesses go to host memory).
//
// The timeline's view of a message: a hand-off through GM, like a cross-core flag. When tracing, the launch
// stub names the message area (cce_rt::SetKfcMessageArea: the bytes of SysWorkspaceDesc::kfcMsg at the
// workspace's start, kfc_comm.h); an AIV's copy into it (PostMessage: copy_ubuf_to_gm of the message) is
// recorded as CrossCoreSetFlag MTE3 2 <16 + sub>, and the AIC's receipt of that message (RcvMessageImpl:
// dc_preload of the message, then a read of its state bit) as CrossCoreWaitFlag S 0 <16 + sub> <1 + sub>.
// So that the receipt recorded is the one the server's code sees, the AIC holds a lock from its dc_preload
// of a message until its next intrinsic (every path from the state read reaches one: an Issue, dcci,
// dc_preload, a cross-core flag, or the kernel's end), and a post takes the same lock: no post lands
// between the recorded look and the server's read. A message written by scalar stores (the client's quit
// message, ~KfcCommClient) is not recorded and not waited for.
#ifndef TILEGEN_CCE_KFC_H
#define TILEGEN_CCE_KFC_H

#include <cstdint>

#include "cce_types.h"

namespace cce_rt {

// defined in runtime.cpp
uint8_t*& KfcWorkspace();                 // this core's system workspace (null: none set)
void SetKfcWorkspace(uint8_t* p);         // sets it (and marks the launch as one running the matmul server)
void SetKfcMessageArea(uint64_t bytes);   // the message queues' bytes at the workspace's start (per launch)
void KfcPostBegin(const uint8_t* dst);    // an AIV copy to dst begins: the lock when dst is a message
void KfcPostEnd();                        // ... ends: records the post, releases the lock
void KfcLook(const void* addr);           // the AIC looks at the message at addr (dc_preload)
void KfcRelease();                        // the AIC reaches its next intrinsic: releases the lock it holds

// Scope of one copy_ubuf_to_gm: a post when its destination is a message.
struct KfcPost {
    explicit KfcPost(const uint8_t* dst) { KfcPostBegin(dst); }
    ~KfcPost() { KfcPostEnd(); }
    KfcPost(const KfcPost&) = delete;
    KfcPost& operator=(const KfcPost&) = delete;
};

}  // namespace cce_rt

inline void __set_kfc_workspace_addr(__gm__ uint8_t* p) { cce_rt::SetKfcWorkspace(p); }
template <typename P, typename O>
inline void dc_preload(P* addr, O offset)
{
    (void)offset;
    cce_rt::KfcLook(reinterpret_cast<const void*>(addr));
}

#endif  // TILEGEN_CCE_KFC_H
