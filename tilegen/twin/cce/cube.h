// tilegen real-API twin: the cube core (AIC): L1 -> L0A/L0B loads, constant fills, mad, the L0C -> GM
// fixpipe (intrinsics called by impl/basic_api/dav_c220/kernel_operator_mm_impl.h,
// kernel_operator_cube_others_impl.h and kernel_operator_fixpipe_v2_impl.h at asc-devkit 0da921b9).
//
// Fractal layouts (ascendc-api.md §3.4; docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/ Mmad, LoadData):
// a fractal is 16 rows x 32 bytes (16 x 16 for 2-byte types), 512 bytes; L0C fractals are 16 x 16 fp32.
//  - L0A (ZZ): fractal (mi, ki) at (mi * K1 + ki) * 512 B, row-major inside: (m % 16) * 16 + k % 16;
//  - L0B (ZN): fractal (ki, ni) at (ki * N1 + ni) * 512 B, column-major inside: (n % 16) * 16 + k % 16;
//  - L0C (NZ): fractal (mi, ni) at (ni * M1 + mi) * 1024 B, row-major inside: (m % 16) * 16 + n % 16.
#ifndef TILEGEN_CCE_CUBE_H
#define TILEGEN_CCE_CUBE_H

#include "core.h"
#include "dma.h"
#include "unitflag.h"

#include <vector>

namespace cce_rt {

inline void RequireAic(const char* what)
{
    if (!Cur().aic) Fail(what, "cube instruction on an AIV");
}

// load_cbuf_to_ca / _cb (LoadData 2D doc, L1 -> L0A/L0B): repeat r moves the 512-byte fractal
// (startIndex + r * srcStride) of src to fractal r * (1 + dstGap) of dst; transpose transposes each
// 16 x 16 fractal (2-byte types only). repeatTimes 0 does nothing. Pipe MTE1.
template <typename T>
inline void Load2D(const char* what, Buf dstBuf, uint64_t dst, uint64_t src, uint64_t startIndex, uint64_t repeat,
                   uint64_t srcStride, uint64_t dstGap, bool transpose)
{
    RequireAic(what);
    Align(what, dstBuf, dst, 512);
    Align(what, L1, src, 32);
    if (transpose && sizeof(T) != 2) Fail(what, "transpose of %zu-byte elements is not modelled", sizeof(T));
    const uint32_t op = Issue(PIPE_MTE1);
    for (uint64_t r = 0; r < repeat; ++r) {
        const uint64_t s = src + (startIndex + r * srcStride) * 512;
        const uint64_t d = dst + r * (1 + dstGap) * 512;
        const uint8_t* sp = Local(what, L1, s, 512);
        TouchRead(what, PIPE_MTE1, L1, s, 512);
        uint8_t* dp = Local(what, dstBuf, d, 512);
        if (!transpose) {
            std::memcpy(dp, sp, 512);
        } else {
            for (int i = 0; i < 16; ++i)
                for (int j = 0; j < 16; ++j) std::memcpy(dp + (j * 16 + i) * 2, sp + (i * 16 + j) * 2, 2);
        }
        TouchWrite(what, PIPE_MTE1, op, dstBuf, d, 512);
    }
}

// create_{ca,cb,cbuf}_matrix(dst, repeatBit, value) (Fill / InitConstValue doc; repeatBit packing in
// InitL1BufferCal / InitL0ANzMatrixCal of kernel_operator_mm_impl.h): repeatTimes = bits [15:0],
// blockNum = [31:16], dstGap = [47:32]. Each repeat fills blockNum blocks, then skips dstGap blocks; a
// block is 32 B in L1 and 512 B in L0A/L0B. "repeatTimes = 0 or blockNum = 0: NOP". Pipe MTE2 for
// L1, MTE1 for L0A/L0B (constraints of the same page).
template <typename T>
inline void Fill(const char* what, Buf b, uint64_t dst, uint64_t repeatBit, T value)
{
    RequireAic(what);
    const uint64_t blk = b == L1 ? 32 : 512;
    Align(what, b, dst, blk);
    const uint64_t repeat = repeatBit & 0xffff, blockNum = (repeatBit >> 16) & 0xffff, gap = (repeatBit >> 32) & 0xffff;
    const int pipe = b == L1 ? PIPE_MTE2 : PIPE_MTE1;
    const uint32_t op = Issue(pipe);
    for (uint64_t r = 0; r < repeat; ++r) {
        const uint64_t d = dst + r * (blockNum + gap) * blk;
        if (blockNum == 0) break;
        uint8_t* p = Local(what, b, d, blockNum * blk);
        for (uint64_t e = 0; e < blockNum * blk; e += sizeof(T)) Store<T>(p + e, value);
        TouchWrite(what, pipe, op, b, d, blockNum * blk);
    }
}

// mad(c, a, b, m, k, n, unitFlag, kDirectionAlign, cmatrixSource, cmatrixInitVal) (Mmad doc):
// c[m x n] = (cmatrixInitVal ? 0 : c) + a[m x k] . b[k x n], fp32 accumulation of exact products in k
// order; lanes outside m x n are not written; K padding inside the last fractal is ignored. Pipe M.
template <typename C, typename A, typename B>
inline void Mad(uint64_t c, uint64_t a, uint64_t b, uint64_t m, uint64_t k, uint64_t n, bool source, bool init, uint64_t unitFlag = 0)
{
    const char* what = "mad";
    RequireAic(what);
    static_assert(sizeof(A) == 2 && sizeof(B) == 2 && std::is_same_v<C, float>, "tilegen twin: mad models fp16/bf16 -> fp32");
    if (source) Fail(what, "cmatrixSource (bias table) is not modelled");
    if (m < 1 || k < 1 || n < 1 || m > 4095 || k > 4095 || n > 4095)
        Fail(what, "m %llu, k %llu, n %llu not in [1, 4095]", (unsigned long long)m, (unsigned long long)k, (unsigned long long)n);
    Align(what, L0A, a, 512);
    Align(what, L0B, b, 512);
    Align(what, L0C, c, 64);
    const uint64_t M1 = (m + 15) / 16, K1 = (k + 15) / 16, N1 = (n + 15) / 16;
    const uint8_t* pa = Local(what, L0A, a, M1 * K1 * 512);
    const uint8_t* pb = Local(what, L0B, b, K1 * N1 * 512);
    uint8_t* pc = Local(what, L0C, c, M1 * N1 * 1024);
    if (unitFlag >= 2) UnitFlagsBefore(what, true, c, M1 * N1 * 1024);  // unitflag.h
    const uint32_t op = Issue(PIPE_M);
    TraceSizes(static_cast<int64_t>(m), static_cast<int64_t>(n), static_cast<int64_t>(k));
    TouchRead(what, PIPE_M, L0A, a, M1 * K1 * 512);
    TouchRead(what, PIPE_M, L0B, b, K1 * N1 * 512);
    if (!init) TouchRead(what, PIPE_M, L0C, c, M1 * N1 * 1024);
    std::vector<float> fa(m * k), fb(k * n);
    for (uint64_t i = 0; i < m; ++i)
        for (uint64_t j = 0; j < k; ++j)
            fa[i * k + j] = static_cast<float>(Load<A>(pa + ((i / 16) * K1 + j / 16) * 512 + ((i % 16) * 16 + j % 16) * 2));
    for (uint64_t j = 0; j < k; ++j)
        for (uint64_t x = 0; x < n; ++x)
            fb[j * n + x] = static_cast<float>(Load<B>(pb + ((j / 16) * N1 + x / 16) * 512 + ((x % 16) * 16 + j % 16) * 2));
    for (uint64_t i = 0; i < m; ++i)
        for (uint64_t x = 0; x < n; ++x) {
            uint8_t* e = pc + ((x / 16) * M1 + i / 16) * 1024 + ((i % 16) * 16 + x % 16) * 4;
            float acc = init ? 0.0f : Load<float>(e);
            for (uint64_t j = 0; j < k; ++j) acc += fa[i * k + j] * fb[j * n + x];
            Store<float>(e, acc);
        }
    TouchWrite(what, PIPE_M, op, L0C, c, M1 * N1 * 1024);
    if (unitFlag == 3) UnitFlagsAfter(true, c, M1 * N1 * 1024);
}

// copy_matrix_cc_to_gm(dst, src, sid, nSize, mSize, dstStride, srcStride, unitFlag, quantPre, relu,
// channelSplit, nz2ndEn) (Fixpipe doc, FixpipeParamsV220; argument order in FixpipeL0cToOut of
// kernel_operator_fixpipe_v2_impl.h). With nz2ndEn (CFG_ROW_MAJOR) and ND_PARA ndNum = 1:
// dst[m * dstStride + n] = conv(src[(n / 16) * srcStride * 16 + m * 16 + n % 16]), m < mSize, n < nSize;
// srcStride in 16-element rows. conv: NoQuant fp32, F322F16 / F322BF16 round to nearest even; relu
// clamps at 0. Atomic add applies when set. Pipe FIX.
template <typename D>
inline void FixToGm(uint8_t* dst, uint64_t src, uint64_t nSize, uint64_t mSize, uint64_t dstStride, uint64_t srcStride,
                    int quantPre, bool relu, bool channelSplit, bool nz2nd, uint64_t unitFlag = 0)
{
    const char* what = "copy_matrix_cc_to_gm";
    RequireAic(what);
    Core& c = Cur();
    if (!nz2nd) Fail(what, "NZ output (nz2ndEn = false) is not modelled");
    if (channelSplit) Fail(what, "channel split is not modelled");
    if ((c.ndPara & 0xffff) != 1) Fail(what, "ND_PARA ndNum %llu != 1 is not modelled", (unsigned long long)(c.ndPara & 0xffff));
    if (nSize < 1 || nSize > 4095 || mSize < 1 || mSize > 65535) Fail(what, "nSize %llu / mSize %llu out of range", (unsigned long long)nSize, (unsigned long long)mSize);
    if (srcStride < mSize) Fail(what, "srcStride %llu rows < mSize %llu", (unsigned long long)srcStride, (unsigned long long)mSize);
    const bool ok = (quantPre == NoQuant && sizeof(D) == 4) || (quantPre == F322F16 && std::is_same_v<D, half>) ||
                    (quantPre == F322BF16 && std::is_same_v<D, bfloat16_t>);
    if (!ok) Fail(what, "quantPre %d with a %zu-byte destination is not modelled", quantPre, sizeof(D));
    Align(what, L0C, src, 64);
    const uint64_t N1 = (nSize + 15) / 16;
    const uint64_t span = (N1 - 1) * srcStride * 64 + mSize * 64;  // the L0C bytes it reads, first to last
    if (unitFlag >= 2) UnitFlagsBefore(what, false, src, span);  // unitflag.h
    Issue(PIPE_FIX);
    TouchRead(what, PIPE_FIX, L0C, src, span);
    std::vector<uint8_t> row(nSize * sizeof(D));
    for (uint64_t m = 0; m < mSize; ++m) {
        for (uint64_t n = 0; n < nSize; ++n) {
            const uint8_t* e = Local(what, L0C, src + ((n / 16) * srcStride * 16 + m * 16 + n % 16) * 4, 4);
            if (IsPoison<float>(e)) Fail(what, "stores uninitialised L0C (0xFF poison) to GM at row %llu column %llu", (unsigned long long)m, (unsigned long long)n);
            float v = Load<float>(e);
            if (relu && v < 0.0f) v = 0.0f;
            Store<D>(row.data() + n * sizeof(D), static_cast<D>(v));
        }
        uint8_t* g = dst + m * dstStride * sizeof(D);
        CheckGm(what, g, row.size());
        StoreGm<sizeof(D)>(what, g, row.data(), row.size());
    }
    if (unitFlag == 3) UnitFlagsAfter(false, src, span);
}

}  // namespace cce_rt

template <typename T>
inline void load_cbuf_to_ca(__ca__ T* dst, __cbuf__ T* src, uint64_t startIndex, uint64_t repeat, uint64_t srcStride,
                            uint64_t dstGap, uint64_t sid, uint64_t transpose, addr_cal_mode_t mode)
{
    (void)sid;
    if (mode != inc) cce_rt::Fail("load_cbuf_to_ca", "addr_cal_mode dec is not modelled");
    cce_rt::Load2D<T>("load_cbuf_to_ca", cce_rt::L0A, cce_rt::AddrOf(dst), cce_rt::AddrOf(src), startIndex, repeat, srcStride,
                      dstGap, transpose != 0);
}
template <typename T>
inline void load_cbuf_to_cb(__cb__ T* dst, __cbuf__ T* src, uint64_t startIndex, uint64_t repeat, uint64_t srcStride,
                            uint64_t dstGap, uint64_t sid, uint64_t transpose, addr_cal_mode_t mode)
{
    (void)sid;
    if (mode != inc) cce_rt::Fail("load_cbuf_to_cb", "addr_cal_mode dec is not modelled");
    cce_rt::Load2D<T>("load_cbuf_to_cb", cce_rt::L0B, cce_rt::AddrOf(dst), cce_rt::AddrOf(src), startIndex, repeat, srcStride,
                      dstGap, transpose != 0);
}

namespace cce_rt {
// The fill value as T: the headers pass fp32/int32 fills as their bit pattern in a uint32_t.
template <typename T, typename V>
inline T FillValue(V v)
{
    if constexpr (std::is_integral_v<V> && !std::is_integral_v<T> && sizeof(V) == sizeof(T)) {
        T t;
        std::memcpy(&t, &v, sizeof(T));
        return t;
    } else {
        return static_cast<T>(v);
    }
}
}  // namespace cce_rt

template <typename T, typename V>
inline void create_ca_matrix(__ca__ T* dst, int64_t repeatBit, V value)
{
    cce_rt::Fill<T>("create_ca_matrix", cce_rt::L0A, cce_rt::AddrOf(dst), static_cast<uint64_t>(repeatBit), cce_rt::FillValue<T>(value));
}
template <typename T, typename V>
inline void create_cb_matrix(__cb__ T* dst, int64_t repeatBit, V value)
{
    cce_rt::Fill<T>("create_cb_matrix", cce_rt::L0B, cce_rt::AddrOf(dst), static_cast<uint64_t>(repeatBit), cce_rt::FillValue<T>(value));
}
template <typename T, typename V>
inline void create_cbuf_matrix(__cbuf__ T* dst, int64_t repeatBit, V value)
{
    cce_rt::Fill<T>("create_cbuf_matrix", cce_rt::L1, cce_rt::AddrOf(dst), static_cast<uint64_t>(repeatBit), cce_rt::FillValue<T>(value));
}
template <typename T, typename V>
inline void create_ca_matrix_bf16(__ca__ T* dst, int64_t repeatBit, V value)
{
    cce_rt::Fill<bfloat16_t>("create_ca_matrix_bf16", cce_rt::L0A, cce_rt::AddrOf(dst), static_cast<uint64_t>(repeatBit), bfloat16_t(value));
}
template <typename T, typename V>
inline void create_cb_matrix_bf16(__cb__ T* dst, int64_t repeatBit, V value)
{
    cce_rt::Fill<bfloat16_t>("create_cb_matrix_bf16", cce_rt::L0B, cce_rt::AddrOf(dst), static_cast<uint64_t>(repeatBit), bfloat16_t(value));
}
template <typename T, typename V>
inline void create_cbuf_matrix_bf16(__cbuf__ T* dst, int64_t repeatBit, V value)
{
    cce_rt::Fill<bfloat16_t>("create_cbuf_matrix_bf16", cce_rt::L1, cce_rt::AddrOf(dst), static_cast<uint64_t>(repeatBit), bfloat16_t(value));
}

template <typename C, typename A, typename B>
inline void mad(__cc__ C* c, __ca__ A* a, __cb__ B* b, uint64_t m, uint64_t k, uint64_t n, uint64_t unitFlag,
                bool kDirectionAlign, bool cmatrixSource, bool cmatrixInitVal)
{
    (void)kDirectionAlign;
    cce_rt::Mad<C, A, B>(cce_rt::AddrOf(c), cce_rt::AddrOf(a), cce_rt::AddrOf(b), m, k, n, cmatrixSource, cmatrixInitVal, unitFlag);
}

template <typename D, typename S>
inline void copy_matrix_cc_to_gm(__gm__ D* dst, __cc__ S* src, uint64_t sid, uint64_t nSize, uint64_t mSize, uint64_t dstStride,
                                 uint64_t srcStride, uint64_t unitFlag, QuantMode_t quantPre, uint64_t relu, bool channelSplit,
                                 bool nz2ndEn)
{
    (void)sid;
    cce_rt::FixToGm<D>(reinterpret_cast<uint8_t*>(dst), cce_rt::AddrOf(src), nSize, mSize, dstStride, srcStride, quantPre, relu != 0,
                       channelSplit, nz2ndEn, unitFlag);
}

// Fixpipe / load configuration registers (kernel_operator_fixpipe_impl.h SetFixpipeNz2ndFlagImpl: ND_PARA
// [15:0] ndNum, [31:16] srcNdStride, [47:32] dstNdStride; QUANT_PRE; the Load3D padding and L1 size).
inline void set_nd_para(uint64_t v) { cce_rt::Cur().ndPara = v; }
inline void set_quant_pre(uint64_t v) { cce_rt::Cur().quantPre = v; }
inline void set_padding(uint64_t v) { cce_rt::Cur().padding = v; }
inline void set_l1_3d_size(uint64_t v) { cce_rt::Cur().l13dSize = v; }
inline void set_fpc(uint64_t v) { (void)v; }

#endif  // TILEGEN_CCE_CUBE_H
