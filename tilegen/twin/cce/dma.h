// tilegen real-API twin: data moves GM <-> UB and GM -> L1 (intrinsics called by
// impl/basic_api/dav_c220/kernel_operator_data_copy_impl.h at asc-devkit 0da921b9).
//
// Semantics (asc-devkit 0da921b9 docs/zh/api/SIMD-API/基础API/):
//  - copy_gm_to_ubuf_align_bN / copy_ubuf_to_gm_align_bN: DataCopyPad (GM->VECIN, VECOUT->GM):
//    blockCount bursts of blockLen BYTES; the GM side strides in bytes, the UB side in 32-byte blocks;
//    each UB burst starts 32-byte aligned and holds leftPad elements, the data, rightPad elements
//    (filled with the set_mov_pad_val value), up to the next 32-byte boundary (bytes left there are
//    not written). Pipes MTE2 (GM -> UB) and MTE3 (UB -> GM).
//  - copy_gm_to_cbuf_multi_nd2nz_bN: 矩阵数据搬入至L1-Buffer/GMToL1随路转换-ND2NZ搬运（DataCopy）.md:
//    dst[i*dstNzMatrixStride + (c/C0)*dstNzC0Stride*C0 + r*dstNzNStride*C0 + c%C0] =
//        src[i*srcNdMatrixStride + r*srcDValue + c] (c < dValue), 0 for dValue <= c < ceil(dValue, C0);
//    strides dstNzC0Stride/dstNzNStride in 32-byte blocks, the others in elements; pipe MTE2.
#ifndef TILEGEN_CCE_DMA_H
#define TILEGEN_CCE_DMA_H

#include "core.h"

namespace cce_rt {

inline void PadFill(uint8_t* p, uint32_t elems, uint32_t size, uint64_t val)
{
    for (uint32_t e = 0; e < elems; ++e) std::memcpy(p + static_cast<uint64_t>(e) * size, &val, size);
}

template <uint32_t kSize>
inline void GmToUb(const char* what, uint64_t dst, const uint8_t* src, uint16_t nBurst, uint32_t lenBurst, uint8_t leftPad,
                   uint8_t rightPad, uint32_t srcGap, uint32_t dstGap)
{
    Core& c = Cur();
    Align(what, UB, dst, 32);
    if (nBurst == 0 || lenBurst == 0) Fail(what, "blockCount %u / blockLen %u must be >= 1", nBurst, lenBurst);
    if (lenBurst % kSize != 0) Fail(what, "blockLen %u bytes is not a multiple of the %u-byte element", lenBurst, kSize);
    if (leftPad * kSize > 32 || rightPad * kSize > 32) Fail(what, "padding %u/%u elements beyond 32 bytes", leftPad, rightPad);
    const uint64_t ubBurst = (static_cast<uint64_t>(leftPad + rightPad) * kSize + lenBurst + 31) / 32 * 32;
    const uint32_t op = Issue(PIPE_MTE2);
    for (uint32_t i = 0; i < nBurst; ++i) {
        const uint8_t* s = src + static_cast<uint64_t>(i) * (lenBurst + srcGap);
        CheckGm(what, s, lenBurst);
        const uint64_t d = dst + static_cast<uint64_t>(i) * (ubBurst + static_cast<uint64_t>(dstGap) * 32);
        uint8_t* p = Local(what, UB, d, ubBurst);
        PadFill(p, leftPad, kSize, c.movPadVal);
        std::memcpy(p + leftPad * kSize, s, lenBurst);
        PadFill(p + leftPad * kSize + lenBurst, rightPad, kSize, c.movPadVal);
        TouchWrite(what, PIPE_MTE2, op, UB, d, leftPad * kSize + lenBurst + rightPad * kSize);
    }
}

// Atomic accumulate of one element into GM in the set atomic type (SetAtomicAdd doc).
template <typename T>
inline void AtomicAddElem(uint8_t* g, const uint8_t* v)
{
    T a = Load<T>(g), b = Load<T>(v);
    Store<T>(g, FromF<T>(ToF(a) + ToF(b)));
}

template <uint32_t kSize>
inline void StoreGm(const char* what, uint8_t* g, const uint8_t* src, uint64_t bytes)
{
    Core& c = Cur();
    for (uint64_t e = 0; e < bytes; e += kSize)
        if (IsPoison<uint8_t[kSize]>(src + e))
            Fail(what, "stores uninitialised local memory (0xFF poison) to GM at element %llu", (unsigned long long)(e / kSize));
    if (!c.atomic) {
        std::memcpy(g, src, bytes);
        return;
    }
    const bool ok = (kSize == 4 && (c.atomicType == 1 || c.atomicType == 4)) || (kSize == 2 && (c.atomicType == 2 || c.atomicType == 3));
    if (!ok) Fail(what, "atomic add of %u-byte elements with atomic type %d (SetAtomicAdd<T> must match the data)", kSize, c.atomicType);
    AtomicLock();
    for (uint64_t e = 0; e < bytes; e += kSize) {
        if (c.atomicType == 1) AtomicAddElem<float>(g + e, src + e);
        else if (c.atomicType == 4) Store<int32_t>(g + e, Load<int32_t>(g + e) + Load<int32_t>(src + e));
        else if (c.atomicType == 2) AtomicAddElem<half>(g + e, src + e);
        else AtomicAddElem<bfloat16_t>(g + e, src + e);
    }
    AtomicUnlock();
}

template <uint32_t kSize>
inline void UbToGm(const char* what, uint8_t* dst, uint64_t src, uint16_t nBurst, uint32_t lenBurst, uint32_t srcGap,
                   uint32_t dstGap)
{
    Align(what, UB, src, 32);
    if (nBurst == 0 || lenBurst == 0) Fail(what, "blockCount %u / blockLen %u must be >= 1", nBurst, lenBurst);
    if (lenBurst % kSize != 0) Fail(what, "blockLen %u bytes is not a multiple of the %u-byte element", lenBurst, kSize);
    const uint64_t ubBurst = (lenBurst + 31ull) / 32 * 32;
    Issue(PIPE_MTE3);
    for (uint32_t i = 0; i < nBurst; ++i) {
        const uint64_t s = src + static_cast<uint64_t>(i) * (ubBurst + static_cast<uint64_t>(srcGap) * 32);
        const uint8_t* p = Local(what, UB, s, lenBurst);
        TouchRead(what, PIPE_MTE3, UB, s, lenBurst);
        uint8_t* g = dst + static_cast<uint64_t>(i) * (lenBurst + dstGap);
        CheckGm(what, g, lenBurst);
        StoreGm<kSize>(what, g, p, lenBurst);
    }
}

template <uint32_t kSize>
inline void Nd2Nz(const char* what, uint64_t dst, const uint8_t* src, uint16_t ndNum, uint16_t nValue, uint16_t dValue,
                  uint16_t srcNdMatrixStride, uint16_t srcDValue, uint16_t dstNzC0Stride, uint16_t dstNzNStride,
                  uint16_t dstNzMatrixStride)
{
    Align(what, L1, dst, 32);
    if (ndNum == 0 || nValue == 0 || dValue == 0) return;  // documented NOPs
    constexpr uint32_t C0 = 32 / kSize;
    const uint32_t dPad = (dValue + C0 - 1) / C0 * C0;
    const uint32_t op = Issue(PIPE_MTE2);
    for (uint32_t i = 0; i < ndNum; ++i) {
        for (uint32_t r = 0; r < nValue; ++r) {
            const uint8_t* s = src + (static_cast<uint64_t>(i) * srcNdMatrixStride + static_cast<uint64_t>(r) * srcDValue) * kSize;
            CheckGm(what, s, static_cast<uint64_t>(dValue) * kSize);
            for (uint32_t g = 0; g < dPad / C0; ++g) {
                const uint64_t e = static_cast<uint64_t>(i) * dstNzMatrixStride + static_cast<uint64_t>(g) * dstNzC0Stride * C0 +
                                   static_cast<uint64_t>(r) * dstNzNStride * C0;
                uint8_t* d = Local(what, L1, dst + e * kSize, 32);
                for (uint32_t k = 0; k < C0; ++k) {
                    const uint32_t col = g * C0 + k;
                    if (col < dValue) std::memcpy(d + k * kSize, s + static_cast<uint64_t>(col) * kSize, kSize);
                    else std::memset(d + k * kSize, 0, kSize);
                }
                TouchWrite(what, PIPE_MTE2, op, L1, dst + e * kSize, 32);
            }
        }
    }
}

}  // namespace cce_rt

#define TILEGEN_CCE_GM2UB(name, size)                                                                            \
    template <typename T>                                                                                        \
    inline void name(__ubuf__ T* dst, __gm__ T* src, uint8_t sid, uint16_t nBurst, uint32_t lenBurst, uint8_t leftPad, \
                     uint8_t rightPad, uint32_t srcGap, uint32_t dstGap)                                          \
    {                                                                                                            \
        (void)sid;                                                                                               \
        cce_rt::GmToUb<size>(#name, cce_rt::AddrOf(dst), reinterpret_cast<const uint8_t*>(src), nBurst, lenBurst,  \
                             leftPad, rightPad, srcGap, dstGap);                                                 \
    }
TILEGEN_CCE_GM2UB(copy_gm_to_ubuf_align_b8, 1)
TILEGEN_CCE_GM2UB(copy_gm_to_ubuf_align_b16, 2)
TILEGEN_CCE_GM2UB(copy_gm_to_ubuf_align_b32, 4)
#undef TILEGEN_CCE_GM2UB

#define TILEGEN_CCE_UB2GM(name, size)                                                                            \
    template <typename T>                                                                                        \
    inline void name(__gm__ T* dst, __ubuf__ T* src, uint8_t sid, uint16_t nBurst, uint32_t lenBurst, uint8_t leftPad, \
                     uint8_t rightPad, uint32_t srcGap, uint32_t dstGap)                                          \
    {                                                                                                            \
        (void)sid; (void)leftPad; (void)rightPad;                                                                \
        cce_rt::UbToGm<size>(#name, reinterpret_cast<uint8_t*>(dst), cce_rt::AddrOf(src), nBurst, lenBurst, srcGap, \
                             dstGap);                                                                            \
    }
TILEGEN_CCE_UB2GM(copy_ubuf_to_gm_align_b8, 1)
TILEGEN_CCE_UB2GM(copy_ubuf_to_gm_align_b16, 2)
TILEGEN_CCE_UB2GM(copy_ubuf_to_gm_align_b32, 4)
#undef TILEGEN_CCE_UB2GM

// set_mov_pad_val: the pad value register of DataCopyPad (the element's bit pattern).
inline void set_mov_pad_val(uint64_t v) { cce_rt::Cur().movPadVal = v; }

#define TILEGEN_CCE_ND2NZ(name, size)                                                                             \
    template <typename T>                                                                                         \
    inline void name(__cbuf__ T* dst, __gm__ T* src, uint8_t sid, uint16_t ndNum, uint16_t nValue, uint16_t dValue, \
                     uint16_t srcNdMatrixStride, uint16_t srcDValue, uint16_t dstNzC0Stride, uint16_t dstNzNStride,   \
                     uint16_t dstNzMatrixStride)                                                                  \
    {                                                                                                             \
        (void)sid;                                                                                                \
        cce_rt::Nd2Nz<size>(#name, cce_rt::AddrOf(dst), reinterpret_cast<const uint8_t*>(src), ndNum, nValue, dValue, \
                            srcNdMatrixStride, srcDValue, dstNzC0Stride, dstNzNStride, dstNzMatrixStride);           \
    }
TILEGEN_CCE_ND2NZ(copy_gm_to_cbuf_multi_nd2nz_b8, 1)
TILEGEN_CCE_ND2NZ(copy_gm_to_cbuf_multi_nd2nz_b16, 2)
TILEGEN_CCE_ND2NZ(copy_gm_to_cbuf_multi_nd2nz_b32s, 4)
#undef TILEGEN_CCE_ND2NZ

#endif  // TILEGEN_CCE_DMA_H
