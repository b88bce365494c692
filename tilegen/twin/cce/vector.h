// tilegen real-API twin: vector instructions of the AIV (intrinsics called by
// impl/basic_api/dav_c220/kernel_operator_vec_*_impl.h at asc-devkit 0da921b9).
//
// Execution model (docs/zh/api/SIMD-API/基础API/ 通用说明和约束.md "repeat / mask", SetVectorMask,
// SetMaskCount/SetMaskNorm; ascendc-api.md §5.0):
//  - one repeat covers 256 bytes: 8 data blocks of 32 bytes, lanes = 256 / sizeof(T) (of the wider type
//    for conversions); lane l of repeat r sits at base + r*repStride*32 + (l / perBlock)*blkStride*32 +
//    (l % perBlock)*sizeof(T);
//  - normal mask mode: lane l runs iff bit l of (maskHi:maskLo) is set, for repeat = 0 .. repeatTime-1;
//  - counter mode (set_mask_count): maskLo elements run, lane by lane over as many repeats as needed; the
//    instruction's repeatTime is ignored (the Level-2 count APIs pass 1);
//  - repeats run in order, each one's results computed from its sources before it writes, so a later repeat
//    reads what an earlier one wrote (通用说明和约束.md, 通用地址重叠约束: the binary APIs on half / int32_t /
//    float support dst overlapping a later repeat's second source with src1RepStride or dstRepStride 0, which
//    the softmax reductions use, e.g. BigBlockReduceMax: Max with dstRepStride 0 folding repeat after repeat);
//    fp16/bf16 arithmetic in float, rounded once (RNE).
// Every lane touched must lie in UB; reads are checked against writes of other pipes (core.h).
#ifndef TILEGEN_CCE_VECTOR_H
#define TILEGEN_CCE_VECTOR_H

#include <algorithm>
#include <vector>

#include "core.h"

namespace cce_rt {

struct Lane {
    uint32_t r, l;  // repeat, lane within the repeat
};

inline void RequireAiv(const char* what)
{
    if (Cur().aic) Fail(what, "vector instruction on the AIC");
}

// The lanes an instruction with `lanes` lanes per repeat and `repeat` repeats runs, in order.
inline std::vector<Lane> Lanes(const char* what, uint32_t lanes, uint32_t repeat)
{
    RequireAiv(what);
    Core& c = Cur();
    std::vector<Lane> out;
    if (c.maskCount) {
        const uint64_t n = c.maskLo;
        if (n > 196608) Fail(what, "counter-mode mask %llu larger than UB", (unsigned long long)n);
        out.reserve(n);
        for (uint64_t i = 0; i < n; ++i) out.push_back(Lane{static_cast<uint32_t>(i / lanes), static_cast<uint32_t>(i % lanes)});
        TraceRepeats((n + lanes - 1) / lanes);
        return out;
    }
    if (repeat > 255) Fail(what, "repeatTime %u > 255", repeat);
    TraceRepeats(repeat);
    for (uint32_t r = 0; r < repeat; ++r)
        for (uint32_t l = 0; l < lanes; ++l) {
            const bool on = l < 64 ? ((c.maskLo >> l) & 1) : ((c.maskHi >> (l - 64)) & 1);
            if (on) out.push_back(Lane{r, l});
        }
    return out;
}

// One operand of a vector instruction: base offset in UB, element size, strides.
struct Opnd {
    uint64_t base;
    uint32_t size;      // bytes per element of this operand
    uint32_t perBlock;  // lanes per data block (of the instruction's wider type)
    uint64_t blk, rep;  // strides in 32-byte blocks
    uint64_t At(const Lane& x) const
    {
        return base + static_cast<uint64_t>(x.r) * rep * 32 + (x.l / perBlock) * blk * (perBlock * size) + (x.l % perBlock) * size;
    }
};

// Operand start addresses in UB are 32-byte aligned (通用说明和约束.md, 通用地址对齐约束 table).
inline Opnd MakeOpnd(const char* what, uint64_t base, uint32_t size, uint32_t wide, uint64_t blk, uint64_t rep)
{
    Align(what, UB, base, 32);
    if (size != wide && blk != 1) Fail(what, "block stride %llu on the narrow side of a conversion is not modelled", (unsigned long long)blk);
    return Opnd{base, size, 32 / wide, blk, rep};
}

template <typename T>
inline T ReadLane(const char* what, const Opnd& o, const Lane& x)
{
    const uint64_t a = o.At(x);
    const uint8_t* p = Local(what, UB, a, sizeof(T));
    TouchRead(what, PIPE_V, UB, a, sizeof(T));
    return Load<T>(p);
}
template <typename T>
inline void WriteLane(const char* what, const Opnd& o, const Lane& x, T v, uint32_t op)
{
    const uint64_t a = o.At(x);
    uint8_t* p = Local(what, UB, a, sizeof(T));
    Store<T>(p, v);
    TouchWrite(what, PIPE_V, op, UB, a, sizeof(T));
}

template <typename T>
constexpr bool kVecFloat = std::is_same_v<T, half> || std::is_same_v<T, float>;

// dst = f(src) lane by lane (Exp, Ln, Adds, Muls, Duplicate, Cast ...).
template <typename D, typename S, typename F>
inline void Unary(const char* what, uint64_t dst, uint64_t src, uint64_t repeat, uint64_t dstBlk, uint64_t srcBlk,
                  uint64_t dstRep, uint64_t srcRep, F f)
{
    constexpr uint32_t wide = sizeof(D) > sizeof(S) ? sizeof(D) : sizeof(S);
    const std::vector<Lane> ls = Lanes(what, 256 / wide, static_cast<uint32_t>(repeat));
    const uint32_t op = Issue(PIPE_V);
    const Opnd d = MakeOpnd(what, dst, sizeof(D), wide, dstBlk, dstRep);
    const Opnd s = MakeOpnd(what, src, sizeof(S), wide, srcBlk, srcRep);
    std::vector<D> out(ls.size());
    for (size_t i = 0; i < ls.size();) {  // one repeat at a time: its reads, then its writes
        size_t j = i;
        for (; j < ls.size() && ls[j].r == ls[i].r; ++j) out[j] = f(ReadLane<S>(what, s, ls[j]));
        for (; i < j; ++i) WriteLane<D>(what, d, ls[i], out[i], op);
    }
}

template <typename T, typename F>
inline void Binary(const char* what, uint64_t dst, uint64_t s0, uint64_t s1, uint64_t repeat, uint64_t dBlk, uint64_t s0Blk,
                   uint64_t s1Blk, uint64_t dRep, uint64_t s0Rep, uint64_t s1Rep, F f)
{
    static_assert(kVecFloat<T> || std::is_integral_v<T>, "tilegen twin: vector arithmetic type");
    const std::vector<Lane> ls = Lanes(what, 256 / sizeof(T), static_cast<uint32_t>(repeat));
    const uint32_t op = Issue(PIPE_V);
    const Opnd d = MakeOpnd(what, dst, sizeof(T), sizeof(T), dBlk, dRep);
    const Opnd a = MakeOpnd(what, s0, sizeof(T), sizeof(T), s0Blk, s0Rep);
    const Opnd b = MakeOpnd(what, s1, sizeof(T), sizeof(T), s1Blk, s1Rep);
    std::vector<T> out(ls.size());
    for (size_t i = 0; i < ls.size();) {  // one repeat at a time: its reads, then its writes
        size_t j = i;
        for (; j < ls.size() && ls[j].r == ls[i].r; ++j) out[j] = f(ReadLane<T>(what, a, ls[j]), ReadLane<T>(what, b, ls[j]));
        for (; i < j; ++i) WriteLane<T>(what, d, ls[i], out[i], op);
    }
}

// float -> half with a rounding mode: 'r' nearest even, 'a' half away from zero, 'f' floor, 'c' ceil,
// 'z' toward zero, 'o' round to odd (Cast doc, RoundMode CAST_RINT/ROUND/FLOOR/CEIL/TRUNC/ODD).
template <typename H>
inline H RoundTo(float v, char mode)
{
    H h = static_cast<H>(v);  // nearest even
    if (mode == 'r' || std::isnan(v)) return h;
    const float hf = static_cast<float>(h);
    if (hf == v) return h;
    auto step = [](H x, bool up) {  // the neighbour of x toward +inf (up) or -inf
        const float f = static_cast<float>(x);
        uint16_t bits;
        std::memcpy(&bits, &x, 2);
        if (f == 0.0f) bits = up ? 0x0001 : 0x8001;
        else if ((f > 0) == up) bits = static_cast<uint16_t>(bits + 1);
        else bits = static_cast<uint16_t>(bits - 1);
        H y;
        std::memcpy(&y, &bits, 2);
        return y;
    };
    const H lo = hf < v ? h : step(h, false);
    const H hi = hf > v ? h : step(h, true);
    switch (mode) {
        case 'f': return lo;
        case 'c': return hi;
        case 'z': return v > 0 ? lo : hi;
        case 'a': {
            const float dl = v - static_cast<float>(lo), dh = static_cast<float>(hi) - v;
            if (dl == dh) return v > 0 ? hi : lo;
            return dl < dh ? lo : hi;
        }
        case 'o': {
            uint16_t b;
            std::memcpy(&b, &lo, 2);
            return (b & 1) ? lo : hi;
        }
        default: return h;
    }
}

// Select / compare bits: element i of the instruction (counting lanes over repeats) is bit i of the
// bit tensor (CompareScalar, Select docs: the selection mask is consumed continuously).
inline uint64_t BitIndex(const Lane& x, uint32_t lanes) { return static_cast<uint64_t>(x.r) * lanes + x.l; }

}  // namespace cce_rt

// ---- mask registers --------------------------------------------------------------------------------
inline void set_vector_mask(uint64_t hi, uint64_t lo)
{
    cce_rt::Core& c = cce_rt::Cur();
    c.maskHi = hi;
    c.maskLo = lo;
}
inline void set_mask_count() { cce_rt::Cur().maskCount = true; }
inline void set_mask_norm() { cce_rt::Cur().maskCount = false; }

// ---- element-wise ----------------------------------------------------------------------------------
#define TILEGEN_CCE_BINARY(name, expr)                                                                            \
    template <typename T>                                                                                         \
    inline void name(__ubuf__ T* dst, __ubuf__ T* src0, __ubuf__ T* src1, uint64_t repeat, uint64_t dBlk, uint64_t s0Blk, \
                     uint64_t s1Blk, uint64_t dRep, uint64_t s0Rep, uint64_t s1Rep)                               \
    {                                                                                                             \
        cce_rt::Binary<T>(#name, cce_rt::AddrOf(dst), cce_rt::AddrOf(src0), cce_rt::AddrOf(src1), repeat, dBlk, s0Blk, \
                          s1Blk, dRep, s0Rep, s1Rep, [](T a, T b) -> T {                                          \
                              if constexpr (cce_rt::kVecFloat<T>) {                                               \
                                  const float x = static_cast<float>(a), y = static_cast<float>(b);               \
                                  return static_cast<T>(expr);                                                    \
                              } else {                                                                            \
                                  const T x = a, y = b;                                                           \
                                  return static_cast<T>(expr);                                                    \
                              }                                                                                   \
                          });                                                                                     \
    }
TILEGEN_CCE_BINARY(vadd, x + y)
TILEGEN_CCE_BINARY(vsub, x - y)
TILEGEN_CCE_BINARY(vmul, x * y)
TILEGEN_CCE_BINARY(vdiv, x / y)
// Max/Min propagate NaN (the hand twin's reading of the Max doc; poison stays visible).
TILEGEN_CCE_BINARY(vmax, (x != x || y != y) ? (x != x ? x : y) : (x > y ? x : y))
TILEGEN_CCE_BINARY(vmin, (x != x || y != y) ? (x != x ? x : y) : (x < y ? x : y))
#undef TILEGEN_CCE_BINARY

// vand / vor (And.md, Or.md, Memory矢量计算/逻辑计算/): bitwise on 16-bit integers, the only A2 types (the API's
// AndIntrinsicsImpl/OrIntrinsicsImpl static_assert int16_t/uint16_t; its count form passes int16_t pointers).
#define TILEGEN_CCE_BITWISE(name, OP)                                                                             \
    template <typename T>                                                                                         \
    inline void name(__ubuf__ T* dst, __ubuf__ T* src0, __ubuf__ T* src1, uint64_t repeat, uint64_t dBlk, uint64_t s0Blk, \
                     uint64_t s1Blk, uint64_t dRep, uint64_t s0Rep, uint64_t s1Rep)                               \
    {                                                                                                             \
        static_assert(std::is_integral_v<T> && sizeof(T) == 2, "tilegen twin: " #name " on int16_t/uint16_t");    \
        cce_rt::Binary<T>(#name, cce_rt::AddrOf(dst), cce_rt::AddrOf(src0), cce_rt::AddrOf(src1), repeat, dBlk, s0Blk, \
                          s1Blk, dRep, s0Rep, s1Rep, [](T a, T b) -> T { return static_cast<T>(a OP b); });        \
    }
TILEGEN_CCE_BITWISE(vand, &)
TILEGEN_CCE_BITWISE(vor, |)
#undef TILEGEN_CCE_BITWISE

#define TILEGEN_CCE_UNARY(name, expr)                                                                             \
    template <typename T>                                                                                         \
    inline void name(__ubuf__ T* dst, __ubuf__ T* src, uint64_t repeat, uint64_t dBlk, uint64_t sBlk, uint64_t dRep, \
                     uint64_t sRep)                                                                               \
    {                                                                                                             \
        static_assert(cce_rt::kVecFloat<T>, "tilegen twin: " #name " on half/float");                            \
        cce_rt::Unary<T, T>(#name, cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dBlk, sBlk, dRep, sRep,       \
                            [](T a) -> T { const float x = static_cast<float>(a); return static_cast<T>(expr); }); \
    }
TILEGEN_CCE_UNARY(vexp, std::exp(x))
TILEGEN_CCE_UNARY(vln, std::log(x))
TILEGEN_CCE_UNARY(vsqrt, std::sqrt(x))
TILEGEN_CCE_UNARY(vrec, 1.0f / x)
TILEGEN_CCE_UNARY(vabs, std::fabs(x))
TILEGEN_CCE_UNARY(vrelu, x > 0.0f ? x : 0.0f)
#undef TILEGEN_CCE_UNARY

#define TILEGEN_CCE_SCALAR(name, expr)                                                                            \
    template <typename T, typename S>                                                                             \
    inline void name(__ubuf__ T* dst, __ubuf__ T* src, S scalar, uint64_t repeat, uint64_t dBlk, uint64_t sBlk,   \
                     uint64_t dRep, uint64_t sRep, bool = false, bool = false)                                    \
    {                                                                                                             \
        if constexpr (cce_rt::kVecFloat<T>) {                                                                     \
            const float y = static_cast<float>(static_cast<T>(scalar));                                          \
            cce_rt::Unary<T, T>(#name, cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dBlk, sBlk, dRep, sRep,   \
                                [y](T a) -> T { const float x = static_cast<float>(a); return static_cast<T>(expr); }); \
        } else {                                                                                                  \
            const T y = static_cast<T>(scalar);                                                                   \
            cce_rt::Unary<T, T>(#name, cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dBlk, sBlk, dRep, sRep,   \
                                [y](T a) -> T { const T x = a; return static_cast<T>(expr); });                   \
        }                                                                                                         \
    }
TILEGEN_CCE_SCALAR(vadds, x + y)
TILEGEN_CCE_SCALAR(vmuls, x * y)
TILEGEN_CCE_SCALAR(vmaxs, (x != x) ? x : (x > y ? x : y))
TILEGEN_CCE_SCALAR(vmins, (x != x) ? x : (x < y ? x : y))
#undef TILEGEN_CCE_SCALAR

// vector_dup(dst, value, repeat, dstBlk, srcBlk, dstRep, srcRep): every active lane = value (Duplicate doc).
template <typename T, typename S>
inline void vector_dup(__ubuf__ T* dst, S value, uint64_t repeat, uint64_t dBlk, uint64_t sBlk, uint64_t dRep, uint64_t sRep)
{
    (void)sBlk; (void)sRep;
    const char* what = "vector_dup";
    const std::vector<cce_rt::Lane> ls = cce_rt::Lanes(what, 256 / sizeof(T), static_cast<uint32_t>(repeat));
    const uint32_t op = cce_rt::Issue(PIPE_V);
    const cce_rt::Opnd d = cce_rt::MakeOpnd(what, cce_rt::AddrOf(dst), sizeof(T), sizeof(T), dBlk, dRep);
    const T v = static_cast<T>(value);
    for (const cce_rt::Lane& x : ls) cce_rt::WriteLane<T>(what, d, x, v, op);
}

// ---- conversions (Cast doc, A2 table; suffix = RoundMode: none/r RINT, a ROUND, f FLOOR, c CEIL, z TRUNC,
// o ODD) -----------------------------------------------------------------------------------------------
#define TILEGEN_CCE_CONV(name, D, S, body)                                                                        \
    template <typename PD, typename PS>                                                                           \
    inline void name(__ubuf__ PD* dst, __ubuf__ PS* src, uint64_t repeat, uint64_t dBlk, uint64_t sBlk, uint64_t dRep, uint64_t sRep) \
    {                                                                                                             \
        cce_rt::Unary<D, S>(#name, cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dBlk, sBlk, dRep, sRep,       \
                            [](S x) -> D { body; });                                                              \
    }
TILEGEN_CCE_CONV(vconv_f162f32, float, half, return static_cast<float>(x))
TILEGEN_CCE_CONV(vconv_bf162f32, float, bfloat16_t, return static_cast<float>(x))
TILEGEN_CCE_CONV(vconv_f322f16, half, float, return cce_rt::RoundTo<half>(x, 'r'))
TILEGEN_CCE_CONV(vconv_f322f16r, half, float, return cce_rt::RoundTo<half>(x, 'r'))
TILEGEN_CCE_CONV(vconv_f322f16a, half, float, return cce_rt::RoundTo<half>(x, 'a'))
TILEGEN_CCE_CONV(vconv_f322f16f, half, float, return cce_rt::RoundTo<half>(x, 'f'))
TILEGEN_CCE_CONV(vconv_f322f16c, half, float, return cce_rt::RoundTo<half>(x, 'c'))
TILEGEN_CCE_CONV(vconv_f322f16z, half, float, return cce_rt::RoundTo<half>(x, 'z'))
TILEGEN_CCE_CONV(vconv_f322f16o, half, float, return cce_rt::RoundTo<half>(x, 'o'))
// int32 -> float, CAST_NONE and CAST_RINT: round to nearest even (exact up to 2^24; the host's default mode)
TILEGEN_CCE_CONV(vconv_s322f32, float, int32_t, return static_cast<float>(x))
TILEGEN_CCE_CONV(vconv_s322f32r, float, int32_t, return static_cast<float>(x))
// float -> int32, CAST_RINT (Cast.md, A2 table: float -> int32_t with CAST_RINT/FLOOR/CEIL/ROUND/TRUNC; call site
// CastIntrinsicsImpl(int32_t*, float*)): nearest, ties to even; out of range saturates, NaN gives 0 [our reading:
// the doc does not say].
namespace cce_rt {
inline int32_t F2S32(float x)
{
    if (x != x) return 0;
    const double r = std::nearbyint(static_cast<double>(x));
    if (r >= 2147483647.0) return 2147483647;
    if (r <= -2147483648.0) return -2147483647 - 1;
    return static_cast<int32_t>(r);
}
}  // namespace cce_rt
TILEGEN_CCE_CONV(vconv_f322s32r, int32_t, float, return cce_rt::F2S32(x))
// float -> float rounded to an integral value (Cast.md, A2 table: float -> float with CAST_RINT/FLOOR/CEIL/
// ROUND/TRUNC; call site CastIntrinsicsImpl(float*, float*)); infinities and NaN pass through.
TILEGEN_CCE_CONV(vconv_f322f32r, float, float, return std::isfinite(x) ? std::nearbyint(x) : x)
TILEGEN_CCE_CONV(vconv_f322f32f, float, float, return std::isfinite(x) ? std::floor(x) : x)
TILEGEN_CCE_CONV(vconv_f322f32c, float, float, return std::isfinite(x) ? std::ceil(x) : x)
TILEGEN_CCE_CONV(vconv_f322f32a, float, float, return std::isfinite(x) ? std::round(x) : x)
TILEGEN_CCE_CONV(vconv_f322f32z, float, float, return std::isfinite(x) ? std::trunc(x) : x)
#undef TILEGEN_CCE_CONV

// float -> bf16 in a rounding mode (bits: the top half of the float).
namespace cce_rt {
inline bfloat16_t F2Bf(float v, char mode)
{
    uint32_t u;
    std::memcpy(&u, &v, 4);
    bfloat16_t out;
    if (mode == 'r' || std::isnan(v) || (u & 0xffff) == 0) {
        out = bfloat16_t(v);
        return out;
    }
    const uint16_t t = static_cast<uint16_t>(u >> 16);  // toward zero
    const bool neg = u >> 31;
    uint16_t away = static_cast<uint16_t>(t + 1);
    uint16_t r = t;
    switch (mode) {
        case 'z': r = t; break;
        case 'f': r = neg ? away : t; break;
        case 'c': r = neg ? t : away; break;
        case 'a': r = (u & 0xffff) >= 0x8000 ? away : t; break;
        case 'o': r = (t & 1) ? t : away; break;
        default: r = bfloat16_t(v).bits;
    }
    out.bits = r;
    return out;
}
}  // namespace cce_rt
#define TILEGEN_CCE_CONV_BF(name, mode)                                                                           \
    template <typename PD, typename PS>                                                                           \
    inline void name(__ubuf__ PD* dst, __ubuf__ PS* src, uint64_t repeat, uint64_t dBlk, uint64_t sBlk, uint64_t dRep, uint64_t sRep) \
    {                                                                                                             \
        cce_rt::Unary<bfloat16_t, float>(#name, cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dBlk, sBlk, dRep, \
                                         sRep, [](float x) -> bfloat16_t { return cce_rt::F2Bf(x, mode); });      \
    }
TILEGEN_CCE_CONV_BF(vconv_f322bf16r, 'r')
TILEGEN_CCE_CONV_BF(vconv_f322bf16a, 'a')
TILEGEN_CCE_CONV_BF(vconv_f322bf16f, 'f')
TILEGEN_CCE_CONV_BF(vconv_f322bf16c, 'c')
TILEGEN_CCE_CONV_BF(vconv_f322bf16z, 'z')
TILEGEN_CCE_CONV_BF(vconv_f322bf16o, 'o')
#undef TILEGEN_CCE_CONV_BF

// ---- gather (Gather.md, Memory矢量计算/离散与聚合/; call site GatherImpl in kernel_operator_vec_gather_impl.h) ----
// vgather(dst, offsets, srcAddr, dstRepStride, repeat): lane l of repeat r (lanes = 256 / sizeof(T), the mask
// as for any instruction) reads the uint32 byte offset offsets[r * lanes + l] and copies the sizeof(T) bytes at
// UB address srcAddr + offset into dst + r * dstRepStride * 32 + l * sizeof(T). Each offset keeps the element
// aligned (the doc: "取值应保证src元素类型位宽对齐") and inside UB; the sources must not be written by the same
// instruction (dst and src are distinct, 约束说明).
template <typename T>
inline void vgather(__ubuf__ T* dst, __ubuf__ uint32_t* offsets, uint32_t srcAddr, uint64_t dstRepStride, uint64_t repeat)
{
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "tilegen twin: vgather moves 16- or 32-bit elements");
    const char* what = "vgather";
    constexpr uint32_t lanes = 256 / sizeof(T);
    const std::vector<cce_rt::Lane> ls = cce_rt::Lanes(what, lanes, static_cast<uint32_t>(repeat));
    const uint32_t op = cce_rt::Issue(PIPE_V);
    const cce_rt::Opnd d = cce_rt::MakeOpnd(what, cce_rt::AddrOf(dst), sizeof(T), sizeof(T), 1, dstRepStride);
    const uint64_t o = cce_rt::AddrOf(offsets);
    cce_rt::Align(what, cce_rt::UB, o, 32);
    std::vector<T> out(ls.size());
    std::vector<uint64_t> from(ls.size());
    for (size_t i = 0; i < ls.size(); ++i) {
        const uint64_t at = o + cce_rt::BitIndex(ls[i], lanes) * 4;
        cce_rt::TouchRead(what, PIPE_V, cce_rt::UB, at, 4);
        const uint32_t off = cce_rt::Load<uint32_t>(cce_rt::Local(what, cce_rt::UB, at, 4));
        from[i] = static_cast<uint64_t>(srcAddr) + off;
        if (from[i] % sizeof(T) != 0) cce_rt::Fail(what, "source address %llu is not element-aligned", (unsigned long long)from[i]);
        cce_rt::TouchRead(what, PIPE_V, cce_rt::UB, from[i], sizeof(T));
        out[i] = cce_rt::Load<T>(cce_rt::Local(what, cce_rt::UB, from[i], sizeof(T)));
    }
    uint64_t lo = UINT64_MAX, hi = 0;  // the bytes dst spans
    for (const cce_rt::Lane& x : ls) {
        lo = std::min<uint64_t>(lo, d.At(x));
        hi = std::max<uint64_t>(hi, d.At(x) + sizeof(T));
    }
    for (uint64_t f : from)
        if (f < hi && lo < f + sizeof(T)) cce_rt::Fail(what, "source byte %llu lies in dst (dst must not be src)", (unsigned long long)f);
    for (size_t i = 0; i < ls.size(); ++i) cce_rt::WriteLane<T>(what, d, ls[i], out[i], op);
}

// ---- compare with a scalar -> bits (CompareScalar doc): bit i of dst = (src[i] OP scalar); NaN compares
// false except NE. Bits are written by whole bytes covering the lanes run.
#define TILEGEN_CCE_CMPVS(name, OP)                                                                               \
    template <typename T, typename S>                                                                             \
    inline void name(__ubuf__ uint8_t* dst, __ubuf__ T* src, S scalar, uint64_t repeat, uint64_t dBlk, uint64_t sBlk, \
                     uint64_t dRep, uint64_t sRep)                                                                \
    {                                                                                                             \
        (void)dBlk; (void)dRep;                                                                                   \
        const char* what = #name;                                                                                 \
        constexpr uint32_t lanes = 256 / sizeof(T);                                                               \
        const std::vector<cce_rt::Lane> ls = cce_rt::Lanes(what, lanes, static_cast<uint32_t>(repeat));           \
        const uint32_t op = cce_rt::Issue(PIPE_V);                                                                \
        const cce_rt::Opnd s = cce_rt::MakeOpnd(what, cce_rt::AddrOf(src), sizeof(T), sizeof(T), sBlk, sRep);     \
        const uint64_t d = cce_rt::AddrOf(dst);                                                                   \
        const float y = static_cast<float>(static_cast<T>(scalar));                                               \
        std::vector<uint8_t> bits;                                                                                \
        for (const cce_rt::Lane& x : ls) {                                                                        \
            const uint64_t b = cce_rt::BitIndex(x, lanes);                                                        \
            if (bits.size() <= b / 8) bits.resize(b / 8 + 1, 0);                                                  \
            const float v = static_cast<float>(cce_rt::ReadLane<T>(what, s, x));                                  \
            if (v OP y) bits[b / 8] |= static_cast<uint8_t>(1u << (b % 8));                                       \
        }                                                                                                         \
        uint8_t* p = cce_rt::Local(what, cce_rt::UB, d, bits.size());                                             \
        std::memcpy(p, bits.data(), bits.size());                                                                 \
        cce_rt::TouchWrite(what, PIPE_V, op, cce_rt::UB, d, bits.size());                                               \
    }
TILEGEN_CCE_CMPVS(vcmpvs_eq, ==)
TILEGEN_CCE_CMPVS(vcmpvs_ne, !=)
TILEGEN_CCE_CMPVS(vcmpvs_lt, <)
TILEGEN_CCE_CMPVS(vcmpvs_le, <=)
TILEGEN_CCE_CMPVS(vcmpvs_gt, >)
TILEGEN_CCE_CMPVS(vcmpvs_ge, >=)
#undef TILEGEN_CCE_CMPVS

// ---- compare two tensors -> bits (Compare doc): bit i of dst = (src0[i] OP src1[i]), both sources through
// their block and repeat strides; the bits are packed as vcmpvs packs them under the default dst strides
// (1, 8), the only ones modelled (the asc-devkit calls pass them, CompareCompute in kernel_operator_vec_cmp_impl.h).
#define TILEGEN_CCE_CMPV(name, OP)                                                                                \
    template <typename T>                                                                                         \
    inline void name(__ubuf__ uint8_t* dst, __ubuf__ T* src0, __ubuf__ T* src1, uint64_t repeat, uint64_t dBlk,   \
                     uint64_t s0Blk, uint64_t s1Blk, uint64_t dRep, uint64_t s0Rep, uint64_t s1Rep)               \
    {                                                                                                             \
        const char* what = #name;                                                                                 \
        if (dBlk != 1 || dRep != 8)                                                                               \
            cce_rt::Fail(what, "dst strides %llu/%llu: only the default 1/8 (packed bits) is modelled",            \
                         static_cast<unsigned long long>(dBlk), static_cast<unsigned long long>(dRep));            \
        constexpr uint32_t lanes = 256 / sizeof(T);                                                               \
        const std::vector<cce_rt::Lane> ls = cce_rt::Lanes(what, lanes, static_cast<uint32_t>(repeat));           \
        const uint32_t op = cce_rt::Issue(PIPE_V);                                                                \
        const cce_rt::Opnd a = cce_rt::MakeOpnd(what, cce_rt::AddrOf(src0), sizeof(T), sizeof(T), s0Blk, s0Rep);  \
        const cce_rt::Opnd b = cce_rt::MakeOpnd(what, cce_rt::AddrOf(src1), sizeof(T), sizeof(T), s1Blk, s1Rep);  \
        const uint64_t d = cce_rt::AddrOf(dst);                                                                   \
        std::vector<uint8_t> bits;                                                                                \
        for (const cce_rt::Lane& x : ls) {                                                                        \
            const uint64_t k = cce_rt::BitIndex(x, lanes);                                                        \
            if (bits.size() <= k / 8) bits.resize(k / 8 + 1, 0);                                                  \
            const float u = static_cast<float>(cce_rt::ReadLane<T>(what, a, x));                                  \
            const float v = static_cast<float>(cce_rt::ReadLane<T>(what, b, x));                                  \
            if (u OP v) bits[k / 8] |= static_cast<uint8_t>(1u << (k % 8));                                       \
        }                                                                                                         \
        uint8_t* p = cce_rt::Local(what, cce_rt::UB, d, bits.size());                                             \
        std::memcpy(p, bits.data(), bits.size());                                                                 \
        cce_rt::TouchWrite(what, PIPE_V, op, cce_rt::UB, d, bits.size());                                         \
    }
TILEGEN_CCE_CMPV(vcmpv_eq, ==)
TILEGEN_CCE_CMPV(vcmpv_ne, !=)
TILEGEN_CCE_CMPV(vcmpv_lt, <)
TILEGEN_CCE_CMPV(vcmpv_le, <=)
TILEGEN_CCE_CMPV(vcmpv_gt, >)
TILEGEN_CCE_CMPV(vcmpv_ge, >=)
#undef TILEGEN_CCE_CMPV

// set_cmpmask(p): CMPMASK = the 16 bytes at p (Select modes 0/1 read the bits / the scalar from it).
template <typename T>
inline void set_cmpmask(__ubuf__ T* p)
{
    const uint64_t a = cce_rt::AddrOf(p);
    cce_rt::Issue(PIPE_V);
    cce_rt::Align("set_cmpmask", cce_rt::UB, a, 32);
    const uint8_t* h = cce_rt::Local("set_cmpmask", cce_rt::UB, a, 16);
    cce_rt::TouchRead("set_cmpmask", PIPE_V, cce_rt::UB, a, 16);
    std::memcpy(cce_rt::Cur().cmpMask, h, 16);
}

// vsel (Select doc): bit 1 -> src0, bit 0 -> src1. Mode 0 (no mode argument): bits from CMPMASK, lane l uses
// bit l every repeat, src1 a tensor. Mode 1: the third operand is the bit tensor, consumed continuously;
// src1 is the scalar held in CMPMASK. Mode 2: third operand src1 tensor, bits at the UB address in CMPMASK.
template <typename T, typename U>
inline void vsel(__ubuf__ T* dst, __ubuf__ T* src0, __ubuf__ U* third, uint64_t repeat, uint64_t dBlk, uint64_t s0Blk,
                 uint64_t s1Blk, uint64_t dRep, uint64_t s0Rep, uint64_t s1Rep, uint8_t mode = 0)
{
    const char* what = "vsel";
    constexpr uint32_t lanes = 256 / sizeof(T);
    cce_rt::Core& c = cce_rt::Cur();
    const std::vector<cce_rt::Lane> ls = cce_rt::Lanes(what, lanes, static_cast<uint32_t>(repeat));
    const uint32_t op = cce_rt::Issue(PIPE_V);
    const cce_rt::Opnd d = cce_rt::MakeOpnd(what, cce_rt::AddrOf(dst), sizeof(T), sizeof(T), dBlk, dRep);
    const cce_rt::Opnd a = cce_rt::MakeOpnd(what, cce_rt::AddrOf(src0), sizeof(T), sizeof(T), s0Blk, s0Rep);
    std::vector<T> out(ls.size());
    if (mode == 1) {
        const T scalar = cce_rt::Load<T>(c.cmpMask);
        const uint64_t bitsAt = cce_rt::AddrOf(third);
        for (size_t i = 0; i < ls.size(); ++i) {
            const uint64_t b = cce_rt::BitIndex(ls[i], lanes);
            const uint8_t* p = cce_rt::Local(what, cce_rt::UB, bitsAt + b / 8, 1);
            cce_rt::TouchRead(what, PIPE_V, cce_rt::UB, bitsAt + b / 8, 1);
            out[i] = ((*p >> (b % 8)) & 1) ? cce_rt::ReadLane<T>(what, a, ls[i]) : scalar;
        }
    } else if (mode == 0) {
        const cce_rt::Opnd s1 = cce_rt::MakeOpnd(what, cce_rt::AddrOf(third), sizeof(T), sizeof(T), s1Blk, s1Rep);
        for (size_t i = 0; i < ls.size(); ++i) {
            const uint32_t b = ls[i].l;
            const bool take0 = (c.cmpMask[b / 8] >> (b % 8)) & 1;
            out[i] = take0 ? cce_rt::ReadLane<T>(what, a, ls[i]) : cce_rt::ReadLane<T>(what, s1, ls[i]);
        }
    } else {
        cce_rt::Fail(what, "select mode %u is not modelled", mode);
    }
    for (size_t i = 0; i < ls.size(); ++i) cce_rt::WriteLane<T>(what, d, ls[i], out[i], op);
}

// ---- reductions over one repeat (WholeReduceSum / WholeReduceMax / ReduceSum / ReduceMax docs) ---------
namespace cce_rt {
// Pairwise tree over the lanes of one repeat (masked-off lanes count as 0), as the ReduceSum doc describes.
inline float TreeSum(std::vector<float> v)
{
    if (v.empty()) return 0.0f;
    size_t n = 1;
    while (n < v.size()) n <<= 1;
    v.resize(n, 0.0f);
    while (n > 1) {
        for (size_t i = 0; i < n / 2; ++i) v[i] = v[2 * i] + v[2 * i + 1];
        n /= 2;
    }
    return v[0];
}
}  // namespace cce_rt

// vcadd(dst, src, repeat, dstRepStride, srcBlkStride, srcRepStride, acc): dst[r * dstRepStride] = sum of the
// active lanes of repeat r. With acc = 1 (the count-form ReduceSum), the repeats' sums are added in order
// into ACC_VAL (get_acc_val) and not written: ReduceSumImpl stores ACC_VAL to dst itself
// (kernel_operator_vec_reduce_impl.h). [our reading; the intrinsic is not documented]
template <typename T>
inline void vcadd(__ubuf__ T* dst, __ubuf__ T* src, uint64_t repeat, uint64_t dRep, uint64_t sBlk, uint64_t sRep, uint64_t acc)
{
    const char* what = "vcadd";
    constexpr uint32_t lanes = 256 / sizeof(T);
    const std::vector<cce_rt::Lane> ls = cce_rt::Lanes(what, lanes, static_cast<uint32_t>(repeat));
    const uint32_t op = cce_rt::Issue(PIPE_V);
    const cce_rt::Opnd s = cce_rt::MakeOpnd(what, cce_rt::AddrOf(src), sizeof(T), sizeof(T), sBlk, sRep);
    std::vector<std::vector<float>> per;
    for (const cce_rt::Lane& x : ls) {
        if (per.size() <= x.r) per.resize(x.r + 1);
        per[x.r].resize(lanes, 0.0f);
        per[x.r][x.l] = static_cast<float>(cce_rt::ReadLane<T>(what, s, x));
    }
    if (acc) {
        float total = 0.0f;
        for (auto& v : per) total = static_cast<float>(static_cast<T>(total + static_cast<float>(static_cast<T>(cce_rt::TreeSum(v)))));
        T t = static_cast<T>(total);
        int64_t bits = 0;
        std::memcpy(&bits, &t, sizeof(T));
        cce_rt::Cur().accVal = bits;
        return;
    }
    const uint64_t d = cce_rt::AddrOf(dst);
    for (size_t r = 0; r < per.size(); ++r) {
        const uint64_t a = d + r * dRep * sizeof(T);
        uint8_t* p = cce_rt::Local(what, cce_rt::UB, a, sizeof(T));
        cce_rt::Store<T>(p, static_cast<T>(cce_rt::TreeSum(per[r])));
        cce_rt::TouchWrite(what, PIPE_V, op, cce_rt::UB, a, sizeof(T));
    }
}
inline int64_t get_acc_val() { return cce_rt::Cur().accVal; }

// vcmax / vcmin (WholeReduceMax doc): per repeat the max (min) of the active lanes and the lane index of
// its first occurrence (an unsigned integer of sizeof(T) bytes); the pair is written at
// dst + r * dstRepStride * 2 elements in the order `order` (VALUE_INDEX: value, index). NaN wins.
template <typename T, bool kMax>
inline void VcMaxMin(const char* what, uint64_t dst, uint64_t src, uint64_t repeat, uint64_t dRep, uint64_t sBlk, uint64_t sRep,
                     Order_t order)
{
    constexpr uint32_t lanes = 256 / sizeof(T);
    const std::vector<cce_rt::Lane> ls = cce_rt::Lanes(what, lanes, static_cast<uint32_t>(repeat));
    const uint32_t op = cce_rt::Issue(PIPE_V);
    const cce_rt::Opnd s = cce_rt::MakeOpnd(what, src, sizeof(T), sizeof(T), sBlk, sRep);
    struct Best { bool any = false; float v = 0; uint32_t idx = 0; };
    std::vector<Best> best;
    for (const cce_rt::Lane& x : ls) {
        if (best.size() <= x.r) best.resize(x.r + 1);
        const float v = static_cast<float>(cce_rt::ReadLane<T>(what, s, x));
        Best& b = best[x.r];
        const bool better = !b.any || (v != v && b.v == b.v) || (b.v == b.v && (kMax ? v > b.v : v < b.v));
        if (better) { b.any = true; b.v = v; b.idx = x.l; }
    }
    using I = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;
    // dstRepStride unit (ReduceRepeat.md, table 3): the pair for VALUE_INDEX / INDEX_VALUE, sizeof(T) for
    // ONLY_VALUE, 4 bytes (a uint32_t) for ONLY_INDEX; each result occupies one unit.
    const uint64_t unit = order == ONLY_VALUE ? sizeof(T) : order == ONLY_INDEX ? 4 : 2 * sizeof(T);
    for (size_t r = 0; r < best.size(); ++r) {
        if (!best[r].any) continue;
        const uint64_t a = dst + r * dRep * unit;
        uint8_t* p = cce_rt::Local(what, cce_rt::UB, a, unit);
        const T v = static_cast<T>(best[r].v);
        const I i = static_cast<I>(best[r].idx);
        switch (order) {
            case VALUE_INDEX: cce_rt::Store<T>(p, v); cce_rt::Store<I>(p + sizeof(T), i); break;
            case INDEX_VALUE: cce_rt::Store<I>(p, i); cce_rt::Store<T>(p + sizeof(T), v); break;
            case ONLY_VALUE: cce_rt::Store<T>(p, v); break;
            case ONLY_INDEX: cce_rt::Store<uint32_t>(p, static_cast<uint32_t>(i)); break;
        }
        cce_rt::TouchWrite(what, PIPE_V, op, cce_rt::UB, a, unit);
    }
}
template <typename T>
inline void vcmax(__ubuf__ T* dst, __ubuf__ T* src, uint64_t repeat, uint64_t dRep, uint64_t sBlk, uint64_t sRep, Order_t order)
{
    VcMaxMin<T, true>("vcmax", cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dRep, sBlk, sRep, order);
}
template <typename T>
inline void vcmin(__ubuf__ T* dst, __ubuf__ T* src, uint64_t repeat, uint64_t dRep, uint64_t sBlk, uint64_t sRep, Order_t order)
{
    VcMaxMin<T, false>("vcmin", cce_rt::AddrOf(dst), cce_rt::AddrOf(src), repeat, dRep, sBlk, sRep, order);
}

// ---- broadcast (Brcb doc, Memory矢量计算/数据填充/Brcb.md; call site kernel_operator_vec_brcb_impl.h) ------
// vbrcb(dst, src, dstBlkStride, dstRepStride, repeat): repeat r reads the 8 elements src[8r .. 8r+7] and fills
// the 32-byte block dst + (r * dstRepStride + j * dstBlkStride) * 32 with src[8r + j] (dstBlkStride 0 reads
// as 1, the doc's pseudo-code). No mask: the API resets it before the call. Elements are 2 or 4 bytes.
template <typename T>
inline void vbrcb(__ubuf__ T* dst, __ubuf__ T* src, uint64_t dstBlk, uint64_t dstRep, uint64_t repeat)
{
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "tilegen twin: vbrcb takes 16- or 32-bit elements");
    const char* what = "vbrcb";
    cce_rt::RequireAiv(what);
    if (repeat > 255) cce_rt::Fail(what, "repeatTime %llu > 255", (unsigned long long)repeat);
    const uint64_t d = cce_rt::AddrOf(dst), s = cce_rt::AddrOf(src);
    cce_rt::Align(what, cce_rt::UB, d, 32);
    cce_rt::Align(what, cce_rt::UB, s, 32);
    const uint64_t blk = dstBlk == 0 ? 1 : dstBlk;
    const uint64_t dHi = d + ((repeat - 1) * dstRep + 7 * blk) * 32 + 32, sHi = s + repeat * 8 * sizeof(T);
    if (repeat > 0 && d < sHi && s < dHi) cce_rt::Fail(what, "src must not overlap dst");
    cce_rt::TraceRepeats(repeat);
    const uint32_t op = cce_rt::Issue(PIPE_V);
    std::vector<T> v(repeat * 8);
    for (uint64_t i = 0; i < repeat * 8; ++i) {
        const uint64_t a = s + i * sizeof(T);
        v[i] = cce_rt::Load<T>(cce_rt::Local(what, cce_rt::UB, a, sizeof(T)));
        cce_rt::TouchRead(what, PIPE_V, cce_rt::UB, a, sizeof(T));
    }
    for (uint64_t r = 0; r < repeat; ++r)
        for (uint64_t j = 0; j < 8; ++j) {
            const uint64_t a = d + (r * dstRep + j * blk) * 32;
            uint8_t* p = cce_rt::Local(what, cce_rt::UB, a, 32);
            for (uint64_t e = 0; e < 32 / sizeof(T); ++e) cce_rt::Store<T>(p + e * sizeof(T), v[r * 8 + j]);
            cce_rt::TouchWrite(what, PIPE_V, op, cce_rt::UB, a, 32);
        }
}

#endif  // TILEGEN_CCE_VECTOR_H
