// tilegen real-API twin: pipe flags, barriers, cross-core flags (intrinsics called by
// impl/basic_api/dav_c220/kernel_operator_sync_impl.h at asc-devkit 0da921b9).
//
// Semantics: docs/zh/api/SIMD-API/基础API/同步控制/ SetFlag/WaitFlag (ISASI), PipeBarrier (ISASI),
// CrossCoreSetFlag / CrossCoreWaitFlag (ISASI); ascendc-api.md §7.1, §7.2.
#ifndef TILEGEN_CCE_SYNC_H
#define TILEGEN_CCE_SYNC_H

#include "core.h"
#include "kfc.h"
#include "rules.h"

// set_flag(src, dst, event): pipe dst may later wait until everything pipe src issued so far is done.
// A second set of the same (src, dst, event) before its wait is an error (the hardware flag is one bit).
inline void set_flag(pipe_t src, pipe_t dst, int64_t ev)
{
    cce_rt::Core& c = cce_rt::Cur();
    if (src < 0 || src >= cce_rt::kPipes || dst < 0 || dst >= cce_rt::kPipes || src == PIPE_ALL || dst == PIPE_ALL)
        cce_rt::Fail("set_flag", "pipes %d -> %d are not a flag pair", src, dst);
    cce_rt::CheckPipeSPair("set_flag", src, dst);
    if (ev < 0 || ev > 7) cce_rt::Fail("set_flag", "event id %d not in [0, 7]", (int)ev);
    if (c.flagSet[src][dst][ev]) cce_rt::Fail("set_flag", "flag %d -> %d event %d set twice without a wait", src, dst, (int)ev);
    c.flagSet[src][dst][ev] = true;
    std::memcpy(c.flagClock[src][dst][ev], c.clock[src], sizeof(c.clock[src]));
    cce_rt::TraceSync(cce_rt::kPipeName[src] + 5, "SetFlag", 16 * src + dst, ev, dst);
}
// wait_flag(src, dst, event): pipe dst is ordered after the instructions of src before the set.
// Waiting on a flag nobody set hangs the NPU: an error here.
inline void wait_flag(pipe_t src, pipe_t dst, int64_t ev)
{
    cce_rt::Core& c = cce_rt::Cur();
    if (src < 0 || src >= cce_rt::kPipes || dst < 0 || dst >= cce_rt::kPipes || ev < 0 || ev > 7)
        cce_rt::Fail("wait_flag", "bad flag %d -> %d event %d", src, dst, (int)ev);
    cce_rt::CheckPipeSPair("wait_flag", src, dst);
    if (!c.flagSet[src][dst][ev]) cce_rt::Fail("wait_flag", "flag %d -> %d event %d was never set (the core would hang)", src, dst, (int)ev);
    c.flagSet[src][dst][ev] = false;
    for (int q = 0; q < cce_rt::kPipes; ++q)
        if (q != dst && c.flagClock[src][dst][ev][q] > c.clock[dst][q]) c.clock[dst][q] = c.flagClock[src][dst][ev][q];
    cce_rt::TraceSync(cce_rt::kPipeName[dst] + 5, "WaitFlag", 16 * src + dst, ev, src);
}
// pipe_barrier(p): later instructions of p wait for earlier ones of p; PIPE_ALL orders every pipe after
// every instruction issued so far.
inline void pipe_barrier(pipe_t p)
{
    cce_rt::Core& c = cce_rt::Cur();
    if (p >= 0 && p < cce_rt::kPipes) cce_rt::TraceSync(cce_rt::kPipeName[p] + 5, "PipeBarrier", 0, 0, 0);
    if (p == PIPE_ALL) {
        for (int q = 0; q < cce_rt::kPipes; ++q)
            for (int r = 0; r < cce_rt::kPipes; ++r)
                if (q != r) c.clock[q][r] = c.clock[r][r];
    } else if (p < 0 || p >= cce_rt::kPipes) {
        cce_rt::Fail("pipe_barrier", "pipe %d", p);
    }
}
// ffts_cross_core_sync(pipe, msg): msg = 1 + (mode & 3) << 4 + (flagId & 0xf) << 8
// (AscendC::GetffstMsg, impl/basic_api/dav_c220/kernel_operator_sync_impl.h:124). Mode 0: all AICs or all
// AIVs of the launch (SyncAll<false> uses it for the AICs: SyncAllImpl, same file :364); mode 2 inside one
// AI Core: an AIC set releases one wait on each of its two AIVs; the AIC's wait needs a set from both AIVs
// (CrossCoreSetFlag(ISASI).md, 核间同步/关键特性说明.md). The counters: cce_rt::CrossCoreSet in runtime.cpp.
inline void ffts_cross_core_sync(pipe_t pipe, uint64_t msg)
{
    cce_rt::CrossCoreSet(static_cast<int>((msg >> 4) & 3), static_cast<int>(pipe), static_cast<int>((msg >> 8) & 0xf));
}
// dcci(addr, entire[, dst]): clean and invalidate the scalar data cache (the line of addr, or all of it:
// DataCacheCleanAndInvalid, impl/basic_api/kernel_reg.h DcciGMImpl). The twin's scalar GM accesses go to
// host memory, which every core sees at once: nothing to clean, so nothing to do (but a matmul server that
// holds the message lock releases it: kfc.h).
template <typename... A> inline void dcci(A&&...) { cce_rt::KfcRelease(); }  // every call form of the headers (GM or UB address, line or all)
inline void wait_flag_dev(uint64_t flag) { cce_rt::CrossCoreWait(static_cast<int>(flag)); }

// ---- special registers: core identity and scalar bit helpers ------------------------------------
// get_block_idx: 0..blocks-1 on both core types; get_subblockid: 0 on the AIC, 0/1 on the AIVs;
// get_subblockdim: 1 on the AIC, 2 on the AIVs (comments in kernel_operator_sys_var_impl.h).
inline int64_t get_block_idx() { return cce_rt::Cur().block; }
inline int64_t get_block_num() { return cce_rt::Cur().blocks; }
inline int64_t get_subblockid() { return cce_rt::Cur().aic ? 0 : cce_rt::Cur().sub; }
inline int64_t get_subblockdim() { return cce_rt::Cur().aic ? 1 : 2; }
// sff0: index of the lowest 0 bit (64 when none); sbitset0/1: clear/set one bit.
inline int64_t sff0(uint64_t x) { return x == ~0ull ? 64 : __builtin_ctzll(~x); }
inline int64_t sbitset0(uint64_t x, int64_t bit) { return static_cast<int64_t>(x & ~(1ull << (bit & 63))); }
inline int64_t sbitset1(uint64_t x, int64_t bit) { return static_cast<int64_t>(x | (1ull << (bit & 63))); }
inline int64_t get_imm(uint64_t x) { return static_cast<int64_t>(x); }

// ---- atomics (SetAtomicAdd / SetAtomicNone / SetAtomicType docs; kernel_operator_set_atomic_impl.h):
// the store paths MTE3 (UB -> GM) and FIX (L0C -> GM) add into GM in the set type while on.
// The timeline prices the atomic stores (a SetAtomic record on S: a = 1 on, 0 off).
inline void set_atomic_add()
{
    cce_rt::TraceSync("S", "SetAtomic", 1, 0, 0);
    cce_rt::Cur().atomic = 1;
}
inline void set_atomic_none()
{
    cce_rt::TraceSync("S", "SetAtomic", 0, 0, 0);
    cce_rt::Cur().atomic = 0;
    cce_rt::Cur().atomicType = 0;
}
inline void set_atomic_f32() { cce_rt::Cur().atomicType = 1; }
inline void set_atomic_f16() { cce_rt::Cur().atomicType = 2; }
inline void set_atomic_bf16() { cce_rt::Cur().atomicType = 3; }
inline void set_atomic_s32() { cce_rt::Cur().atomicType = 4; }

#endif  // TILEGEN_CCE_SYNC_H
