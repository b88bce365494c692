// tilegen real-API twin: the plain DataCopy moves in 32-byte data blocks (intrinsics called by
// impl/basic_api/dav_c220/kernel_operator_data_copy_impl.h at asc-devkit 0da921b9: DataCopyGM2UBImpl,
// DataCopyUB2GMImpl, DataCopyGM2L1Impl, DataCopyL12GMImpl; the KFC message queue of the matmul server,
// impl/basic_api/dav_c220/kfc/kfc_comm.h and kfc_comm_client.h, posts its messages with copy_ubuf_to_gm and
// clears its queues with copy_cbuf_to_gm).
//
// Semantics (asc-devkit 0da921b9 docs/zh/api/SIMD-API/基础API/): GM与UB数据搬运/GM与UB高维切分数据搬运(DataCopy).md
// (DataCopyParams, table 3): blockCount bursts of blockLen data blocks of 32 B; srcGap / dstGap, also in
// data blocks, lie between the end of one burst and the start of the next, on either side; blockCount or
// blockLen 0 is a NOP. GM addresses aligned to the element, UB addresses to 32 B. The same parameters for
// GM -> L1 (矩阵计算（ISASI）/矩阵计算的搬入/矩阵数据搬入至L1-Buffer/GMToL1连续数据搬运（DataCopy）.md) and
// L1 -> GM (矩阵计算（ISASI）/矩阵计算的搬出/L1到GM数据搬运/L1ToGM连续数据搬运（DataCopy）.md). Pipes: MTE2 into
// the core, MTE3 out of it (the call sites' HardEvents: kfc_comm.h ClearWorkspaceImpl waits MTE2_MTE3
// between the L1 fill and copy_cbuf_to_gm). Stores to GM honour the atomic mode (SetAtomicAdd.md).
#ifndef TILEGEN_CCE_DATACOPY_H
#define TILEGEN_CCE_DATACOPY_H

#include "core.h"
#include "dma.h"
#include "kfc.h"

namespace cce_rt {

inline bool DataCopyNop(uint64_t nBurst, uint64_t lenBurst) { return nBurst == 0 || lenBurst == 0; }

// GM -> UB or L1 (dstBuf): burst i reads GM [src + i * (len + srcGap) * 32, +len * 32) into
// dst + i * (len + dstGap) * 32.
inline void CopyIn(const char* what, Buf dstBuf, uint64_t dst, const uint8_t* src, uint64_t nBurst, uint64_t lenBurst,
                   uint64_t srcGap, uint64_t dstGap)
{
    if (DataCopyNop(nBurst, lenBurst)) return;
    Align(what, dstBuf, dst, 32);
    if (nBurst > 4095) Fail(what, "blockCount %llu > 4095", (unsigned long long)nBurst);
    const uint64_t len = lenBurst * 32;
    const uint32_t op = Issue(PIPE_MTE2);
    for (uint64_t i = 0; i < nBurst; ++i) {
        const uint8_t* s = src + i * (lenBurst + srcGap) * 32;
        CheckGm(what, s, len);
        const uint64_t d = dst + i * (lenBurst + dstGap) * 32;
        std::memcpy(Local(what, dstBuf, d, len), s, len);
        TouchWrite(what, PIPE_MTE2, op, dstBuf, d, len);
    }
}

// UB or L1 (srcBuf) -> GM: burst i writes src + i * (len + srcGap) * 32 to GM dst + i * (len + dstGap) * 32,
// element-wise atomic when the atomic mode is on.
inline void CopyOut(const char* what, uint8_t* dst, Buf srcBuf, uint64_t src, uint64_t nBurst, uint64_t lenBurst,
                    uint64_t srcGap, uint64_t dstGap)
{
    if (DataCopyNop(nBurst, lenBurst)) return;
    Align(what, srcBuf, src, 32);
    if (nBurst > 4095) Fail(what, "blockCount %llu > 4095", (unsigned long long)nBurst);
    const uint64_t len = lenBurst * 32;
    Issue(PIPE_MTE3);
    const int t = Cur().atomicType;
    for (uint64_t i = 0; i < nBurst; ++i) {
        const uint64_t s = src + i * (lenBurst + srcGap) * 32;
        const uint8_t* p = Local(what, srcBuf, s, len);
        TouchRead(what, PIPE_MTE3, srcBuf, s, len);
        uint8_t* g = dst + i * (lenBurst + dstGap) * 32;
        CheckGm(what, g, len);
        // the element type is not passed (void pointers): poison is a whole 32-byte block of 0xFF; an atomic
        // store adds elements of the atomic type's size
        if (!Cur().atomic) StoreGm<32>(what, g, p, len);
        else if (t == 2 || t == 3) StoreGm<2>(what, g, p, len);
        else StoreGm<4>(what, g, p, len);
    }
}

}  // namespace cce_rt

template <typename T>
inline void copy_gm_to_ubuf(__ubuf__ T* dst, __gm__ T* src, uint64_t sid, uint64_t nBurst, uint64_t lenBurst, uint64_t srcGap,
                            uint64_t dstGap)
{
    (void)sid;
    cce_rt::CopyIn("copy_gm_to_ubuf", cce_rt::UB, cce_rt::AddrOf(dst), reinterpret_cast<const uint8_t*>(src), nBurst, lenBurst,
                   srcGap, dstGap);
}

template <typename T>
inline void copy_gm_to_cbuf(__cbuf__ T* dst, __gm__ T* src, int64_t sid, uint64_t nBurst, uint64_t lenBurst, uint64_t srcGap,
                            uint64_t dstGap, pad_t padMode)
{
    (void)sid;
    if (padMode != PAD_NONE) cce_rt::Fail("copy_gm_to_cbuf", "pad mode %d is not modelled (PAD_NONE is)", static_cast<int>(padMode));
    cce_rt::CopyIn("copy_gm_to_cbuf", cce_rt::L1, cce_rt::AddrOf(dst), reinterpret_cast<const uint8_t*>(src), nBurst, lenBurst,
                   srcGap, dstGap);
}

// A copy into the matmul server's message area is a message post (kfc.h).
template <typename T>
inline void copy_ubuf_to_gm(__gm__ T* dst, __ubuf__ T* src, uint64_t sid, uint64_t nBurst, uint64_t lenBurst, uint64_t srcGap,
                            uint64_t dstGap)
{
    (void)sid;
    uint8_t* g = reinterpret_cast<uint8_t*>(dst);
    cce_rt::KfcPost post(g);
    cce_rt::CopyOut("copy_ubuf_to_gm", g, cce_rt::UB, cce_rt::AddrOf(src), nBurst, lenBurst, srcGap, dstGap);
}

template <typename T>
inline void copy_cbuf_to_gm(__gm__ T* dst, __cbuf__ T* src, uint64_t sid, uint64_t nBurst, uint64_t lenBurst, uint64_t srcGap,
                            uint64_t dstGap)
{
    (void)sid;
    cce_rt::CopyOut("copy_cbuf_to_gm", reinterpret_cast<uint8_t*>(dst), cce_rt::L1, cce_rt::AddrOf(src), nBurst, lenBurst, srcGap,
                    dstGap);
}

#endif  // TILEGEN_CCE_DATACOPY_H
