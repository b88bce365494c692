// tilegen CPU twin: vector (AIV, UB-only) API — element-wise ops (count and high-dim forms), Cast,
// Duplicate, reductions, Brcb, Compare/CompareScalar, Select, mask registers.
//
// Addressing model [G:编程指南/类库API/基础API/接口分类说明/高维切分API, ascendc-api §5.1]: one repeat =
// 8 blocks x 32 B; lane l of repeat r of an operand X lives at
//     X + (r*XRepStride + (l / (32/sizeof)) * XBlkStride) * 32 + (l % (32/sizeof)) * sizeof.
// A count form is the same engine with contiguous strides and a counter mask.
// Checks for every call: AIV core, operands in UB (VECIN/VECCALC/VECOUT), 32-byte aligned starts,
// every touched byte inside the tensor passed, dtype allowed on A2, overlap rules [P:通用说明和约束].
#ifndef TILEGEN_TWIN_VECTOR_H
#define TILEGEN_TWIN_VECTOR_H

#include "cube.h"

namespace AscendC {

// [I:include/basic_api/kernel_struct_unary.h]
struct UnaryRepeatParams {
    UnaryRepeatParams() {}
    UnaryRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t srcBlkStrideIn, const uint8_t dstRepStrideIn,
                      const uint8_t srcRepStrideIn)
        : dstBlkStride(dstBlkStrideIn), srcBlkStride(srcBlkStrideIn), dstRepStride(dstRepStrideIn), srcRepStride(srcRepStrideIn)
    {}
    uint32_t blockNumber = 8;
    uint16_t dstBlkStride = 1;
    uint16_t srcBlkStride = 1;
    uint8_t dstRepStride = 8;
    uint8_t srcRepStride = 8;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
    bool halfBlock = false;
};
// [I:include/basic_api/kernel_struct_binary.h]
struct BinaryRepeatParams {
    BinaryRepeatParams() {}
    BinaryRepeatParams(const uint8_t dstBlkStrideIn, const uint8_t src0BlkStrideIn, const uint8_t src1BlkStrideIn,
                       const uint8_t dstRepStrideIn, const uint8_t src0RepStrideIn, const uint8_t src1RepStrideIn)
        : dstBlkStride(dstBlkStrideIn), src0BlkStride(src0BlkStrideIn), src1BlkStride(src1BlkStrideIn),
          dstRepStride(dstRepStrideIn), src0RepStride(src0RepStrideIn), src1RepStride(src1RepStrideIn)
    {}
    uint32_t blockNumber = 8;
    uint8_t dstBlkStride = 1;
    uint8_t src0BlkStride = 1;
    uint8_t src1BlkStride = 1;
    uint8_t dstRepStride = 8;
    uint8_t src0RepStride = 8;
    uint8_t src1RepStride = 8;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
};
// [I:include/basic_api/kernel_struct_brcb.h]
struct BrcbRepeatParams {
    BrcbRepeatParams() {}
    BrcbRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t dstRepStrideIn)
        : dstRepStride(dstRepStrideIn), dstBlkStride(dstBlkStrideIn)
    {}
    uint32_t blockNumber = 8;
    uint16_t dstRepStride = 8;
    uint16_t dstBlkStride = 1;
};

enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };                                   // [P:Compare]
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };  // [P:Select]
enum class MaskMode : uint8_t { NORMAL = 0, COUNTER };                                           // [P:SetVectorMask]
enum class ReduceOrder : uint8_t { ORDER_VALUE_INDEX = 0, ORDER_INDEX_VALUE, ORDER_ONLY_VALUE, ORDER_ONLY_INDEX };  // [P:WholeReduceMax]
// [I:impl/utils/common_types.h:25] the reduction of ReduceRepeat (MIN not emulated)
enum class ReduceType { NONE = -1, SUM = 0, MAX, MIN };
constexpr uint64_t MASK_PLACEHOLDER = 0;

// Precision configs [P:Exp, P:Ln, P:Div, P:Sqrt, P:Reciprocal]. INTRINSIC flushes subnormals to 0.
enum class ExpAlgo { INTRINSIC = 0, PRECISION_1ULP_FTZ_TRUE, PRECISION_1ULP_FTZ_FALSE };
struct ExpConfig {
    ExpAlgo algo = ExpAlgo::INTRINSIC;
};
inline constexpr ExpConfig DEFAULT_EXP_CONFIG = {ExpAlgo::INTRINSIC};
enum class LnAlgo { INTRINSIC = 0, PRECISION_1ULP_FTZ_TRUE, PRECISION_1ULP_FTZ_FALSE };
struct LnConfig {
    LnAlgo algo = LnAlgo::INTRINSIC;
};
inline constexpr LnConfig DEFAULT_LN_CONFIG = {LnAlgo::INTRINSIC};
enum class DivAlgo { INTRINSIC = 0, DIFF_COMPENSATION, PRECISION_0ULP_FTZ_TRUE, PRECISION_0ULP_FTZ_FALSE };
struct DivConfig {
    DivAlgo algo = DivAlgo::INTRINSIC;
};
inline constexpr DivConfig DEFAULT_DIV_CONFIG = {DivAlgo::INTRINSIC};
struct SqrtConfig {
    int algo = 0;
};
inline constexpr SqrtConfig DEFAULT_SQRT_CONFIG = {0};
struct ReciprocalConfig {
    int algo = 0;
};
inline constexpr ReciprocalConfig DEFAULT_RECIPROCAL_CONFIG = {0};

}  // namespace AscendC

namespace twin {
namespace vec {

using AscendC::LocalTensor;
using AscendC::RoundMode;

// dtype sets (A2 dtype matrix, ascendc-api §0.9)
enum TypeSet : uint32_t {
    kF16 = 1,
    kF32 = 2,
    kI16 = 4,
    kI32 = 8,
    kBF16 = 16,
    kU16 = 32,
    kU32 = 64,
};
template <typename T>
constexpr uint32_t TypeBit()
{
    constexpr DType d = DTypeOf<T>();
    if constexpr (d == DType::F16) return kF16;
    else if constexpr (d == DType::F32) return kF32;
    else if constexpr (d == DType::I16) return kI16;
    else if constexpr (d == DType::I32) return kI32;
    else if constexpr (d == DType::BF16) return kBF16;
    else if constexpr (d == DType::U16) return kU16;
    else if constexpr (d == DType::U32) return kU32;
    else return 0;
}
inline std::string SetNames(uint32_t s)
{
    std::string r;
    const char* n[] = {"half", "float", "int16_t", "int32_t", "bfloat16_t", "uint16_t", "uint32_t"};
    for (int i = 0; i < 7; ++i)
        if (s & (1u << i)) r += (r.empty() ? "" : "/") + std::string(n[i]);
    return r;
}
template <typename T>
inline void CheckType(const char* api, uint32_t allowed, const char* src)
{
    if ((TypeBit<T>() & allowed) == 0)
        Fail(api, Fmt("data type %s is not supported on A2 (supported: %s)%s", TypeName<T>(), SetNames(allowed).c_str(),
                      std::is_same_v<T, bfloat16_t> ? "; bf16 has no vector arithmetic on A2, Cast to float first" : ""),
             src);
}

template <typename T>
using Calc = std::conditional_t<std::is_integral_v<T>, int64_t, float>;
template <typename T>
inline T FromCalc(Calc<T> v)
{
    if constexpr (std::is_integral_v<T>) return static_cast<T>(v);
    else return num::FromF<T>(v);
}

inline float FMax(float a, float b) { return (std::isnan(a) || std::isnan(b)) ? NAN : (a > b ? a : b); }
inline float FMin(float a, float b) { return (std::isnan(a) || std::isnan(b)) ? NAN : (a < b ? a : b); }
inline int64_t FMax(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t FMin(int64_t a, int64_t b) { return a < b ? a : b; }

// Active lanes of a repeat.
struct Lanes {
    bool counter = true;
    uint64_t count = 0;
    uint64_t lo = 0, hi = 0;
    bool On(uint64_t rep, uint32_t lane, uint32_t P) const
    {
        if (counter) return rep * P + lane < count;
        return lane < 64 ? ((lo >> lane) & 1ull) : ((hi >> (lane - 64)) & 1ull);
    }
};

struct Opnd {
    const LocalRef* r;
    uint32_t esize;
    uint64_t blk;
    uint64_t rep;
    const char* name;
    uint64_t Off(uint64_t r_, uint32_t lane) const
    {
        uint32_t epb = 32 / esize;
        return (r_ * rep + (lane / epb) * blk) * 32ull + (lane % epb) * static_cast<uint64_t>(esize);
    }
};

// Operand basics: UB, this AIV, 32-byte aligned start.
template <typename T>
inline const LocalRef& UbOperand(const char* api, const LocalTensor<T>& t, const char* what, uint32_t align = 32)
{
    t.Valid(api);
    const LocalRef& r = t.Ref();
    if (r.hw != Hw::UB)
        Fail(api, Fmt("%s must be a VECIN/VECCALC/VECOUT (UB) tensor, got %s (%s)", what, HwName(r.hw), PosName(r.pos)),
             "P:通用说明和约束");
    CheckAlign(api, r, align, what, "P:通用说明和约束 通用地址对齐约束");
    return r;
}

// Bounds: highest byte touched by active lanes must lie inside the tensor.
inline uint64_t CheckBounds(const char* api, const Opnd& o, uint64_t R, const Lanes& L, uint32_t P)
{
    uint64_t maxEnd = 0;
    for (uint64_t r = 0; r < R; ++r)
        for (uint32_t l = 0; l < P; ++l)
            if (L.On(r, l, P)) maxEnd = std::max<uint64_t>(maxEnd, o.Off(r, l) + o.esize);
    if (maxEnd > o.r->bytes)
        Fail(api,
             Fmt("%s: the call touches bytes up to %llu but the tensor holds %u bytes (tensor size overflow)", o.name,
                 static_cast<unsigned long long>(maxEnd), o.r->bytes),
             "ascendc-api §0.4, I:kernel_check_data_copy_overflow.h");
    return maxEnd;
}

// Blocks (absolute 32-byte block index in UB) touched by active lanes of one repeat.
inline void RepBlocks(const Opnd& o, uint64_t r, const Lanes& L, uint32_t P, std::vector<uint32_t>& out)
{
    out.clear();
    uint32_t epb = 32 / o.esize;
    for (uint32_t b = 0; b * epb < P; ++b) {
        bool any = false;
        for (uint32_t l = b * epb; l < std::min<uint32_t>((b + 1) * epb, P) && !any; ++l) any = L.On(r, l, P);
        if (any) out.push_back(static_cast<uint32_t>((o.r->addr + o.Off(r, b * epb)) / 32));
    }
}

// Overlap rules [P:通用说明和约束 通用地址重叠约束]: within a repeat src/dst overlap 100 % or not at all;
// a later repeat's source must not overlap an earlier repeat's destination (except the documented
// dst == src1 case of Add/Sub/Mul/Max/Min with src1RepStride or dstRepStride 0: allowLater).
inline void CheckOverlap(const char* api, const Opnd& d, const Opnd* srcs, int nsrc, uint64_t R, const Lanes& L, uint32_t P,
                         int allowLater = -1)
{
    auto span = [&](const Opnd& o) {
        uint64_t lo = UINT64_MAX, hi = 0;
        std::vector<uint32_t> bl;
        for (uint64_t r = 0; r < R; ++r) {
            RepBlocks(o, r, L, P, bl);
            for (uint32_t b : bl) {
                lo = std::min<uint64_t>(lo, b);
                hi = std::max<uint64_t>(hi, b + 1ull);
            }
        }
        return std::make_pair(lo, hi);
    };
    auto ds = span(d);
    bool any = false;
    for (int i = 0; i < nsrc; ++i) {
        auto ss = span(srcs[i]);
        if (ss.first < ds.second && ds.first < ss.second) any = true;
    }
    if (!any) return;
    std::vector<int32_t> writtenBy(HwSize(Hw::UB) / 32, -1);
    std::vector<uint32_t> db, sb;
    for (uint64_t r = 0; r < R; ++r) {
        RepBlocks(d, r, L, P, db);
        for (int i = 0; i < nsrc; ++i) {
            RepBlocks(srcs[i], r, L, P, sb);
            bool inter = false;
            for (uint32_t x : sb)
                for (uint32_t y : db)
                    if (x == y) inter = true;
            if (inter && sb != db)
                Fail(api,
                     Fmt("%s partially overlaps dst within repeat %llu (must overlap 100%% or not at all)", srcs[i].name,
                         static_cast<unsigned long long>(r)),
                     "P:通用说明和约束 通用地址重叠约束");
            if (i == allowLater) continue;
            for (uint32_t x : sb)
                if (writtenBy[x] >= 0 && static_cast<uint64_t>(writtenBy[x]) < r)
                    Fail(api,
                         Fmt("%s of repeat %llu reads a block written by dst of earlier repeat %d", srcs[i].name,
                             static_cast<unsigned long long>(r), writtenBy[x]),
                         "P:通用说明和约束 通用地址重叠约束");
        }
        for (uint32_t y : db)
            if (writtenBy[y] < 0) writtenBy[y] = static_cast<int32_t>(r);
    }
}

// Mask resolution for high-dim forms.
inline uint32_t MaskBitsPerRepeat(uint32_t esize) { return 256 / esize; }
inline Lanes MaskContinuous(const char* api, uint64_t mask, uint32_t P, bool isSetMask, uint64_t repeatTime, uint64_t& R)
{
    CoreCtx& c = *t_core;
    Lanes L;
    if (!isSetMask) {
        if (c.maskCounter) {
            L.counter = true;
            L.count = c.maskLo;
            R = CeilDiv(L.count, P);
            return L;
        }
        L.counter = false;
        L.lo = c.maskLo;
        L.hi = P > 64 ? c.maskHi : 0;
        R = repeatTime;
        return L;
    }
    if (mask < 1 || mask > P)
        Fail(api, Fmt("continuous mask %llu not in [1, %u]", static_cast<unsigned long long>(mask), P),
             "G:…/高维切分API, P:Add");
    L.counter = false;
    L.lo = mask >= 64 ? ~0ull : ((1ull << mask) - 1);
    L.hi = mask > 64 ? (mask >= 128 ? ~0ull : ((1ull << (mask - 64)) - 1)) : 0;
    c.maskCounter = false;
    c.maskLo = L.lo;
    c.maskHi = L.hi;
    R = repeatTime;
    return L;
}
inline Lanes MaskBitwise(const char* api, const uint64_t mask[], uint32_t P, bool isSetMask, uint64_t repeatTime, uint64_t& R)
{
    if (!isSetMask) return MaskContinuous(api, 0, P, false, repeatTime, R);
    CoreCtx& c = *t_core;
    Lanes L;
    L.counter = false;
    L.lo = mask[0];
    L.hi = P > 64 ? mask[1] : 0;
    if (L.lo == 0 && L.hi == 0) Fail(api, "bitwise mask is all zero", "G:…/高维切分API, P:Add");
    c.maskCounter = false;
    c.maskLo = L.lo;
    c.maskHi = L.hi;
    R = repeatTime;
    return L;
}
// One name for both mask forms (a continuous lane count, or a 2 x 64-bit lane bitmap), so that the
// two mask overloads every high-dim API has share one body (the TWIN_*_MASKED macros below).
inline Lanes MaskLanes(const char* api, uint64_t mask, uint32_t P, bool isSetMask, uint64_t repeatTime, uint64_t& R)
{
    return MaskContinuous(api, mask, P, isSetMask, repeatTime, R);
}
inline Lanes MaskLanes(const char* api, const uint64_t mask[], uint32_t P, bool isSetMask, uint64_t repeatTime, uint64_t& R)
{
    return MaskBitwise(api, mask, P, isSetMask, repeatTime, R);
}
inline Lanes CountLanes(const char* api, int64_t count, uint32_t P, uint64_t& R)
{
    if (count < 0) Fail(api, Fmt("count %lld is negative", static_cast<long long>(count)), "P:Add");
    Lanes L;
    L.counter = true;
    L.count = static_cast<uint64_t>(count);
    R = CeilDiv(L.count, P);
    // count forms leave the mask register in NORMAL mode with all lanes enabled [ascendc-api §5.1]
    CoreCtx& c = *t_core;
    c.maskCounter = false;
    c.maskLo = c.maskHi = ~0ull;
    return L;
}

inline void CheckBlkStride(const char* api, uint64_t dstBlk)
{
    if (dstBlk == 0) Fail(api, "dstBlkStride 0 is undefined", "Z:…/SIMD计算说明/高维切分");
}

// ---- engines ----
template <typename D, typename S, typename F>
inline void Unary(const char* api, const LocalTensor<D>& dst, const LocalTensor<S>& src, uint64_t R, const Lanes& L,
                  uint64_t dBlk, uint64_t dRep, uint64_t sBlk, uint64_t sRep, F f)
{
    const LocalRef& d = UbOperand(api, dst, "dst");
    const LocalRef& s = UbOperand(api, src, "src");
    constexpr uint32_t W = sizeof(D) > sizeof(S) ? sizeof(D) : sizeof(S);
    constexpr uint32_t P = 256 / W;
    if (R == 0) return;
    if (R > 255 && !L.counter) Fail(api, "repeatTime > 255", "G:…/高维切分API");
    Opnd od{&d, sizeof(D), dBlk, dRep, "dst"}, os{&s, sizeof(S), sBlk, sRep, "src"};
    const uint64_t dEnd = CheckBounds(api, od, R, L, P);
    const uint64_t sEnd = CheckBounds(api, os, R, L, P);
    CheckOverlap(api, od, &os, 1, R, L, P);
    if (std::strcmp(api, "Duplicate") == 0) trace::Rec("V", api, static_cast<int64_t>(R), 0, 0, {trace::Loc(dst, dEnd)}, {});
    else trace::Rec("V", api, static_cast<int64_t>(R), 0, 0, {trace::Loc(dst, dEnd)}, {trace::Loc(src, sEnd)});
    D out[P];
    bool on[P];
    for (uint64_t r = 0; r < R; ++r) {
        for (uint32_t l = 0; l < P; ++l) {
            on[l] = L.On(r, l, P);
            if (on[l]) {
                S v;
                std::memcpy(&v, s.Ptr() + os.Off(r, l), sizeof(S));
                out[l] = f(v);
            }
        }
        for (uint32_t l = 0; l < P; ++l)
            if (on[l]) std::memcpy(d.Ptr() + od.Off(r, l), &out[l], sizeof(D));
    }
}

template <typename T, typename F>
inline void Binary(const char* api, const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                   uint64_t R, const Lanes& L, const AscendC::BinaryRepeatParams& p, bool allowDstSrc1Later, F f)
{
    const LocalRef& d = UbOperand(api, dst, "dst");
    const LocalRef& s0 = UbOperand(api, src0, "src0");
    const LocalRef& s1 = UbOperand(api, src1, "src1");
    constexpr uint32_t P = 256 / sizeof(T);
    if (R == 0) return;
    if (R > 255 && !L.counter) Fail(api, "repeatTime > 255", "G:…/高维切分API");
    Opnd od{&d, sizeof(T), p.dstBlkStride, p.dstRepStride, "dst"};
    Opnd os[2] = {{&s0, sizeof(T), p.src0BlkStride, p.src0RepStride, "src0"},
                  {&s1, sizeof(T), p.src1BlkStride, p.src1RepStride, "src1"}};
    const uint64_t dEnd = CheckBounds(api, od, R, L, P);
    const uint64_t s0End = CheckBounds(api, os[0], R, L, P);
    const uint64_t s1End = CheckBounds(api, os[1], R, L, P);
    trace::Rec("V", api, static_cast<int64_t>(R), 0, 0, {trace::Loc(dst, dEnd)}, {trace::Loc(src0, s0End), trace::Loc(src1, s1End)});
    int allow = -1;
    if (allowDstSrc1Later && d.addr == s1.addr && (p.src1RepStride == 0 || p.dstRepStride == 0)) allow = 1;
    CheckOverlap(api, od, os, 2, R, L, P, allow);
    T out[P];
    bool on[P];
    for (uint64_t r = 0; r < R; ++r) {
        for (uint32_t l = 0; l < P; ++l) {
            on[l] = L.On(r, l, P);
            if (on[l]) {
                T a, b;
                std::memcpy(&a, s0.Ptr() + os[0].Off(r, l), sizeof(T));
                std::memcpy(&b, s1.Ptr() + os[1].Off(r, l), sizeof(T));
                out[l] = f(a, b);
            }
        }
        for (uint32_t l = 0; l < P; ++l)
            if (on[l]) std::memcpy(d.Ptr() + od.Off(r, l), &out[l], sizeof(T));
    }
}

// Count-form helpers.
template <typename D, typename S, typename F>
inline void UnaryCount(const char* api, const LocalTensor<D>& dst, const LocalTensor<S>& src, int64_t count, F f)
{
    RequireAiv(api, "ascendc-api §0.6");
    constexpr uint32_t W = sizeof(D) > sizeof(S) ? sizeof(D) : sizeof(S);
    constexpr uint32_t P = 256 / W;
    uint64_t R;
    Lanes L = CountLanes(api, count, P, R);
    Unary(api, dst, src, R, L, 1, P * sizeof(D) / 32, 1, P * sizeof(S) / 32, f);
}
template <typename T, typename F>
inline void BinaryCount(const char* api, const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                        int64_t count, bool allowDstSrc1Later, F f)
{
    RequireAiv(api, "ascendc-api §0.6");
    constexpr uint32_t P = 256 / sizeof(T);
    uint64_t R;
    Lanes L = CountLanes(api, count, P, R);
    AscendC::BinaryRepeatParams p;
    Binary(api, dst, src0, src1, R, L, p, allowDstSrc1Later, f);
}

// ---- Cast legality and conversion [P:Cast 表4, ascendc-api §5.6] ----
constexpr uint32_t RM(RoundMode m) { return 1u << static_cast<int>(m); }
constexpr uint32_t kRintTrunc = RM(RoundMode::CAST_RINT) | RM(RoundMode::CAST_FLOOR) | RM(RoundMode::CAST_CEIL) |
                                RM(RoundMode::CAST_ROUND) | RM(RoundMode::CAST_TRUNC);
constexpr uint32_t kNone = RM(RoundMode::CAST_NONE);
template <typename D, typename S>
constexpr uint32_t CastModes()
{
    constexpr DType d = DTypeOf<D>(), s = DTypeOf<S>();
    if (s == DType::F32) {
        if (d == DType::F16) return kRintTrunc | RM(RoundMode::CAST_ODD) | kNone;
        if (d == DType::BF16) return kRintTrunc;
        if (d == DType::F32 || d == DType::I32 || d == DType::I16 || d == DType::I64) return kRintTrunc;
    }
    if (s == DType::F16) {
        if (d == DType::F32) return kNone;
        if (d == DType::I32 || d == DType::I16) return kRintTrunc;
        if (d == DType::I8 || d == DType::U8) return kRintTrunc | kNone;
    }
    if (s == DType::BF16) {
        if (d == DType::F32) return kNone;
        if (d == DType::I32) return kRintTrunc;
    }
    if (s == DType::I32) {
        if (d == DType::F32) return kRintTrunc | kNone;
        if (d == DType::I16 || d == DType::I64) return kNone;
    }
    if (s == DType::I16) {
        if (d == DType::F16) return kRintTrunc | kNone;
        if (d == DType::F32) return kNone;
    }
    if ((s == DType::I8 || s == DType::U8) && d == DType::F16) return kNone;
    if (s == DType::I64) {
        if (d == DType::I32) return kNone;
        if (d == DType::F32) return kRintTrunc;
    }
    return 0;
}
template <typename D, typename S>
inline D Convert(S v, RoundMode m)
{
    RoundMode mm = (m == RoundMode::CAST_NONE) ? RoundMode::CAST_RINT : m;
    if constexpr (std::is_same_v<S, float> && std::is_same_v<D, half>) return num::FloatToHalf(v, mm);
    else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bfloat16_t>) return num::FloatToBf16(v, mm);
    else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, float>) {
        if (std::isnan(v) || std::isinf(v)) return v;
        return static_cast<float>(num::RoundIntegral(v, mm));
    } else if constexpr (std::is_integral_v<D> && !std::is_integral_v<S>)
        return num::FloatToInt<D>(static_cast<double>(static_cast<float>(v)), mm);
    else if constexpr (std::is_same_v<D, float> && std::is_integral_v<S>)
        return num::DoubleToFloat(static_cast<double>(v), mm);
    else if constexpr (std::is_same_v<D, float>)
        return static_cast<float>(v);  // half/bf16 -> float: exact
    else if constexpr (std::is_same_v<D, half> && std::is_integral_v<S>)
        return num::FloatToHalf(static_cast<float>(v), mm);
    else if constexpr (std::is_integral_v<D> && std::is_integral_v<S>) {
        int64_t x = static_cast<int64_t>(v);
        if (x > static_cast<int64_t>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
        if (x < static_cast<int64_t>(std::numeric_limits<D>::min())) return std::numeric_limits<D>::min();
        return static_cast<D>(x);
    } else {
        return D{};  // unreachable: CheckCast rejects pairs that are not legal on A2 before converting
    }
}
template <typename D, typename S>
inline void CheckCast(const char* api, RoundMode m)
{
    constexpr uint32_t modes = CastModes<D, S>();
    if (modes == 0)
        Fail(api, Fmt("%s -> %s is not a Cast pair on A2%s", TypeName<S>(), TypeName<D>(),
                      (std::is_same_v<S, half> && std::is_same_v<D, bfloat16_t>) ||
                              (std::is_same_v<S, bfloat16_t> && std::is_same_v<D, half>)
                          ? " (no direct half<->bf16: go through float)"
                          : ""),
             "P:Cast 表4");
    if ((modes & RM(m)) == 0)
        Fail(api, Fmt("round mode %s is not allowed for %s -> %s on A2", num::RoundModeName(m), TypeName<S>(), TypeName<D>()),
             "P:Cast 表4");
}

// Pairwise binary-tree sum of n (power of two) values, adjacent pairs first [P:ReduceSum 方式一/二].
template <typename T>
inline T TreeSum(std::vector<T>& v)
{
    size_t n = v.size();
    while (n > 1) {
        for (size_t i = 0; i < n / 2; ++i) {
            if constexpr (std::is_same_v<T, half>) v[i] = num::HalfAddSat(v[2 * i], v[2 * i + 1]);
            else v[i] = v[2 * i] + v[2 * i + 1];
        }
        n /= 2;
    }
    return v[0];
}

inline void UbScratchCheck(const char* api)
{
    CoreCtx& c = *t_core;
    if (c.pipe != nullptr) {
        uint32_t end = static_cast<AscendC::TPipe*>(c.pipe)->UbEnd();
        if (end > kUbScratch)
            Fail(api,
                 Fmt("TPipe UB allocations end at %u B, inside the 8 KiB scratch [184 KiB, 192 KiB) that Select modes 1/2 "
                     "write; keep UB allocations <= 184 KiB",
                     end),
                 "P:Select, I:kernel_utils_constants.h TMP_UB_OFFSET");
    }
}
// What a Select mode 1/2 leaves in that scratch: nothing a later read may rely on.
inline void UbScratchPoison()
{
    CoreCtx& c = *t_core;
    std::memset(c.pool[static_cast<int>(Hw::UB)] + kUbScratch, kPoisonByte, HwSize(Hw::UB) - kUbScratch);
}

}  // namespace vec
}  // namespace twin

namespace AscendC {

// ================================ element-wise, count and high-dim forms ================================
// Each high-dim API has two overloads that differ only in the mask parameter (uint64_t mask or
// uint64_t mask[]); a *_MASKED macro writes the body once and is expanded for both (MASK_PARAM).
#define TWIN_VEC_UNARY_MASKED(NAME, SETS, SRC, EXPR, MASK_PARAM)                                                       \
    template <typename T, bool isSetMask = true>                                                                       \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, MASK_PARAM, const uint8_t repeatTime,       \
                     const UnaryRepeatParams& p)                                                                       \
    {                                                                                                                  \
        twin::RequireAiv(#NAME, SRC);                                                                                  \
        twin::vec::CheckType<T>(#NAME, SETS, SRC);                                                                     \
        twin::vec::CheckBlkStride(#NAME, p.dstBlkStride);                                                              \
        uint64_t R;                                                                                                    \
        twin::vec::Lanes L = twin::vec::MaskLanes(#NAME, mask, 256 / sizeof(T), isSetMask, repeatTime, R);             \
        twin::vec::Unary(#NAME, dst, src, R, L, p.dstBlkStride, p.dstRepStride, p.srcBlkStride, p.srcRepStride,        \
                         [](T x) -> T { EXPR; });                                                                      \
    }
#define TWIN_VEC_UNARY(NAME, SETS, SRC, EXPR)                                                                          \
    template <typename T>                                                                                              \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count)                       \
    {                                                                                                                  \
        twin::RequireAiv(#NAME, SRC);                                                                                  \
        twin::vec::CheckType<T>(#NAME, SETS, SRC);                                                                     \
        twin::vec::UnaryCount(#NAME, dst, src, count, [](T x) -> T { EXPR; });                                         \
    }                                                                                                                  \
    TWIN_VEC_UNARY_MASKED(NAME, SETS, SRC, EXPR, uint64_t mask)                                                        \
    TWIN_VEC_UNARY_MASKED(NAME, SETS, SRC, EXPR, uint64_t mask[])

// [P:Abs] half/float
TWIN_VEC_UNARY(Abs, twin::vec::kF16 | twin::vec::kF32, "P:Abs", return twin::num::FromF<T>(std::fabs(static_cast<float>(x))))
// [P:Relu] half/float/int32
TWIN_VEC_UNARY(Relu, twin::vec::kF16 | twin::vec::kF32 | twin::vec::kI32, "P:Relu",
               if constexpr (std::is_integral_v<T>) return x < 0 ? T(0) : x;
               else { float f = static_cast<float>(x); return twin::num::FromF<T>(std::isnan(f) ? f : (f < 0 ? 0.0f : f)); })
#undef TWIN_VEC_UNARY
#undef TWIN_VEC_UNARY_MASKED

// Exp / Ln / Sqrt / Reciprocal carry a precision-config template parameter.
#define TWIN_VEC_UNARY_CFG_MASKED(NAME, CFGT, CFGDEF, SRC, EXPR, MASK_PARAM)                                           \
    template <typename T, bool isSetMask = true, const CFGT& config = CFGDEF>                                          \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, MASK_PARAM, const uint8_t repeatTime,       \
                     const UnaryRepeatParams& p)                                                                       \
    {                                                                                                                  \
        twin::RequireAiv(#NAME, SRC);                                                                                  \
        twin::vec::CheckType<T>(#NAME, twin::vec::kF16 | twin::vec::kF32, SRC);                                        \
        twin::vec::CheckBlkStride(#NAME, p.dstBlkStride);                                                              \
        constexpr bool ftz = static_cast<int>(config.algo) != 2;                                                       \
        uint64_t R;                                                                                                    \
        twin::vec::Lanes L = twin::vec::MaskLanes(#NAME, mask, 256 / sizeof(T), isSetMask, repeatTime, R);             \
        twin::vec::Unary(#NAME, dst, src, R, L, p.dstBlkStride, p.dstRepStride, p.srcBlkStride, p.srcRepStride,        \
                         [](T x) -> T {                                                                                \
                             T r = [&]() -> T { EXPR; }();                                                             \
                             return ftz ? twin::num::Ftz(r) : r;                                                       \
                         });                                                                                           \
    }
#define TWIN_VEC_UNARY_CFG(NAME, CFGT, CFGDEF, SRC, EXPR)                                                              \
    template <typename T, const CFGT& config = CFGDEF>                                                                 \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count)                       \
    {                                                                                                                  \
        twin::RequireAiv(#NAME, SRC);                                                                                  \
        twin::vec::CheckType<T>(#NAME, twin::vec::kF16 | twin::vec::kF32, SRC);                                        \
        constexpr bool ftz = static_cast<int>(config.algo) != 2;                                                       \
        twin::vec::UnaryCount(#NAME, dst, src, count, [](T x) -> T {                                                   \
            T r = [&]() -> T { EXPR; }();                                                                              \
            return ftz ? twin::num::Ftz(r) : r;                                                                        \
        });                                                                                                            \
    }                                                                                                                  \
    TWIN_VEC_UNARY_CFG_MASKED(NAME, CFGT, CFGDEF, SRC, EXPR, uint64_t mask)                                            \
    TWIN_VEC_UNARY_CFG_MASKED(NAME, CFGT, CFGDEF, SRC, EXPR, uint64_t mask[])

// [P:Exp] e^x, computed in float and rounded once; INTRINSIC flushes subnormal results to 0.
TWIN_VEC_UNARY_CFG(Exp, ExpConfig, DEFAULT_EXP_CONFIG, "P:Exp", return twin::num::FromF<T>(std::exp(static_cast<float>(x))))
// [P:Ln] natural log.
TWIN_VEC_UNARY_CFG(Ln, LnConfig, DEFAULT_LN_CONFIG, "P:Ln", return twin::num::FromF<T>(std::log(static_cast<float>(x))))
// [P:Sqrt]
TWIN_VEC_UNARY_CFG(Sqrt, SqrtConfig, DEFAULT_SQRT_CONFIG, "P:Sqrt", return twin::num::FromF<T>(std::sqrt(static_cast<float>(x))))
// [P:Reciprocal]
TWIN_VEC_UNARY_CFG(Reciprocal, ReciprocalConfig, DEFAULT_RECIPROCAL_CONFIG, "P:Reciprocal",
                   return twin::num::FromF<T>(1.0f / static_cast<float>(x)))
#undef TWIN_VEC_UNARY_CFG
#undef TWIN_VEC_UNARY_CFG_MASKED

#define TWIN_VEC_BINARY_MASKED(NAME, SETS, SRC, ALLOWLATER, EXPR, MASK_PARAM)                                          \
    template <typename T, bool isSetMask = true>                                                                       \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, MASK_PARAM,    \
                     const uint8_t repeatTime, const BinaryRepeatParams& p)                                            \
    {                                                                                                                  \
        twin::RequireAiv(#NAME, SRC);                                                                                  \
        twin::vec::CheckType<T>(#NAME, SETS, SRC);                                                                     \
        twin::vec::CheckBlkStride(#NAME, p.dstBlkStride);                                                              \
        uint64_t R;                                                                                                    \
        twin::vec::Lanes L = twin::vec::MaskLanes(#NAME, mask, 256 / sizeof(T), isSetMask, repeatTime, R);             \
        twin::vec::Binary(#NAME, dst, src0, src1, R, L, p, ALLOWLATER, [](T x, T y) -> T {                             \
            using C = twin::vec::Calc<T>;                                                                              \
            C a = static_cast<C>(x), b = static_cast<C>(y);                                                            \
            return twin::vec::FromCalc<T>(EXPR);                                                                       \
        });                                                                                                            \
    }
#define TWIN_VEC_BINARY(NAME, SETS, SRC, ALLOWLATER, EXPR)                                                             \
    template <typename T>                                                                                              \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,                \
                     const int32_t& count)                                                                             \
    {                                                                                                                  \
        twin::RequireAiv(#NAME, SRC);                                                                                  \
        twin::vec::CheckType<T>(#NAME, SETS, SRC);                                                                     \
        twin::vec::BinaryCount(#NAME, dst, src0, src1, count, ALLOWLATER, [](T x, T y) -> T {                          \
            using C = twin::vec::Calc<T>;                                                                              \
            C a = static_cast<C>(x), b = static_cast<C>(y);                                                            \
            (void)a;                                                                                                   \
            (void)b;                                                                                                   \
            return twin::vec::FromCalc<T>(EXPR);                                                                       \
        });                                                                                                            \
    }                                                                                                                  \
    TWIN_VEC_BINARY_MASKED(NAME, SETS, SRC, ALLOWLATER, EXPR, uint64_t mask)                                           \
    TWIN_VEC_BINARY_MASKED(NAME, SETS, SRC, ALLOWLATER, EXPR, uint64_t mask[])

constexpr uint32_t kArithSets = twin::vec::kF16 | twin::vec::kF32 | twin::vec::kI16 | twin::vec::kI32;
// [P:Add] [P:Sub] [P:Mul] [P:Max] [P:Min]: half/int16/int32/float; [P:Div]: half/float
TWIN_VEC_BINARY(Add, kArithSets, "P:Add", true, a + b)
TWIN_VEC_BINARY(Sub, kArithSets, "P:Sub", true, a - b)
TWIN_VEC_BINARY(Mul, kArithSets, "P:Mul", true, a * b)
TWIN_VEC_BINARY(Max, kArithSets, "P:Max", true, twin::vec::FMax(a, b))
TWIN_VEC_BINARY(Min, kArithSets, "P:Min", true, twin::vec::FMin(a, b))
// [P:And] [P:Or] (Memory矢量计算/逻辑计算/And.md, Or.md): bitwise, int16_t/uint16_t on A2. The docs' constraint
// for 32-bit data (And.md 约束说明: "ReinterpretCast to uint16_t/int16_t, then And"; passed directly, the
// count must be twice the elements and behaviour varies between chips) is enforced: int32/uint32 are refused.
TWIN_VEC_BINARY(And, twin::vec::kI16 | twin::vec::kU16, "P:And", false, a & b)
TWIN_VEC_BINARY(Or, twin::vec::kI16 | twin::vec::kU16, "P:Or", false, a | b)
#undef TWIN_VEC_BINARY
#undef TWIN_VEC_BINARY_MASKED

// [P:Gather] (Memory矢量计算/离散与聚合/Gather.md), the count form: dst[i] = src[(srcBaseAddr + srcOffset[i]) /
// sizeof(T)] for i < count; srcOffset in bytes (uint32_t), each a multiple of sizeof(T) and inside src
// (the doc: offsets element-aligned, not past UB; the twin holds them to the tensor passed); dst must not
// be src (约束说明). A2 types: int16_t/uint16_t/half/bfloat16_t/int32_t/uint32_t/float. The whole of src
// counts as read (its reads are data-dependent).
constexpr uint32_t kGatherSets = twin::vec::kI16 | twin::vec::kU16 | twin::vec::kF16 | twin::vec::kBF16 | twin::vec::kI32 |
                                 twin::vec::kU32 | twin::vec::kF32;
template <typename T>
inline void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint32_t>& srcOffset,
                   const uint32_t srcBaseAddr, const uint32_t count)
{
    const char* api = "Gather";
    twin::RequireAiv(api, "P:Gather");
    twin::vec::CheckType<T>(api, kGatherSets, "P:Gather");
    const twin::LocalRef& d = twin::vec::UbOperand(api, dst, "dst");
    const twin::LocalRef& s = twin::vec::UbOperand(api, src, "src");
    const twin::LocalRef& o = twin::vec::UbOperand(api, srcOffset, "srcOffset");
    if (count == 0) return;
    const uint64_t dBytes = static_cast<uint64_t>(count) * sizeof(T), oBytes = static_cast<uint64_t>(count) * 4;
    if (dBytes > d.bytes || oBytes > o.bytes)
        twin::Fail(api, twin::Fmt("count %u: dst holds %u bytes, srcOffset %u", count, d.bytes, o.bytes), "P:Gather");
    if (d.addr < s.addr + s.bytes && s.addr < d.addr + dBytes)
        twin::Fail(api, "dst overlaps src (Gather does not support the same memory for both)", "P:Gather 约束说明");
    if (srcBaseAddr % sizeof(T) != 0)
        twin::Fail(api, twin::Fmt("srcBaseAddr %u is not a multiple of the element size %zu", srcBaseAddr, sizeof(T)), "P:Gather 约束说明");
    twin::trace::Rec("V", api, static_cast<int64_t>((dBytes + 255) / 256), 0, 0, {twin::trace::Loc(dst, dBytes)},
                     {twin::trace::Loc(src, s.bytes), twin::trace::Loc(srcOffset, oBytes)});
    std::vector<T> out(count);
    for (uint32_t i = 0; i < count; ++i) {
        uint32_t off;
        std::memcpy(&off, o.Ptr() + static_cast<uint64_t>(i) * 4, 4);
        const uint64_t at = static_cast<uint64_t>(srcBaseAddr) + off;
        if (off % sizeof(T) != 0 || at + sizeof(T) > s.bytes)
            twin::Fail(api, twin::Fmt("srcOffset[%u] = %u (+ base %u) is not an aligned element of src (%u bytes)", i, off, srcBaseAddr, s.bytes),
                       "P:Gather 约束说明");
        std::memcpy(&out[i], s.Ptr() + at, sizeof(T));
    }
    for (uint32_t i = 0; i < count; ++i) std::memcpy(d.Ptr() + static_cast<uint64_t>(i) * sizeof(T), &out[i], sizeof(T));
}

// [P:Div] with DivConfig (INTRINSIC: <= 1 ulp; the twin rounds the float quotient once).
template <typename T, const DivConfig& config = DEFAULT_DIV_CONFIG>
inline void Div(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count)
{
    twin::RequireAiv("Div", "P:Div");
    twin::vec::CheckType<T>("Div", twin::vec::kF16 | twin::vec::kF32, "P:Div");
    twin::vec::BinaryCount("Div", dst, src0, src1, count, false,
                           [](T x, T y) -> T { return twin::num::FromF<T>(static_cast<float>(x) / static_cast<float>(y)); });
}
#define TWIN_VEC_DIV_MASKED(MASK_PARAM)                                                                                \
    template <typename T, bool isSetMask = true, const DivConfig& config = DEFAULT_DIV_CONFIG>                         \
    inline void Div(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, MASK_PARAM,     \
                    const uint8_t repeatTime, const BinaryRepeatParams& p)                                             \
    {                                                                                                                  \
        twin::RequireAiv("Div", "P:Div");                                                                              \
        twin::vec::CheckType<T>("Div", twin::vec::kF16 | twin::vec::kF32, "P:Div");                                    \
        twin::vec::CheckBlkStride("Div", p.dstBlkStride);                                                              \
        uint64_t R;                                                                                                    \
        twin::vec::Lanes L = twin::vec::MaskLanes("Div", mask, 256 / sizeof(T), isSetMask, repeatTime, R);             \
        twin::vec::Binary("Div", dst, src0, src1, R, L, p, false, [](T x, T y) -> T {                                  \
            return twin::num::FromF<T>(static_cast<float>(x) / static_cast<float>(y));                                 \
        });                                                                                                            \
    }
TWIN_VEC_DIV_MASKED(uint64_t mask)
TWIN_VEC_DIV_MASKED(uint64_t mask[])
#undef TWIN_VEC_DIV_MASKED

// Vector-scalar ops: the scalar has type T (deduction conflict otherwise, as on NPU) [P:Muls, P:Adds, P:Maxs, P:Mins].
#define TWIN_VEC_SCALAR_MASKED(NAME, SRC, EXPR, MASK_PARAM)                                                            \
    template <typename T, bool isSetMask = true>                                                                       \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, MASK_PARAM,           \
                     const uint8_t repeatTime, const UnaryRepeatParams& p)                                             \
    {                                                                                                                  \
        twin::RequireAiv(#NAME, SRC);                                                                                  \
        twin::vec::CheckType<T>(#NAME, kArithSets, SRC);                                                               \
        twin::vec::CheckBlkStride(#NAME, p.dstBlkStride);                                                              \
        using C = twin::vec::Calc<T>;                                                                                  \
        C b = static_cast<C>(scalarValue);                                                                             \
        uint64_t R;                                                                                                    \
        twin::vec::Lanes L = twin::vec::MaskLanes(#NAME, mask, 256 / sizeof(T), isSetMask, repeatTime, R);             \
        twin::vec::Unary(#NAME, dst, src, R, L, p.dstBlkStride, p.dstRepStride, p.srcBlkStride, p.srcRepStride,        \
                         [b](T x) -> T {                                                                               \
                             C a = static_cast<C>(x);                                                                  \
                             return twin::vec::FromCalc<T>(EXPR);                                                      \
                         });                                                                                           \
    }
#define TWIN_VEC_SCALAR(NAME, SRC, EXPR)                                                                               \
    template <typename T, bool isSetMask = true>                                                                       \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count) \
    {                                                                                                                  \
        twin::RequireAiv(#NAME, SRC);                                                                                  \
        twin::vec::CheckType<T>(#NAME, kArithSets, SRC);                                                               \
        using C = twin::vec::Calc<T>;                                                                                  \
        C b = static_cast<C>(scalarValue);                                                                             \
        twin::vec::UnaryCount(#NAME, dst, src, count, [b](T x) -> T {                                                  \
            C a = static_cast<C>(x);                                                                                   \
            return twin::vec::FromCalc<T>(EXPR);                                                                       \
        });                                                                                                            \
    }                                                                                                                  \
    TWIN_VEC_SCALAR_MASKED(NAME, SRC, EXPR, uint64_t mask)                                                             \
    TWIN_VEC_SCALAR_MASKED(NAME, SRC, EXPR, uint64_t mask[])

TWIN_VEC_SCALAR(Adds, "P:Adds", a + b)
TWIN_VEC_SCALAR(Muls, "P:Muls", a* b)
TWIN_VEC_SCALAR(Maxs, "P:Maxs", twin::vec::FMax(a, b))
TWIN_VEC_SCALAR(Mins, "P:Mins", twin::vec::FMin(a, b))
#undef TWIN_VEC_SCALAR
#undef TWIN_VEC_SCALAR_MASKED

// ================================ Duplicate [P:Duplicate] ================================
constexpr uint32_t kDupSets = twin::vec::kI16 | twin::vec::kU16 | twin::vec::kF16 | twin::vec::kBF16 | twin::vec::kI32 |
                              twin::vec::kU32 | twin::vec::kF32;
template <typename T>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count)
{
    twin::RequireAiv("Duplicate", "P:Duplicate");
    twin::vec::CheckType<T>("Duplicate", kDupSets, "P:Duplicate");
    T v = scalarValue;
    twin::vec::UnaryCount("Duplicate", dst, dst, count, [v](T) -> T { return v; });
}
#define TWIN_VEC_DUPLICATE_MASKED(MASK_PARAM)                                                                          \
    template <typename T, bool isSetMask = true>                                                                       \
    inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, MASK_PARAM, const uint8_t repeatTime,       \
                          const uint16_t dstBlockStride, const uint8_t dstRepeatStride)                                \
    {                                                                                                                  \
        twin::RequireAiv("Duplicate", "P:Duplicate");                                                                  \
        twin::vec::CheckType<T>("Duplicate", kDupSets, "P:Duplicate");                                                 \
        twin::vec::CheckBlkStride("Duplicate", dstBlockStride);                                                        \
        uint64_t R;                                                                                                    \
        twin::vec::Lanes L = twin::vec::MaskLanes("Duplicate", mask, 256 / sizeof(T), isSetMask, repeatTime, R);       \
        T v = scalarValue;                                                                                             \
        twin::vec::Unary("Duplicate", dst, dst, R, L, dstBlockStride, dstRepeatStride, dstBlockStride, dstRepeatStride, \
                         [v](T) -> T { return v; });                                                                   \
    }
TWIN_VEC_DUPLICATE_MASKED(uint64_t mask)
TWIN_VEC_DUPLICATE_MASKED(uint64_t mask[])
#undef TWIN_VEC_DUPLICATE_MASKED

// ================================ Cast [P:Cast, ascendc-api §5.6] ================================
// Lanes per repeat follow the wider type; each side uses its own 32-byte blocks.
template <typename T, typename U>
inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode, const uint32_t count)
{
    twin::RequireAiv("Cast", "P:Cast");
    twin::vec::CheckCast<T, U>("Cast", roundMode);
    RoundMode m = roundMode;
    twin::vec::UnaryCount("Cast", dst, src, static_cast<int64_t>(count), [m](U x) -> T { return twin::vec::Convert<T, U>(x, m); });
}
#define TWIN_VEC_CAST_MASKED(MASK_PARAM)                                                                               \
    template <typename T, typename U, bool isSetMask = true>                                                           \
    inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode, MASK_PARAM,     \
                     const uint8_t repeatTime, const UnaryRepeatParams& p)                                             \
    {                                                                                                                  \
        twin::RequireAiv("Cast", "P:Cast");                                                                            \
        twin::vec::CheckCast<T, U>("Cast", roundMode);                                                                 \
        twin::vec::CheckBlkStride("Cast", p.dstBlkStride);                                                             \
        constexpr uint32_t W = sizeof(T) > sizeof(U) ? sizeof(T) : sizeof(U);                                          \
        uint64_t R;                                                                                                    \
        twin::vec::Lanes L = twin::vec::MaskLanes("Cast", mask, 256 / W, isSetMask, repeatTime, R);                    \
        RoundMode m = roundMode;                                                                                       \
        twin::vec::Unary("Cast", dst, src, R, L, p.dstBlkStride, p.dstRepStride, p.srcBlkStride, p.srcRepStride,       \
                         [m](U x) -> T { return twin::vec::Convert<T, U>(x, m); });                                    \
    }
TWIN_VEC_CAST_MASKED(const uint64_t mask)
TWIN_VEC_CAST_MASKED(const uint64_t mask[])
#undef TWIN_VEC_CAST_MASKED

// ================================ mask registers ================================
// [P:SetVectorMask, P:SetMaskCount, P:SetMaskNorm, P:ResetMask]
template <typename T, MaskMode mode = MaskMode::NORMAL>
inline void SetVectorMask(const uint64_t maskHigh, const uint64_t maskLow)
{
    twin::CoreCtx& c = twin::Cur("SetVectorMask");
    twin::RequireAiv("SetVectorMask", "P:SetVectorMask");
    c.maskCounter = (mode == MaskMode::COUNTER) || c.maskCounter;
    c.maskHi = maskHigh;
    c.maskLo = maskLow;
}
template <typename T, MaskMode mode = MaskMode::NORMAL>
inline void SetVectorMask(int32_t len)
{
    twin::CoreCtx& c = twin::Cur("SetVectorMask");
    twin::RequireAiv("SetVectorMask", "P:SetVectorMask");
    if (mode == MaskMode::COUNTER || c.maskCounter) {
        c.maskCounter = true;
        c.maskLo = static_cast<uint64_t>(len);
        c.maskHi = 0;
        return;
    }
    uint32_t P = 256 / sizeof(T);
    if (len < 1 || static_cast<uint32_t>(len) > P)
        twin::Fail("SetVectorMask", twin::Fmt("len %d not in [1, %u]", len, P), "P:SetVectorMask");
    c.maskLo = len >= 64 ? ~0ull : ((1ull << len) - 1);
    c.maskHi = len > 64 ? (len >= 128 ? ~0ull : ((1ull << (len - 64)) - 1)) : 0;
}
inline void SetMaskCount()
{
    twin::CoreCtx& c = twin::Cur("SetMaskCount");
    c.maskCounter = true;
}
inline void SetMaskNorm()
{
    twin::CoreCtx& c = twin::Cur("SetMaskNorm");
    c.maskCounter = false;
}
inline void ResetMask()
{
    twin::CoreCtx& c = twin::Cur("ResetMask");
    c.maskLo = c.maskHi = ~0ull;
}

// ================================ reductions ================================
// [P:ReduceMax] count form: dst[0] = max, dst[1] = index bits (calIndex); sharedTmpBuffer needs
// roundUp(2R, 32/sizeof) elements without index, R = max(1, count / (256/sizeof)) (doc formula), more with index.
// NaN inputs propagate (unspecified on NPU, ascendc-api §10.4). The tmp area is clobbered.
template <typename T>
inline void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
                      const int32_t count, bool calIndex = 0)
{
    const char* api = "ReduceMax";
    constexpr const char* S = "P:ReduceMax";
    twin::RequireAiv(api, S);
    twin::vec::CheckType<T>(api, twin::vec::kF16 | twin::vec::kF32, S);
    const twin::LocalRef& d = twin::vec::UbOperand(api, dst, "dst", sizeof(T) * 2);
    const twin::LocalRef& s = twin::vec::UbOperand(api, src, "src");
    const twin::LocalRef& t = twin::vec::UbOperand(api, sharedTmpBuffer, "sharedTmpBuffer");
    if (count < 1) twin::Fail(api, twin::Fmt("count %d must be >= 1", count), S);
    twin::CheckRange(api, s, 0, static_cast<uint64_t>(count) * sizeof(T), "src", S);
    twin::CheckRange(api, d, 0, (calIndex ? 2 : 1) * sizeof(T), "dst", S);
    const int64_t epb = 32 / sizeof(T), epr = 256 / sizeof(T);
    auto ru = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    int64_t R = std::max<int64_t>(1, count / epr);
    int64_t need;
    if (!calIndex) {
        need = ru(R * 2, epb) * epb;
    } else {
        int64_t o1 = R * 2;
        int64_t a2 = ru(o1, epb) * epb;
        int64_t o2 = ru(o1, epr) * 2;
        int64_t a3 = ru(o2, epb) * epb;
        int64_t o3 = ru(o2, epr) * 2;
        int64_t e3 = ru(o3, epb) * epb;
        need = a2 + a3 + e3;
    }
    twin::trace::Rec("V", api, (count + epr - 1) / epr, count, 0,
                     {twin::trace::Loc(dst, (calIndex ? 2 : 1) * sizeof(T)), twin::trace::Loc(sharedTmpBuffer, need * sizeof(T))},
                     {twin::trace::Loc(src, static_cast<uint64_t>(count) * sizeof(T))});
    if (static_cast<uint64_t>(need) * sizeof(T) > t.bytes)
        twin::Fail(api, twin::Fmt("sharedTmpBuffer holds %u B but needs %lld elements (%lld B)", t.bytes,
                                  static_cast<long long>(need), static_cast<long long>(need * sizeof(T))),
                   S);
    const T* in = reinterpret_cast<const T*>(s.Ptr());
    float best = static_cast<float>(in[0]);
    uint32_t bi = 0;
    bool nan = std::isnan(best);
    for (int32_t i = 1; i < count; ++i) {
        float v = static_cast<float>(in[i]);
        if (std::isnan(v)) nan = true;
        if (v > best) {
            best = v;
            bi = static_cast<uint32_t>(i);
        }
    }
    if (nan) best = NAN;
    // clobber the work area (dst may alias it: write dst afterwards)
    bool aliasSrc = (t.addr < s.addr + static_cast<uint64_t>(count) * sizeof(T)) && (s.addr < t.addr + need * sizeof(T));
    if (!aliasSrc) std::memset(t.Ptr(), twin::kPoisonByte, static_cast<size_t>(need) * sizeof(T));
    T r = twin::num::FromF<T>(best);
    std::memcpy(d.Ptr(), &r, sizeof(T));
    if (calIndex) {
        if constexpr (std::is_same_v<T, half>) {
            if (bi > 65535) twin::Fail(api, "half ReduceMax index above 65535", S);
            uint16_t b16 = static_cast<uint16_t>(bi);
            std::memcpy(d.Ptr() + sizeof(T), &b16, 2);
        } else {
            std::memcpy(d.Ptr() + sizeof(T), &bi, 4);
        }
    }
}

// [P:ReduceSum] count form: within a repeat a pairwise binary tree, across repeats sequential (方式一: the count form on A2);
// half partial sums saturate at +-65504. Any tmp size is accepted and tmp is not modified (方式一 does not use it).
template <typename T, bool isSetMask = true>
inline void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
                      const int32_t count)
{
    const char* api = "ReduceSum";
    constexpr const char* S = "P:ReduceSum";
    twin::RequireAiv(api, S);
    twin::vec::CheckType<T>(api, twin::vec::kF16 | twin::vec::kF32, S);
    const twin::LocalRef& d = twin::vec::UbOperand(api, dst, "dst", sizeof(T));
    const twin::LocalRef& s = twin::vec::UbOperand(api, src, "src");
    twin::vec::UbOperand(api, sharedTmpBuffer, "sharedTmpBuffer");
    if (count < 1) twin::Fail(api, twin::Fmt("count %d must be >= 1", count), S);
    twin::CheckRange(api, s, 0, static_cast<uint64_t>(count) * sizeof(T), "src", S);
    twin::CheckRange(api, d, 0, sizeof(T), "dst", S);
    const T* in = reinterpret_cast<const T*>(s.Ptr());
    const int64_t P = 256 / sizeof(T);
    twin::trace::Rec("V", api, (count + P - 1) / P, count, 0, {twin::trace::Loc(dst, sizeof(T))},
                     {twin::trace::Loc(src, static_cast<uint64_t>(count) * sizeof(T))});
    std::vector<T> lane(P);
    T acc = T(0);
    for (int64_t r = 0; r * P < count; ++r) {
        for (int64_t l = 0; l < P; ++l) lane[l] = (r * P + l < count) ? in[r * P + l] : T(0);
        T part = twin::vec::TreeSum(lane);
        if (r == 0) acc = part;
        else if constexpr (std::is_same_v<T, half>) acc = twin::num::HalfAddSat(acc, part);
        else acc = acc + part;
    }
    std::memcpy(d.Ptr(), &acc, sizeof(T));
}

// [P:WholeReduceMax, P:WholeReduceSum] one result per repeat; dstRepStride counted in results.
template <typename T, bool isSetMask = true>
inline void WholeReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t mask, const int32_t repeatTime,
                           const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride,
                           ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX);
template <typename T, bool isSetMask = true>
inline void WholeReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[], const int32_t repeatTime,
                           const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride,
                           ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX);
template <typename T, bool isSetMask = true>
inline void WholeReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t mask, const int32_t repeatTime,
                           const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride);
template <typename T, bool isSetMask = true>
inline void WholeReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[], const int32_t repeatTime,
                           const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride);

}  // namespace AscendC

namespace twin {
namespace vec {
template <typename T>
inline void WholeReduce(const char* api, bool isMax, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                        const Lanes& L, uint64_t R, int32_t dstRepStride, int32_t srcBlkStride, int32_t srcRepStride,
                        AscendC::ReduceOrder order)
{
    const char* S = isMax ? "P:WholeReduceMax" : "P:WholeReduceSum";
    RequireAiv(api, S);
    CheckType<T>(api, kF16 | kF32, S);
    uint32_t dAlign = isMax ? 2 * sizeof(T) : sizeof(T);
    const LocalRef& d = UbOperand(api, dst, "dst", dAlign);
    const LocalRef& s = UbOperand(api, src, "src");
    constexpr uint32_t P = 256 / sizeof(T);
    if (R == 0) return;
    if (R > 255) Fail(api, "repeatTime > 255", S);
    if (dstRepStride < 0 || srcBlkStride < 0 || srcRepStride < 0) Fail(api, "negative stride", S);
    Opnd os{&s, sizeof(T), static_cast<uint64_t>(srcBlkStride), static_cast<uint64_t>(srcRepStride), "src"};
    const uint64_t sEnd = CheckBounds(api, os, R, L, P);
    using AscendC::ReduceOrder;
    uint64_t unit = !isMax ? sizeof(T)
                    : (order == ReduceOrder::ORDER_ONLY_VALUE ? sizeof(T)
                       : order == ReduceOrder::ORDER_ONLY_INDEX ? 4
                                                               : 2 * sizeof(T));
    uint64_t write = isMax && (order == ReduceOrder::ORDER_VALUE_INDEX || order == ReduceOrder::ORDER_INDEX_VALUE) ? 2 * sizeof(T) : unit;
    const uint64_t dEnd = (R - 1) * static_cast<uint64_t>(dstRepStride) * unit + write;
    CheckRange(api, d, 0, dEnd, "dst", S);
    trace::Rec("V", api, static_cast<int64_t>(R), 0, 0, {trace::Loc(dst, dEnd)}, {trace::Loc(src, sEnd)});
    std::vector<T> res(R);
    std::vector<uint32_t> idx(R);
    std::vector<T> lanes(P);
    for (uint64_t r = 0; r < R; ++r) {
        bool any = false, nan = false;
        float best = 0;
        uint32_t bi = 0;
        for (uint32_t l = 0; l < P; ++l) {
            T v = T(0);
            if (L.On(r, l, P)) {
                std::memcpy(&v, s.Ptr() + os.Off(r, l), sizeof(T));
                float f = static_cast<float>(v);
                if (std::isnan(f)) nan = true;
                if (!any || f > best) {
                    best = f;
                    bi = l;
                }
                any = true;
            }
            lanes[l] = v;
        }
        if (isMax) {
            res[r] = num::FromF<T>(nan ? NAN : best);
            idx[r] = bi;
        } else {
            res[r] = TreeSum(lanes);
        }
    }
    for (uint64_t r = 0; r < R; ++r) {
        uint8_t* o = d.Ptr() + r * static_cast<uint64_t>(dstRepStride) * unit;
        if (!isMax || order == ReduceOrder::ORDER_ONLY_VALUE) {
            std::memcpy(o, &res[r], sizeof(T));
        } else if (order == ReduceOrder::ORDER_ONLY_INDEX) {
            std::memcpy(o, &idx[r], 4);
        } else {
            uint8_t idxBits[sizeof(T)] = {};
            if constexpr (sizeof(T) == 2) {
                uint16_t i16 = static_cast<uint16_t>(idx[r]);
                std::memcpy(idxBits, &i16, 2);
            } else {
                std::memcpy(idxBits, &idx[r], 4);
            }
            bool vi = order == ReduceOrder::ORDER_VALUE_INDEX;
            std::memcpy(o + (vi ? 0 : sizeof(T)), &res[r], sizeof(T));
            std::memcpy(o + (vi ? sizeof(T) : 0), idxBits, sizeof(T));
        }
    }
}
}  // namespace vec
}  // namespace twin

namespace AscendC {
#define TWIN_VEC_WHOLE_REDUCE_MASKED(MASK_PARAM)                                                                       \
    template <typename T, bool isSetMask>                                                                              \
    inline void WholeReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, MASK_PARAM, const int32_t repeatTime, \
                               const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride,     \
                               ReduceOrder order)                                                                      \
    {                                                                                                                  \
        twin::RequireAiv("WholeReduceMax", "P:WholeReduceMax");                                                        \
        uint64_t R;                                                                                                    \
        twin::vec::Lanes L = twin::vec::MaskLanes("WholeReduceMax", mask, 256 / sizeof(T), isSetMask,                  \
                                                  static_cast<uint64_t>(repeatTime), R);                               \
        twin::vec::WholeReduce("WholeReduceMax", true, dst, src, L, R, dstRepStride, srcBlkStride, srcRepStride, order); \
    }                                                                                                                  \
    template <typename T, bool isSetMask>                                                                              \
    inline void WholeReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, MASK_PARAM, const int32_t repeatTime, \
                               const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride)     \
    {                                                                                                                  \
        twin::RequireAiv("WholeReduceSum", "P:WholeReduceSum");                                                        \
        uint64_t R;                                                                                                    \
        twin::vec::Lanes L = twin::vec::MaskLanes("WholeReduceSum", mask, 256 / sizeof(T), isSetMask,                  \
                                                  static_cast<uint64_t>(repeatTime), R);                               \
        twin::vec::WholeReduce("WholeReduceSum", false, dst, src, L, R, dstRepStride, srcBlkStride, srcRepStride,      \
                               ReduceOrder::ORDER_ONLY_VALUE);                                                         \
    }
// the continuous form takes an int32_t lane count (converted as static_cast<uint64_t>: a negative one fails)
TWIN_VEC_WHOLE_REDUCE_MASKED(const int32_t mask)
TWIN_VEC_WHOLE_REDUCE_MASKED(const uint64_t mask[])
#undef TWIN_VEC_WHOLE_REDUCE_MASKED

// [P:ReduceRepeat, I:include/basic_api/kernel_operator_vec_reduce_intf.h:72,80] the 9.1.0 name of
// WholeReduceSum/WholeReduceMax (deprecated there: "WholeReduceMax(deprecated, use ReduceRepeat instead)",
// impl/basic_api/kernel_operator_vec_reduce_intf_impl.h:764): one result per repeat, the same engine;
// dst and src of one type on A2 (ReduceRepeatCommon's static_assert), order ignored for SUM.
#define TWIN_VEC_REDUCE_REPEAT_MASKED(MASK_PARAM)                                                                      \
    template <ReduceType reduceType, typename T, typename U, bool isSetMask = true>                                    \
    inline void ReduceRepeat(const LocalTensor<T>& dst, const LocalTensor<U>& src, MASK_PARAM, const int32_t repeatTime, \
                             const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride,       \
                             ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX)                                       \
    {                                                                                                                  \
        static_assert(std::is_same_v<T, U>, "twin: ReduceRepeat needs one dst and src type on A2");                    \
        static_assert(reduceType == ReduceType::SUM || reduceType == ReduceType::MAX,                                  \
                      "twin: ReduceRepeat emulates SUM and MAX");                                                      \
        twin::RequireAiv("ReduceRepeat", "P:ReduceRepeat");                                                            \
        uint64_t R;                                                                                                    \
        twin::vec::Lanes L = twin::vec::MaskLanes("ReduceRepeat", mask, 256 / sizeof(T), isSetMask,                    \
                                                  static_cast<uint64_t>(repeatTime), R);                               \
        const bool isMax = reduceType == ReduceType::MAX;                                                              \
        twin::vec::WholeReduce(isMax ? "ReduceRepeatMax" : "ReduceRepeatSum", isMax, dst, src, L, R, dstRepStride,     \
                               srcBlkStride, srcRepStride, isMax ? order : ReduceOrder::ORDER_ONLY_VALUE);             \
    }
TWIN_VEC_REDUCE_REPEAT_MASKED(const int32_t mask)
TWIN_VEC_REDUCE_REPEAT_MASKED(const uint64_t mask[])
#undef TWIN_VEC_REDUCE_REPEAT_MASKED

// ================================ Brcb [P:Brcb, ascendc-api §5.4] ================================
// Repeat r reads src0[8r..8r+7]; block j of repeat r (dst + (r*dstRepStride + j*dstBlkStride)*32) is filled
// with src0[8r+j]. dstBlkStride 0 is treated as 1; src0 must not overlap dst.
template <typename T>
inline void Brcb(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const uint8_t repeatTime, const BrcbRepeatParams& p)
{
    const char* api = "Brcb";
    constexpr const char* S = "P:Brcb";
    twin::RequireAiv(api, S);
    twin::vec::CheckType<T>(api, twin::vec::kI16 | twin::vec::kU16 | twin::vec::kI32 | twin::vec::kU32 | twin::vec::kF16 |
                                     twin::vec::kBF16 | twin::vec::kF32,
                            S);
    const twin::LocalRef& d = twin::vec::UbOperand(api, dst, "dst");
    const twin::LocalRef& s = twin::vec::UbOperand(api, src0, "src0");
    if (repeatTime == 0) return;
    uint64_t R = repeatTime;
    uint64_t blk = p.dstBlkStride == 0 ? 1 : p.dstBlkStride;
    twin::CheckRange(api, s, 0, R * 8 * sizeof(T), "src0", S);
    uint64_t dEnd = ((R - 1) * p.dstRepStride + 7 * blk) * 32 + 32;
    twin::CheckRange(api, d, 0, dEnd, "dst", S);
    uint64_t dLo = d.addr, dHi = d.addr + dEnd, sLo = s.addr, sHi = s.addr + R * 8 * sizeof(T);
    if (dLo < sHi && sLo < dHi) twin::Fail(api, "src0 must not overlap dst", S);
    twin::trace::Rec("V", api, static_cast<int64_t>(R), 0, 0, {twin::trace::Loc(dst, dEnd)}, {twin::trace::Loc(src0, R * 8 * sizeof(T))});
    constexpr uint32_t epb = 32 / sizeof(T);
    for (uint64_t r = 0; r < R; ++r)
        for (uint64_t j = 0; j < 8; ++j) {
            T v;
            std::memcpy(&v, s.Ptr() + (8 * r + j) * sizeof(T), sizeof(T));
            twin::dc::FillElems<T>(d.Ptr() + (r * p.dstRepStride + j * blk) * 32, epb, v);
        }
}

// ================================ Compare / CompareScalar [P:Compare, P:CompareScalar] ================================
// Count form: dst (uint8_t) bit-packed little-endian, element i -> bit i%8 of byte i/8; count*sizeof(T) % 256 == 0.
namespace detail_cmp {
template <typename T>
inline bool Cmp(T a, T b, CMPMODE m)
{
    if constexpr (std::is_integral_v<T>) {
        return m == CMPMODE::EQ ? a == b : false;
    } else {
        float x = static_cast<float>(a), y = static_cast<float>(b);
        switch (m) {
            case CMPMODE::LT: return x < y;
            case CMPMODE::GT: return x > y;
            case CMPMODE::EQ: return x == y;
            case CMPMODE::LE: return x <= y;
            case CMPMODE::GE: return x >= y;
            case CMPMODE::NE: return x != y;
        }
        return false;
    }
}
template <typename T, typename U>
inline void CheckCmp(const char* api, const char* S, CMPMODE m, uint32_t count)
{
    static_assert(std::is_same_v<U, uint8_t>, "twin: Compare/CompareScalar dst must be uint8_t on A2");
    if constexpr (std::is_same_v<T, int32_t>) {
        if (m != CMPMODE::EQ) twin::Fail(api, "int32_t supports CMPMODE::EQ only on A2", S);
    } else {
        twin::vec::CheckType<T>(api, twin::vec::kF16 | twin::vec::kF32, S);
    }
    if ((static_cast<uint64_t>(count) * sizeof(T)) % 256 != 0)
        twin::Fail(api, twin::Fmt("count*sizeof(T) = %llu bytes is not a multiple of 256",
                                  static_cast<unsigned long long>(static_cast<uint64_t>(count) * sizeof(T))),
                   S);
    // The count form sets no mask on A2: CompareScalarCompute and CompareCompute (impl/basic_api/dav_c220/
    // kernel_operator_vec_cmp_impl.h:370, 154 at asc-devkit 0da921b9) issue count / (256 / sizeof(T)) repeats
    // under the mask register as it is, so a
    // level-0 call's narrower mask before it would compare only those lanes. The twin requires all lanes.
    const twin::CoreCtx& c = *twin::t_core;
    const bool full = !c.maskCounter && c.maskLo == ~0ull && (sizeof(T) == 4 || c.maskHi == ~0ull);
    if (!full)
        twin::Fail(api,
                   twin::Fmt("the count form runs under the mask register, which a level-0 call left at %016llx:%016llx%s "
                             "(ResetMask() first)",
                             static_cast<unsigned long long>(c.maskHi), static_cast<unsigned long long>(c.maskLo),
                             c.maskCounter ? " in counter mode" : ""),
                   "I:impl/basic_api/dav_c220/kernel_operator_vec_cmp_impl.h:370");
}
}  // namespace detail_cmp

// Compares [P:Compares, I:include/basic_api/kernel_operator_vec_cmpsel_intf.h:155]; CompareScalar is its
// pre-9.1.0 name (same declaration block, "CompareScalar has been updated, please use Compares instead").
namespace detail_cmp {
template <typename T, typename U>
inline void Scalar(const char* api, const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar, CMPMODE cmpMode,
                   uint32_t count)
{
    constexpr const char* S = "P:Compares";
    twin::RequireAiv(api, S);
    detail_cmp::CheckCmp<T, U>(api, S, cmpMode, count);
    const twin::LocalRef& d = twin::vec::UbOperand(api, dst, "dst");
    const twin::LocalRef& s = twin::vec::UbOperand(api, src0, "src0");
    twin::CheckRange(api, s, 0, static_cast<uint64_t>(count) * sizeof(T), "src0", S);
    twin::CheckRange(api, d, 0, count / 8, "dst", S);
    twin::trace::Rec("V", api, (static_cast<int64_t>(count) * sizeof(T) + 255) / 256, count, 0, {twin::trace::Loc(dst, count / 8)},
                     {twin::trace::Loc(src0, static_cast<uint64_t>(count) * sizeof(T))});
    std::vector<uint8_t> bits(count / 8, 0);
    for (uint32_t i = 0; i < count; ++i) {
        T v;
        std::memcpy(&v, s.Ptr() + static_cast<uint64_t>(i) * sizeof(T), sizeof(T));
        if (detail_cmp::Cmp(v, src1Scalar, cmpMode)) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    }
    std::memcpy(d.Ptr(), bits.data(), bits.size());
}
}  // namespace detail_cmp
template <typename T, typename U>
inline void Compares(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar, CMPMODE cmpMode, uint32_t count)
{
    detail_cmp::Scalar("Compares", dst, src0, src1Scalar, cmpMode, count);
}
template <typename T, typename U>
inline void CompareScalar(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar, CMPMODE cmpMode,
                          uint32_t count)
{
    detail_cmp::Scalar("CompareScalar", dst, src0, src1Scalar, cmpMode, count);
}
template <typename T, typename U>
inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, CMPMODE cmpMode,
                    uint32_t count)
{
    const char* api = "Compare";
    constexpr const char* S = "P:Compare";
    twin::RequireAiv(api, S);
    detail_cmp::CheckCmp<T, U>(api, S, cmpMode, count);
    const twin::LocalRef& d = twin::vec::UbOperand(api, dst, "dst");
    const twin::LocalRef& s0 = twin::vec::UbOperand(api, src0, "src0");
    const twin::LocalRef& s1 = twin::vec::UbOperand(api, src1, "src1");
    twin::CheckRange(api, s0, 0, static_cast<uint64_t>(count) * sizeof(T), "src0", S);
    twin::CheckRange(api, s1, 0, static_cast<uint64_t>(count) * sizeof(T), "src1", S);
    twin::CheckRange(api, d, 0, count / 8, "dst", S);
    twin::trace::Rec("V", api, (static_cast<int64_t>(count) * sizeof(T) + 255) / 256, count, 0, {twin::trace::Loc(dst, count / 8)},
                     {twin::trace::Loc(src0, static_cast<uint64_t>(count) * sizeof(T)), twin::trace::Loc(src1, static_cast<uint64_t>(count) * sizeof(T))});
    std::vector<uint8_t> bits(count / 8, 0);
    for (uint32_t i = 0; i < count; ++i) {
        T a, b;
        std::memcpy(&a, s0.Ptr() + static_cast<uint64_t>(i) * sizeof(T), sizeof(T));
        std::memcpy(&b, s1.Ptr() + static_cast<uint64_t>(i) * sizeof(T), sizeof(T));
        if (detail_cmp::Cmp(a, b, cmpMode)) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    }
    std::memcpy(d.Ptr(), bits.data(), bits.size());
}

// High-dim form [I:include/basic_api/kernel_operator_vec_cmpsel_intf.h:61-68]: on A2 the mask is a reserved
// parameter (Compare.md: 设置无效; VcmpvImpl drops it, kernel_operator_vec_cmp_impl.h:242, 266), so the lanes
// are those of the mask register, which the twin requires full, as for the count form; repeat r writes its 256/sizeof(T) result
// bits packed at byte r * 256/sizeof(T)/8 of dst, as the count form's repeats do (CompareCompute,
// impl/basic_api/dav_c220/kernel_operator_vec_cmp_impl.h:154, issues vcmpv with the default
// BinaryRepeatParams: dstBlkStride 1, dstRepStride 8). The twin models that layout only, so it requires
// those two dst strides; the source strides are honoured.
namespace detail_cmp {
template <typename T, typename U>
inline void Level0(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, CMPMODE cmpMode,
                   uint8_t repeatTime, const BinaryRepeatParams& p)
{
    const char* api = "Compare";
    constexpr const char* S = "P:Compare";
    twin::RequireAiv(api, S);
    // as the count form: every lane compares under the mask register, which must be full (ResetMask())
    detail_cmp::CheckCmp<T, U>(api, S, cmpMode, static_cast<uint32_t>(repeatTime) * (256 / sizeof(T)));
    if (p.dstBlkStride != 1 || p.dstRepStride != 8)
        twin::Fail(api,
                   twin::Fmt("dstBlkStride %u / dstRepStride %u: the twin models the packed result layout of the default "
                             "strides 1 / 8 only",
                             p.dstBlkStride, p.dstRepStride),
                   "I:impl/basic_api/dav_c220/kernel_operator_vec_cmp_impl.h:154");
    const twin::LocalRef& d = twin::vec::UbOperand(api, dst, "dst");
    const twin::LocalRef& a = twin::vec::UbOperand(api, src0, "src0");
    const twin::LocalRef& b = twin::vec::UbOperand(api, src1, "src1");
    constexpr uint32_t P = 256 / sizeof(T);
    const uint64_t R = repeatTime;
    if (R == 0) return;
    twin::vec::Lanes L;
    L.counter = false;
    L.lo = ~0ull;
    L.hi = P > 64 ? ~0ull : 0;
    twin::vec::Opnd o0{&a, sizeof(T), p.src0BlkStride, p.src0RepStride, "src0"};
    twin::vec::Opnd o1{&b, sizeof(T), p.src1BlkStride, p.src1RepStride, "src1"};
    const uint64_t e0 = twin::vec::CheckBounds(api, o0, R, L, P);
    const uint64_t e1 = twin::vec::CheckBounds(api, o1, R, L, P);
    const uint64_t bytes = R * P / 8;
    twin::CheckRange(api, d, 0, bytes, "dst", S);
    twin::trace::Rec("V", api, static_cast<int64_t>(R), 0, 0, {twin::trace::Loc(dst, bytes)},
                     {twin::trace::Loc(src0, e0), twin::trace::Loc(src1, e1)});
    std::vector<uint8_t> bits(bytes, 0);
    for (uint64_t r = 0; r < R; ++r)
        for (uint32_t l = 0; l < P; ++l) {
            T x, y;
            std::memcpy(&x, a.Ptr() + o0.Off(r, l), sizeof(T));
            std::memcpy(&y, b.Ptr() + o1.Off(r, l), sizeof(T));
            const uint64_t bit = r * P + l;
            if (detail_cmp::Cmp(x, y, cmpMode)) bits[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
        }
    std::memcpy(d.Ptr(), bits.data(), bits.size());
}
}  // namespace detail_cmp
template <typename T, typename U, bool isSetMask = true>
inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, CMPMODE cmpMode,
                    const uint64_t mask, uint8_t repeatTime, const BinaryRepeatParams& repeatParams)
{
    (void)mask;
    detail_cmp::Level0(dst, src0, src1, cmpMode, repeatTime, repeatParams);
}
template <typename T, typename U, bool isSetMask = true>
inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, CMPMODE cmpMode,
                    const uint64_t mask[], uint8_t repeatTime, const BinaryRepeatParams& repeatParams)
{
    (void)mask;
    detail_cmp::Level0(dst, src0, src1, cmpMode, repeatTime, repeatParams);
}

// ================================ Select [P:Select, ascendc-api §5.5, §0.2] ================================
// bit 1 -> src0, bit 0 -> src1 / scalar. Mode 0 reuses the first 256/sizeof(T) mask bits every repeat;
// modes 1/2 consume selMask continuously and need the 8 KiB UB scratch at [184 KiB, 192 KiB) on A2:
// the twin fails if the TPipe's UB allocations reach into it and poisons it after the call.
namespace detail_sel {
// What the dav-c220 bodies issue before vsel, so that the trace costs it (impl/basic_api/dav_c220/
// kernel_operator_vec_cmpsel_impl.h, VselImpl and VselIntrinsicsImplPre): mode 1 duplicates the scalar
// into the reserved UB block and loads it with set_cmpmask; mode 2 loads the selMask address with set_cmpmask.
inline void TracePre(SELMODE mode)
{
    if (mode == SELMODE::VSEL_TENSOR_SCALAR_MODE) twin::trace::Rec("V", "Duplicate", 1, 0, 0, {}, {});
    if (mode != SELMODE::VSEL_CMPMASK_SPR) twin::trace::Rec("V", "SetCmpMask", 0, 0, 0, {}, {});
}
template <typename T, typename U, typename F>
inline void Run(const char* api, const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                const LocalTensor<T>* src1, SELMODE mode, uint32_t count, F pick1)
{
    constexpr const char* S = "P:Select";
    twin::RequireAiv(api, S);
    twin::vec::CheckType<T>(api, twin::vec::kF16 | twin::vec::kF32, S);
    static_assert(std::is_same_v<U, uint8_t> || std::is_same_v<U, uint16_t> || std::is_same_v<U, uint32_t> ||
                      std::is_same_v<U, uint64_t>,
                  "twin: selMask must be uint8_t/uint16_t/uint32_t/uint64_t");
    const twin::LocalRef& d = twin::vec::UbOperand(api, dst, "dst");
    const twin::LocalRef& m = twin::vec::UbOperand(api, selMask, "selMask");
    const twin::LocalRef& s0 = twin::vec::UbOperand(api, src0, "src0");
    const twin::LocalRef* s1 = src1 ? &twin::vec::UbOperand(api, *src1, "src1") : nullptr;
    constexpr uint32_t P = 256 / sizeof(T);
    if (count == 0) return;
    twin::CheckRange(api, d, 0, static_cast<uint64_t>(count) * sizeof(T), "dst", S);
    twin::CheckRange(api, s0, 0, static_cast<uint64_t>(count) * sizeof(T), "src0", S);
    if (s1) twin::CheckRange(api, *s1, 0, static_cast<uint64_t>(count) * sizeof(T), "src1", S);
    uint64_t maskBits = mode == SELMODE::VSEL_CMPMASK_SPR ? std::min<uint64_t>(count, P) : count;
    twin::CheckRange(api, m, 0, twin::CeilDiv(maskBits, 8), "selMask", S);
    if (mode != SELMODE::VSEL_CMPMASK_SPR) twin::vec::UbScratchCheck(api);
    detail_sel::TracePre(mode);
    if (src1)
        twin::trace::Rec("V", api, (static_cast<int64_t>(count) * sizeof(T) + 255) / 256, count, 0,
                         {twin::trace::Loc(dst, static_cast<uint64_t>(count) * sizeof(T))},
                         {twin::trace::Loc(selMask, twin::CeilDiv(maskBits, 8)), twin::trace::Loc(src0, static_cast<uint64_t>(count) * sizeof(T)),
                          twin::trace::Loc(*src1, static_cast<uint64_t>(count) * sizeof(T))});
    else
        twin::trace::Rec("V", api, (static_cast<int64_t>(count) * sizeof(T) + 255) / 256, count, 0,
                         {twin::trace::Loc(dst, static_cast<uint64_t>(count) * sizeof(T))},
                         {twin::trace::Loc(selMask, twin::CeilDiv(maskBits, 8)), twin::trace::Loc(src0, static_cast<uint64_t>(count) * sizeof(T))});
    std::vector<T> out(count);
    const uint8_t* mb = m.Ptr();
    for (uint32_t i = 0; i < count; ++i) {
        uint32_t bit = mode == SELMODE::VSEL_CMPMASK_SPR ? i % P : i;
        bool take0 = (mb[bit / 8] >> (bit % 8)) & 1u;
        T a;
        std::memcpy(&a, s0.Ptr() + static_cast<uint64_t>(i) * sizeof(T), sizeof(T));
        out[i] = take0 ? a : pick1(i, s1);
    }
    std::memcpy(d.Ptr(), out.data(), out.size() * sizeof(T));
    if (mode != SELMODE::VSEL_CMPMASK_SPR) twin::vec::UbScratchPoison();
}
}  // namespace detail_sel

template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0, T src1,
                   SELMODE selMode, uint32_t count)
{
    if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE)
        twin::Fail("Select", "the tensor-scalar form needs SELMODE::VSEL_TENSOR_SCALAR_MODE", "P:Select");
    detail_sel::Run("Select", dst, selMask, src0, static_cast<const LocalTensor<T>*>(nullptr), selMode, count,
                    [src1](uint32_t, const twin::LocalRef*) { return src1; });
}
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                   const LocalTensor<T>& src1, SELMODE selMode, uint32_t count)
{
    if (selMode == SELMODE::VSEL_TENSOR_SCALAR_MODE)
        twin::Fail("Select", "VSEL_TENSOR_SCALAR_MODE needs a scalar src1", "P:Select");
    detail_sel::Run("Select", dst, selMask, src0, &src1, selMode, count, [](uint32_t i, const twin::LocalRef* s1) {
        T b;
        std::memcpy(&b, s1->Ptr() + static_cast<uint64_t>(i) * sizeof(T), sizeof(T));
        return b;
    });
}

// High-dim tensor-scalar form [I:include/basic_api/kernel_operator_vec_cmpsel_intf.h:251-261, mode 1]:
// lane l of repeat r takes src0 where bit r * 256/sizeof(T) + l of selMask is 1, else the scalar (Select.md:
// each repeat consumes the next 256/sizeof(T) bits, whatever the lane mask); lanes the mask leaves out keep
// dst. Needs the UB scratch of modes 1/2, like the count form.
namespace detail_sel {
template <typename T, typename U, typename M>
inline void Level0(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0, T src1,
                   SELMODE selMode, M mask, bool isSetMask, uint8_t repeatTime, const BinaryRepeatParams& p)
{
    const char* api = "Select";
    constexpr const char* S = "P:Select";
    twin::RequireAiv(api, S);
    twin::vec::CheckType<T>(api, twin::vec::kF16 | twin::vec::kF32, S);
    if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE)
        twin::Fail(api, "the tensor-scalar form needs SELMODE::VSEL_TENSOR_SCALAR_MODE", S);
    twin::vec::CheckBlkStride(api, p.dstBlkStride);
    constexpr uint32_t P = 256 / sizeof(T);
    uint64_t R;
    const twin::vec::Lanes L = twin::vec::MaskLanes(api, mask, P, isSetMask, repeatTime, R);
    if (R == 0) return;
    const twin::LocalRef& d = twin::vec::UbOperand(api, dst, "dst");
    const twin::LocalRef& m = twin::vec::UbOperand(api, selMask, "selMask");
    const twin::LocalRef& a = twin::vec::UbOperand(api, src0, "src0");
    twin::vec::Opnd od{&d, sizeof(T), p.dstBlkStride, p.dstRepStride, "dst"};
    twin::vec::Opnd oa{&a, sizeof(T), p.src0BlkStride, p.src0RepStride, "src0"};
    const uint64_t dEnd = twin::vec::CheckBounds(api, od, R, L, P);
    const uint64_t aEnd = twin::vec::CheckBounds(api, oa, R, L, P);
    const uint64_t maskBytes = R * P / 8;
    twin::CheckRange(api, m, 0, maskBytes, "selMask", S);
    twin::vec::CheckOverlap(api, od, &oa, 1, R, L, P);
    twin::vec::UbScratchCheck(api);
    detail_sel::TracePre(selMode);
    twin::trace::Rec("V", api, static_cast<int64_t>(R), 0, 0, {twin::trace::Loc(dst, dEnd)},
                     {twin::trace::Loc(selMask, maskBytes), twin::trace::Loc(src0, aEnd)});
    const uint8_t* mb = m.Ptr();
    for (uint64_t r = 0; r < R; ++r)
        for (uint32_t l = 0; l < P; ++l) {
            if (!L.On(r, l, P)) continue;
            const uint64_t bit = r * P + l;
            T x;
            std::memcpy(&x, a.Ptr() + oa.Off(r, l), sizeof(T));
            const T out = ((mb[bit / 8] >> (bit % 8)) & 1u) ? x : src1;
            std::memcpy(d.Ptr() + od.Off(r, l), &out, sizeof(T));
        }
    twin::vec::UbScratchPoison();
}
}  // namespace detail_sel
template <typename T, typename U, bool isSetMask = true>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0, T src1,
                   SELMODE selMode, uint64_t mask, uint8_t repeatTime, const BinaryRepeatParams& repeatParams)
{
    detail_sel::Level0(dst, selMask, src0, src1, selMode, mask, isSetMask, repeatTime, repeatParams);
}
template <typename T, typename U, bool isSetMask = true>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0, T src1,
                   SELMODE selMode, uint64_t mask[], uint8_t repeatTime, const BinaryRepeatParams& repeatParams)
{
    detail_sel::Level0(dst, selMask, src0, src1, selMode, static_cast<const uint64_t*>(mask), isSetMask, repeatTime, repeatParams);
}

// ================================ CreateVecIndex [P:CreateVecIndex] ================================
// Count form, I:include/basic_api/kernel_operator_vec_createvecindex_intf.h:50: dst[i] = firstValue + i for
// i < count (half/int16_t/float/int32_t; float and half add in float). The instructions are those of the
// dav-c220 implementation (impl/basic_api/dav_c220/kernel_operator_vec_createvecindex_impl.h at
// asc-devkit 0da921b9), so that the trace costs what the NPU runs: the first 32-byte block by scalar
// SetValue, an S->V flag pair, then each further block of the first repeat and each further repeat as
// an Adds of the block (repeat) before it plus its element count, a PipeBarrier<PIPE_V> after each but
// the tail of the last repeat.
// The caller orders the scalar writes after the vector pipe's last use of dst (a V->S flag).
template <typename T>
inline void CreateVecIndex(LocalTensor<T> dst, const T& firstValue, uint32_t count)
{
    const char* api = "CreateVecIndex";
    constexpr const char* S = "P:CreateVecIndex";
    twin::RequireAiv(api, S);
    twin::vec::CheckType<T>(api, twin::vec::kF16 | twin::vec::kI16 | twin::vec::kF32 | twin::vec::kI32, S);
    twin::vec::UbOperand(api, dst, "dst");
    auto value = [&](uint32_t i) -> T {
        if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<int64_t>(firstValue) + i);
        else return static_cast<T>(static_cast<float>(firstValue) + static_cast<float>(i));
    };
    constexpr uint32_t blk = 32 / sizeof(T), rep = 256 / sizeof(T);
    const uint32_t first = count < blk ? count : blk;
    for (uint32_t i = 0; i < first; ++i) dst.SetValue(i, value(i));
    const TEventID ev = GetTPipePtr()->FetchEventID(HardEvent::S_V);
    SetFlag<HardEvent::S_V>(ev);
    WaitFlag<HardEvent::S_V>(ev);
    if (count <= blk) return;
    const UnaryRepeatParams p;
    const uint32_t inRep = count >= rep ? rep : count;  // the first repeat: whole blocks, then a tail
    for (uint32_t b = 1; b < inRep / blk; ++b) {
        Adds(dst[b * blk], dst[(b - 1) * blk], static_cast<T>(blk), static_cast<uint64_t>(blk), 1, p);
        PipeBarrier<PIPE_V>();
    }
    if (inRep % blk != 0) {
        const uint32_t at = inRep / blk * blk;
        Adds(dst[at], dst[at - blk], static_cast<T>(blk), static_cast<uint64_t>(inRep % blk), 1, p);
        PipeBarrier<PIPE_V>();
    }
    if (count <= rep) return;
    for (uint32_t r = 1; r < count / rep; ++r) {
        Adds(dst[r * rep], dst[(r - 1) * rep], static_cast<T>(rep), static_cast<uint64_t>(rep), 1, p);
        PipeBarrier<PIPE_V>();
    }
    if (count % rep != 0) {
        const uint32_t at = count / rep * rep;
        Adds(dst[at], dst[at - rep], static_cast<T>(rep), static_cast<uint64_t>(count % rep), 1, p);  // no barrier after it
    }
}

}  // namespace AscendC

#endif  // TILEGEN_TWIN_VECTOR_H
