// tilegen runtime for Ascend C kernels on 910B (NPU arch 2201, `--npu-arch=dav-2201`).
//
// Small fixed building blocks that the generated kernels call with the parameters the compiler
// computed: integer helpers in 64 bits, tile moves (GM <-> UB with DataCopyPad, GM -> L1 with the ND->NZ
// DataCopy, L1 -> L0A/L0B with LoadData, L0C -> GM with Fixpipe), a tile matmul on the cube, row-wise
// vector helpers and the cube<->vector hand-off through a per-core GM workspace with cross-core flags.
// Pipe synchronisation is conservative: every move is followed by its consumer's wait, so no two pipes
// overlap (correctness first; overlap is future work).
//
// API sources (asc-devkit docs/api/context/<Name>.md at cannmirror/asc-devkit@452bbfb9, summarised in
// tilegen's ascendc-api notes): DataCopyPad (§3.3), DataCopy with Nd2NzParams (§3.2), fractal layouts
// NZ/ZZ/ZN (§3.4), LoadData/Load2D (§3.5), Fixpipe with FixpipeParamsV220 (§3.6), Mmad (§4.1),
// InitConstValue, vector ops Exp/Ln/Add/Sub/Mul/Max/Muls/Adds/Duplicate/Cast (§5.2, §5.6),
// ReduceMax/ReduceSum (§5.3), CompareScalar/Select (§5.5), SetFlag/WaitFlag (§7.1),
// CrossCoreSetFlag/CrossCoreWaitFlag (§7.2), SetAtomicAdd/SetAtomicNone (§7.4).
#ifndef TILEGEN_RUNTIME_H
#define TILEGEN_RUNTIME_H

#include "kernel_operator.h"

namespace tilegen {
using namespace AscendC;

// Cross-core flag ids (mode 2, inside one AI Core). "Ready" has one id per direction: tiles are
// consumed in the order they are produced. "Free" has one id per workspace slot (FLAG_FREE_BASE + slot):
// slots are refilled at different rates, so each waits for its own consumer. Ids 0-10 are the user's
// on A2 (CrossCoreSetFlag); a producer never runs more than one tile per slot ahead, so no counter
// passes 15.
constexpr uint16_t FLAG_C2V_READY = 0;
constexpr uint16_t FLAG_V2C_READY = 1;
constexpr uint16_t FLAG_FREE_BASE = 2;

// IEEE infinities as compile-time constants: the device headers include <cmath> (INFINITY) only under
// ASCENDC_CPU_DEBUG, so the kernels must not rely on it.
constexpr float POS_INF = __builtin_huge_valf();
constexpr float NEG_INF = -__builtin_huge_valf();

// ---------------------------------------------------------------------------------------------------
// Integers: every offset and size is int64 (a tensor can pass 2^31 elements).
__aicore__ inline int64_t FloorDiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__aicore__ inline int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }
__aicore__ inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }
__aicore__ inline int64_t Max64(int64_t a, int64_t b) { return a > b ? a : b; }
__aicore__ inline int64_t Clip(int64_t x, int64_t lo, int64_t hi) { return Min64(Max64(x, lo), hi); }

// An immediate SetFlag/WaitFlag pair on a free event ID of the TPipe. A literal ID may collide with one the
// TPipe holds: on dav-c220 the AIC's TPipe::Init sets M_MTE1 events 0-2 (impl/basic_api/kernel_tpipe_impl.h
// at asc-devkit 0da921b9), and "相同流水、相同eventID下，连续使用SetFlag会引发未定义行为" (docs/zh/api/SIMD-API/
// 基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md, which asks TPipe code for FetchEventID/AllocEventID).
template <HardEvent E>
__aicore__ inline void SetWait()
{
    const int32_t id = static_cast<int32_t>(GetTPipePtr()->FetchEventID(E));
    SetFlag<E>(id);
    WaitFlag<E>(id);
}

// ---------------------------------------------------------------------------------------------------
// Vector side (AIV). A tile of R rows x C columns lives in UB as R rows of `cpad` elements (C rounded
// up to 32 bytes), which is the layout DataCopyPad produces.

template <typename T>
__aicore__ inline void WaitMte2ToV()
{
    SetWait<HardEvent::MTE2_V>();
}
__aicore__ inline void WaitVToMte3()
{
    SetWait<HardEvent::V_MTE3>();
}
__aicore__ inline void WaitMte3ToV()
{
    SetWait<HardEvent::MTE3_V>();
}
__aicore__ inline void WaitVToMte2()
{
    SetWait<HardEvent::V_MTE2>();
}

// GM rows -> UB: `valid` rows of `cols` elements from `src` (row pitch `pitch` elements) into the first
// `valid` rows of `dst`; rows [valid, rows) get `padValue` when `pad` (the padding of a tile past the
// tensor's extent).
template <typename T>
__aicore__ inline void LoadRows(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int64_t valid, int64_t rows,
                                int64_t cols, int64_t cpad, int64_t pitch, bool pad, T padValue)
{
    WaitVToMte2();
    if (valid > 0) {
        DataCopyExtParams p(static_cast<uint16_t>(valid), static_cast<uint32_t>(cols * sizeof(T)),
                            static_cast<uint32_t>((pitch - cols) * sizeof(T)), 0, 0);
        DataCopyPadExtParams<T> pp(false, 0, 0, padValue);
        DataCopyPad(dst, src, p, pp);
    }
    WaitMte2ToV<T>();
    if (pad && valid < rows) {
        Duplicate(dst[valid * cpad], padValue, static_cast<int32_t>((rows - valid) * cpad));
    }
}

// A vector of `valid` consecutive elements GM -> UB; elements [valid, n) get `padValue` when `pad`.
template <typename T>
__aicore__ inline void LoadVector(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int64_t valid, int64_t n, bool pad,
                                  T padValue)
{
    WaitVToMte2();
    if (valid > 0) {
        DataCopyExtParams p(1, static_cast<uint32_t>(valid * sizeof(T)), 0, 0, 0);
        DataCopyPadExtParams<T> pp(false, 0, 0, padValue);
        DataCopyPad(dst, src, p, pp);
    }
    WaitMte2ToV<T>();
    if (pad && valid < n) {
        for (int64_t e = valid; e < n; ++e) dst.SetValue(static_cast<uint32_t>(e), padValue);
    }
}

// UB rows -> GM: `valid` rows of `cols` elements to `dst` (row pitch `pitch` elements); `atomic`
// adds into fp32 GM instead of writing.
template <typename T>
__aicore__ inline void StoreRows(const GlobalTensor<T>& dst, const LocalTensor<T>& src, int64_t valid, int64_t cols,
                                 int64_t cpad, int64_t pitch, bool atomic)
{
    if (valid <= 0) return;
    WaitVToMte3();
    if (atomic) SetAtomicAdd<T>();
    DataCopyExtParams p(static_cast<uint16_t>(valid), static_cast<uint32_t>(cols * sizeof(T)), 0,
                        static_cast<uint32_t>((pitch - cols) * sizeof(T)), 0);
    DataCopyPad(dst, src, p);
    if (atomic) SetAtomicNone();
    WaitMte3ToV();
}

template <typename T>
__aicore__ inline void StoreVector(const GlobalTensor<T>& dst, const LocalTensor<T>& src, int64_t valid, bool atomic)
{
    if (valid <= 0) return;
    WaitVToMte3();
    if (atomic) SetAtomicAdd<T>();
    DataCopyExtParams p(1, static_cast<uint32_t>(valid * sizeof(T)), 0, 0, 0);
    DataCopyPad(dst, src, p);
    if (atomic) SetAtomicNone();
    WaitMte3ToV();
}

// dst row r = src row r (op) vec[r] for r < rows: Adds with -v (sub), +v (add), Muls with v (mul).
__aicore__ inline void RowsAddScalar(const LocalTensor<float>& dst, const LocalTensor<float>& src,
                                     const LocalTensor<float>& vec, int64_t rows, int64_t cpad, float sign)
{
    for (int64_t r = 0; r < rows; ++r) {
        float v = sign * vec.GetValue(static_cast<uint32_t>(r));
        Adds(dst[r * cpad], src[r * cpad], v, static_cast<int32_t>(cpad));
    }
}
__aicore__ inline void RowsMulScalar(const LocalTensor<float>& dst, const LocalTensor<float>& src,
                                     const LocalTensor<float>& vec, int64_t rows, int64_t cpad)
{
    for (int64_t r = 0; r < rows; ++r) {
        float v = vec.GetValue(static_cast<uint32_t>(r));
        Muls(dst[r * cpad], src[r * cpad], v, static_cast<int32_t>(cpad));
    }
}
// dst row r = src row r / vec[r], or 0 where vec[r] == 0 (O of a row with no visible key).
__aicore__ inline void RowsSafeDiv(const LocalTensor<float>& dst, const LocalTensor<float>& src,
                                   const LocalTensor<float>& vec, int64_t rows, int64_t cpad)
{
    for (int64_t r = 0; r < rows; ++r) {
        float v = vec.GetValue(static_cast<uint32_t>(r));
        if (v != 0.0f) {
            Muls(dst[r * cpad], src[r * cpad], 1.0f / v, static_cast<int32_t>(cpad));
        } else {
            Duplicate(dst[r * cpad], 0.0f, static_cast<int32_t>(cpad));
        }
    }
}
// vec[r] = max or sum over the first `cols` columns of row r.
__aicore__ inline void RowsReduce(const LocalTensor<float>& vec, const LocalTensor<float>& src, int64_t rows, int64_t cols,
                                  int64_t cpad, const LocalTensor<float>& out, const LocalTensor<float>& tmp, bool isMax)
{
    for (int64_t r = 0; r < rows; ++r) {
        if (isMax) {
            ReduceMax(out, src[r * cpad], tmp, static_cast<int32_t>(cols), false);
        } else {
            ReduceSum(out, src[r * cpad], tmp, static_cast<int32_t>(cols));
        }
        vec.SetValue(static_cast<uint32_t>(r), out.GetValue(0));
    }
}
// x = 0 where x == -inf (the "safe" running max of a row that has seen no visible key yet).
__aicore__ inline void ZeroIfNegInf(const LocalTensor<float>& dst, const LocalTensor<float>& src, int64_t n)
{
    for (int64_t e = 0; e < n; ++e) {
        float v = src.GetValue(static_cast<uint32_t>(e));
        dst.SetValue(static_cast<uint32_t>(e), (v == NEG_INF) ? 0.0f : v);
    }
}
// Cast a tile row by row when the two dtypes pad their rows differently.
template <typename D, typename S>
__aicore__ inline void CastRows(const LocalTensor<D>& dst, const LocalTensor<S>& src, RoundMode mode, int64_t rows,
                                int64_t cols, int64_t dpad, int64_t spad)
{
    if (dpad == spad) {
        Cast(dst, src, mode, static_cast<uint32_t>(rows * spad));
        return;
    }
    for (int64_t r = 0; r < rows; ++r) Cast(dst[r * dpad], src[r * spad], mode, static_cast<uint32_t>(cols));
}
// DESIGN §3 mask on a tile of `rows` rows starting at global row `row0` and `cols` columns starting at
// `col0`: key c visible to query r iff r + off - left <= c <= r + off + right (left/right < 0:
// unbounded), r < Sq, c < Sk. Hidden scores become -inf. `colIdx` holds col0 + c as floats for the
// compare; `bits` receives the compare mask. Needs cpad * 4 to be a multiple of 256 (Bc multiple of 64).
__aicore__ inline void MaskTile(const LocalTensor<float>& s, const LocalTensor<float>& colIdx, const LocalTensor<uint8_t>& bits,
                                int64_t rows, int64_t cpad, int64_t row0, int64_t col0, int64_t sq, int64_t sk, int64_t off,
                                int64_t left, int64_t right)
{
    for (int64_t c = 0; c < cpad; ++c) colIdx.SetValue(static_cast<uint32_t>(c), static_cast<float>(col0 + c));
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t gr = row0 + r;
        const LocalTensor<float> row = s[r * cpad];
        if (gr >= sq) {
            Duplicate(row, NEG_INF, static_cast<int32_t>(cpad));
            continue;
        }
        int64_t lo = left >= 0 ? gr + off - left : 0;
        int64_t hi = right >= 0 ? gr + off + right : sk - 1;
        hi = Min64(hi, sk - 1);
        lo = Max64(lo, 0);
        if (lo <= col0 && hi >= col0 + cpad - 1) continue;
        CompareScalar(bits, colIdx, static_cast<float>(lo), CMPMODE::GE, static_cast<uint32_t>(cpad));
        Select(row, bits, row, NEG_INF, SELMODE::VSEL_TENSOR_SCALAR_MODE, static_cast<uint32_t>(cpad));
        CompareScalar(bits, colIdx, static_cast<float>(hi), CMPMODE::LE, static_cast<uint32_t>(cpad));
        Select(row, bits, row, NEG_INF, SELMODE::VSEL_TENSOR_SCALAR_MODE, static_cast<uint32_t>(cpad));
    }
}

// ---------------------------------------------------------------------------------------------------
// Cube side (AIC). An L1 tile of R x C half/bf16 elements is NZ: C/16 column strips of rpad = ceil16(R)
// rows x 16 elements (fractals of 16 x 16). L0C tiles are NZ fp32 with 16 x 16 fractals.

__aicore__ inline void WaitMte2ToMte1()
{
    SetWait<HardEvent::MTE2_MTE1>();
}
__aicore__ inline void WaitMte1ToMte2()
{
    SetWait<HardEvent::MTE1_MTE2>();
}
__aicore__ inline void WaitMte1ToM()
{
    SetWait<HardEvent::MTE1_M>();
}
__aicore__ inline void WaitMToMte1()
{
    SetWait<HardEvent::M_MTE1>();
}
__aicore__ inline void WaitMToFix()
{
    SetWait<HardEvent::M_FIX>();
}
__aicore__ inline void WaitFixToM()
{
    SetWait<HardEvent::FIX_M>();
}

// GM rows -> L1 NZ: `valid` rows of `cols` elements (row pitch `pitch`), columns zero-padded to 16 by
// the ND->NZ copy; when `zeroTail`, the rows [valid, rows) of the tile are zeroed first (padding that
// reaches a contraction).
template <typename T>
__aicore__ inline void LoadNz(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int64_t valid, int64_t rows,
                              int64_t cols, int64_t pitch, bool zeroTail)
{
    const int64_t rpad = CeilDiv(rows, 16) * 16;
    const int64_t cpad = CeilDiv(cols, 16) * 16;
    WaitMte1ToMte2();
    if (zeroTail && valid < rows) {
        InitConstValue(dst, InitConstValueParams<T>(1, static_cast<uint16_t>(rpad * cpad * sizeof(T) / 32), 0, T(0)));
        PipeBarrier<PIPE_MTE2>();
    }
    if (valid > 0) {
        Nd2NzParams p(1, static_cast<uint16_t>(valid), static_cast<uint16_t>(cols), 0, static_cast<uint16_t>(pitch),
                      static_cast<uint16_t>(rpad), 1, 0);
        DataCopy(dst, src, p);
    }
    WaitMte2ToMte1();
}

// c (+)= op(a) @ op(b) on the cube: a, b NZ in L1 (stored with rows ar/br), c NZ fp32 in L0C of m x n.
// op(a) is m x k (a stored m x k, or k x m when transA); op(b) is k x n (b stored k x n, or n x k when
// transB). The contraction runs in steps of `kStep` through the two halves of L0A and L0B.
template <typename T>
__aicore__ inline void MatmulTile(const LocalTensor<float>& c, const LocalTensor<T>& a, const LocalTensor<T>& b,
                                  const LocalTensor<T>& l0a, const LocalTensor<T>& l0b, int64_t halfA, int64_t halfB, int64_t m,
                                  int64_t n, int64_t k, bool transA, bool transB, bool accumulate, int64_t kStep)
{
    const int64_t m1 = CeilDiv(m, 16);
    const int64_t n1 = CeilDiv(n, 16);
    const int64_t aRows16 = transA ? CeilDiv(k, 16) : m1;  // fractal rows of a as stored
    const int64_t bRows16 = transB ? n1 : CeilDiv(k, 16);  // fractal rows of b as stored
    int64_t stage = 0;
    for (int64_t k0 = 0; k0 < k; k0 += kStep, stage ^= 1) {
        const int64_t kc = Min64(kStep, k - k0);
        const int64_t kc1 = CeilDiv(kc, 16);
        const LocalTensor<T> la = l0a[stage * halfA];
        const LocalTensor<T> lb = l0b[stage * halfB];
        WaitMToMte1();
        for (int64_t mi = 0; mi < m1; ++mi) {  // ZZ: fractal (mi, kk) at mi * kc1 + kk
            LoadData2DParams p;
            p.repeatTimes = static_cast<uint8_t>(kc1);
            if (!transA) {
                p.startIndex = static_cast<uint16_t>((k0 / 16) * aRows16 + mi);
                p.srcStride = static_cast<uint16_t>(aRows16);
                p.ifTranspose = false;
            } else {
                p.startIndex = static_cast<uint16_t>(mi * aRows16 + k0 / 16);
                p.srcStride = 1;
                p.ifTranspose = true;
            }
            LoadData(la[mi * kc1 * 256], a, p);
        }
        for (int64_t kk = 0; kk < kc1; ++kk) {  // ZN: fractal (kk, ni) at kk * n1 + ni
            LoadData2DParams p;
            p.repeatTimes = static_cast<uint8_t>(n1);
            if (!transB) {
                p.startIndex = static_cast<uint16_t>(k0 / 16 + kk);
                p.srcStride = static_cast<uint16_t>(bRows16);
                p.ifTranspose = true;
            } else {
                p.startIndex = static_cast<uint16_t>((k0 / 16 + kk) * bRows16);
                p.srcStride = 1;
                p.ifTranspose = false;
            }
            LoadData(lb[kk * n1 * 256], b, p);
        }
        WaitMte1ToM();
        MmadParams mp(static_cast<uint16_t>(m), static_cast<uint16_t>(n), static_cast<uint16_t>(kc), 0, false,
                      !accumulate && k0 == 0);
        Mmad(c, la, lb, mp);
    }
    WaitMToMte1();
}

// c = 0 (an m x n L0C accumulator): a zero 16-column A tile times a zero 16-row B tile. One 512-byte
// fractal (blockNum = 1) per repeat: blockNum = 0 is a NOP on A2 (docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/
// 矩阵计算的搬入/辅助配置接口/Fill.md, InitConstValueParams table, asc-devkit 0da921b9).
template <typename T>
__aicore__ inline void ZeroAcc(const LocalTensor<float>& c, const LocalTensor<T>& l0a, const LocalTensor<T>& l0b, int64_t m,
                               int64_t n)
{
    WaitMToMte1();
    InitConstValue(l0a, InitConstValueParams<T>(static_cast<uint16_t>(CeilDiv(m, 16)), 1, 0, T(0)));
    InitConstValue(l0b, InitConstValueParams<T>(static_cast<uint16_t>(CeilDiv(n, 16)), 1, 0, T(0)));
    WaitMte1ToM();
    Mmad(c, l0a, l0b, MmadParams(static_cast<uint16_t>(m), static_cast<uint16_t>(n), 16, 0, false, true));
    WaitMToMte1();
}

// L0C (m x n fp32, NZ) -> GM rows (`valid` rows, `cols` columns, row pitch `pitch`), fp32; `atomic` adds.
__aicore__ inline void FixpipeRows(const GlobalTensor<float>& dst, const LocalTensor<float>& c, int64_t m, int64_t valid,
                                   int64_t cols, int64_t pitch, bool atomic)
{
    if (valid <= 0) return;
    WaitMToFix();
    if (atomic) SetAtomicAdd<float>();
    FixpipeParamsV220 p(static_cast<uint16_t>(cols), static_cast<uint16_t>(valid), static_cast<uint16_t>(CeilDiv(m, 16) * 16),
                        static_cast<uint32_t>(pitch), false);
    Fixpipe<float, float, CFG_ROW_MAJOR>(dst, c, p);
    if (atomic) SetAtomicNone();
    WaitFixToM();
}

}  // namespace tilegen

#endif  // TILEGEN_RUNTIME_H
