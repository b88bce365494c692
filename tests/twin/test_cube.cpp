// Positive cube-path tests: GM ND -Nd2Nz-> L1 -LoadData-> L0A/L0B -Mmad-> L0C -Fixpipe-> GM equals a
// plain float matmul, for half/bf16/float, with and without transposed operands, odd sizes.
#include "common.h"

namespace {

constexpr uint32_t Ceil16(uint32_t x) { return (x + 15) / 16 * 16; }

// A is [M,K] (aT=false) or stored as A^T [K,M] (aT=true); B is [K,N] (bT=false) or stored as B^T [N,K].
template <typename T, typename Out>
struct MatmulKernel {
    uint32_t M, N, K;
    bool aT, bT;
    void operator()(GM_ADDR a, GM_ADDR b, GM_ADDR c) const
    {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
        if ASCEND_IS_AIV {
            return;  // cube-only test
        }
        constexpr uint32_t C0 = 32 / sizeof(T);
        const uint32_t Mp = Ceil16(M), Np = Ceil16(N), Kp = (K + C0 - 1) / C0 * C0;
        const uint32_t Kp16 = Ceil16(K);
        const uint32_t Mfr = Mp / 16, Nfr = Np / 16, K1 = Kp / C0;
        GlobalTensor<T> gA, gB;
        GlobalTensor<Out> gC;
        gA.SetGlobalBuffer((__gm__ T*)a, M * K);
        gB.SetGlobalBuffer((__gm__ T*)b, K * N);
        gC.SetGlobalBuffer((__gm__ Out*)c, M * N);
        TPipe pipe;
        TQue<TPosition::A1, 1> qA1;
        TQue<TPosition::B1, 1> qB1;
        TQue<TPosition::A2, 1> qA2;
        TQue<TPosition::B2, 1> qB2;
        TQue<TPosition::CO1, 1> qC;
        // L1 tiles hold whole fractals; a transposed operand is padded to 16 in its K rows too.
        pipe.InitBuffer(qA1, 1, (aT ? Kp16 * Mp : Mp * Kp) * sizeof(T));
        pipe.InitBuffer(qB1, 1, (bT ? Np * Kp : Kp16 * Np) * sizeof(T));
        pipe.InitBuffer(qA2, 1, Mp * Kp * sizeof(T));
        pipe.InitBuffer(qB2, 1, Kp * Np * sizeof(T));
        pipe.InitBuffer(qC, 1, Mp * Np * sizeof(float));

        LocalTensor<T> a1 = qA1.AllocTensor<T>();
        LocalTensor<T> b1 = qB1.AllocTensor<T>();
        const bool gemv = M == 1 && !aT;  // GEMV: A is one row, kept ND (contiguous) through L1 and L0A
        if (gemv) DataCopy(a1, gA, Nd2NzParams(1, 1, K, 0, K, 1, 1, 0));       // dstNzC0Stride 1: ND row
        else if (!aT) DataCopy(a1, gA, Nd2NzParams(1, M, K, 0, K, Mp, 1, 0));  // A NZ, Rpad = Mp
        else DataCopy(a1, gA, Nd2NzParams(1, K, M, 0, M, Kp16, 1, 0));         // A^T NZ, Rpad = Kp16
        if (!bT) DataCopy(b1, gB, Nd2NzParams(1, K, N, 0, N, Kp16, 1, 0));     // B NZ, Rpad = Kp16
        else DataCopy(b1, gB, Nd2NzParams(1, N, K, 0, K, Np, 1, 0));           // B^T NZ, Rpad = Np
        qA1.EnQue(a1);
        qB1.EnQue(b1);
        a1 = qA1.DeQue<T>();
        b1 = qB1.DeQue<T>();
        SetFlag<HardEvent::MTE2_MTE1>(0);
        WaitFlag<HardEvent::MTE2_MTE1>(0);

        LocalTensor<T> a2 = qA2.AllocTensor<T>();
        LocalTensor<T> b2 = qB2.AllocTensor<T>();
        if (gemv) {  // the row as whole 512-byte fractals, copied in order (mmad_gemv example of the devkit)
            LoadData(a2, a1, LoadData2DParams(0, (K * sizeof(T) + 511) / 512, 1, 0, 0, false, 0));
        } else if (!aT) {
            for (uint32_t i = 0; i < Mfr; ++i) {  // NZ -> ZZ: one M-fractal row per call
                LoadData2DParams p;
                p.startIndex = i;
                p.repeatTimes = K1;
                p.srcStride = Mfr;
                LoadData(a2[i * K1 * 16 * C0], a1, p);
            }
        } else {  // A^T NZ already has ZZ fractal order; transpose each fractal
            LoadData(a2, a1, LoadData2DParams(0, Mfr * K1, 1, 0, 0, true, 0));
        }
        if (!bT) {
            for (uint32_t kb = 0; kb < K1; ++kb) {  // NZ -> ZN: transpose each fractal
                LoadData2DParams p;
                p.startIndex = kb;
                p.repeatTimes = Nfr;
                p.srcStride = Kp16 / 16;
                p.ifTranspose = true;
                LoadData(b2[kb * Nfr * 16 * C0], b1, p);
            }
        } else {  // B^T NZ == ZN
            LoadData(b2, b1, LoadData2DParams(0, K1 * Nfr, 1, 0, 0, false, 0));
        }
        qA1.FreeTensor(a1);
        qB1.FreeTensor(b1);
        SetFlag<HardEvent::MTE1_M>(0);
        WaitFlag<HardEvent::MTE1_M>(0);

        LocalTensor<float> c1 = qC.AllocTensor<float>();
        Mmad(c1, a2, b2, MmadParams(M, N, K, 0, false, true));
        qA2.FreeTensor(a2);
        qB2.FreeTensor(b2);
        SetFlag<HardEvent::M_FIX>(0);
        WaitFlag<HardEvent::M_FIX>(0);
        FixpipeParamsV220 fp(N, M, Mp, N, false);
        if constexpr (std::is_same_v<Out, half>) fp.quantPre = QuantMode_t::F322F16;
        else if constexpr (std::is_same_v<Out, bfloat16_t>) fp.quantPre = QuantMode_t::F322BF16;
        Fixpipe<Out, float, CFG_ROW_MAJOR>(gC, c1, fp);
        qC.FreeTensor(c1);
        pipe.Destroy();
    }
};

template <typename T, typename Out>
int RunMatmul(uint32_t M, uint32_t N, uint32_t K, bool aT, bool bT, unsigned seed)
{
    auto af = tt::Rand(M * K, -1, 1, seed), bf = tt::Rand(K * N, -1, 1, seed + 1);
    auto aq = tt::To<T>(af), bq = tt::To<T>(bf);
    // storage order as the kernel expects
    std::vector<T> aS(M * K), bS(K * N);
    for (uint32_t m = 0; m < M; ++m)
        for (uint32_t k = 0; k < K; ++k) (aT ? aS[k * M + m] : aS[m * K + k]) = aq[m * K + k];
    for (uint32_t k = 0; k < K; ++k)
        for (uint32_t n = 0; n < N; ++n) (bT ? bS[n * K + k] : bS[k * N + n]) = bq[k * N + n];
    tt::Gm<T> gA(aS, "A"), gB(bS, "B");
    tt::Gm<Out> gC(M * N, "C");
    twin::LaunchMix(1, MatmulKernel<T, Out>{M, N, K, aT, bT}, gA.addr(), gB.addr(), gC.addr());
    for (uint32_t m = 0; m < M; ++m)
        for (uint32_t n = 0; n < N; ++n) {
            float ref = 0;
            for (uint32_t k = 0; k < K; ++k) ref += static_cast<float>(aq[m * K + k]) * static_cast<float>(bq[k * N + n]);
            float refq = static_cast<float>(static_cast<Out>(ref));
            float got = static_cast<float>(gC[m * N + n]);
            EXPECT(tt::Close(got, refq, 1e-2f, 1e-3f), "C[%u,%u] = %g, want %g (M=%u N=%u K=%u aT=%d bT=%d)", m, n, got,
                   refq, M, N, K, aT, bT);
        }
    return 0;
}

}  // namespace

TWIN_TEST(cube_half_plain) { return RunMatmul<half, float>(32, 48, 64, false, false, 1); }
TWIN_TEST(cube_half_odd) { return RunMatmul<half, float>(30, 40, 70, false, false, 2); }
TWIN_TEST(cube_half_odd2) { return RunMatmul<half, half>(17, 50, 33, false, false, 3); }
TWIN_TEST(cube_half_bT) { return RunMatmul<half, float>(30, 40, 70, false, true, 4); }
TWIN_TEST(cube_half_aT) { return RunMatmul<half, float>(30, 40, 70, true, false, 5); }
TWIN_TEST(cube_half_aT_bT) { return RunMatmul<half, half>(45, 19, 37, true, true, 6); }
TWIN_TEST(cube_bf16_plain) { return RunMatmul<bfloat16_t, float>(32, 32, 48, false, false, 7); }
TWIN_TEST(cube_bf16_odd) { return RunMatmul<bfloat16_t, bfloat16_t>(30, 40, 70, false, false, 8); }
TWIN_TEST(cube_bf16_bT) { return RunMatmul<bfloat16_t, float>(33, 17, 50, false, true, 9); }
TWIN_TEST(cube_bf16_aT) { return RunMatmul<bfloat16_t, half>(20, 64, 24, true, false, 10); }
TWIN_TEST(cube_float_bT) { return RunMatmul<float, float>(30, 20, 37, false, true, 11); }
// m = 1 is GEMV: Mmad reads L0A as ND [P:Mmad, Z:.../Mmad计算/关键特性说明/GEMV]; the twin must compute it.
TWIN_TEST(cube_gemv_half) { return RunMatmul<half, float>(1, 40, 300, false, false, 12); }
TWIN_TEST(cube_gemv_bf16_bT) { return RunMatmul<bfloat16_t, bfloat16_t>(1, 16, 64, false, true, 13); }

// Accumulation across two Mmad calls (cmatrixInitVal=false) and the L0C result layout, checked directly.
TWIN_TEST(cube_accumulate)
{
    const uint32_t M = 16, N = 16, K = 16;
    std::vector<float> af = tt::Rand(M * K, -1, 1, 20), bf = tt::Rand(K * N, -1, 1, 21);
    tt::Gm<half> gA(tt::To<half>(af)), gB(tt::To<half>(bf));
    tt::Gm<float> gC(M * N);
    auto k = [&](GM_ADDR a, GM_ADDR b, GM_ADDR c) {
        if ASCEND_IS_AIC {
            GlobalTensor<half> A, B;
            GlobalTensor<float> C;
            A.SetGlobalBuffer((__gm__ half*)a, M * K);
            B.SetGlobalBuffer((__gm__ half*)b, K * N);
            C.SetGlobalBuffer((__gm__ float*)c, M * N);
            TPipe pipe;
            TBuf<TPosition::A1> l1a;
            TBuf<TPosition::B1> l1b;
            TBuf<TPosition::A2> l0a;
            TBuf<TPosition::B2> l0b;
            TBuf<TPosition::CO1> l0c;
            pipe.InitBuffer(l1a, 512);
            pipe.InitBuffer(l1b, 512);
            pipe.InitBuffer(l0a, 512);
            pipe.InitBuffer(l0b, 512);
            pipe.InitBuffer(l0c, 1024);
            auto A1 = l1a.Get<half>(), B1 = l1b.Get<half>();
            auto A2 = l0a.Get<half>(), B2 = l0b.Get<half>();
            auto C1 = l0c.Get<float>();
            DataCopy(A1, A, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 0));
            DataCopy(B1, B, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 0));
            SetFlag<HardEvent::MTE2_MTE1>(0);
            WaitFlag<HardEvent::MTE2_MTE1>(0);
            LoadData(A2, A1, LoadData2DParams(0, 1, 0, 0, 0, false, 0));
            LoadData(B2, B1, LoadData2DParams(0, 1, 0, 0, 0, true, 0));
            SetFlag<HardEvent::MTE1_M>(0);
            WaitFlag<HardEvent::MTE1_M>(0);
            Mmad(C1, A2, B2, MmadParams(16, 16, 16, 0, false, true));
            Mmad(C1, A2, B2, MmadParams(16, 16, 16, 0, false, false));  // C += A*B
            SetFlag<HardEvent::M_FIX>(0);
            WaitFlag<HardEvent::M_FIX>(0);
            Fixpipe(C, C1, FixpipeParamsV220(16, 16, 16, 16, false));
        }
    };
    twin::LaunchMix(1, k, gA.addr(), gB.addr(), gC.addr());
    for (uint32_t m = 0; m < M; ++m)
        for (uint32_t n = 0; n < N; ++n) {
            float ref = 0;
            for (uint32_t kk = 0; kk < K; ++kk)
                ref += static_cast<float>(gA[m * K + kk]) * static_cast<float>(gB[kk * N + n]);
            EXPECT(tt::Close(gC[m * N + n], 2 * ref, 1e-5f, 1e-5f), "C[%u,%u]=%g want %g", m, n, gC[m * N + n], 2 * ref);
        }
    return 0;
}

// Fill with blockNum = 0 is a NOP (Fill.md: "当repeatTimes为0或者blockNum为0时，指令不会进行任何操作"): the
// two-argument InitConstValueParams(repeatTimes, value) leaves blockNum = 0, so nothing is filled and the
// poison stays.
TWIN_TEST(cube_fill_blocknum0_is_nop)
{
    tt::Gm<half> out(512, "out");
    auto k = [&](GM_ADDR o) {
        if ASCEND_IS_AIC {
            GlobalTensor<half> O;
            O.SetGlobalBuffer((__gm__ half*)o, 512);
            TPipe pipe;
            TBuf<TPosition::A1> l1;
            pipe.InitBuffer(l1, 1024);
            LocalTensor<half> t = l1.Get<half>();
            InitConstValue(t, InitConstValueParams<half>(2, static_cast<half>(1.0f)));  // blockNum = 0
            Fill(t, InitConstValueParams<half>(0, 4, 0, static_cast<half>(1.0f)));      // repeatTimes = 0
            DataCopy(O, t, 512);
        }
    };
    twin::LaunchMix(1, k, out.addr());
    for (int i = 0; i < 512; ++i) EXPECT(std::isnan(static_cast<float>(out[i])), "element %d = %g should still be poison", i, static_cast<float>(out[i]));
    return 0;
}

// Fill on L1 and L0A, then L1 -> GM DataCopy (an AIC store path) to observe the contents.
TWIN_TEST(cube_initconst_l1_to_gm)
{
    tt::Gm<half> out(512, "out");
    auto k = [&](GM_ADDR o) {
        if ASCEND_IS_AIC {
            GlobalTensor<half> O;
            O.SetGlobalBuffer((__gm__ half*)o, 512);
            TPipe pipe;
            TBuf<TPosition::A1> l1;
            TBuf<TPosition::A2> l0;
            pipe.InitBuffer(l1, 1024);
            pipe.InitBuffer(l0, 1024);
            LocalTensor<half> t = l1.Get<half>();
            Fill(t, InitConstValueParams<half>(2, 4, 4, static_cast<half>(3.0f)));  // 2 x (4 blocks + 4 gap) x 32 B
            Fill(l0.Get<half>(), InitConstValueParams<half>(1, 2, 0, static_cast<half>(0.0f)));  // 2 x 512 B of L0A
            SetFlag<HardEvent::MTE2_MTE3>(0);  // the L1 fill (MTE2) before the store reads it (MTE3)
            WaitFlag<HardEvent::MTE2_MTE3>(0);
            DataCopy(O, t, 512);
        }
    };
    twin::LaunchMix(1, k, out.addr());
    for (int i = 0; i < 512; ++i) {
        bool filled = (i % 128) < 64 && i < 256;
        float v = static_cast<float>(out[i]);
        if (filled) EXPECT(v == 3.0f, "element %d = %g", i, v);
        else EXPECT(std::isnan(v), "element %d = %g should still be poison", i, v);
    }
    return 0;
}
