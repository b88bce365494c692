// MIX kernels: AIC -> GM workspace -> both AIVs with CrossCoreSetFlag<2>, reverse credits, SyncAll,
// mode 0/1 flags, atomics from many cores, throw mode.
#include "common.h"

namespace {
constexpr uint16_t CUBE2VEC = 1;
constexpr uint16_t VEC2CUBE = 2;
constexpr uint32_t T = 32;  // tile edge
}  // namespace

// Per block and tile t: AIC computes S_t = A_t * B (32x32x32 half -> fp32) into workspace slot t%2
// and signals both AIVs; AIV sub s takes rows [16s, 16s+16), writes out = 2*S + 1 and returns the
// slot to the AIC (mode-2 AIV->AIC set, which the AIC sees once both AIVs have set).
extern "C" __global__ __aicore__ void mix_tiles(GM_ADDR a, GM_ADDR b, GM_ADDR ws, GM_ADDR out, uint32_t tiles)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    const uint32_t blk = static_cast<uint32_t>(GetBlockIdx() / GetTaskRatio());
    GlobalTensor<float> W, O;
    W.SetGlobalBuffer((__gm__ float*)ws + blk * 2 * T * T, 2 * T * T);
    O.SetGlobalBuffer((__gm__ float*)out + blk * tiles * T * T, tiles * T * T);
    if ASCEND_IS_AIC {
        GlobalTensor<half> A, B;
        A.SetGlobalBuffer((__gm__ half*)a + blk * tiles * T * T, tiles * T * T);
        B.SetGlobalBuffer((__gm__ half*)b, T * T);
        TPipe pipe;
        TBuf<TPosition::A1> l1a;
        TBuf<TPosition::B1> l1b;
        TQue<TPosition::A2, 1> qa;
        TQue<TPosition::B2, 1> qb;
        TQue<TPosition::CO1, 1> qc;
        pipe.InitBuffer(l1a, T * T * sizeof(half));
        pipe.InitBuffer(l1b, T * T * sizeof(half));
        pipe.InitBuffer(qa, 1, T * T * sizeof(half));
        pipe.InitBuffer(qb, 1, T * T * sizeof(half));
        pipe.InitBuffer(qc, 1, T * T * sizeof(float));
        LocalTensor<half> b1 = l1b.Get<half>();
        DataCopy(b1, B, Nd2NzParams(1, T, T, 0, T, T, 1, 0));
        for (uint32_t t = 0; t < tiles; ++t) {
            if (t >= 2) CrossCoreWaitFlag(VEC2CUBE);  // slot t%2 is free again
            LocalTensor<half> a1 = l1a.Get<half>();
            DataCopy(a1, A[t * T * T], Nd2NzParams(1, T, T, 0, T, T, 1, 0));
            SetFlag<HardEvent::MTE2_MTE1>(0);
            WaitFlag<HardEvent::MTE2_MTE1>(0);
            LocalTensor<half> a2 = qa.AllocTensor<half>();
            LocalTensor<half> b2 = qb.AllocTensor<half>();
            for (uint32_t i = 0; i < 2; ++i) {  // NZ -> ZZ, one 16-row fractal row per call
                LoadData2DParams p;
                p.startIndex = i;
                p.repeatTimes = 2;
                p.srcStride = 2;
                LoadData(a2[i * 2 * 256], a1, p);
            }
            for (uint32_t kb = 0; kb < 2; ++kb) {
                LoadData2DParams p;
                p.startIndex = kb;
                p.repeatTimes = 2;
                p.srcStride = 2;
                p.ifTranspose = true;
                LoadData(b2[kb * 2 * 256], b1, p);
            }
            qa.EnQue(a2);
            qb.EnQue(b2);
            a2 = qa.DeQue<half>();
            b2 = qb.DeQue<half>();
            LocalTensor<float> c = qc.AllocTensor<float>();
            Mmad(c, a2, b2, MmadParams(T, T, T, 0, false, true));
            qa.FreeTensor(a2);
            qb.FreeTensor(b2);
            qc.EnQue(c);
            c = qc.DeQue<float>();
            Fixpipe(W[(t % 2) * T * T], c, FixpipeParamsV220(T, T, T, T, false));
            qc.FreeTensor(c);
            CrossCoreSetFlag<2, PIPE_FIX>(CUBE2VEC);
        }
        for (uint32_t t = 0; t < (tiles < 2 ? tiles : 2); ++t) CrossCoreWaitFlag(VEC2CUBE);
    }
    if ASCEND_IS_AIV {
        const uint32_t sub = static_cast<uint32_t>(GetSubBlockIdx());
        TPipe pipe;
        TQue<TPosition::VECIN, 2> qi;
        TQue<TPosition::VECOUT, 2> qo;
        pipe.InitBuffer(qi, 2, 16 * T * sizeof(float));
        pipe.InitBuffer(qo, 2, 16 * T * sizeof(float));
        for (uint32_t t = 0; t < tiles; ++t) {
            CrossCoreWaitFlag(CUBE2VEC);
            LocalTensor<float> x = qi.AllocTensor<float>();
            DataCopy(x, W[(t % 2) * T * T + sub * 16 * T], 16 * T);
            qi.EnQue(x);
            x = qi.DeQue<float>();
            LocalTensor<float> y = qo.AllocTensor<float>();
            Muls(y, x, 2.0f, 16 * T);
            Adds(y, y, 1.0f, 16 * T);
            qi.FreeTensor(x);
            qo.EnQue(y);
            y = qo.DeQue<float>();
            DataCopy(O[t * T * T + sub * 16 * T], y, 16 * T);
            qo.FreeTensor(y);
            CrossCoreSetFlag<2, PIPE_MTE3>(VEC2CUBE);
        }
    }
}

TWIN_TEST(mix_cube_to_vec)
{
    const uint32_t blocks = 4, tiles = 5;
    auto af = tt::Rand(blocks * tiles * T * T, -1, 1, 30), bf = tt::Rand(T * T, -1, 1, 31);
    tt::Gm<half> A(tt::To<half>(af), "A"), B(tt::To<half>(bf), "B");
    tt::Gm<float> W(blocks * 2 * T * T, "ws"), O(blocks * tiles * T * T, "out");
    twin::LaunchMix(blocks, mix_tiles, A.addr(), B.addr(), W.addr(), O.addr(), tiles);
    for (uint32_t bl = 0; bl < blocks; ++bl)
        for (uint32_t t = 0; t < tiles; ++t)
            for (uint32_t m = 0; m < T; ++m)
                for (uint32_t n = 0; n < T; ++n) {
                    float s = 0;
                    for (uint32_t k = 0; k < T; ++k)
                        s += static_cast<float>(A[((bl * tiles + t) * T + m) * T + k]) * static_cast<float>(B[k * T + n]);
                    float want = 2 * s + 1;
                    float got = O[((bl * tiles + t) * T + m) * T + n];
                    EXPECT(tt::Close(got, want, 1e-5f, 1e-5f), "block %u tile %u [%u,%u] = %g want %g", bl, t, m, n, got, want);
                }
    return 0;
}

// Atomic accumulation into fp32 GM from every core, many times: AIVs via DataCopy with SetAtomicAdd<float>,
// AICs via Fixpipe with SetAtomicType<float>() only (production FAG pattern).
TWIN_TEST(atomics_many_blocks)
{
    const int N = 8, iters = 50;
    tt::Gm<float> acc(256, "acc");
    acc.zero();
    std::vector<half> ones(256, static_cast<half>(1.0f));
    tt::Gm<half> one(ones, "ones");
    auto k = [&](GM_ADDR accp, GM_ADDR onep) {
        GlobalTensor<float> G;
        G.SetGlobalBuffer((__gm__ float*)accp, 256);
        if ASCEND_IS_AIV {
            TPipe pipe;
            TBuf<TPosition::VECOUT> b;
            pipe.InitBuffer(b, 256 * sizeof(float));
            LocalTensor<float> t = b.Get<float>();
            Duplicate(t, static_cast<float>(GetBlockIdx() + 1), 256);
            SetFlag<HardEvent::V_MTE3>(0);
            WaitFlag<HardEvent::V_MTE3>(0);
            SetAtomicAdd<float>();
            for (int i = 0; i < iters; ++i) DataCopy(G, t, 256);
            DisableDmaAtomic();
        } else {
            GlobalTensor<half> H;
            H.SetGlobalBuffer((__gm__ half*)onep, 256);
            TPipe pipe;
            TBuf<TPosition::A1> a1;
            TBuf<TPosition::A2> a2;
            TBuf<TPosition::B2> b2;
            TBuf<TPosition::CO1> c1;
            pipe.InitBuffer(a1, 512);
            pipe.InitBuffer(a2, 512);
            pipe.InitBuffer(b2, 512);
            pipe.InitBuffer(c1, 1024);
            DataCopy(a1.Get<half>(), H, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 0));
            SetFlag<HardEvent::MTE2_MTE1>(0);
            WaitFlag<HardEvent::MTE2_MTE1>(0);
            LoadData(a2.Get<half>(), a1.Get<half>(), LoadData2DParams(0, 1, 0, 0, 0, false, 0));
            LoadData(b2.Get<half>(), a1.Get<half>(), LoadData2DParams(0, 1, 0, 0, 0, true, 0));
            SetFlag<HardEvent::MTE1_M>(0);
            WaitFlag<HardEvent::MTE1_M>(0);
            Mmad(c1.Get<float>(), a2.Get<half>(), b2.Get<half>(), MmadParams(16, 16, 16, 0, false, true));  // all 16
            SetFlag<HardEvent::M_FIX>(0);
            WaitFlag<HardEvent::M_FIX>(0);
            SetAtomicType<float>();
            for (int i = 0; i < iters; ++i) Fixpipe(G, c1.Get<float>(), FixpipeParamsV220(16, 16, 16, 16, false));
            DisableDmaAtomic();
        }
    };
    twin::LaunchMix(N, k, acc.addr(), one.addr());
    float want = static_cast<float>(iters) * (2 * N * (2 * N + 1) / 2 + 16 * N);
    for (int i = 0; i < 256; ++i) EXPECT(acc[i] == want, "acc[%d] = %g want %g", i, acc[i], want);
    return 0;
}

// SyncAll<true> among AIVs after a zeroing pre-pass, SyncAll<false> among all cores, mode-0 and mode-1 flags.
TWIN_TEST(syncall_and_modes)
{
    const int N = 4;
    tt::Gm<float> buf(2 * N * 8, "buf");  // poisoned (NaN) until the AIVs zero it
    tt::Gm<float> res(N * 8, "res");
    auto k = [&](GM_ADDR bp, GM_ADDR rp) {
        GlobalTensor<float> Bf, R;
        Bf.SetGlobalBuffer((__gm__ float*)bp, 2 * N * 8);
        R.SetGlobalBuffer((__gm__ float*)rp, N * 8);
        if ASCEND_IS_AIV {
            TPipe pipe;
            TBuf<TPosition::VECCALC> b;
            pipe.InitBuffer(b, 2 * N * 8 * sizeof(float));
            LocalTensor<float> t = b.Get<float>();
            Duplicate(t, 0.0f, 8);
            SetFlag<HardEvent::V_MTE3>(0);
            WaitFlag<HardEvent::V_MTE3>(0);
            DataCopy(Bf[GetBlockIdx() * 8], t, 8);  // each AIV zeroes its 32 bytes
            SyncAll<true>();
            Duplicate(t, 1.0f, 2 * N * 8);
            SetFlag<HardEvent::V_MTE3>(0);
            WaitFlag<HardEvent::V_MTE3>(0);
            SetAtomicAdd<float>();
            DataCopy(Bf, t, 2 * N * 8);
            DisableDmaAtomic();
            CrossCoreSetFlag<0, PIPE_MTE3>(5);  // all-AIV barrier through mode 0
            CrossCoreWaitFlag(5);
            CrossCoreSetFlag<1, PIPE_MTE3>(6);  // the two AIVs of the block
            CrossCoreWaitFlag(6);
        }
        SyncAll<false>();
        if ASCEND_IS_AIC {
            CrossCoreSetFlag<0, PIPE_FIX>(4);  // all-AIC barrier through mode 0
            CrossCoreWaitFlag(4);
            for (int i = 0; i < 8; ++i) R.SetValue(GetBlockIdx() * 8 + i, Bf.GetValue(GetBlockIdx() * 8 + i));
        }
    };
    twin::LaunchMix(N, k, buf.addr(), res.addr());
    for (int i = 0; i < N * 8; ++i) EXPECT(res[i] == 2.0f * N, "res[%d] = %g want %g", i, res[i], 2.0f * N);
    return 0;
}

// A vector-only kernel declared MIX_AIV_1_0 (__mix__(0, 1)) has the cross-core scheduler: hard
// SyncAll<true> among its AIVs completes [P:SyncAll, P:CrossCoreSetFlag(ISASI) table 3].
TWIN_TEST(syncall_aiv_mix_1_0)
{
    const int N = 3;
    tt::Gm<float> buf(N * 8, "buf");
    tt::Gm<float> res(N * 8, "res");
    auto k = [&](GM_ADDR bp, GM_ADDR rp) {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
        GlobalTensor<float> Bf, R;
        Bf.SetGlobalBuffer((__gm__ float*)bp, N * 8);
        R.SetGlobalBuffer((__gm__ float*)rp, N * 8);
        const int64_t me = GetBlockIdx(), next = (me + 1) % N;
        for (int i = 0; i < 8; ++i) Bf.SetValue(me * 8 + i, static_cast<float>(me + 1));
        SyncAll<true>();
        for (int i = 0; i < 8; ++i) R.SetValue(me * 8 + i, Bf.GetValue(next * 8 + i));
    };
    twin::LaunchAiv(N, k, buf.addr(), res.addr());
    for (int b = 0; b < N; ++b)
        for (int i = 0; i < 8; ++i)
            EXPECT(res[b * 8 + i] == static_cast<float>((b + 1) % N + 1), "res[%d] = %g", b * 8 + i, res[b * 8 + i]);
    return 0;
}

// Throw mode: a failure becomes a twin::Failure in the launching thread; the twin stays usable.
TWIN_TEST(throw_mode)
{
    twin::SetFailMode(twin::FailMode::Throw);
    bool caught = false;
    try {
        twin::LaunchAiv(2, [] {
            TPipe pipe;
            TQue<TPosition::VECIN, 1> q;
            pipe.InitBuffer(q, 1, 256);
            q.DeQue<float>();
        });
    } catch (const twin::Failure& f) {
        caught = std::string(f.what()).find("twin: TQue::DeQue: DeQue on an empty queue") != std::string::npos;
        if (!caught) std::fprintf(stderr, "message: %s\n", f.what());
    }
    EXPECT(caught, "DeQue failure not thrown");
    caught = false;
    try {
        twin::LaunchMix(2, [] {
            if ASCEND_IS_AIV {
                CrossCoreWaitFlag(3);
            }
        });
    } catch (const twin::Failure& f) {
        caught = std::string(f.what()).find("deadlock") != std::string::npos &&
                 std::string(f.what()).find("CrossCoreWaitFlag(flagId=3)") != std::string::npos;
        if (!caught) std::fprintf(stderr, "message: %s\n", f.what());
    }
    EXPECT(caught, "deadlock not thrown");
    tt::Gm<float> g(8);
    twin::LaunchAiv(1, [&](GM_ADDR p) {
        GlobalTensor<float> G;
        G.SetGlobalBuffer((__gm__ float*)p, 8);
        G.SetValue(0, 3.0f);
    }, g.addr());
    EXPECT(g[0] == 3.0f, "launch after failures");
    twin::SetFailMode(twin::FailMode::Abort);
    return 0;
}
