// tilegen real-API twin: the checks of the semantic rules (include/twin/rules.h) that no single
// intrinsic file owns: the PIPE_S pairs of set_flag/wait_flag, and Huawei's sanitizer report hook.
// The cross-core rules live with the flags (runtime.cpp), the buffer ones with Local() (core.h).
#ifndef TILEGEN_CCE_RULES_H
#define TILEGEN_CCE_RULES_H

#include <cstddef>
#include <type_traits>

#include "core.h"

namespace cce_rt {

// Rule pipe-s-pair: on the AIC no SetFlag/WaitFlag pair has PIPE_S on either side (表2 of
// 核内同步能力概述.md: its PIPE_S row and column are "不涉及", the pair does not exist in hardware). The
// headers pass such a HardEvent (FIX_S, M_S, MTE2_S, S_MTE2, MTE3_S, S_MTE3) straight to set_flag/wait_flag.
inline void CheckPipeSPair(const char* what, int src, int dst)
{
    if (Cur().aic && (src == PIPE_S || dst == PIPE_S))
        FailRule(what, twin_rules::kPipeSPair, nullptr,
                 "%s -> %s on the AIC, where no SetFlag/WaitFlag pair involves PIPE_S (表2: 不涉及)",
                 src >= 0 && src < kPipes ? kPipeName[src] : "?", dst >= 0 && dst < kPipes ? kPipeName[dst] : "?");
}

// ---- the sanitizer report hook -------------------------------------------------------------------
// The headers wrap every vector instruction in `if ASCEND_IS_AIV` and every cube one in `if ASCEND_IS_AIC`
// (e.g. impl/basic_api/dav_c220/kernel_operator_vec_binary_impl.h:70, kernel_operator_mm_impl.h:33), so a
// call on the other core type compiles to nothing, on the NPU as here: no intrinsic ever sees it. Built
// with __MSTX_DFX_REPORT__ (as for msSanitizer), every vector API and every DataCopy / DataCopyPad first
// reports its name and its tensors through __mstx_dfx_report_stub, outside that guard
// (impl/basic_api/mstx_local_tensor_info.h: report types MSTX_VEC_* 3000-3024, MSTX_DATA_COPY 4001,
// MSTX_DATA_COPY_PAD 4002; each tensor as {address space, address, element count, element bits}). The
// twin checks there: a vector API on the AIC, a local tensor of a level the core does not have (rule
// core-type) and a tensor running past its level's capacity (rule local-capacity), such as a 430 KB UB
// buffer from InitBuffer, which no intrinsic sees whole. Mmad, LoadData and Fixpipe report nothing:
// on an AIV they stay invisible (tilegen/twin/README.md, "Rules").
namespace mstx {

// MstxTensorAddressSpace: PRIVATE, GM, L1, L0A, L0B, L0C, UB
constexpr int kSpaceBuf[7] = {-1, -1, L1, L0A, L0B, L0C, UB};
// The capacity an InitBuffer'd tensor may reach: the buffer, less the top 128 B of L1 (TOTAL_L1_SIZE
// of 2201 = 512 KiB - KFC_L1_RESERVER_SIZE, impl/basic_api/utils/kernel_utils_constants.h:135).
constexpr uint32_t kCapacity[NBUF] = {kBufSize[UB], kBufSize[L1] - 128, kBufSize[L0A], kBufSize[L0B], kBufSize[L0C]};

template <typename Desc>
inline void Tensor(const char* api, const char* role, const Desc& t)
{
    const int space = static_cast<int>(t.space);
    if (space < 0 || space > 6 || kSpaceBuf[space] < 0) return;  // GM or no physical buffer
    const Buf b = static_cast<Buf>(kSpaceBuf[space]);
    Core& c = Cur();
    if (c.buf[b] == nullptr)
        FailRule(api, twin_rules::kCoreType, nullptr, "%s tensor in %s on %s, which has no %s (%s runs on %s)", role,
                 kBufName[b], c.aic ? "the AIC" : "an AIV", kBufName[b], api, c.aic ? "the AIVs" : "the AIC");
    const uint64_t bytes = (static_cast<uint64_t>(t.size) * t.dataBits + 7) / 8;
    if (t.addr + bytes > kCapacity[b] || t.addr + bytes < t.addr)
        FailRule(api, twin_rules::kLocalCapacity, b == L0A || b == L0B ? twin_rules::kCapacityL0 : twin_rules::kCapacity2201,
                 "%s tensor: %s bytes [%llu, %llu) outside the %u-byte buffer%s", role, kBufName[b],
                 (unsigned long long)t.addr, (unsigned long long)(t.addr + bytes), kCapacity[b],
                 b == L1 ? " (L1 less the 128 B the KFC reserves)" : "");
}

// Each report struct names its tensors dst, src, src0, src1, tmp, shared, mask, src0Offset (the ones it has).
// Not every report fills every one (the struct is a plain local): Select's tensor-scalar forms leave src1
// unset (scalarMode), its form without a selMask leaves mask unset, one Transpose form leaves shared unset
// (impl/basic_api/mstx_local_tensor_info.h:939, 1316-1458). The twin reads only the ones always filled.
#define CCE_MSTX_TENSOR(F)                                                                         \
    template <typename D>                                                                          \
    inline auto Visit_##F(const char* api, const D& d, int)->decltype((void)d.F.space, void())     \
    {                                                                                              \
        Tensor(api, #F, d.F);                                                                      \
    }                                                                                              \
    template <typename D>                                                                          \
    inline void Visit_##F(const char*, const D&, long)                                             \
    {                                                                                              \
    }
CCE_MSTX_TENSOR(dst)
CCE_MSTX_TENSOR(src)
CCE_MSTX_TENSOR(src0)
CCE_MSTX_TENSOR(src1)
CCE_MSTX_TENSOR(tmp)
CCE_MSTX_TENSOR(src0Offset)
#undef CCE_MSTX_TENSOR
// Select's tensor-scalar mode: src1 is a scalar, and the report leaves its tensor unset.
template <typename D>
inline auto ScalarMode(const D& d, int) -> decltype(static_cast<bool>(d.scalarMode))
{
    return static_cast<bool>(d.scalarMode);
}
template <typename D>
inline bool ScalarMode(const D&, long)
{
    return false;
}

// The API's name (every report struct of the APIs ends with char name[64], filled by CopyName).
template <typename D>
inline auto NameOf(char (&out)[65], const D& d, int) -> decltype((void)d.name[0], void())
{
    for (size_t i = 0; i < sizeof(d.name) && i < 64 && d.name[i] != '\0'; ++i) out[i] = d.name[i];
}
template <typename D>
inline void NameOf(char (&out)[65], const D&, long)
{
    out[0] = '?';
}

}  // namespace mstx
}  // namespace cce_rt

template <typename Desc>
inline void __mstx_dfx_report_stub(uint32_t type, uint64_t size, Desc* desc)
{
    (void)size;
    if (type < 3000 || type > 4002 || desc == nullptr) return;  // KFC / HCCL records: not reported by the APIs used here
    char api[65] = {};
    cce_rt::mstx::NameOf(api, *desc, 0);
    if (type < 4000 && cce_rt::Cur().aic)
        cce_rt::FailRule(api, twin_rules::kCoreType, nullptr,
                         "vector instruction on the AIC; the Vector unit and UB are on the AIVs, and the headers compile it "
                         "out of the cube pass (if ASCEND_IS_AIV): on the NPU it does nothing");
    cce_rt::mstx::Visit_dst(api, *desc, 0);
    cce_rt::mstx::Visit_src(api, *desc, 0);
    cce_rt::mstx::Visit_src0(api, *desc, 0);
    if (!cce_rt::mstx::ScalarMode(*desc, 0)) cce_rt::mstx::Visit_src1(api, *desc, 0);
    cce_rt::mstx::Visit_tmp(api, *desc, 0);
    cce_rt::mstx::Visit_src0Offset(api, *desc, 0);
}
inline void __mstx_dfx_report_stub(uint32_t, uint64_t, std::nullptr_t) {}

#endif  // TILEGEN_CCE_RULES_H
