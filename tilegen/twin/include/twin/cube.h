// tilegen CPU twin: cube path — LoadData (Load2D L1 -> L0A/L0B), Mmad, Fixpipe (L0C -> GM).
// Fractal layouts [ascendc-api §3.4, G:技术附录/概念原理和术语/神经网络和算子/数据排布格式]:
//   NZ (L1, and L0C with C0=16): elem(r,c) at (c/C0)*Rpad*C0 + r*C0 + c%C0
//   ZZ (L0A):  elem(m,k) at ((m/16)*K1 + k/C0)*16*C0 + (m%16)*C0 + k%C0
//   ZN (L0B):  elem(k,n) at ((k/C0)*N1 + n/16)*16*C0 + (n%16)*C0 + k%C0
// with C0 = 32/sizeof(T), K1 = ceil(K/C0), N1 = ceil(N/16).
#ifndef TILEGEN_TWIN_CUBE_H
#define TILEGEN_TWIN_CUBE_H

#include "datacopy.h"

// [P:Fixpipe] quantPre values (global enum as in the CCE headers; also usable as QuantMode_t::X).
enum QuantMode_t : uint8_t {
    NoQuant = 0,
    F322F16,
    F322BF16,
    DEQF16,
    VDEQF16,
    QF322B8_PRE,
    VQF322B8_PRE,
    REQ8,
    VREQ8,
};

namespace AscendC {

// [I:include/basic_api/kernel_struct_mm.h, P:Load2D] all units 512-byte fractals.
struct LoadData2DParams {
    LoadData2DParams() {}
    LoadData2DParams(const uint16_t startIndexIn, const uint8_t repeatTimesIn, const uint16_t srcStrideIn,
                     const uint8_t sidIn, const uint16_t dstGapIn, const bool ifTransposeIn, const uint8_t addrModeIn)
        : startIndex(startIndexIn),
          dstGap(dstGapIn),
          srcStride(srcStrideIn),
          ifTranspose(ifTransposeIn),
          repeatTimes(repeatTimesIn),
          sid(sidIn),
          addrMode(addrModeIn)
    {}
    uint16_t startIndex = 0;
    uint16_t dstGap = 0;
    uint16_t srcStride = 0;
    bool ifTranspose = false;
    uint8_t repeatTimes = 0;
    uint8_t sid = 0;
    uint8_t addrMode = 0;
};
using LoadData2dParams = LoadData2DParams;

// [I:include/basic_api/kernel_struct_mm.h, P:Mmad]
struct MmadParams {
    MmadParams() {}
    MmadParams(const uint16_t mIn, const uint16_t nIn, const uint16_t kIn, const bool isBiasIn, const int32_t fmOffsetIn,
               const bool enSsparseIn, const bool enWinogradAIn, const bool enWinogradBIn)
        : m(mIn), n(nIn), k(kIn), isBias(isBiasIn), fmOffset(fmOffsetIn), enSsparse(enSsparseIn),
          enWinogradA(enWinogradAIn), enWinogradB(enWinogradBIn)
    {}
    MmadParams(const uint16_t mIn, const uint16_t nIn, const uint16_t kIn, const uint8_t unitFlagIn,
               const bool cmatrixSourceIn, const bool cmatrixInitValIn)
        : m(mIn), n(nIn), k(kIn), unitFlag(unitFlagIn), cmatrixSource(cmatrixSourceIn), cmatrixInitVal(cmatrixInitValIn)
    {}
    uint16_t m = 0;
    uint16_t n = 0;
    uint16_t k = 0;
    bool isBias = false;
    int32_t fmOffset = 0;
    bool enSsparse = false;
    bool enWinogradA = false;
    bool enWinogradB = false;
    uint8_t unitFlag = 0;
    bool kDirectionAlign = false;
    bool cmatrixSource = false;
    bool cmatrixInitVal = true;
};

// [I:include/basic_api/kernel_struct_fixpipe.h, P:Fixpipe]
enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };
struct FixpipeConfig {
    CO2Layout format;
};
inline constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ};
inline constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
inline constexpr FixpipeConfig CFG_COLUMN_MAJOR = {CO2Layout::COLUMN_MAJOR};

struct FixpipeParamsV220 {
    FixpipeParamsV220() {}
    FixpipeParamsV220(const uint16_t nSizeIn, const uint16_t mSizeIn, const uint16_t srcStrideIn,
                      const uint32_t dstStrideIn, const bool reluEnIn)
        : nSize(nSizeIn), mSize(mSizeIn), srcStride(srcStrideIn), dstStride(dstStrideIn), reluEn(reluEnIn)
    {}
    FixpipeParamsV220(const uint16_t nSizeIn, const uint16_t mSizeIn, const uint16_t srcStrideIn,
                      const uint32_t dstStrideIn, const bool reluEnIn, const QuantMode_t quantPreIn,
                      const int64_t deqScalarIn, const uint16_t ndNumIn, const uint16_t srcNdStrideIn,
                      const uint16_t dstNdStrideIn, const uint8_t unitFlagIn)
        : nSize(nSizeIn), mSize(mSizeIn), srcStride(srcStrideIn), dstStride(dstStrideIn), quantPre(quantPreIn),
          deqScalar(static_cast<uint64_t>(deqScalarIn)), ndNum(ndNumIn), srcNdStride(srcNdStrideIn),
          dstNdStride(dstNdStrideIn), reluEn(reluEnIn), unitFlag(unitFlagIn)
    {}
    uint16_t nSize = 0;
    uint16_t mSize = 0;
    uint16_t srcStride = 0;
    uint32_t dstStride = 0;
    QuantMode_t quantPre = QuantMode_t::NoQuant;
    uint64_t deqScalar = 0;
    uint16_t ndNum = 1;
    uint16_t srcNdStride = 0;
    uint16_t dstNdStride = 0;
    bool reluEn = false;
    uint8_t unitFlag = 0;
    bool isChannelSplit = false;
};

// [I:include/basic_api/kernel_struct_mm.h:444, P:Fill]: the two-argument constructor leaves blockNum = dstGap = 0
template <typename T>
struct InitConstValueParams {
    InitConstValueParams() {}
    InitConstValueParams(const uint16_t repeatTimesIn, const uint16_t blockNumIn, const uint16_t dstGapIn, const T initValueIn)
        : repeatTimes(repeatTimesIn), blockNum(blockNumIn), dstGap(dstGapIn), initValue(initValueIn)
    {}
    InitConstValueParams(const uint16_t repeatTimesIn, const T initValueIn) : repeatTimes(repeatTimesIn), initValue(initValueIn) {}
    uint16_t repeatTimes = 0;
    uint16_t blockNum = 0;
    uint16_t dstGap = 0;
    T initValue = T(0);
};

// Fill [P:Fill; I:include/basic_api/kernel_operator_mm_intf.h:379, impl/basic_api/dav_c220/kernel_operator_mm_impl.h
// InitL1BufferCal / InitL0ANzMatrixCal / InitL0BNzMatrixCal]: fill L1 (A1/B1, 32-byte blocks) or L0A/L0B
// (A2/B2, 512-byte blocks): for r < repeatTimes fill blockNum blocks at dst + r*(blockNum + dstGap) blocks.
// On A2 every field is used ("支持配置所有参数"); repeatTimes = 0 or blockNum = 0 is a NOP (Fill.md, 约束说明),
// so the two-argument InitConstValueParams(repeatTimes, value), which leaves blockNum = 0, fills nothing.
// InitConstValue is the pre-9.1.0 name of the same call (kernel_operator_mm_intf.h:381).
namespace detail_fill {
template <typename T, typename U>
inline void Fill(const char* api, const LocalTensor<T>& dst, const InitConstValueParams<U>& p)
{
    constexpr const char* S = "P:Fill";
    constexpr twin::DType dt = twin::DTypeOf<T>();
    static_assert(dt == twin::DType::F16 || dt == twin::DType::I16 || dt == twin::DType::U16 || dt == twin::DType::BF16 ||
                      dt == twin::DType::F32 || dt == twin::DType::I32 || dt == twin::DType::U32,
                  "twin: Fill dtype not supported on A2");
    twin::RequireAic(api, S);
    dst.Valid(api);
    const twin::LocalRef& d = dst.Ref();
    if (d.hw != twin::Hw::L1 && d.hw != twin::Hw::L0A && d.hw != twin::Hw::L0B)
        twin::Fail(api, twin::Fmt("dst must be A1/B1/A2/B2, got %s (%s)", twin::HwName(d.hw), twin::PosName(d.pos)), S);
    uint64_t unit = d.hw == twin::Hw::L1 ? 32 : 512;
    twin::CheckAlign(api, d, static_cast<uint32_t>(unit), "dst", S);
    if (p.repeatTimes > 32767 || p.blockNum > 32767 || p.dstGap > 32767)
        twin::Fail(api, "repeatTimes/blockNum/dstGap must be in [0, 32767]", S);
    const uint64_t bn = p.blockNum, gap = p.dstGap;
    if (p.repeatTimes == 0 || bn == 0) return;  // NOP on the hardware
    uint64_t end = ((p.repeatTimes - 1ull) * (bn + gap) + bn) * unit;
    twin::CheckRange(api, d, 0, end, "dst", S);
    // a fill of L1 runs on MTE2, of L0A/L0B on MTE1 (tilegen_runtime.h orders them so: LoadNz, ZeroAcc)
    twin::trace::Rec(d.hw == twin::Hw::L1 ? "MTE2" : "MTE1", "Fill", static_cast<int64_t>(p.repeatTimes * bn * unit), 0, 0,
                     {twin::trace::Loc(dst, end)}, {});
    for (uint64_t r = 0; r < p.repeatTimes; ++r)
        twin::dc::FillElems<T>(d.Ptr() + r * (bn + gap) * unit, bn * unit / sizeof(T), p.initValue);
}
}  // namespace detail_fill
template <typename T, typename U = T, typename std::enable_if<std::is_same<T, U>::value, bool>::type = true>
inline void Fill(const LocalTensor<T>& dst, const InitConstValueParams<U>& p)
{
    detail_fill::Fill("Fill", dst, p);
}
template <typename T, typename U = T, typename std::enable_if<std::is_same<T, U>::value, bool>::type = true>
inline void InitConstValue(const LocalTensor<T>& dst, const InitConstValueParams<U>& p)
{
    detail_fill::Fill("InitConstValue", dst, p);
}

// ---------------------------------------------------------------------------------------------
// LoadData (Load2D) L1 -> L0A/L0B [P:Load2D, ascendc-api §3.5, I:dav_c220/kernel_operator_mm_impl.h]
// for i < repeatTimes: copy the 512-byte fractal src + (startIndex + i*srcStride)*512 to
// dst + i*(1+dstGap)*512, transposing the 16x16 fractal when ifTranspose (2-byte types only).
// ---------------------------------------------------------------------------------------------
template <typename T>
inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p)
{
    const char* api = "LoadData";
    constexpr const char* S = "P:Load2D";
    twin::RequireAic(api, S);
    dst.Valid(api);
    src.Valid(api);
    constexpr twin::DType dt = twin::DTypeOf<T>();
    static_assert(dt == twin::DType::U8 || dt == twin::DType::I8 || dt == twin::DType::U16 || dt == twin::DType::I16 ||
                      dt == twin::DType::F16 || dt == twin::DType::BF16 || dt == twin::DType::U32 ||
                      dt == twin::DType::I32 || dt == twin::DType::F32,
                  "twin: Load2D dtype not supported on A2");
    const twin::LocalRef& d = dst.Ref();
    const twin::LocalRef& s = src.Ref();
    if (s.hw != twin::Hw::L1)
        twin::Fail(api, twin::Fmt("source must be in L1 (A1/B1), got %s (%s)", twin::HwName(s.hw), twin::PosName(s.pos)), S);
    if (d.hw != twin::Hw::L0A && d.hw != twin::Hw::L0B)
        twin::Fail(api, twin::Fmt("destination must be L0A (A2) or L0B (B2), got %s (%s)", twin::HwName(d.hw), twin::PosName(d.pos)), S);
    twin::CheckAlign(api, d, 512, "dst", "P:通用说明和约束");
    twin::CheckAlign(api, s, 32, "src", "P:通用说明和约束");
    if (p.repeatTimes < 1) twin::Fail(api, "repeatTimes must be in [1, 255]", S);
    if (p.ifTranspose && sizeof(T) != 2)
        twin::Fail(api, twin::Fmt("ifTranspose is only for 16x16 fractals of 2-byte types, got %s", twin::TypeName<T>()), S);
    uint64_t R = p.repeatTimes;
    uint64_t srcEnd = (p.startIndex + (R - 1) * p.srcStride + 1) * 512ull;
    uint64_t dstEnd = (R - 1) * (1ull + p.dstGap) * 512ull + 512ull;
    twin::CheckRange(api, s, 0, srcEnd, "src", S);
    twin::CheckRange(api, d, 0, dstEnd, "dst", S);
    twin::trace::Rec("MTE1", "LoadData", static_cast<int64_t>(R), d.hw == twin::Hw::L0B ? 1 : 0, p.ifTranspose ? 1 : 0,
                     {twin::trace::Loc(dst, dstEnd)},
                     {twin::trace::Rng{'1', s.addr + p.startIndex * 512ull, s.addr + srcEnd}});
    for (uint64_t i = 0; i < R; ++i) {
        const uint8_t* f = s.Ptr() + (p.startIndex + i * p.srcStride) * 512ull;
        uint8_t* o = d.Ptr() + i * (1ull + p.dstGap) * 512ull;
        if (!p.ifTranspose) {
            std::memmove(o, f, 512);
        } else {
            uint16_t tmp[256];
            std::memcpy(tmp, f, 512);
            uint16_t out[256];
            for (int r = 0; r < 16; ++r)
                for (int c = 0; c < 16; ++c) out[c * 16 + r] = tmp[r * 16 + c];
            std::memcpy(o, out, 512);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Mmad [P:Mmad, Z:SIMD-API/基础API/矩阵计算（ISASI）/Mmad计算/Mmad, ascendc-api §4.1, §0.10]
// c (CO1, NZ, fp32/int32) = (cmatrixInitVal ? 0 : c) + a (A2, ZZ) * b (B2, ZN); m,n,k in [0,4095],
// any 0 -> no-op. m == 1 is GEMV ("当M = 1时，会默认开启GEMV ... 以ND格式进行读取", Mmad.md; the
// GEMV.md feature page and examples/.../mmad_gemv): A2 holds the 1 x k row as k contiguous elements
// (ND, 512-byte aligned start), B2 and the result keep their layouts (row 0 of each 16-row fractal).
// Padding lanes of the result fractals (rows >= m, cols >= n) are poisoned on a fresh result.
// ---------------------------------------------------------------------------------------------
template <typename T, typename U, typename S>
inline void Mmad(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter, const MmadParams& p)
{
    const char* api = "Mmad";
    constexpr const char* SRC = "P:Mmad";
    static_assert((std::is_same_v<T, float> && std::is_same_v<U, half> && std::is_same_v<S, half>) ||
                      (std::is_same_v<T, float> && std::is_same_v<U, bfloat16_t> && std::is_same_v<S, bfloat16_t>) ||
                      (std::is_same_v<T, float> && std::is_same_v<U, float> && std::is_same_v<S, float>) ||
                      (std::is_same_v<T, int32_t> && std::is_same_v<U, int8_t> && std::is_same_v<S, int8_t>),
                  "twin: Mmad type triple not supported on A2 (half*half->f32, bf16*bf16->f32, f32*f32->f32, s8*s8->s32)");
    twin::RequireAic(api, SRC);
    dst.Valid(api);
    fm.Valid(api);
    filter.Valid(api);
    const twin::LocalRef& c = dst.Ref();
    const twin::LocalRef& a = fm.Ref();
    const twin::LocalRef& b = filter.Ref();
    twin::CheckHw(api, c, twin::Hw::L0C, "dst", SRC);
    twin::CheckHw(api, a, twin::Hw::L0A, "fm (left matrix)", SRC);
    twin::CheckHw(api, b, twin::Hw::L0B, "filter (right matrix)", SRC);
    twin::CheckAlign(api, c, 1024, "dst (256 elements)", SRC);
    twin::CheckAlign(api, a, 512, "fm", SRC);
    twin::CheckAlign(api, b, 512, "filter", SRC);
    if (p.m > 4095 || p.n > 4095 || p.k > 4095)
        twin::Fail(api, twin::Fmt("m=%u n=%u k=%u: each must be in [0, 4095]", p.m, p.n, p.k), SRC);
    if (p.cmatrixSource) twin::Fail(api, "cmatrixSource (bias table as C source) is not emulated", "twin");
    if (p.fmOffset != 0 || p.enSsparse || p.enWinogradA || p.enWinogradB || p.kDirectionAlign)
        twin::Fail(api, "fmOffset/enSsparse/enWinograd/kDirectionAlign are not emulated", "twin");
    if (p.m == 0 || p.n == 0 || p.k == 0) return;  // "该指令不会被执行"
    const bool gemv = p.m == 1;
    constexpr uint64_t C0 = 32 / sizeof(U);
    const uint64_t M = p.m, N = p.n, K = p.k;
    const uint64_t Mfr = twin::CeilDiv(M, 16), Nfr = twin::CeilDiv(N, 16), K1 = twin::CeilDiv(K, C0);
    const uint64_t Mpad = Mfr * 16;
    // GEMV reads the k elements of the row (whole 32-byte blocks); otherwise Mfr x K1 ZZ fractals
    twin::CheckRange(api, a, 0, gemv ? twin::RoundUp(K * sizeof(U), 32) : Mfr * K1 * 512, "fm", SRC);
    twin::CheckRange(api, b, 0, K1 * Nfr * 512, "filter", SRC);
    twin::CheckRange(api, c, 0, Nfr * Mpad * 16 * sizeof(T), "dst", SRC);
    {
        const bool acc = !p.cmatrixInitVal || p.isBias;
        // a: m, b: n, c: k, each in elements (the kind names the operand width: Mmad2 = 2-byte, Mmad4 = 4-byte)
        const twin::trace::Rng cr = twin::trace::Loc(dst, Nfr * Mpad * 16 * sizeof(T));
        if (acc)
            twin::trace::Rec("M", sizeof(U) == 2 ? "Mmad2" : "Mmad4", static_cast<int64_t>(M), static_cast<int64_t>(N),
                             static_cast<int64_t>(K), {cr},
                             {twin::trace::Loc(fm, gemv ? twin::RoundUp(K * sizeof(U), 32) : Mfr * K1 * 512),
                              twin::trace::Loc(filter, K1 * Nfr * 512), cr});
        else
            twin::trace::Rec("M", sizeof(U) == 2 ? "Mmad2" : "Mmad4", static_cast<int64_t>(M), static_cast<int64_t>(N),
                             static_cast<int64_t>(K), {cr},
                             {twin::trace::Loc(fm, gemv ? twin::RoundUp(K * sizeof(U), 32) : Mfr * K1 * 512),
                              twin::trace::Loc(filter, K1 * Nfr * 512)});
    }
    const U* A = reinterpret_cast<const U*>(a.Ptr());
    const S* B = reinterpret_cast<const S*>(b.Ptr());
    T* Cm = reinterpret_cast<T*>(c.Ptr());
    bool accumulate = !p.cmatrixInitVal || p.isBias;
    std::vector<float> arow(K);
    for (uint64_t m = 0; m < Mpad; ++m) {
        if (m < M)
            for (uint64_t k = 0; k < K; ++k)
                arow[k] = static_cast<float>(gemv ? A[k] : A[((m / 16) * K1 + k / C0) * 16 * C0 + (m % 16) * C0 + k % C0]);
        for (uint64_t n = 0; n < Nfr * 16; ++n) {
            T* out = &Cm[(n / 16) * Mpad * 16 + m * 16 + n % 16];
            if (m >= M || n >= N) {
                if (!accumulate) std::memset(out, twin::kPoisonByte, sizeof(T));
                continue;
            }
            if constexpr (std::is_same_v<T, int32_t>) {
                int64_t acc = accumulate ? *out : 0;
                for (uint64_t k = 0; k < K; ++k)
                    acc += static_cast<int64_t>(arow[k]) *
                           static_cast<int64_t>(B[((k / C0) * Nfr + n / 16) * 16 * C0 + (n % 16) * C0 + k % C0]);
                *out = static_cast<int32_t>(acc);
            } else {
                float acc = accumulate ? *out : 0.0f;
                for (uint64_t k = 0; k < K; ++k)
                    acc += arow[k] *
                           static_cast<float>(B[((k / C0) * Nfr + n / 16) * 16 * C0 + (n % 16) * C0 + k % C0]);
                *out = acc;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fixpipe CO1 -> GM [P:Fixpipe, I:dav_c220/kernel_operator_fixpipe_v2_impl.h, ascendc-api §3.6, §0.11]
// ROW_MAJOR: dst[i*dstNdStride + m*dstStride + n] =
//     conv(src[i*srcNdStride*256 + (n/16)*srcStride*16 + m*16 + n%16]), m < mSize, n < nSize.
// quantPre is never inferred: f32->f16 needs F322F16, f32->bf16 F322BF16, f32->f32 NoQuant.
// Conversions round to nearest even; overflow -> inf (INF_NAN mode; see README). Atomic state applies.
// ---------------------------------------------------------------------------------------------
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
inline void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const FixpipeParamsV220& p)
{
    const char* api = "Fixpipe";
    constexpr const char* S = "P:Fixpipe";
    static_assert(std::is_same_v<U, float> || std::is_same_v<U, int32_t>, "twin: Fixpipe source must be float or int32_t");
    twin::RequireAic(api, S);
    src.Valid(api);
    const twin::LocalRef& s = src.Ref();
    twin::CheckHw(api, s, twin::Hw::L0C, "src", S);
    twin::CheckAlign(api, s, 64, "src", S);
    if (config.format == CO2Layout::COLUMN_MAJOR) twin::Fail(api, "CFG_COLUMN_MAJOR is not available on A2", S);
    // quantPre must match the type pair
    bool ok = false;
    if constexpr (std::is_same_v<U, float>) {
        if constexpr (std::is_same_v<T, float>) ok = p.quantPre == QuantMode_t::NoQuant;
        else if constexpr (std::is_same_v<T, half>) ok = p.quantPre == QuantMode_t::F322F16;
        else if constexpr (std::is_same_v<T, bfloat16_t>) ok = p.quantPre == QuantMode_t::F322BF16;
    } else {
        if constexpr (std::is_same_v<T, int32_t>) ok = p.quantPre == QuantMode_t::NoQuant;
    }
    if (!ok)
        twin::Fail(api,
                   twin::Fmt("%s -> %s with quantPre=%d: use NoQuant for f32->f32 / s32->s32, F322F16 for f32->half, "
                             "F322BF16 for f32->bf16 (quantPre is never inferred; other quant modes not emulated)",
                             twin::TypeName<U>(), twin::TypeName<T>(), static_cast<int>(p.quantPre)),
                   "P:Fixpipe, I:copy_cube_out_utils.h");
    if (p.ndNum == 0) return;  // "ndNum=0 表示不执行"
    if (p.nSize < 1 || p.nSize > 4095) twin::Fail(api, twin::Fmt("nSize %u not in [1, 4095]", p.nSize), S);
    if (p.dstStride == 0) twin::Fail(api, "dstStride must not be 0", S);
    if (p.isChannelSplit) twin::Fail(api, "isChannelSplit is not emulated", "twin");
    if (p.ndNum > 1) {
        if (p.srcNdStride < 1 || p.srcNdStride > 512) twin::Fail(api, twin::Fmt("srcNdStride %u not in [1, 512]", p.srcNdStride), S);
        if (p.dstNdStride < 1) twin::Fail(api, "dstNdStride must be in [1, 65535]", S);
    }
    const U* in = reinterpret_cast<const U*>(s.Ptr());
    auto conv = [&](U v) -> T {
        if constexpr (std::is_same_v<U, float>) {
            float f = v;
            if (p.reluEn && f < 0.0f) f = 0.0f;
            if constexpr (std::is_same_v<T, float>) return f;
            else if constexpr (std::is_same_v<T, half>) return static_cast<half>(f);
            else return bfloat16_t(f);
        } else {
            int32_t x = v;
            if (p.reluEn && x < 0) x = 0;
            return static_cast<T>(x);
        }
    };
    twin::CoreCtx& core = *twin::t_core;
    std::vector<T> row;
    if (config.format == CO2Layout::ROW_MAJOR) {
        if (p.mSize < 1 || p.mSize > 8192) twin::Fail(api, twin::Fmt("mSize %u not in [1, 8192]", p.mSize), S);
        // dstStride is "the number of elements in each row of the destination ND matrix"
        if (p.dstStride < p.nSize)
            twin::Fail(api, twin::Fmt("NZ2ND dstStride %u (destination row length) is smaller than nSize %u: rows would overlap",
                                      p.dstStride, p.nSize),
                       S);
        if (p.nSize > 16 && p.srcStride < p.mSize)
            twin::Fail(api, twin::Fmt("srcStride %u (rows between 16-column groups of the NZ source) is smaller than mSize %u",
                                      p.srcStride, p.mSize),
                       S);
        uint64_t maxSrc = (p.ndNum - 1ull) * p.srcNdStride * 256 + ((p.nSize - 1ull) / 16) * p.srcStride * 16 +
                          (p.mSize - 1ull) * 16 + 15;
        twin::CheckRange(api, s, 0, (maxSrc + 1) * sizeof(U), "src", S);
        twin::trace::Rec("FIX", "Fixpipe", static_cast<int64_t>(p.ndNum) * p.mSize * p.nSize * sizeof(T), p.mSize,
                         twin::trace::GmLevel(dst.Bytes()),
                         {twin::trace::Gm(dst.Bytes(), ((p.ndNum - 1ull) * p.dstNdStride + (p.mSize - 1ull) * p.dstStride + p.nSize) * sizeof(T))},
                         {twin::trace::Loc(src, (maxSrc + 1) * sizeof(U))});
        row.resize(p.nSize);
        for (uint64_t i = 0; i < p.ndNum; ++i)
            for (uint64_t m = 0; m < p.mSize; ++m) {
                for (uint64_t n = 0; n < p.nSize; ++n)
                    row[n] = conv(in[i * p.srcNdStride * 256 + (n / 16) * p.srcStride * 16 + m * 16 + n % 16]);
                uint64_t off = (i * p.dstNdStride + m * static_cast<uint64_t>(p.dstStride)) * sizeof(T);
                dst.Check(api, off, p.nSize * sizeof(T), S);
                twin::GmStore<T>(api, core, dst.Block(), dst.Bytes() + off, row.data(), p.nSize, S);
            }
    } else {  // CFG_NZ: keep NZ; dstStride in 32-byte blocks between 16-column groups
        if (p.nSize % 16 != 0) twin::Fail(api, twin::Fmt("CFG_NZ needs nSize (%u) to be a multiple of 16", p.nSize), S);
        if (p.ndNum != 1) twin::Fail(api, "CFG_NZ with ndNum > 1 is not emulated", "twin");
        uint64_t groups = p.nSize / 16;
        uint64_t maxSrc = (groups - 1) * p.srcStride * 16 + (p.mSize - 1ull) * 16 + 15;
        twin::CheckRange(api, s, 0, (maxSrc + 1) * sizeof(U), "src", S);
        twin::trace::Rec("FIX", "Fixpipe", static_cast<int64_t>(groups) * p.mSize * 16 * sizeof(T), p.mSize,
                         twin::trace::GmLevel(dst.Bytes()),
                         {twin::trace::Gm(dst.Bytes(), ((groups - 1) * p.dstStride * 32ull) + p.mSize * 16ull * sizeof(T))},
                         {twin::trace::Loc(src, (maxSrc + 1) * sizeof(U))});
        row.resize(static_cast<size_t>(p.mSize) * 16);
        for (uint64_t g = 0; g < groups; ++g) {
            for (uint64_t e = 0; e < p.mSize * 16ull; ++e) row[e] = conv(in[g * p.srcStride * 16 + e]);
            uint64_t off = g * static_cast<uint64_t>(p.dstStride) * 32;
            dst.Check(api, off, row.size() * sizeof(T), S);
            twin::GmStore<T>(api, core, dst.Block(), dst.Bytes() + off, row.data(), row.size(), S);
        }
    }
}

}  // namespace AscendC

#endif  // TILEGEN_TWIN_CUBE_H
