// Positive vector / data-movement tests on one AIV (twin::LaunchAiv): each op against a plain loop.
#include "common.h"

namespace {

// Runs body(in LocalTensor<T>, out LocalTensor<O>) on one AIV: loads n elements of `in` from GM,
// writes n2 elements of `out` to GM.
template <typename T, typename O, typename Body>
std::vector<O> OnAiv(const std::vector<T>& in, uint32_t nOut, Body body)
{
    tt::Gm<T> gi(in, "in");
    tt::Gm<O> go(nOut, "out");
    uint32_t nIn = static_cast<uint32_t>(in.size());
    auto k = [&](GM_ADDR x, GM_ADDR y) {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
        GlobalTensor<T> X;
        GlobalTensor<O> Y;
        X.SetGlobalBuffer((__gm__ T*)x, nIn);
        Y.SetGlobalBuffer((__gm__ O*)y, nOut);
        TPipe pipe;
        TQue<TPosition::VECIN, 1> qi;
        TQue<TPosition::VECOUT, 1> qo;
        TBuf<TPosition::VECCALC> tmp;
        pipe.InitBuffer(qi, 1, nIn * sizeof(T));
        pipe.InitBuffer(qo, 1, nOut * sizeof(O));
        pipe.InitBuffer(tmp, 16384);
        LocalTensor<T> li = qi.AllocTensor<T>();
        DataCopyPad(li, X, DataCopyExtParams(1, nIn * sizeof(T), 0, 0, 0), DataCopyPadExtParams<T>(false, 0, 0, T(0)));
        qi.EnQue(li);
        li = qi.DeQue<T>();
        LocalTensor<O> lo = qo.AllocTensor<O>();
        body(li, lo, tmp.Get<uint8_t>());
        qo.EnQue(lo);
        lo = qo.DeQue<O>();
        DataCopyPad(Y, lo, DataCopyExtParams(1, nOut * sizeof(O), 0, 0, 0));
        qo.FreeTensor(lo);
        qi.FreeTensor(li);
    };
    twin::LaunchAiv(1, k, gi.addr(), go.addr());
    return go.vec();
}

template <typename T>
int CheckUnary(const char* name, const std::vector<float>& x, std::vector<T> got, float (*f)(float), float rtol, bool ftz)
{
    for (size_t i = 0; i < x.size(); ++i) {
        float xi = static_cast<float>(static_cast<T>(x[i]));
        float want = static_cast<float>(static_cast<T>(f(xi)));
        float minN = std::is_same_v<T, half> ? 6.103515625e-05f : FLT_MIN;
        if (ftz && std::fabs(want) < minN) want = 0;
        float g = static_cast<float>(got[i]);
        EXPECT(tt::Close(g, want, rtol, 0) || g == want, "%s[%zu](%g) = %g, want %g", name, i, xi, g, want);
    }
    return 0;
}

}  // namespace

TWIN_TEST(vec_exp_ln_half)
{
    auto x = tt::Rand(300, 0.01f, 4.0f, 1);
    auto hx = tt::To<half>(x);
    auto e = OnAiv<half, half>(hx, 640, [](LocalTensor<half> in, LocalTensor<half> out, LocalTensor<uint8_t>) {
        Exp(out, in, 300);
        Ln(out[320], in, 300);  // 640-byte offset keeps 32-byte alignment
    });
    std::vector<half> ex(e.begin(), e.begin() + 300), ln(e.begin() + 320, e.begin() + 620);
    if (CheckUnary<half>("Exp", x, ex, [](float v) { return std::exp(v); }, 0, true)) return 1;
    return CheckUnary<half>("Ln", x, ln, [](float v) { return std::log(v); }, 0, true);
}

TWIN_TEST(vec_exp_float_ftz)
{
    std::vector<float> x = {0.0f, 1.0f, -1.0f, -100.0f, -87.0f, -88.0f, -95.0f, 10.0f};
    auto r = OnAiv<float, float>(x, 8, [](LocalTensor<float> in, LocalTensor<float> out, LocalTensor<uint8_t>) { Exp(out, in, 8); });
    for (size_t i = 0; i < x.size(); ++i) {
        float want = std::exp(x[i]);
        if (std::fabs(want) < FLT_MIN) want = 0;  // INTRINSIC: subnormal -> 0
        EXPECT(r[i] == want, "exp(%g) = %g want %g", x[i], r[i], want);
    }
    return 0;
}

TWIN_TEST(vec_binary_float)
{
    const uint32_t n = 200;
    auto a = tt::Rand(n, -3, 3, 2), b = tt::Rand(n, 0.5f, 3, 3);
    std::vector<float> in(a);
    in.resize(256);
    in.insert(in.end(), b.begin(), b.end());  // b at element 256 (1 KiB, aligned)
    auto r = OnAiv<float, float>(in, 6 * 256, [&](LocalTensor<float> x, LocalTensor<float> o, LocalTensor<uint8_t>) {
        LocalTensor<float> A = x, B = x[256];
        Add(o, A, B, n);
        Sub(o[256], A, B, n);
        Mul(o[512], A, B, n);
        Div(o[768], A, B, n);
        Max(o[1024], A, B, n);
        Min(o[1280], A, B, n);
    });
    for (uint32_t i = 0; i < n; ++i) {
        EXPECT(r[i] == a[i] + b[i], "Add");
        EXPECT(r[256 + i] == a[i] - b[i], "Sub");
        EXPECT(r[512 + i] == a[i] * b[i], "Mul");
        EXPECT(r[768 + i] == a[i] / b[i], "Div");
        EXPECT(r[1024 + i] == std::max(a[i], b[i]), "Max");
        EXPECT(r[1280 + i] == std::min(a[i], b[i]), "Min");
    }
    return 0;
}

TWIN_TEST(vec_scalar_ops_half)
{
    const uint32_t n = 130;
    auto a = tt::Rand(n, -3, 3, 4);
    auto ha = tt::To<half>(a);
    auto r = OnAiv<half, half>(ha, 4 * 144, [&](LocalTensor<half> x, LocalTensor<half> o, LocalTensor<uint8_t>) {
        Muls(o, x, static_cast<half>(0.5f), n);
        Adds(o[144], x, static_cast<half>(1.25f), n);
        Maxs(o[288], x, static_cast<half>(0.0f), n);
        Duplicate(o[432], static_cast<half>(7.0f), n);
    });
    for (uint32_t i = 0; i < n; ++i) {
        float xi = static_cast<float>(ha[i]);
        EXPECT(static_cast<float>(r[i]) == static_cast<float>(static_cast<half>(xi * 0.5f)), "Muls");
        EXPECT(static_cast<float>(r[144 + i]) == static_cast<float>(static_cast<half>(xi + 1.25f)), "Adds");
        EXPECT(static_cast<float>(r[288 + i]) == std::max(xi, 0.0f), "Maxs");
        EXPECT(static_cast<float>(r[432 + i]) == 7.0f, "Duplicate");
    }
    return 0;
}

TWIN_TEST(vec_cast)
{
    std::vector<float> x = {1.5f, 2.5f, -2.5f, 0.1f, 65519.0f, 70000.0f, -1e9f, 3.4e38f, 1.00048828125f, -0.0f,
                            1e-8f, 123.456f, 2.0f, -7.75f, 0.33333334f, 1e5f};
    const uint32_t n = 16;
    // float -> half (RINT, FLOOR, CEIL, TRUNC, ROUND, ODD), -> bf16 RINT, -> int32 ROUND, -> float TRUNC,
    // half -> float, bf16 -> float
    auto r = OnAiv<float, float>(x, 16 * 16, [&](LocalTensor<float> in, LocalTensor<float> o, LocalTensor<uint8_t> tmpb) {
        LocalTensor<half> h = tmpb.ReinterpretCast<half>();
        const RoundMode modes[6] = {RoundMode::CAST_RINT, RoundMode::CAST_FLOOR, RoundMode::CAST_CEIL,
                                    RoundMode::CAST_TRUNC, RoundMode::CAST_ROUND, RoundMode::CAST_ODD};
        for (int m = 0; m < 6; ++m) {
            Cast(h[m * 16], in, modes[m], n);
            Cast(o[m * 16], h[m * 16], RoundMode::CAST_NONE, n);
        }
        LocalTensor<bfloat16_t> bf = tmpb[1024].ReinterpretCast<bfloat16_t>();
        Cast(bf, in, RoundMode::CAST_RINT, n);
        Cast(o[6 * 16], bf, RoundMode::CAST_NONE, n);
        LocalTensor<int32_t> i32 = tmpb[2048].ReinterpretCast<int32_t>();
        Cast(i32, in, RoundMode::CAST_ROUND, n);
        Cast(o[7 * 16], i32, RoundMode::CAST_NONE, n);
        Cast(o[8 * 16], in, RoundMode::CAST_TRUNC, n);
    });
    auto h = [](float v) { return static_cast<float>(static_cast<half>(v)); };
    for (uint32_t i = 0; i < n; ++i) {
        float v = x[i];
        float rint = h(v);
        if (std::isinf(rint)) rint = std::copysign(65504.0f, v);  // saturation
        EXPECT(r[i] == rint, "float->half RINT(%g) = %g want %g", v, r[i], rint);
        if (std::fabs(v) <= 60000.0f) {
            EXPECT(r[16 + i] <= v && h(r[16 + i]) == r[16 + i], "FLOOR(%g) = %g", v, r[16 + i]);
            EXPECT(r[32 + i] >= v && h(r[32 + i]) == r[32 + i], "CEIL(%g) = %g", v, r[32 + i]);
            EXPECT(std::fabs(r[48 + i]) <= std::fabs(v), "TRUNC(%g) = %g", v, r[48 + i]);
            EXPECT(r[32 + i] - r[16 + i] <= std::fabs(v) * 0.001f + 6e-8f, "FLOOR/CEIL not neighbours for %g", v);
        } else {
            EXPECT(std::fabs(r[16 + i]) == 65504.0f && std::fabs(r[32 + i]) == 65504.0f, "saturation of %g", v);
        }
        float bfv = static_cast<float>(bfloat16_t(v));
        if (std::isinf(bfv)) bfv = std::copysign(3.3895313892515355e38f, v);
        EXPECT(r[96 + i] == bfv, "float->bf16(%g) = %g want %g", v, r[96 + i], bfv);
        float rr = std::round(v);
        float want = rr >= 2147483647.0f ? 2147483647.0f : (rr <= -2147483648.0f ? -2147483648.0f : rr);
        EXPECT(r[112 + i] == want, "float->int32 ROUND(%g) = %g want %g", v, r[112 + i], want);
        EXPECT(r[128 + i] == std::trunc(v), "float TRUNC(%g) = %g", v, r[128 + i]);
    }
    // spot checks: 2.5 ROUND -> 2.5 (exact in half); 70000 saturates to 65504; ODD of 1.00048828125 (tie) -> odd neighbour
    EXPECT(r[5] == 65504.0f, "70000 -> %g", r[5]);
    EXPECT(r[80 + 8] == 1.0009765625f, "ODD(1.00048828125) = %.10g", r[80 + 8]);
    EXPECT(r[64 + 8] == 1.0009765625f, "ROUND(1.00048828125) = %.10g (tie away from zero)", r[64 + 8]);
    EXPECT(r[8] == 1.0f, "RINT(1.00048828125) = %.10g (tie to even)", r[8]);
    return 0;
}

TWIN_TEST(vec_bitwise_gather)
{
    // And/Or of int32 words on their int16 halves (And.md: ReinterpretCast to 16-bit), then Gather of floats
    // from a UB table at byte offsets (Gather.md), each against a plain loop
    std::vector<float> x(64);
    for (uint32_t i = 0; i < 64; ++i) x[i] = static_cast<float>(static_cast<int32_t>(i * 2654435761u % 100000u) - 50000);
    auto r = OnAiv<float, float>(x, 3 * 64, [&](LocalTensor<float> in, LocalTensor<float> o, LocalTensor<uint8_t> tmpb) {
        LocalTensor<int32_t> a = tmpb.ReinterpretCast<int32_t>(), b = tmpb[256].ReinterpretCast<int32_t>();
        LocalTensor<int32_t> c = tmpb[512].ReinterpretCast<int32_t>();
        Cast(a, in, RoundMode::CAST_RINT, 64);
        Duplicate(b, static_cast<int32_t>(0x55555555), 64);
        And(c.ReinterpretCast<int16_t>(), a.ReinterpretCast<int16_t>(), b.ReinterpretCast<int16_t>(), 128);
        Cast(o, c, RoundMode::CAST_NONE, 64);
        Or(c.ReinterpretCast<int16_t>(), a.ReinterpretCast<int16_t>(), b.ReinterpretCast<int16_t>(), 128);
        Cast(o[64], c, RoundMode::CAST_NONE, 64);
        LocalTensor<uint32_t> off = tmpb[768].ReinterpretCast<uint32_t>();
        for (uint32_t i = 0; i < 64; ++i) off.SetValue(i, ((i * 37u) % 64u) * 4u);
        Gather(o[128], in, off, 0u, 64);
    });
    for (uint32_t i = 0; i < 64; ++i) {
        const int32_t v = static_cast<int32_t>(x[i]);
        EXPECT(r[i] == static_cast<float>(v & 0x55555555), "And(%d) = %g", v, r[i]);
        EXPECT(r[64 + i] == static_cast<float>(v | 0x55555555), "Or(%d) = %g", v, r[64 + i]);
        EXPECT(r[128 + i] == x[(i * 37u) % 64u], "Gather[%u] = %g", i, r[128 + i]);
    }
    return 0;
}

TWIN_TEST(vec_reduce)
{
    const uint32_t n = 1000;
    auto x = tt::Rand(n, -5, 5, 6);
    x[777] = 9.5f;
    auto r = OnAiv<float, float>(x, 16, [&](LocalTensor<float> in, LocalTensor<float> o, LocalTensor<uint8_t> tmpb) {
        LocalTensor<float> tmp = tmpb.ReinterpretCast<float>();
        ReduceMax(o, in, tmp, n, true);
        ReduceSum(o[8], in, tmp, n);
    });
    EXPECT(r[0] == 9.5f, "max %g", r[0]);
    uint32_t idx = tt::Bits(r[1]);
    EXPECT(idx == 777, "index %u", idx);
    // reference order: binary tree inside each 64-lane repeat, sequential across repeats
    float acc = 0;
    for (uint32_t rep = 0; rep * 64 < n; ++rep) {
        std::vector<float> l(64, 0.0f);
        for (uint32_t j = 0; j < 64; ++j)
            if (rep * 64 + j < n) l[j] = x[rep * 64 + j];
        for (size_t w = 64; w > 1; w /= 2)
            for (size_t j = 0; j < w / 2; ++j) l[j] = l[2 * j] + l[2 * j + 1];
        acc = rep == 0 ? l[0] : acc + l[0];
    }
    EXPECT(r[8] == acc, "sum %g want %g", r[8], acc);
    return 0;
}

TWIN_TEST(vec_reduce_half_saturates)
{
    std::vector<half> x(128, static_cast<half>(0.0f));
    x[0] = static_cast<half>(60000.0f);
    x[1] = static_cast<half>(60000.0f);
    x[2] = static_cast<half>(-30000.0f);
    x[3] = static_cast<half>(100.0f);
    auto r = OnAiv<half, half>(x, 16, [&](LocalTensor<half> in, LocalTensor<half> o, LocalTensor<uint8_t> tmpb) {
        ReduceSum(o, in, tmpb.ReinterpretCast<half>(), 4);
    });
    // doc example [P:ReduceSum]: 60000+60000 saturates to 65504, then 65504 + (-29900) -> 35604 in exact
    // arithmetic; in half precision -29900 is 29904 and the sum rounds to 35584.
    float want = static_cast<float>(static_cast<half>(65504.0f + static_cast<float>(static_cast<half>(-29900.0f))));
    EXPECT(static_cast<float>(r[0]) == want, "doc example: %g, want %g", static_cast<float>(r[0]), want);
    return 0;
}

// Row-wise softmax building blocks: WholeReduceMax (ORDER_ONLY_VALUE) per row, Brcb to 32-byte blocks,
// high-dim Sub with src1BlkStride 0 (row broadcast), Exp, WholeReduceSum.
TWIN_TEST(vec_rowwise_highdim)
{
    const uint32_t rows = 8, cols = 64;
    auto x = tt::Rand(rows * cols, -4, 4, 7);
    auto r = OnAiv<float, float>(x, rows * cols + 16, [&](LocalTensor<float> in, LocalTensor<float> o, LocalTensor<uint8_t> tmpb) {
        LocalTensor<float> mx = tmpb.ReinterpretCast<float>();      // 8 row maxima
        LocalTensor<float> bc = tmpb[256].ReinterpretCast<float>();  // 8 blocks of 8 copies
        WholeReduceMax(mx, in, 64, rows, 1, 1, 8, ReduceOrder::ORDER_ONLY_VALUE);
        Brcb(bc, mx, 1, BrcbRepeatParams(1, 8));
        BinaryRepeatParams p(1, 1, 0, 8, 8, 1);  // src1: same block for all 8 blocks of a repeat, next block per repeat
        Sub(o, in, bc, 64, rows, p);
        Exp(o, o, rows * cols);
        WholeReduceSum(o[rows * cols], o, 64, rows, 1, 1, 8);
    });
    for (uint32_t i = 0; i < rows; ++i) {
        float m = -std::numeric_limits<float>::infinity();
        for (uint32_t j = 0; j < cols; ++j) m = std::max(m, x[i * cols + j]);
        std::vector<float> e(cols);
        for (uint32_t j = 0; j < cols; ++j) {
            e[j] = std::exp(x[i * cols + j] - m);
            EXPECT(r[i * cols + j] == e[j], "exp(x-max)[%u,%u] = %g want %g", i, j, r[i * cols + j], e[j]);
        }
        for (size_t w = 64; w > 1; w /= 2)
            for (size_t j = 0; j < w / 2; ++j) e[j] = e[2 * j] + e[2 * j + 1];
        EXPECT(r[rows * cols + i] == e[0], "row sum %u: %g want %g", i, r[rows * cols + i], e[0]);
    }
    return 0;
}

TWIN_TEST(vec_compare_select)
{
    const uint32_t n = 128;
    auto x = tt::Rand(n, -1, 1, 8);
    auto hx = tt::To<half>(x);
    auto r = OnAiv<half, half>(hx, 3 * n, [&](LocalTensor<half> in, LocalTensor<half> o, LocalTensor<uint8_t> tmpb) {
        LocalTensor<uint8_t> bits = tmpb;
        Compares(bits, in, static_cast<half>(0.0f), CMPMODE::GT, n);  // 128 halves = 256 bytes
        Select(o, bits, in, static_cast<half>(-9.0f), SELMODE::VSEL_TENSOR_SCALAR_MODE, n);
        LocalTensor<half> neg = tmpb[256].ReinterpretCast<half>();
        Muls(neg, in, static_cast<half>(-1.0f), n);
        Select(o[n], bits, in, neg, SELMODE::VSEL_TENSOR_TENSOR_MODE, n);  // |x|
        // expose the raw bit mask as halves for the host check
        LocalTensor<half> raw = o[2 * n];
        DataCopy(raw, bits.ReinterpretCast<half>(), 128);
    });
    const uint8_t* bits = reinterpret_cast<const uint8_t*>(&r[2 * n]);
    for (uint32_t i = 0; i < n; ++i) {
        float xi = static_cast<float>(hx[i]);
        bool gt = xi > 0;
        EXPECT(((bits[i / 8] >> (i % 8)) & 1) == gt, "bit %u", i);
        EXPECT(static_cast<float>(r[i]) == (gt ? xi : -9.0f), "Select1[%u]", i);
        EXPECT(static_cast<float>(r[n + i]) == std::fabs(xi), "Select2[%u] = %g", i, static_cast<float>(r[n + i]));
    }
    return 0;
}

// DataCopyPad GM -> UB with GM strides and padding, then UB -> GM with strides; checks the UB image too.
TWIN_TEST(datacopypad_strides_padding)
{
    const uint32_t rows = 5, ld = 37, cols = 21;  // 42-byte rows of half: not 32-byte aligned
    std::vector<half> src(rows * ld);
    for (uint32_t i = 0; i < rows * ld; ++i) src[i] = static_cast<half>(static_cast<float>(i));
    tt::Gm<half> gSrc(src, "src"), gOut(rows * ld, "out"), gImg(5 * 32 * 3, "img");
    for (uint32_t i = 0; i < rows * ld; ++i) gOut[i] = static_cast<half>(-1.0f);
    auto k = [&](GM_ADDR s, GM_ADDR o, GM_ADDR img) {
        GlobalTensor<half> S, O, I;
        S.SetGlobalBuffer((__gm__ half*)s, rows * ld);
        O.SetGlobalBuffer((__gm__ half*)o, rows * ld);
        I.SetGlobalBuffer((__gm__ half*)img, 5 * 32 * 3);
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 3 * 5 * 64);
        LocalTensor<half> t = b.Get<half>();
        // (1) left 2 + data 21 + right 3 = 26 halves = 52 B -> 64 B per row, padding value 0.5, dstStride 0
        DataCopyPad(t, S, DataCopyExtParams(rows, cols * 2, (ld - cols) * 2, 0, 0),
                    DataCopyPadExtParams<half>(true, 2, 3, static_cast<half>(0.5f)));
        // (2) no padding, unaligned: dummy = copies of the row's first element; dstStride 1 block
        LocalTensor<half> t2 = t[160];
        DataCopyPad(t2, S, DataCopyExtParams(2, cols * 2, (ld - cols) * 2, 1, 0),
                    DataCopyPadExtParams<half>(false, 0, 0, static_cast<half>(0.0f)));
        SetFlag<HardEvent::MTE2_MTE3>(0);
        WaitFlag<HardEvent::MTE2_MTE3>(0);
        DataCopy(I, t, 5 * 32 * 3);
        // (3) UB -> GM: write rows of (1) starting after the left pad... use an aligned copy of data instead
        LocalTensor<half> t3 = t[320];
        SetFlag<HardEvent::MTE3_MTE2>(0);  // the store of (1)-(2) has read t[320, 480) before (3) rewrites it
        WaitFlag<HardEvent::MTE3_MTE2>(0);
        DataCopyPad(t3, S, DataCopyExtParams(rows, cols * 2, (ld - cols) * 2, 0, 0),
                    DataCopyPadExtParams<half>(false, 0, 0, static_cast<half>(0.0f)));
        SetFlag<HardEvent::MTE2_V>(0);
        WaitFlag<HardEvent::MTE2_V>(0);
        Muls(t3, t3, static_cast<half>(2.0f), rows * 32);
        SetFlag<HardEvent::V_MTE3>(0);
        WaitFlag<HardEvent::V_MTE3>(0);
        DataCopyPad(O, t3, DataCopyExtParams(rows, cols * 2, 0, (ld - cols) * 2, 0));
    };
    twin::LaunchAiv(1, k, gSrc.addr(), gOut.addr(), gImg.addr());
    for (uint32_t r = 0; r < rows; ++r) {
        const half* row = &gImg[r * 32];
        EXPECT(static_cast<float>(row[0]) == 0.5f && static_cast<float>(row[1]) == 0.5f, "left pad row %u", r);
        for (uint32_t c = 0; c < cols; ++c)
            EXPECT(static_cast<float>(row[2 + c]) == static_cast<float>(r * ld + c), "data row %u col %u", r, c);
        for (uint32_t c = 2 + cols; c < 32; ++c) EXPECT(static_cast<float>(row[c]) == 0.5f, "right pad/dummy row %u col %u", r, c);
    }
    for (uint32_t r = 0; r < 2; ++r) {
        const half* row = &gImg[160 + r * 48];  // footprint 64 B = 32 halves + 1 gap block = 48 halves per burst
        for (uint32_t c = 0; c < cols; ++c)
            EXPECT(static_cast<float>(row[c]) == static_cast<float>(r * ld + c), "(2) data row %u col %u", r, c);
        for (uint32_t c = cols; c < 32; ++c)
            EXPECT(static_cast<float>(row[c]) == static_cast<float>(r * ld), "(2) dummy row %u col %u = %g", r, c,
                   static_cast<float>(row[c]));
    }
    for (uint32_t r = 0; r < rows; ++r)
        for (uint32_t c = 0; c < ld; ++c) {
            float want = c < cols ? 2.0f * static_cast<float>(r * ld + c) : -1.0f;
            EXPECT(static_cast<float>(gOut[r * ld + c]) == want, "out[%u,%u] = %g want %g", r, c,
                   static_cast<float>(gOut[r * ld + c]), want);
        }
    return 0;
}

// New local buffers are NaN-poisoned: reading memory nothing wrote shows up as NaN in the output.
TWIN_TEST(poison_reads_nan)
{
    tt::Gm<float> out(64);
    out.zero();
    auto k = [&](GM_ADDR o) {
        GlobalTensor<float> O;
        O.SetGlobalBuffer((__gm__ float*)o, 64);
        TPipe pipe;
        TQue<TPosition::VECOUT, 1> q;
        pipe.InitBuffer(q, 1, 64 * sizeof(float));
        LocalTensor<float> t = q.AllocTensor<float>();
        Duplicate(t, 1.0f, 32);  // only the first half is written
        q.EnQue(t);
        t = q.DeQue<float>();
        DataCopy(O, t, 64);
        q.FreeTensor(t);
    };
    twin::LaunchAiv(1, k, out.addr());
    for (int i = 0; i < 32; ++i) EXPECT(out[i] == 1.0f, "written part");
    for (int i = 32; i < 64; ++i) EXPECT(std::isnan(out[i]), "unwritten element %d = %g is not NaN", i, out[i]);
    // GM from GmAlloc is poisoned too
    tt::Gm<half> g(4);
    EXPECT(std::isnan(static_cast<float>(g[0])), "fresh GM is not NaN");
    tt::Gm<bfloat16_t> gb(4);
    EXPECT(std::isnan(static_cast<float>(gb[0])), "fresh GM bf16 is not NaN");
    return 0;
}

TWIN_TEST(identity_and_kernel_type)
{
    const int N = 3;
    tt::Gm<int32_t> ids(N * 3 * 8);
    ids.zero();
    auto k = [&](GM_ADDR p) {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
        GlobalTensor<int32_t> G;
        G.SetGlobalBuffer((__gm__ int32_t*)p, N * 3 * 8);
        int slot = static_cast<int>(GetBlockIdx() / GetTaskRatio()) * 3;  // ASCEND_IS_AIC is only valid after `if`
        if ASCEND_IS_AIV {
            slot += 1 + static_cast<int>(GetSubBlockIdx());
        }
        G.SetValue(slot * 8 + 0, static_cast<int32_t>(GetBlockIdx()));
        G.SetValue(slot * 8 + 1, static_cast<int32_t>(GetBlockNum()));
        G.SetValue(slot * 8 + 2, static_cast<int32_t>(GetSubBlockIdx()));
        G.SetValue(slot * 8 + 3, static_cast<int32_t>(GetSubBlockNum()));
        G.SetValue(slot * 8 + 4, static_cast<int32_t>(GetTaskRatio()));
        G.SetValue(slot * 8 + 5, g_coreType == AscendC::AIC ? 1 : 2);
    };
    twin::LaunchMix(N, k, ids.addr());
    for (int b = 0; b < N; ++b) {
        int32_t* c = &ids[(b * 3) * 8];
        EXPECT(c[0] == b && c[1] == N && c[2] == 0 && c[3] == 1 && c[4] == 1 && c[5] == 1, "AIC %d: %d %d %d %d %d", b, c[0], c[1],
               c[2], c[3], c[4]);
        for (int s = 0; s < 2; ++s) {
            int32_t* v = &ids[(b * 3 + 1 + s) * 8];
            EXPECT(v[0] == 2 * b + s && v[1] == N && v[2] == s && v[3] == 2 && v[4] == 2 && v[5] == 2, "AIV %d.%d: %d %d %d %d %d", b,
                   s, v[0], v[1], v[2], v[3], v[4]);
        }
    }
    return 0;
}

// DataCopy with DataCopyParams: gaps in 32-byte blocks on both sides (GM too).
TWIN_TEST(datacopy_params_gaps)
{
    std::vector<float> src(64);
    for (int i = 0; i < 64; ++i) src[i] = static_cast<float>(i);
    tt::Gm<float> g(src), o(64);
    o.zero();
    auto k = [&](GM_ADDR s, GM_ADDR d) {
        GlobalTensor<float> S, D;
        S.SetGlobalBuffer((__gm__ float*)s, 64);
        D.SetGlobalBuffer((__gm__ float*)d, 64);
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 64 * sizeof(float));
        LocalTensor<float> t = q.AllocTensor<float>();
        Duplicate(t, -1.0f, 64);
        SetFlag<HardEvent::V_MTE2>(0);
        WaitFlag<HardEvent::V_MTE2>(0);
        DataCopy(t, S, DataCopyParams(3, 1, 1, 0));  // blocks 0, 2, 4 of GM -> UB blocks 0, 1, 2
        q.EnQue(t);
        t = q.DeQue<float>();
        DataCopy(D, t, DataCopyParams(2, 1, 1, 2));  // UB blocks 0, 2 -> GM blocks 0, 3
        q.FreeTensor(t);
    };
    twin::LaunchAiv(1, k, g.addr(), o.addr());
    for (int i = 0; i < 64; ++i) {
        float want = 0.0f;
        if (i < 8) want = static_cast<float>(i);                 // GM block 0 <- UB block 0 <- GM block 0
        else if (i >= 24 && i < 32) want = static_cast<float>(i - 24 + 32);  // GM block 3 <- UB block 2 <- GM block 4
        EXPECT(o[i] == want, "out[%d] = %g want %g", i, o[i], want);
    }
    return 0;
}

// TPipe: InitBuffer rounds to 32 B and allocates in call order; Destroy/Reset let a new layout start at 0.
TWIN_TEST(pipe_layout_destroy_reset)
{
    tt::Gm<int64_t> addrs(8);
    auto k = [&](GM_ADDR p) {
        GlobalTensor<int64_t> A;
        A.SetGlobalBuffer((__gm__ int64_t*)p, 8);
        {
            TPipe pipe;
            TQue<TPosition::VECIN, 2> q;
            TBuf<TPosition::VECCALC> b;
            pipe.InitBuffer(q, 2, 33);  // 2 x 64 B
            pipe.InitBuffer(b, 100);    // 128 B at offset 128
            LocalTensor<float> x = q.AllocTensor<float>();
            LocalTensor<float> y = q.AllocTensor<float>();
            LocalTensor<float> z = b.Get<float>();
            uint8_t* base = reinterpret_cast<uint8_t*>(x.GetPhyAddr());
            A.SetValue(0, reinterpret_cast<uint8_t*>(y.GetPhyAddr()) - base);
            A.SetValue(1, reinterpret_cast<uint8_t*>(z.GetPhyAddr()) - base);
            A.SetValue(2, static_cast<int64_t>(x.GetSize()));
            A.SetValue(3, static_cast<int64_t>(z.GetSize()));
            q.FreeTensor(x);
            q.FreeTensor(y);
            pipe.Reset();
            TBuf<TPosition::VECCALC> all;
            pipe.InitBuffer(all, 184 * 1024);  // whole layout restarts at 0
            A.SetValue(4, reinterpret_cast<uint8_t*>(all.Get<float>().GetPhyAddr()) - base);
            pipe.Destroy();
        }
        TPipe pipe2;  // a second TPipe after Destroy
        TBuf<TPosition::VECCALC> all2;
        pipe2.InitBuffer(all2, 192 * 1024);
        A.SetValue(5, static_cast<int64_t>(all2.Get<uint8_t>().GetSize()));
    };
    twin::LaunchAiv(1, k, addrs.addr());
    EXPECT(addrs[0] == 64 && addrs[1] == 128 && addrs[2] == 16 && addrs[3] == 32, "layout %lld %lld %lld %lld",
           (long long)addrs[0], (long long)addrs[1], (long long)addrs[2], (long long)addrs[3]);
    EXPECT(addrs[4] == 0 && addrs[5] == 192 * 1024, "reset/destroy %lld %lld", (long long)addrs[4], (long long)addrs[5]);
    return 0;
}

// The remaining element-wise ops, Compare (tensor-tensor), Select mode 0, a bitwise-mask high-dim call
// (masked lanes keep the old dst) and isSetMask=false with the counter-mode mask register.
TWIN_TEST(vec_misc_masks)
{
    const uint32_t n = 64;
    auto a = tt::Rand(n, 0.25f, 4.0f, 9);
    std::vector<float> in(a);
    for (uint32_t i = 0; i < n; ++i) in.push_back(i % 3 == 0 ? -a[i] : a[i]);  // b at 64: mixed signs
    auto r = OnAiv<float, float>(in, 12 * n, [&](LocalTensor<float> x, LocalTensor<float> o, LocalTensor<uint8_t> tmpb) {
        LocalTensor<float> A = x, B = x[n];
        Sqrt(o, A, n);
        Reciprocal(o[n], A, n);
        Abs(o[2 * n], B, n);
        Relu(o[3 * n], B, n);
        Mins(o[4 * n], B, 1.0f, n);
        LocalTensor<uint8_t> bits = tmpb;
        Compare(bits, A, B, CMPMODE::EQ, n);                                    // 64 floats = 256 bytes
        Select(o[5 * n], bits, A, B, SELMODE::VSEL_CMPMASK_SPR, n);  // == ? A : B
        // bitwise mask: only even lanes of o[6n..7n) get A+B, odd lanes keep 7
        Duplicate(o[6 * n], 7.0f, n);
        uint64_t mask[2] = {0x5555555555555555ull, 0};
        Add(o[6 * n], A, B, mask, 1, BinaryRepeatParams());
        // counter mode through the mask register: first 40 lanes of o[7n..8n) = A*B, rest keep 0
        Duplicate(o[7 * n], 0.0f, n);
        SetMaskCount();
        SetVectorMask<float, MaskMode::COUNTER>(0, 40);
        Mul<float, false>(o[7 * n], A, B, MASK_PLACEHOLDER, 1, BinaryRepeatParams());
        SetMaskNorm();
        ResetMask();
        // continuous mask 10 on 2 repeats with dst/src rep strides of 8 blocks
        Duplicate(o[8 * n], -1.0f, 2 * n);
        Adds(o[8 * n], x, 100.0f, 10, 2, UnaryRepeatParams(1, 1, 8, 8));
    });
    for (uint32_t i = 0; i < n; ++i) {
        float b = in[n + i];
        EXPECT(r[i] == std::sqrt(a[i]), "Sqrt");
        EXPECT(r[n + i] == 1.0f / a[i], "Reciprocal");
        EXPECT(r[2 * n + i] == std::fabs(b), "Abs");
        EXPECT(r[3 * n + i] == std::max(b, 0.0f), "Relu");
        EXPECT(r[4 * n + i] == std::min(b, 1.0f), "Mins");
        EXPECT(r[5 * n + i] == (a[i] == b ? a[i] : b), "Select mode 0 [%u]", i);
        EXPECT(r[6 * n + i] == (i % 2 == 0 ? a[i] + b : 7.0f), "bitwise mask [%u] = %g", i, r[6 * n + i]);
        EXPECT(r[7 * n + i] == (i < 40 ? a[i] * b : 0.0f), "counter mask [%u] = %g", i, r[7 * n + i]);
    }
    for (uint32_t i = 0; i < 2 * n; ++i)
        EXPECT(r[8 * n + i] == ((i % 64) < 10 ? in[i] + 100.0f : -1.0f), "continuous mask [%u] = %g", i, r[8 * n + i]);
    return 0;
}

// Pipe ordering (order.h): what orders one pipe after another. A chain MTE2 -> S -> V, PipeBarrier<PIPE_ALL>,
// an explicit MTE3 -> MTE2 pair and a TQue's EnQue/DeQue and FreeTensor/AllocTensor hand-overs each let the
// next pipe touch the tile; the values prove the order the twin ran them in.
TWIN_TEST(order_chains_and_handovers)
{
    std::vector<float> src(128);
    for (int i = 0; i < 128; ++i) src[i] = static_cast<float>(i);
    tt::Gm<float> g(src, "src"), o(192, "out");
    auto k = [&](GM_ADDR s, GM_ADDR d) {
        GlobalTensor<float> S, D;
        S.SetGlobalBuffer((__gm__ float*)s, 128);
        D.SetGlobalBuffer((__gm__ float*)d, 192);
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(b, 128 * sizeof(float));
        pipe.InitBuffer(q, 1, 64 * sizeof(float));
        LocalTensor<float> t = b.Get<float>(), u = t[64];
        DataCopy(t, S, 64);                 // MTE2 writes t
        SetFlag<HardEvent::MTE2_S>(0);      // MTE2 -> S -> V: V is ordered after the copy
        WaitFlag<HardEvent::MTE2_S>(0);
        SetFlag<HardEvent::S_V>(0);
        WaitFlag<HardEvent::S_V>(0);
        Muls(u, t, 2.0f, 64);               // V reads t, writes u
        PipeBarrier<PIPE_ALL>();            // every pipe after the Muls
        DataCopy(D, u, 64);                 // MTE3 reads u
        SetFlag<HardEvent::MTE3_MTE2>(0);
        WaitFlag<HardEvent::MTE3_MTE2>(0);
        DataCopy(u, S[64], 64);             // MTE2 rewrites u after the store read it
        SetFlag<HardEvent::MTE2_MTE3>(0);
        WaitFlag<HardEvent::MTE2_MTE3>(0);
        DataCopy(D[64], u, 64);
        for (int r = 0; r < 2; ++r) {       // queue hand-overs only: no explicit flag
            LocalTensor<float> x = q.AllocTensor<float>();
            DataCopy(x, S[64 * r], 64);     // MTE2 rewrites what the last round's Adds read (FreeTensor -> AllocTensor)
            q.EnQue(x);
            x = q.DeQue<float>();
            Adds(x, x, 1.0f, 64);           // V after the copy (EnQue -> DeQue)
            q.EnQue(x);
            x = q.DeQue<float>();
            if (r == 1) DataCopy(D[128], x, 64);  // MTE3 after the Adds (EnQue -> DeQue)
            q.FreeTensor(x);
        }
    };
    twin::LaunchAiv(1, k, g.addr(), o.addr());
    for (int i = 0; i < 64; ++i) {
        EXPECT(o[i] == 2.0f * i, "out[%d] = %g", i, o[i]);
        EXPECT(o[64 + i] == static_cast<float>(64 + i), "out[%d] = %g", 64 + i, o[64 + i]);
        EXPECT(o[128 + i] == static_cast<float>(64 + i) + 1.0f, "out[%d] = %g", 128 + i, o[128 + i]);
    }
    return 0;
}
