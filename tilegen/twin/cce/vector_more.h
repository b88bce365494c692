// tilegen real-API twin: more vector instructions of the AIV, the ones the high-level APIs (SoftmaxFlashV2,
// SelectWithBytesMask, ...) reach on 2201 beyond vector.h (intrinsics called by
// impl/basic_api/dav_c220/kernel_operator_vec_*_impl.h and kernel_operator_data_copy_impl.h at asc-devkit
// 0da921b9), on vector.h's execution model (repeats, masks, strides; counter mode).
//
// Semantics (asc-devkit 0da921b9 docs/zh/api/SIMD-API/基础API/Memory矢量计算/):
//  - vconv_u82f16: Cast uint8_t -> half, exact (类型转换/Cast.md);
//  - vcopy: Copy, lane-wise copy of 16- or 32-bit lanes under the mask with both operands' strides
//    (数据搬运/UB与UB数据搬运/UBToUB掩码式高维数据搬运(Copy).md);
//  - copy_ubuf_to_ubuf: DataCopy UB -> UB, blockCount bursts of blockLen 32-byte blocks, gaps in blocks, 0 a
//    NOP (数据搬运/UB与UB数据搬运/UBToUB高维切分数据搬运(DataCopy).md); run on the vector pipe (PIPE_V);
//  - vcgadd / vcgmax: ReduceDataBlock SUM / MAX (归约计算/ReduceDataBlock.md): each repeat's 8 data blocks are
//    reduced one result each (a pairwise tree for the sum), the 8 results written contiguously at
//    dst + r * dstRepStride * 8 elements; a block with no active lane writes nothing;
//  - vreducev2 + get_rsvd_cnt: GatherMask (比较与选择/GatherMask.md): the elements whose pattern bit is 1 are
//    packed contiguously into dst; built-in patterns 1-7 (even, odd, 1st/2nd/3rd/4th of each 4, all) or a
//    bit tensor src1 consumed continuously within a repeat and advanced by src1RepeatStride blocks per
//    repeat; counter mode (A2: "配置方式一") runs mask elements per repeat for repeatTimes repeats, normal
//    mode 256 bytes per repeat; RSVD_CNT (get_rsvd_cnt, GetRsvdCnt) = the elements kept.
#ifndef TILEGEN_CCE_VECTOR_MORE_H
#define TILEGEN_CCE_VECTOR_MORE_H

#include <vector>

#include "core.h"
#include "vector.h"

namespace cce_rt {
uint64_t& RsvdCntRegister();  // defined in runtime.cpp (per core)
}  // namespace cce_rt

template <typename PD, typename PS>
inline void vconv_u82f16(__ubuf__ PD* dst, __ubuf__ PS* src, uint64_t repeat, uint64_t dBlk, uint64_t sBlk, uint64_t dRep, uint64_t sRep)
{
    cce_rt::Unary<half, uint8_t>("vconv_u82f16", cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dBlk, sBlk, dRep, sRep,
                                 [](uint8_t x) -> half { return static_cast<half>(x); });
}

template <typename T>
inline void vcopy(__ubuf__ T* dst, __ubuf__ T* src, uint64_t repeat, uint64_t dBlk, uint64_t sBlk, uint64_t dRep, uint64_t sRep)
{
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "tilegen twin: vcopy on 16- or 32-bit lanes");
    cce_rt::Unary<T, T>("vcopy", cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dBlk, sBlk, dRep, sRep, [](T a) -> T { return a; });
}

template <typename T>
inline void copy_ubuf_to_ubuf(__ubuf__ T* dst, __ubuf__ T* src, uint64_t sid, uint64_t nBurst, uint64_t lenBurst, uint64_t srcGap,
                              uint64_t dstGap)
{
    (void)sid;
    const char* what = "copy_ubuf_to_ubuf";
    cce_rt::RequireAiv(what);
    if (nBurst == 0 || lenBurst == 0) return;
    const uint64_t d = cce_rt::AddrOf(dst), s = cce_rt::AddrOf(src), len = lenBurst * 32;
    cce_rt::Align(what, cce_rt::UB, d, 32);
    cce_rt::Align(what, cce_rt::UB, s, 32);
    cce_rt::TraceRepeats((nBurst * len + 255) / 256);  // the timeline prices it per 256 bytes, as a vector repeat
    const uint32_t op = cce_rt::Issue(PIPE_V);
    std::vector<uint8_t> tmp(len);
    for (uint64_t i = 0; i < nBurst; ++i) {
        const uint64_t sa = s + i * (lenBurst + srcGap) * 32, da = d + i * (lenBurst + dstGap) * 32;
        std::memcpy(tmp.data(), cce_rt::Local(what, cce_rt::UB, sa, len), len);
        cce_rt::TouchRead(what, PIPE_V, cce_rt::UB, sa, len);
        std::memcpy(cce_rt::Local(what, cce_rt::UB, da, len), tmp.data(), len);
        cce_rt::TouchWrite(what, PIPE_V, op, cce_rt::UB, da, len);
    }
}

namespace cce_rt {
template <typename T, bool kMax>
inline void BlockReduce(const char* what, uint64_t dst, uint64_t src, uint64_t repeat, uint64_t dRep, uint64_t sBlk, uint64_t sRep)
{
    static_assert(kVecFloat<T>, "tilegen twin: ReduceDataBlock on half / float");
    constexpr uint32_t lanes = 256 / sizeof(T), perBlock = 32 / sizeof(T);
    const std::vector<Lane> ls = Lanes(what, lanes, static_cast<uint32_t>(repeat));
    const uint32_t op = Issue(PIPE_V);
    const Opnd s = MakeOpnd(what, src, sizeof(T), sizeof(T), sBlk, sRep);
    if (dst % (kVecFloat<T> && sizeof(T) == 2 ? 16 : 32) != 0) Fail(what, "dst %llu not aligned", (unsigned long long)dst);
    struct Acc { bool any = false; std::vector<float> v; };
    std::vector<Acc> acc;  // per (repeat, block)
    for (const Lane& x : ls) {
        const size_t k = static_cast<size_t>(x.r) * 8 + x.l / perBlock;
        if (acc.size() <= k) acc.resize(k + 1);
        acc[k].v.resize(perBlock, kMax ? -INFINITY : 0.0f);
        acc[k].any = true;
        acc[k].v[x.l % perBlock] = static_cast<float>(ReadLane<T>(what, s, x));
    }
    for (size_t k = 0; k < acc.size(); ++k) {
        if (!acc[k].any) continue;
        float out;
        if (kMax) {
            out = -INFINITY;
            for (float f : acc[k].v) out = (f != f || out != out) ? (f != f ? f : out) : (f > out ? f : out);
        } else {
            out = TreeSum(acc[k].v);
        }
        const uint64_t r = k / 8, j = k % 8;
        const uint64_t a = dst + (r * dRep * 8 + j) * sizeof(T);
        Store<T>(Local(what, UB, a, sizeof(T)), static_cast<T>(out));
        TouchWrite(what, PIPE_V, op, UB, a, sizeof(T));
    }
}
}  // namespace cce_rt

template <typename T>
inline void vcgadd(__ubuf__ T* dst, __ubuf__ T* src, uint64_t repeat, uint64_t dRep, uint64_t sBlk, uint64_t sRep)
{
    cce_rt::BlockReduce<T, false>("vcgadd", cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dRep, sBlk, sRep);
}
template <typename T>
inline void vcgmax(__ubuf__ T* dst, __ubuf__ T* src, uint64_t repeat, uint64_t dRep, uint64_t sBlk, uint64_t sRep)
{
    cce_rt::BlockReduce<T, true>("vcgmax", cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dRep, sBlk, sRep);
}

template <typename T>
inline void vreducev2(__ubuf__ T* dst, __ubuf__ T* src0, __ubuf__ T* src1, uint64_t repeat, uint64_t s0Blk, uint64_t pattern,
                      uint64_t s0Rep, uint64_t s1Rep)
{
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "tilegen twin: GatherMask on 16- or 32-bit elements");
    const char* what = "vreducev2";
    cce_rt::RequireAiv(what);
    cce_rt::Core& c = cce_rt::Cur();
    if (pattern > 7) cce_rt::Fail(what, "pattern mode %llu not in [0, 7]", (unsigned long long)pattern);
    if (repeat > 255) cce_rt::Fail(what, "repeatTime %llu > 255", (unsigned long long)repeat);
    constexpr uint32_t perBlock = 32 / sizeof(T);
    const uint64_t perRepeat = c.maskCount ? c.maskLo : 256 / sizeof(T);
    const uint64_t d = cce_rt::AddrOf(dst), s0 = cce_rt::AddrOf(src0), s1 = cce_rt::AddrOf(src1);
    cce_rt::Align(what, cce_rt::UB, d, 32);
    cce_rt::Align(what, cce_rt::UB, s0, 32);
    cce_rt::TraceRepeats(repeat * ((perRepeat * sizeof(T) + 255) / 256));
    const uint32_t op = cce_rt::Issue(PIPE_V);
    std::vector<T> kept;
    for (uint64_t r = 0; r < repeat; ++r)
        for (uint64_t i = 0; i < perRepeat; ++i) {
            bool take;
            if (pattern == 0) {
                const uint64_t byte = s1 + r * s1Rep * 32 + i / 8;
                take = (*cce_rt::Local(what, cce_rt::UB, byte, 1) >> (i % 8)) & 1;
                cce_rt::TouchRead(what, PIPE_V, cce_rt::UB, byte, 1);
            } else {
                static constexpr uint32_t kBits[8] = {0, 0x5, 0xA, 0x1, 0x2, 0x4, 0x8, 0xF};  // of each 4 elements
                take = (kBits[pattern] >> (i % 4)) & 1;
            }
            if (!take) continue;
            const uint64_t a = s0 + r * s0Rep * 32 + (i / perBlock) * s0Blk * 32 + (i % perBlock) * sizeof(T);
            kept.push_back(cce_rt::Load<T>(cce_rt::Local(what, cce_rt::UB, a, sizeof(T))));
            cce_rt::TouchRead(what, PIPE_V, cce_rt::UB, a, sizeof(T));
        }
    for (size_t k = 0; k < kept.size(); ++k) {
        const uint64_t a = d + k * sizeof(T);
        cce_rt::Store<T>(cce_rt::Local(what, cce_rt::UB, a, sizeof(T)), kept[k]);
        cce_rt::TouchWrite(what, PIPE_V, op, cce_rt::UB, a, sizeof(T));
    }
    cce_rt::RsvdCntRegister() = kept.size();
}
inline int64_t get_rsvd_cnt() { return static_cast<int64_t>(cce_rt::RsvdCntRegister()); }

#endif  // TILEGEN_CCE_VECTOR_MORE_H
