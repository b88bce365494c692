// Negative tests: each must be stopped by the twin with a "twin: <API>: ..." line and a non-zero exit.
// tests/test_twin.py holds the expected message fragment of each. Reaching `return 1` means the
// violation was not caught.
#include "common.h"

namespace {
template <typename F>
void Aiv(F f)
{
    twin::LaunchAiv(1, f);
}
template <typename F>
void Mix(F f, int blocks = 1)
{
    twin::LaunchMix(blocks, f);
}
int NotCaught(const char* what)
{
    std::fprintf(stderr, "NOT CAUGHT: %s\n", what);
    return 1;
}
}  // namespace

// ---- pools ----
TWIN_TEST(neg_ub_overalloc)
{
    Aiv([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> a;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(a, 2, 64 * 1024);
        pipe.InitBuffer(b, 64 * 1024 + 32);  // 192 KiB + 32 B
    });
    return NotCaught("UB over-allocation");
}
TWIN_TEST(neg_l1_overalloc)
{
    Mix([] {
        if ASCEND_IS_AIC {
            TPipe pipe;
            TBuf<TPosition::A1> b;
            pipe.InitBuffer(b, 512 * 1024);  // the top 128 B of L1 are reserved on 2201
        }
    });
    return NotCaught("L1 over-allocation");
}
TWIN_TEST(neg_l0a_overalloc)
{
    Mix([] {
        if ASCEND_IS_AIC {
            TPipe pipe;
            TQue<TPosition::A2, 1> q;
            pipe.InitBuffer(q, 2, 32 * 1024 + 512);
        }
    });
    return NotCaught("L0A over-allocation");
}
TWIN_TEST(neg_l0c_overalloc)
{
    Mix([] {
        if ASCEND_IS_AIC {
            TPipe pipe;
            TQue<TPosition::CO1, 1> q;
            TBuf<TPosition::CO1> b;
            pipe.InitBuffer(q, 1, 128 * 1024);
            pipe.InitBuffer(b, 32);
        }
    });
    return NotCaught("L0C over-allocation");
}
TWIN_TEST(neg_ub_on_aic)
{
    Mix([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 1024);  // unguarded: also runs on the AIC, which has no UB
    });
    return NotCaught("UB InitBuffer on AIC");
}

// ---- alignment and lengths ----
TWIN_TEST(neg_misaligned_vector)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 4096);
        LocalTensor<half> t = b.Get<half>();
        Duplicate(t, static_cast<half>(0.0f), 1024);
        Add(t[512], t[3], t[256], 64);  // t[3] starts 6 bytes into a block
    });
    return NotCaught("misaligned operand");
}
TWIN_TEST(neg_datacopy_len)
{
    tt::Gm<half> g(64);
    Aiv([&] {
        GlobalTensor<half> G;
        G.SetGlobalBuffer((__gm__ half*)g.p, 64);
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 128);
        LocalTensor<half> t = q.AllocTensor<half>();
        DataCopy(t, G, 7);  // 14 bytes
    });
    return NotCaught("DataCopy length not a multiple of 32 B");
}
TWIN_TEST(neg_tensor_overflow)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a, b;
        pipe.InitBuffer(a, 256);
        pipe.InitBuffer(b, 1024);
        LocalTensor<float> x = a.Get<float>(), y = b.Get<float>();
        Duplicate(y, 1.0f, 256);
        Exp(x, y, 128);  // x holds only 64 floats
    });
    return NotCaught("operand longer than its tensor");
}
TWIN_TEST(neg_localtensor_offset)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a;
        pipe.InitBuffer(a, 256);
        LocalTensor<float> x = a.Get<float>();
        LocalTensor<float> y = x[64];  // offset == length
        (void)y;
    });
    return NotCaught("LocalTensor offset past the end");
}
TWIN_TEST(neg_partial_overlap)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a;
        pipe.InitBuffer(a, 4096);
        LocalTensor<float> x = a.Get<float>();
        Duplicate(x, 1.0f, 1024);
        Add(x[8], x, x[512], 256);  // dst shifted by one block against src0
    });
    return NotCaught("partial src/dst overlap");
}
TWIN_TEST(neg_and_int32)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a;
        pipe.InitBuffer(a, 1024);
        LocalTensor<int32_t> x = a.Get<int32_t>();
        Duplicate(x, 3, 256);
        And(x, x, x, 64);  // 32-bit And: the doc asks for int16 halves
    });
    return NotCaught("And on int32");
}
TWIN_TEST(neg_gather_dst_is_src)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a;
        pipe.InitBuffer(a, 1024);
        LocalTensor<float> x = a.Get<float>();
        LocalTensor<uint32_t> off = a.Get<uint32_t>()[128];
        Duplicate(x, 1.0f, 128);
        Duplicate(off, 0u, 64);
        Gather(x, x, off, 0u, 64);
    });
    return NotCaught("Gather with dst == src");
}
TWIN_TEST(neg_gather_misaligned_offset)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a;
        pipe.InitBuffer(a, 2048);
        LocalTensor<float> x = a.Get<float>(128), y = a.Get<float>()[128];
        LocalTensor<uint32_t> off = a.Get<uint32_t>()[256];
        Duplicate(x, 1.0f, 128);
        Duplicate(off, 6u, 64);  // 6 bytes: not a float element
        Gather(y, x, off, 0u, 64);
    });
    return NotCaught("Gather offset not element-aligned");
}

// ---- queues ----
TWIN_TEST(neg_deque_empty)
{
    Aiv([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 2, 256);
        LocalTensor<float> t = q.DeQue<float>();
        (void)t;
    });
    return NotCaught("DeQue on empty queue");
}
TWIN_TEST(neg_double_free)
{
    Aiv([] {
        TPipe pipe;
        TQue<TPosition::VECOUT, 1> q;
        pipe.InitBuffer(q, 1, 256);
        LocalTensor<float> t = q.AllocTensor<float>();
        q.EnQue(t);
        t = q.DeQue<float>();
        q.FreeTensor(t);
        q.FreeTensor(t);
    });
    return NotCaught("double FreeTensor");
}
TWIN_TEST(neg_too_many_buffers)
{
    Aiv([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q1, q2, q3, q4, q5;
        pipe.InitBuffer(q1, 2, 256);
        pipe.InitBuffer(q2, 2, 256);
        pipe.InitBuffer(q3, 2, 256);
        pipe.InitBuffer(q4, 2, 256);
        pipe.InitBuffer(q5, 1, 256);  // 9th VECIN buffer
    });
    return NotCaught("more than 8 queue buffers per TPosition");
}
TWIN_TEST(neg_alloc_exhausted)
{
    Aiv([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 2, 256);
        LocalTensor<float> a = q.AllocTensor<float>();
        LocalTensor<float> b = q.AllocTensor<float>();
        LocalTensor<float> c = q.AllocTensor<float>();  // would spin forever on NPU
        (void)a;
        (void)b;
        (void)c;
    });
    return NotCaught("AllocTensor with no FREE buffer");
}
TWIN_TEST(neg_enque_over_depth)
{
    Aiv([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 2, 256);
        LocalTensor<float> a = q.AllocTensor<float>();
        LocalTensor<float> b = q.AllocTensor<float>();
        q.EnQue(a);
        q.EnQue(b);  // depth 1
    });
    return NotCaught("EnQue beyond depth");
}

// ---- cross-core flags ----
TWIN_TEST(neg_flag_16_pending)
{
    Mix([] {
        if ASCEND_IS_AIC {
            for (int i = 0; i < 16; ++i) CrossCoreSetFlag<2, PIPE_FIX>(0);
        }
    });
    return NotCaught("16 pending sets");
}
TWIN_TEST(neg_flag_never_set)
{
    Mix([] {
        if ASCEND_IS_AIV {
            if (GetSubBlockIdx() == 1) CrossCoreWaitFlag(3);
        }
    }, 2);
    return NotCaught("wait that never completes");
}
TWIN_TEST(neg_flag_id_11)
{
    Mix([] {
        if ASCEND_IS_AIC {
            CrossCoreSetFlag<2, PIPE_FIX>(11);
        }
    });
    return NotCaught("flagId 11");
}
TWIN_TEST(neg_flag_id_16)
{
    Mix([] {
        if ASCEND_IS_AIC {
            CrossCoreSetFlag<2, PIPE_FIX>(16);
        }
    });
    return NotCaught("flagId 16");
}
TWIN_TEST(neg_flag_unwaited)
{
    Mix([] {
        if ASCEND_IS_AIC {
            CrossCoreSetFlag<2, PIPE_FIX>(1);  // nobody waits
        }
    });
    return NotCaught("set never waited");
}
TWIN_TEST(neg_mode0_missing_core)
{
    Mix([] {
        if ASCEND_IS_AIV {
            if (GetBlockIdx() != 3) {  // AIV 3 never joins the mode-0 barrier
                CrossCoreSetFlag<0, PIPE_MTE3>(2);
                CrossCoreWaitFlag(2);
            }
        }
    }, 2);
    return NotCaught("mode-0 barrier with a missing core");
}
// Hard SyncAll in a vector-only kernel that does not declare KERNEL_TYPE_MIX_AIV_1_0: the NPU starts no
// cross-core scheduler for an AIV_ONLY kernel and the barrier never completes [P:CrossCoreSetFlag(ISASI)
// 约束说明, P:SyncAll]; the twin must say so at once (not hang, not complete).
TWIN_TEST(neg_syncall_aiv_only)
{
    twin::LaunchAiv(2, [] { SyncAll<true>(); });
    return NotCaught("hard SyncAll in an AIV_ONLY kernel");
}
// A MIX launch on fewer blocks than the physical cores where one AIV leaves before the barrier: every
// other core waits forever on the NPU; the twin reports the deadlock when the last runnable core stops.
TWIN_TEST(neg_syncall_missing_core)
{
    Mix(
        [] {
            if ASCEND_IS_AIV {
                if (GetBlockIdx() == 3) return;
            }
            SyncAll<false>();
        },
        2);
    return NotCaught("SyncAll<false> with a core that never arrives");
}
// A core that never arrives because it spins (polls GM for a value nobody writes): no core is blocked
// on the twin's flags, so only the wait timeout can end it; with TWIN_WAIT_TIMEOUT_S = 1 it must fail in
// about a second.
TWIN_TEST(neg_syncall_stalled_core)
{
    setenv("TWIN_WAIT_TIMEOUT_S", "1", 1);
    tt::Gm<int32_t> flag(8, "flag");
    flag.zero();
    Mix(
        [&] {
            GlobalTensor<int32_t> F;
            F.SetGlobalBuffer((__gm__ int32_t*)flag.addr(), 8);
            if ASCEND_IS_AIC {
                if (GetBlockIdx() == 1)
                    while (F.GetValue(0) == 0) {
                    }
            }
            SyncAll<false>();
        },
        2);
    return NotCaught("SyncAll<false> with a spinning core");
}
TWIN_TEST(neg_syncall_on_aic)
{
    Mix([] { SyncAll<true>(); });
    return NotCaught("SyncAll<true> on AIC");
}
TWIN_TEST(neg_setflag_unpaired)
{
    Aiv([] { SetFlag<HardEvent::MTE2_V>(0); });
    return NotCaught("SetFlag without WaitFlag");
}
TWIN_TEST(neg_waitflag_unset)
{
    Aiv([] { WaitFlag<HardEvent::V_MTE3>(1); });
    return NotCaught("WaitFlag without SetFlag");
}
TWIN_TEST(neg_pipebarrier_s)
{
    Aiv([] { PipeBarrier<PIPE_S>(); });
    return NotCaught("PipeBarrier<PIPE_S>");
}
TWIN_TEST(neg_event_wrong_core)
{
    Mix([] {
        if ASCEND_IS_AIC {
            SetFlag<HardEvent::MTE2_V>(0);  // no vector pipe on the AIC
            WaitFlag<HardEvent::MTE2_V>(0);
        }
    });
    return NotCaught("vector HardEvent on AIC");
}

// ---- GM ----
TWIN_TEST(neg_gm_oob_read)
{
    tt::Gm<float> g(100);
    Aiv([&] {
        GlobalTensor<float> G;
        G.SetGlobalBuffer((__gm__ float*)g.p, 100);
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 512);
        LocalTensor<float> t = q.AllocTensor<float>();
        DataCopy(t, G[64], 64);  // reads elements [64, 128) of 100
    });
    return NotCaught("GM read out of bounds");
}
TWIN_TEST(neg_gm_oob_write)
{
    tt::Gm<half> g(40);
    Aiv([&] {
        GlobalTensor<half> G;
        G.SetGlobalBuffer((__gm__ half*)g.p, 40);
        TPipe pipe;
        TBuf<TPosition::VECOUT> b;
        pipe.InitBuffer(b, 128);
        LocalTensor<half> t = b.Get<half>();
        Duplicate(t, static_cast<half>(1.0f), 64);
        SetFlag<HardEvent::V_MTE3>(0);
        WaitFlag<HardEvent::V_MTE3>(0);
        DataCopyPad(G[30], t, DataCopyExtParams(1, 20 * sizeof(half), 0, 0, 0));  // [30, 50) of 40
    });
    return NotCaught("GM write out of bounds");
}
TWIN_TEST(neg_gm_scalar_oob)
{
    tt::Gm<int32_t> g(4);
    Mix([&] {
        GlobalTensor<int32_t> G;
        G.SetGlobalBuffer((__gm__ int32_t*)g.p, 4);
        if ASCEND_IS_AIC {
            G.SetValue(4, 1);
        }
    });
    return NotCaught("GM SetValue out of bounds");
}
TWIN_TEST(neg_gm_foreign_pointer)
{
    static float host[64];
    Aiv([] {
        GlobalTensor<float> G;
        G.SetGlobalBuffer(host, 64);
        G.GetValue(0);
    });
    return NotCaught("GM pointer not from GmAlloc");
}
TWIN_TEST(neg_gm_guard)
{
    float* p = static_cast<float*>(twin::GmAlloc(10 * sizeof(float)));
    p[10] = 1.0f;  // host write past the end
    twin::GmFree(p);
    return NotCaught("guard zone overwrite");
}
TWIN_TEST(neg_numblocks)
{
    twin::LaunchMix(25, [] {});
    return NotCaught("numBlocks above the physical AIC count");
}

// ---- core-type guards and dtypes ----
TWIN_TEST(neg_vector_on_aic)
{
    Mix([] {
        if ASCEND_IS_AIC {
            LocalTensor<float> t;
            Add(t, t, t, 64);
        }
    });
    return NotCaught("vector op on AIC");
}
TWIN_TEST(neg_cube_on_aiv)
{
    Mix([] {
        if ASCEND_IS_AIV {
            LocalTensor<float> c;
            LocalTensor<half> a, b;
            Mmad(c, a, b, MmadParams(16, 16, 16, 0, false, true));
        }
    });
    return NotCaught("Mmad on AIV");
}
TWIN_TEST(neg_bf16_arith)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 1024);
        LocalTensor<bfloat16_t> t = b.Get<bfloat16_t>();
        Duplicate(t, bfloat16_t(1.0f), 512);  // legal: Duplicate supports bf16
        Add(t, t, t, 128);                    // illegal on A2
    });
    return NotCaught("bf16 Add");
}
TWIN_TEST(neg_bf16_exp)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 1024);
        LocalTensor<bfloat16_t> t = b.Get<bfloat16_t>();
        Duplicate(t, bfloat16_t(1.0f), 512);
        Exp(t, t, 128);
    });
    return NotCaught("bf16 Exp");
}
TWIN_TEST(neg_cast_half_bf16)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a, b;
        pipe.InitBuffer(a, 512);
        pipe.InitBuffer(b, 512);
        LocalTensor<half> h = a.Get<half>();
        Duplicate(h, static_cast<half>(1.0f), 128);
        Cast(b.Get<bfloat16_t>(), h, RoundMode::CAST_RINT, 128);
    });
    return NotCaught("Cast half->bf16");
}
TWIN_TEST(neg_cast_bad_mode)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a, b;
        pipe.InitBuffer(a, 512);
        pipe.InitBuffer(b, 512);
        LocalTensor<float> f = a.Get<float>();
        Duplicate(f, 1.0f, 64);
        Cast(b.Get<bfloat16_t>(), f, RoundMode::CAST_NONE, 64);  // float->bf16 needs an explicit mode
    });
    return NotCaught("Cast float->bf16 with CAST_NONE");
}
// A descriptor field past its type: the row pitch Hq * D = 520 * 128 of a BSND tensor into the 16-bit
// Nd2NzParams.srcDValue. A plain static_cast passes 1024 and the copy reads the wrong rows; the checked
// narrowing of tilegen_runtime.h (TILEGEN_NARROW -> twin::CheckedNarrow on the twin) must stop it.
TWIN_TEST(neg_field_wrap)
{
    tt::Gm<half> g(520 * 128 * 2, "q");
    Mix([&] {
        if ASCEND_IS_AIC {
            GlobalTensor<half> Q;
            Q.SetGlobalBuffer((__gm__ half*)g.addr(), 520 * 128 * 2);
            TPipe pipe;
            TBuf<TPosition::A1> l1;
            pipe.InitBuffer(l1, 2 * 16 * 128 * sizeof(half));
            const int64_t pitch = 520 * 128;
            DataCopy(l1.Get<half>(), Q,
                     Nd2NzParams(1, 2, 128, 0, twin::CheckedNarrow<uint16_t>(pitch, 1, 65535, "Nd2NzParams_srcDValue"), 16, 1, 0));
        }
    });
    return NotCaught("Nd2NzParams.srcDValue = 66560 narrowed to uint16");
}
TWIN_TEST(neg_loaddata_misaligned)
{
    Mix([] {
        if ASCEND_IS_AIC {
            TPipe pipe;
            TBuf<TPosition::A1> l1;
            TBuf<TPosition::A2> l0;
            pipe.InitBuffer(l1, 1024);
            pipe.InitBuffer(l0, 2048);
            LoadData(l0.Get<half>()[16], l1.Get<half>(), LoadData2DParams(0, 1, 0, 0, 0, false, 0));  // L0A + 32 B
        }
    });
    return NotCaught("LoadData destination not 512-byte aligned");
}
TWIN_TEST(neg_fixpipe_quant)
{
    tt::Gm<half> g(256);
    Mix([&] {
        if ASCEND_IS_AIC {
            GlobalTensor<half> G;
            G.SetGlobalBuffer((__gm__ half*)g.p, 256);
            TPipe pipe;
            TBuf<TPosition::CO1> c;
            pipe.InitBuffer(c, 1024);
            Fixpipe(G, c.Get<float>(), FixpipeParamsV220(16, 16, 16, 16, false));  // f32->f16 needs F322F16
        }
    });
    return NotCaught("Fixpipe without quantPre");
}
TWIN_TEST(neg_compare_count)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a, m;
        pipe.InitBuffer(a, 1024);
        pipe.InitBuffer(m, 256);
        LocalTensor<half> x = a.Get<half>();
        Duplicate(x, static_cast<half>(1.0f), 512);
        Compares(m.Get<uint8_t>(), x, static_cast<half>(0.0f), CMPMODE::GT, 100);  // 200 B, not 256-multiple
    });
    return NotCaught("Compares count");
}
// A level-0 call leaves its lane mask in the mask register and the count-form Compares of A2 sets none
// (impl/basic_api/dav_c220/kernel_operator_vec_cmp_impl.h:370): it would compare 8 lanes of each repeat.
TWIN_TEST(neg_compares_after_masked_op)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a, m;
        pipe.InitBuffer(a, 1024);
        pipe.InitBuffer(m, 256);
        LocalTensor<float> x = a.Get<float>();
        Duplicate(x, 1.0f, 256);
        Adds(x, x, 1.0f, static_cast<uint64_t>(8), 1, UnaryRepeatParams());
        Compares(m.Get<uint8_t>(), x, 0.0f, CMPMODE::GT, 64);
    });
    return NotCaught("Compares after a masked level-0 call");
}
TWIN_TEST(neg_reducemax_tmp)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a, t, d;
        pipe.InitBuffer(a, 4096);
        pipe.InitBuffer(t, 32);
        pipe.InitBuffer(d, 32);
        LocalTensor<float> x = a.Get<float>();
        Duplicate(x, 1.0f, 1024);
        ReduceMax(d.Get<float>(), x, t.Get<float>(), 1024, false);  // needs roundUp(2*16, 8) = 32 floats
    });
    return NotCaught("ReduceMax tmp too small");
}
TWIN_TEST(neg_select_scratch)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a, m, big;
        pipe.InitBuffer(a, 1024);
        pipe.InitBuffer(m, 256);
        pipe.InitBuffer(big, 186 * 1024);  // UB allocations now reach into [184 KiB, 192 KiB)
        LocalTensor<half> x = a.Get<half>();
        Duplicate(x, static_cast<half>(1.0f), 512);
        Duplicate(m.Get<uint16_t>(), static_cast<uint16_t>(0xFFFF), 128);
        Select(x, m.Get<uint8_t>(), x, static_cast<half>(0.0f), SELMODE::VSEL_TENSOR_SCALAR_MODE, 128);
    });
    return NotCaught("Select with UB allocations in the scratch area");
}
TWIN_TEST(neg_atomic_type_mismatch)
{
    tt::Gm<half> g(64);
    Aiv([&] {
        GlobalTensor<half> G;
        G.SetGlobalBuffer((__gm__ half*)g.p, 64);
        TPipe pipe;
        TBuf<TPosition::VECOUT> b;
        pipe.InitBuffer(b, 128);
        LocalTensor<half> t = b.Get<half>();
        Duplicate(t, static_cast<half>(1.0f), 64);
        SetFlag<HardEvent::V_MTE3>(0);
        WaitFlag<HardEvent::V_MTE3>(0);
        SetAtomicAdd<float>();
        DataCopy(G, t, 64);
    });
    return NotCaught("atomic type mismatch");
}
TWIN_TEST(neg_kernel_type)
{
    Mix([] { KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY); });
    return NotCaught("kernel type does not match the launcher");
}
TWIN_TEST(neg_ub_scalar_on_l1)
{
    Mix([] {
        if ASCEND_IS_AIC {
            TPipe pipe;
            TBuf<TPosition::A1> b;
            pipe.InitBuffer(b, 512);
            float v = b.Get<float>().GetValue(0);
            (void)v;
        }
    });
    return NotCaught("scalar GetValue on L1");
}
TWIN_TEST(neg_queue_after_reset)
{
    Aiv([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 256);
        pipe.Reset();
        LocalTensor<float> t = q.AllocTensor<float>();  // q belongs to the layout before Reset
        (void)t;
    });
    return NotCaught("queue used after TPipe::Reset");
}
TWIN_TEST(neg_two_pipes)
{
    Aiv([] {
        TPipe a;
        TPipe b;  // the first one was not destroyed
    });
    return NotCaught("two active TPipes");
}
TWIN_TEST(neg_datacopy_blockcount)
{
    tt::Gm<float> g(64);
    Aiv([&] {
        GlobalTensor<float> G;
        G.SetGlobalBuffer((__gm__ float*)g.p, 64);
        TPipe pipe;
        TBuf<TPosition::VECIN> b;
        pipe.InitBuffer(b, 256);
        DataCopy(b.Get<float>(), G, DataCopyParams(0, 1, 0, 0));
    });
    return NotCaught("DataCopy blockCount 0");
}
TWIN_TEST(neg_use_after_free)
{
    Aiv([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 256);
        LocalTensor<float> t = q.AllocTensor<float>();
        Duplicate(t, 1.0f, 64);
        q.EnQue(t);
        LocalTensor<float> u = q.DeQue<float>();
        q.FreeTensor(u);
        Adds(t, t, 1.0f, 64);  // the buffer was returned to the queue
    });
    return NotCaught("use of a tensor after FreeTensor");
}
TWIN_TEST(neg_tbuf_after_destroy)
{
    Aiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 256);
        LocalTensor<float> t = b.Get<float>();
        pipe.Destroy();
        TPipe pipe2;
        Duplicate(t, 1.0f, 64);  // t belongs to the destroyed layout
    });
    return NotCaught("tensor of a destroyed TPipe");
}
TWIN_TEST(neg_fixpipe_dststride)
{
    tt::Gm<float> g(1024);
    Mix([&] {
        if ASCEND_IS_AIC {
            GlobalTensor<float> G;
            G.SetGlobalBuffer((__gm__ float*)g.p, 1024);
            TPipe pipe;
            TBuf<TPosition::CO1> c;
            pipe.InitBuffer(c, 4096);
            Fixpipe(G, c.Get<float>(), FixpipeParamsV220(32, 32, 32, 16, false));  // rows of 32 into a pitch of 16
        }
    });
    return NotCaught("Fixpipe dstStride < nSize");
}

// ---- pipe ordering (order.h): the pipes run concurrently on the NPU ----
TWIN_TEST(neg_order_read_before_mte2)
{
    tt::Gm<float> g(64);
    g.zero();
    Aiv([&] {
        GlobalTensor<float> G;
        G.SetGlobalBuffer((__gm__ float*)g.p, 64);
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 512);
        LocalTensor<float> t = b.Get<float>();
        DataCopy(t, G, 64);
        Muls(t[64], t, 2.0f, 64);  // no MTE2 -> V flag between the copy and its reader
    });
    return NotCaught("vector read of a tile MTE2 loaded, without MTE2_V");
}
TWIN_TEST(neg_order_rewrite_before_mte3)
{
    tt::Gm<float> g(64);
    Aiv([&] {
        GlobalTensor<float> G;
        G.SetGlobalBuffer((__gm__ float*)g.p, 64);
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 256);
        LocalTensor<float> t = b.Get<float>();
        Duplicate(t, 1.0f, 64);
        SetFlag<HardEvent::V_MTE3>(0);
        WaitFlag<HardEvent::V_MTE3>(0);
        DataCopy(G, t, 64);
        Duplicate(t, 2.0f, 64);  // no MTE3 -> V flag: the store may still read t
    });
    return NotCaught("vector rewrite of a tile MTE3 stores, without MTE3_V");
}
TWIN_TEST(neg_order_loaddata_before_mte2)
{
    tt::Gm<half> g(256);
    g.zero();
    Mix([&] {
        if ASCEND_IS_AIC {
            GlobalTensor<half> G;
            G.SetGlobalBuffer((__gm__ half*)g.p, 256);
            TPipe pipe;
            TBuf<TPosition::A1> l1;
            TBuf<TPosition::A2> l0a;
            pipe.InitBuffer(l1, 512);
            pipe.InitBuffer(l0a, 512);
            DataCopy(l1.Get<half>(), G, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 0));
            LoadData(l0a.Get<half>(), l1.Get<half>(), LoadData2DParams(0, 1, 0, 0, 0, false, 0));  // no MTE2 -> MTE1
        }
    });
    return NotCaught("LoadData of an L1 tile MTE2 loaded, without MTE2_MTE1");
}
