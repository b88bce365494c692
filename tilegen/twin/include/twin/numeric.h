// tilegen CPU twin: numeric conversions with Ascend round modes and saturation.
#ifndef TILEGEN_TWIN_NUMERIC_H
#define TILEGEN_TWIN_NUMERIC_H

#include "base.h"

namespace AscendC {
// [P:Cast] enum class RoundMode. CAST_NONE = RINT when lossy, exact otherwise.
enum class RoundMode {
    CAST_NONE = 0,
    CAST_RINT,
    CAST_FLOOR,
    CAST_CEIL,
    CAST_ROUND,
    CAST_TRUNC,
    CAST_ODD,
    CAST_HYBRID,
};
}  // namespace AscendC

namespace twin {
namespace num {

using AscendC::RoundMode;

inline const char* RoundModeName(RoundMode m)
{
    static const char* n[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL",
                              "CAST_ROUND", "CAST_TRUNC", "CAST_ODD", "CAST_HYBRID"};
    int i = static_cast<int>(m);
    return (i >= 0 && i < 8) ? n[i] : "invalid";
}

inline bool IsNan(float f) { return std::isnan(f); }

template <typename T>
inline float ToF(T v)
{
    return static_cast<float>(v);
}

// 16-bit sign-magnitude float formats (half, bf16): bit helpers.
struct HalfFmt {
    static uint16_t Rne(float x)
    {
        half h = static_cast<half>(x);
        uint16_t b;
        std::memcpy(&b, &h, 2);
        return b;
    }
    static float Val(uint16_t b)
    {
        half h;
        std::memcpy(&h, &b, 2);
        return static_cast<float>(h);
    }
    static constexpr uint16_t kInf = 0x7c00, kMax = 0x7bff;
};
struct Bf16Fmt {
    static uint16_t Rne(float x) { return bfloat16_t::FromFloat(x); }
    static float Val(uint16_t b) { return static_cast<float>(bfloat16_t::FromBits(b)); }
    static constexpr uint16_t kInf = 0x7f80, kMax = 0x7f7f;
};
inline uint16_t NextTowardPosInf(uint16_t b)
{
    if ((b & 0x7fff) == 0) return 0x0001;
    return (b & 0x8000) ? static_cast<uint16_t>(b - 1) : static_cast<uint16_t>(b + 1);
}
inline uint16_t NextTowardNegInf(uint16_t b)
{
    if ((b & 0x7fff) == 0) return 0x8001;
    return (b & 0x8000) ? static_cast<uint16_t>(b + 1) : static_cast<uint16_t>(b - 1);
}

// float -> 16-bit float with a round mode; finite overflow saturates to the largest finite value
// ("溢出默认按照饱和处理" [P:Cast]); inf/NaN inputs pass through.
template <typename Fmt>
inline uint16_t NarrowBits(float x, RoundMode m)
{
    uint16_t r = Fmt::Rne(x);
    if (std::isnan(x) || std::isinf(x)) return r;
    float rv = Fmt::Val(r);
    uint16_t out = r;
    if (rv != x && m != RoundMode::CAST_RINT && m != RoundMode::CAST_NONE) {
        uint16_t lo, hi;
        if (rv < x) {
            lo = r;
            hi = NextTowardPosInf(r);
        } else {
            hi = r;
            lo = NextTowardNegInf(r);
        }
        double dl = static_cast<double>(x) - static_cast<double>(Fmt::Val(lo));
        double dh = static_cast<double>(Fmt::Val(hi)) - static_cast<double>(x);
        switch (m) {
            case RoundMode::CAST_FLOOR: out = lo; break;
            case RoundMode::CAST_CEIL: out = hi; break;
            case RoundMode::CAST_TRUNC: out = (x > 0) ? lo : hi; break;
            case RoundMode::CAST_ROUND:
                if (dl < dh) out = lo;
                else if (dh < dl) out = hi;
                else out = (x > 0) ? hi : lo;  // tie: away from zero
                break;
            case RoundMode::CAST_ODD: out = (lo & 1) ? lo : hi; break;
            default: break;
        }
    }
    if ((out & 0x7fff) == Fmt::kInf) out = static_cast<uint16_t>((out & 0x8000) | Fmt::kMax);  // saturate
    return out;
}

inline half FloatToHalf(float x, RoundMode m)
{
    uint16_t b = NarrowBits<HalfFmt>(x, m);
    half h;
    std::memcpy(&h, &b, 2);
    return h;
}
inline bfloat16_t FloatToBf16(float x, RoundMode m) { return bfloat16_t::FromBits(NarrowBits<Bf16Fmt>(x, m)); }

// Round a double to an integral value with a round mode.
inline double RoundIntegral(double x, RoundMode m)
{
    switch (m) {
        case RoundMode::CAST_FLOOR: return std::floor(x);
        case RoundMode::CAST_CEIL: return std::ceil(x);
        case RoundMode::CAST_TRUNC: return std::trunc(x);
        case RoundMode::CAST_ROUND: return std::round(x);
        default: return std::nearbyint(x);  // RINT / NONE: ties to even (default FP environment)
    }
}

// double -> float with a round mode (for int32/int64 -> float).
inline float DoubleToFloat(double x, RoundMode m)
{
    float r = static_cast<float>(x);
    if (static_cast<double>(r) == x || m == RoundMode::CAST_RINT || m == RoundMode::CAST_NONE) return r;
    float lo, hi;
    if (static_cast<double>(r) < x) {
        lo = r;
        hi = std::nextafter(r, INFINITY);
    } else {
        hi = r;
        lo = std::nextafter(r, -INFINITY);
    }
    switch (m) {
        case RoundMode::CAST_FLOOR: return lo;
        case RoundMode::CAST_CEIL: return hi;
        case RoundMode::CAST_TRUNC: return x > 0 ? lo : hi;
        case RoundMode::CAST_ROUND: {
            double dl = x - lo, dh = hi - x;
            if (dl < dh) return lo;
            if (dh < dl) return hi;
            return x > 0 ? hi : lo;
        }
        default: return r;
    }
}

// float -> integer with a round mode, saturating; NaN -> 0 (not documented; see README).
template <typename I>
inline I FloatToInt(double x, RoundMode m)
{
    if (std::isnan(x)) return 0;
    double r = RoundIntegral(x, m);
    double lo = static_cast<double>(std::numeric_limits<I>::min());
    double hi = static_cast<double>(std::numeric_limits<I>::max());
    if (r <= lo) return std::numeric_limits<I>::min();
    if (r >= hi) return std::numeric_limits<I>::max();
    return static_cast<I>(r);
}

// Half-precision add with saturation at +-65504 (ReduceSum documents this behaviour [P:ReduceSum]).
inline half HalfAddSat(half a, half b)
{
    float s = static_cast<float>(a) + static_cast<float>(b);
    if (std::isnan(s)) return static_cast<half>(s);
    if (!std::isinf(static_cast<float>(a)) && !std::isinf(static_cast<float>(b))) {
        if (s > 65504.0f) s = 65504.0f;
        if (s < -65504.0f) s = -65504.0f;
    }
    return static_cast<half>(s);
}

// Generic arithmetic helpers: compute in float (or int64 for integers) and round once to T.
template <typename T>
inline T FromF(float v)
{
    if constexpr (std::is_same_v<T, bfloat16_t>) return bfloat16_t(v);
    else return static_cast<T>(v);
}

// Flush subnormal results to zero (ExpAlgo/LnAlgo INTRINSIC "所有Subnormal被近似为0" [P:Exp]).
template <typename T>
inline T Ftz(T v)
{
    float f = static_cast<float>(v);
    if (f == 0.0f || std::isnan(f) || std::isinf(f)) return v;
    float minNormal = std::is_same_v<T, half> ? 6.103515625e-05f : FLT_MIN;
    if (std::fabs(f) < minNormal) return FromF<T>(std::signbit(f) ? -0.0f : 0.0f);
    return v;
}

}  // namespace num
}  // namespace twin

#endif  // TILEGEN_TWIN_NUMERIC_H
