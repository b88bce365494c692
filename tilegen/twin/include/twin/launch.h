// tilegen CPU twin: kernel launch (threads with thread-local core identity), core identity queries,
// kernel-type macros, cross-core flags and SyncAll with real blocking semantics and exact deadlock
// detection.
#ifndef TILEGEN_TWIN_LAUNCH_H
#define TILEGEN_TWIN_LAUNCH_H

#include "tensor.h"
#include "trace.h"

// pipe_t (global, as in the CCE headers) [ascendc-api §6].
enum pipe_t : uint8_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_MTE4, PIPE_MTE5, PIPE_V2, PIPE_FIX };

// Kernel types [P:设置Kernel类型].
enum KernelMetaType : uint8_t {
    KERNEL_TYPE_AIV_ONLY = 0,
    KERNEL_TYPE_AIC_ONLY,
    KERNEL_TYPE_MIX_AIV_1_0,
    KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1,
    KERNEL_TYPE_MIX_AIC_1_2,
};

namespace AscendC {
// HardEvent = <source pipe>_<destination pipe> [P:SetFlag-WaitFlag(ISASI), ascendc-api §7.1].
enum class HardEvent : uint8_t {
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3,
    MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S,
    MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MAX
};
using TEventID = int8_t;
}  // namespace AscendC

namespace twin {

inline const char* HardEventName(int e)
{
    static const char* n[] = {
        "MTE2_MTE1", "MTE1_MTE2", "MTE1_M", "M_MTE1", "MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "M_V", "V_M",
        "V_V", "MTE3_MTE1", "MTE1_MTE3", "MTE1_V", "MTE2_M", "M_MTE2", "V_MTE1", "M_FIX", "FIX_M", "MTE3_MTE2",
        "MTE2_MTE3", "S_V", "V_S", "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S", "MTE2_FIX", "FIX_MTE2", "FIX_S",
        "M_S", "FIX_MTE3"};
    return (e >= 0 && e < 32) ? n[e] : "?";
}
// Source and destination pipe of a HardEvent.
inline void HardEventPipes(int e, pipe_t& src, pipe_t& dst)
{
    static const pipe_t t[][2] = {
        {PIPE_MTE2, PIPE_MTE1}, {PIPE_MTE1, PIPE_MTE2}, {PIPE_MTE1, PIPE_M}, {PIPE_M, PIPE_MTE1},
        {PIPE_MTE2, PIPE_V}, {PIPE_V, PIPE_MTE2}, {PIPE_MTE3, PIPE_V}, {PIPE_V, PIPE_MTE3}, {PIPE_M, PIPE_V},
        {PIPE_V, PIPE_M}, {PIPE_V, PIPE_V}, {PIPE_MTE3, PIPE_MTE1}, {PIPE_MTE1, PIPE_MTE3}, {PIPE_MTE1, PIPE_V},
        {PIPE_MTE2, PIPE_M}, {PIPE_M, PIPE_MTE2}, {PIPE_V, PIPE_MTE1}, {PIPE_M, PIPE_FIX}, {PIPE_FIX, PIPE_M},
        {PIPE_MTE3, PIPE_MTE2}, {PIPE_MTE2, PIPE_MTE3}, {PIPE_S, PIPE_V}, {PIPE_V, PIPE_S}, {PIPE_S, PIPE_MTE2},
        {PIPE_MTE2, PIPE_S}, {PIPE_S, PIPE_MTE3}, {PIPE_MTE3, PIPE_S}, {PIPE_MTE2, PIPE_FIX}, {PIPE_FIX, PIPE_MTE2},
        {PIPE_FIX, PIPE_S}, {PIPE_M, PIPE_S}, {PIPE_FIX, PIPE_MTE3}};
    src = t[e][0];
    dst = t[e][1];
}

inline const char* PipeName(pipe_t p)
{
    switch (p) {
        case PIPE_S: return "PIPE_S";
        case PIPE_V: return "PIPE_V";
        case PIPE_M: return "PIPE_M";
        case PIPE_MTE1: return "PIPE_MTE1";
        case PIPE_MTE2: return "PIPE_MTE2";
        case PIPE_MTE3: return "PIPE_MTE3";
        case PIPE_ALL: return "PIPE_ALL";
        case PIPE_FIX: return "PIPE_FIX";
        default: return "PIPE_?";
    }
}
inline uint32_t PipeMask(pipe_t p)
{
    switch (p) {
        case PIPE_S: return 1;
        case PIPE_V: return 2;
        case PIPE_M: return 4;
        case PIPE_MTE1: return 8;
        case PIPE_MTE2: return 16;
        case PIPE_MTE3: return 32;
        case PIPE_FIX: return 64;
        default: return 0;
    }
}
inline uint32_t CorePipes(CoreType t) { return t == CoreType::AIC ? kAicPipes : kAivPipes; }

// ---------------------------------------------------------------------------------------------
// Configuration: physical AIC count (910B1/B2: 24, B3/B4: 20 [ascend-910b §1.1]); AIV = 2x.
// ---------------------------------------------------------------------------------------------
namespace detail {
inline std::atomic<int>& AicCoresVar()
{
    static std::atomic<int> v{0};
    return v;
}
inline double WaitTimeoutSeconds()
{
    const char* e = std::getenv("TWIN_WAIT_TIMEOUT_S");
    double v = e ? std::atof(e) : 60.0;
    return v > 0 ? v : 60.0;
}
}  // namespace detail
inline void SetAicCoreNum(int n) { detail::AicCoresVar().store(n); }
inline int GetAicCoreNum()
{
    int v = detail::AicCoresVar().load();
    if (v <= 0) {
        const char* e = std::getenv("TWIN_AIC_CORES");
        v = e ? std::atoi(e) : 24;
        if (v <= 0) v = 24;
    }
    return v;
}

struct XCounters {
    int v[kMaxXFlags] = {};
};

struct Launch {
    bool mix = true;
    int numBlocks = 0;
    std::vector<std::unique_ptr<CoreCtx>> cores;
    std::vector<CoreCtx*> aic, aiv;
    std::mutex mu;
    std::condition_variable cv;
    int alive = 0;
    bool aborted = false;
    std::string failure;
    // cross-core flags [P:CrossCoreSetFlag(ISASI), P:CrossCoreWaitFlag(ISASI), ascendc-api §7.2]
    std::vector<XCounters> cnt;    // per core: pending sets a Wait can consume
    std::vector<XCounters> pend0;  // per core: mode-0 sets not yet matched by every core of its type
    std::vector<XCounters> pend1;  // per AIV: mode-1 sets not yet matched by the partner AIV
    std::vector<XCounters> pend2;  // per AIV: mode-2 AIV->AIC sets not yet matched by the partner AIV
    // SyncAll barriers [P:SyncAll]
    int barCount[2] = {0, 0};
    uint64_t barGen[2] = {0, 0};
    int declaredType = -1;
    std::vector<int> slotOf;  // unused helper
    int Slot(const CoreCtx* c) const { return c->type == CoreType::AIC ? c->group * (mix ? 3 : 1) : SlotAiv(c); }
    int SlotAiv(const CoreCtx* c) const { return mix ? c->group * 3 + 1 + c->sub : c->group; }
};

struct SlotIndex {
    static int Of(const Launch& L, const CoreCtx* c) { return L.Slot(c); }
};

namespace detail {
inline std::mutex& LaunchMutex()
{
    static std::mutex m;
    return m;
}

// Every running core blocked on a condition that is still false => nobody can ever set a flag or
// reach a barrier: report and fail. (A woken core whose condition became true does not count.)
inline void DeadlockCheckLocked(Launch& L, const char* api, const char* src)
{
    if (L.alive == 0) return;
    int stuck = 0;
    for (auto& c : L.cores)
        if (c->waitPred && !c->waitPred()) ++stuck;
    if (stuck != L.alive) return;
    std::string msg = "deadlock: every running core is blocked:";
    for (auto& c : L.cores)
        if (c->waitPred) msg += " " + CoreName(c.get()) + " waits " + c->waitingOn + ";";
    int done = static_cast<int>(L.cores.size()) - L.alive;
    if (done > 0) msg += Fmt(" %d core(s) already finished", done);
    L.aborted = true;
    AbortFlag().store(true);
    L.cv.notify_all();
    Fail(api, msg, src);
}

// Block the calling core until pred() holds (caller holds lk on L.mu).
template <class Pred, class Desc>
inline void BlockUntil(Launch& L, std::unique_lock<std::mutex>& lk, CoreCtx& me, Pred pred, Desc desc,
                       const char* api, const char* src)
{
    if (pred()) return;
    if (L.aborted) throw Aborted();
    me.waitingOn = desc();
    me.waitPred = pred;
    struct Unblock {
        CoreCtx& me;
        ~Unblock()
        {
            me.waitPred = nullptr;
            me.waitingOn.clear();
        }
    } unblock{me};
    DeadlockCheckLocked(L, api, src);
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(WaitTimeoutSeconds() * 1000));
    while (!pred()) {
        if (L.aborted) throw Aborted();
        if (L.cv.wait_until(lk, deadline) == std::cv_status::timeout && !pred() && !L.aborted) {
            L.aborted = true;
            AbortFlag().store(true);
            L.cv.notify_all();
            Fail(api, Fmt("waited %.0f s for %s (set TWIN_WAIT_TIMEOUT_S); some core never signals it",
                          WaitTimeoutSeconds(), desc().c_str()),
                 src);
        }
    }
}
}  // namespace detail

inline Launch& CurLaunch(const char* api) { return *Cur(api).launch; }

// ---------------------------------------------------------------------------------------------
// Cross-core flags [P:CrossCoreSetFlag(ISASI), P:CrossCoreWaitFlag(ISASI), I:dav_c220/kernel_operator_sync_impl.h]
// Mode 0: all cores of the caller's type; the Wait of each such core passes once every core of that
//         type has Set (one pending set per round).
// Mode 1: the two AIVs of one block; both must Set before either Wait passes.
// Mode 2: AIC Set -> both AIVs of its block get one pending set; AIV Set -> the block's AIC gets one
//         once both AIVs have Set.
// A receiving counter holds at most 15 pending sets; the 16th fails here (it would hang / be lost).
// ---------------------------------------------------------------------------------------------
namespace detail {
constexpr const char* kXSrc = "P:CrossCoreSetFlag(ISASI)";
// "当Kernel类型为KERNEL_TYPE_AIC_ONLY或KERNEL_TYPE_AIV_ONLY时，硬件不会开启调度模块，也就无法正常进行核间同步"
// [P:CrossCoreSetFlag(ISASI) 约束说明; P:SyncAll: a pure-vector kernel needs __mix__(0, 1)]: in a
// vector-only launch (twin::LaunchAiv) whose kernel is not declared KERNEL_TYPE_MIX_AIV_1_0 (the NPU then
// runs it as AIV_ONLY) a cross-core flag or hard SyncAll never completes. Fail at once instead of hanging.
inline void RequireScheduler(Launch& L, const char* api)
{
    int declared;
    {
        std::lock_guard<std::mutex> lk(L.mu);
        declared = L.declaredType;
    }
    if (!L.mix && declared != KERNEL_TYPE_MIX_AIV_1_0)
        Fail(api,
             Fmt("deadlock: a vector-only kernel of type %s has no cross-core scheduler on the NPU, so this "
                 "never completes there; declare KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0)",
                 declared < 0 ? "KERNEL_TYPE_AIV_ONLY (none declared)" : "KERNEL_TYPE_AIV_ONLY"),
             "P:CrossCoreSetFlag(ISASI), P:SyncAll");
}
inline void Bump(Launch& L, XCounters& c, CoreCtx* who, int flag, const char* what)
{
    if (++c.v[flag] > 15)
        Fail("CrossCoreSetFlag",
             Fmt("flag %d: 16th pending %s for %s; the counter saturates at 15 (add a reverse sync / credit)", flag,
                 what, CoreName(who).c_str()),
             kXSrc);
    (void)L;
}
inline void CrossSet(int mode, pipe_t pipe, uint16_t flagId)
{
    const char* api = "CrossCoreSetFlag";
    CoreCtx& me = Cur(api);
    Launch& L = *me.launch;
    // Rule cross-core-flag-id: modes 0-2 take flagId 0-15; SyncAll uses 11-14 [P:CrossCoreSetFlag(ISASI)
    // flagId取值范围说明, 约束说明]
    if (flagId > 15)
        FailRule(api, twin_rules::kCrossCoreFlagId,
                 Fmt("flagId %u out of range [0, 15] (the hardware would keep its low 4 bits: flag %u)", flagId, flagId & 15u));
    if (flagId >= 11 && flagId <= 14)
        FailRule(api, twin_rules::kCrossCoreFlagId, Fmt("flagId %u is one of SyncAll's (11-14 on A2); use 0-10 or 15", flagId));
    RequireScheduler(L, api);
    // Rule cross-core-mode: A2 has modes 0, 1, 2 [P:CrossCoreSetFlag(ISASI) modeId支持的取值说明]
    if (mode == 4) FailRule(api, twin_rules::kCrossCoreMode, "modeId 4 exists on Ascend 950 only; A2 has modes 0, 1 and 2");
    if (mode < 0 || mode > 2) FailRule(api, twin_rules::kCrossCoreMode, Fmt("modeId %d is not 0, 1 or 2", mode));
    if ((PipeMask(pipe) & CorePipes(me.type)) == 0)
        Fail(api, Fmt("pipe %s does not exist on %s", PipeName(pipe), me.type == CoreType::AIC ? "AIC" : "AIV"),
             kXSrc);
    if ((mode == 1 || mode == 2) && !L.mix)
        Fail(api, Fmt("mode %d needs a MIX kernel (1 AIC + 2 AIV per block)", mode), kXSrc);
    if (mode == 1 && me.type == CoreType::AIC) Fail(api, "mode 1 synchronises the two AIVs of a block; called on AIC", kXSrc);
    // queued on `pipe`: a = mode, b = flag id
    trace::Rec(trace::Short(PipeName(pipe)), "CrossCoreSetFlag", mode, flagId, 0);
    std::lock_guard<std::mutex> lk(L.mu);
    int s = L.Slot(&me);
    switch (mode) {
        case 0: {
            Bump(L, L.pend0[s], &me, flagId, "mode-0 set");
            auto& group = me.type == CoreType::AIC ? L.aic : L.aiv;
            bool all = true;
            for (CoreCtx* c : group)
                if (L.pend0[L.Slot(c)].v[flagId] == 0) all = false;
            if (all)
                for (CoreCtx* c : group) {
                    L.pend0[L.Slot(c)].v[flagId]--;
                    Bump(L, L.cnt[L.Slot(c)], c, flagId, "set");
                }
            break;
        }
        case 1: {
            Bump(L, L.pend1[s], &me, flagId, "mode-1 set");
            CoreCtx* a0 = L.aiv[me.group * 2];
            CoreCtx* a1 = L.aiv[me.group * 2 + 1];
            if (L.pend1[L.Slot(a0)].v[flagId] > 0 && L.pend1[L.Slot(a1)].v[flagId] > 0) {
                L.pend1[L.Slot(a0)].v[flagId]--;
                L.pend1[L.Slot(a1)].v[flagId]--;
                Bump(L, L.cnt[L.Slot(a0)], a0, flagId, "set");
                Bump(L, L.cnt[L.Slot(a1)], a1, flagId, "set");
            }
            break;
        }
        case 2: {
            if (me.type == CoreType::AIC) {
                Bump(L, L.cnt[L.Slot(L.aiv[me.group * 2])], L.aiv[me.group * 2], flagId, "set");
                Bump(L, L.cnt[L.Slot(L.aiv[me.group * 2 + 1])], L.aiv[me.group * 2 + 1], flagId, "set");
            } else {
                Bump(L, L.pend2[s], &me, flagId, "mode-2 set");
                CoreCtx* a0 = L.aiv[me.group * 2];
                CoreCtx* a1 = L.aiv[me.group * 2 + 1];
                if (L.pend2[L.Slot(a0)].v[flagId] > 0 && L.pend2[L.Slot(a1)].v[flagId] > 0) {
                    L.pend2[L.Slot(a0)].v[flagId]--;
                    L.pend2[L.Slot(a1)].v[flagId]--;
                    Bump(L, L.cnt[L.Slot(L.aic[me.group])], L.aic[me.group], flagId, "set");
                }
            }
            break;
        }
    }
    L.cv.notify_all();
}
inline void CrossWait(uint16_t flagId)
{
    const char* api = "CrossCoreWaitFlag";
    CoreCtx& me = Cur(api);
    Launch& L = *me.launch;
    // Rule cross-core-flag-id, as for CrossCoreSetFlag [P:CrossCoreWaitFlag(ISASI) flagId取值范围说明]
    if (flagId > 15) FailRule(api, twin_rules::kCrossCoreFlagId, Fmt("flagId %u out of range [0, 15]", flagId), "P:CrossCoreWaitFlag(ISASI)");
    if (flagId >= 11 && flagId <= 14)
        FailRule(api, twin_rules::kCrossCoreFlagId, Fmt("flagId %u is one of SyncAll's (11-14 on A2); use 0-10 or 15", flagId),
                 "P:CrossCoreWaitFlag(ISASI)");
    RequireScheduler(L, api);
    trace::Rec("S", "CrossCoreWaitFlag", 0, flagId, 0);  // the scalar pipe waits (pipe = PIPE_S, the default)
    std::unique_lock<std::mutex> lk(L.mu);
    int s = L.Slot(&me);
    BlockUntil(
        L, lk, me, [&] { return L.cnt[s].v[flagId] > 0; },
        [&] { return Fmt("CrossCoreWaitFlag(flagId=%u) with 0 pending sets", flagId); }, api,
        "P:CrossCoreWaitFlag(ISASI)");
    L.cnt[s].v[flagId]--;
}

// barrier k: 0 = all AIVs (SyncAll<true>), 1 = all cores (SyncAll<false>).
// At SyncAll<false>, once every core has arrived (so nothing can set a flag any more): the kernel phase
// before it must end as a kernel does, every CrossCoreSetFlag waited for and none half-matched, or a
// flag left over would be taken by a wait of the next phase (SyncAll's own ids 11-14 aside).
inline void PhaseEndCheckLocked(Launch& L, const char* api)
{
    for (auto& c : L.cores) {
        int s = L.Slot(c.get());
        for (int f = 0; f < kMaxXFlags; ++f) {
            if (f >= 11 && f <= 14) continue;
            int left = L.cnt[s].v[f] + L.pend0[s].v[f] + L.pend1[s].v[f] + L.pend2[s].v[f];
            if (left == 0) continue;
            L.aborted = true;
            AbortFlag().store(true);
            L.cv.notify_all();
            Fail(api,
                 Fmt("%s reaches SyncAll with %d CrossCoreSetFlag set(s) on flagId %d not waited for or not matched: "
                     "the kernel phase before the barrier must end with every flag consumed",
                     CoreName(c.get()).c_str(), left, f),
                 "P:CrossCoreSetFlag(ISASI), P:SyncAll");
        }
    }
}

inline void Barrier(int k, const char* api)
{
    CoreCtx& me = Cur(api);
    Launch& L = *me.launch;
    int n = k == 0 ? static_cast<int>(L.aiv.size()) : static_cast<int>(L.cores.size());
    RequireScheduler(L, api);
    std::unique_lock<std::mutex> lk(L.mu);
    uint64_t gen = L.barGen[k];
    if (++L.barCount[k] == n) {
        if (k == 1) PhaseEndCheckLocked(L, api);
        L.barCount[k] = 0;
        L.barGen[k]++;
        L.cv.notify_all();
        return;
    }
    BlockUntil(
        L, lk, me, [&] { return L.barGen[k] != gen; },
        [&] { return Fmt("%s (%d of %d cores arrived)", api, L.barCount[k], n); }, api, "P:SyncAll");
}
}  // namespace detail

inline const char* KernelTypeName(int t)
{
    static const char* n[] = {"KERNEL_TYPE_AIV_ONLY", "KERNEL_TYPE_AIC_ONLY", "KERNEL_TYPE_MIX_AIV_1_0",
                              "KERNEL_TYPE_MIX_AIC_1_0", "KERNEL_TYPE_MIX_AIC_1_1", "KERNEL_TYPE_MIX_AIC_1_2"};
    return (t >= 0 && t < 6) ? n[t] : "unknown kernel type";
}
// Kernel type declared by KERNEL_TASK_TYPE_DEFAULT must match the launcher.
inline void DeclareKernelType(int t)
{
    CoreCtx& c = Cur("KERNEL_TASK_TYPE_DEFAULT");
    Launch& L = *c.launch;
    {
        std::lock_guard<std::mutex> lk(L.mu);
        L.declaredType = t;
    }
    if (L.mix && t != KERNEL_TYPE_MIX_AIC_1_2)
        Fail("KERNEL_TASK_TYPE_DEFAULT",
             Fmt("%s declared but launched with twin::LaunchMix (MIX_AIC_1_2: 1 AIC + 2 AIV per block)", KernelTypeName(t)),
             "P:设置Kernel类型");
    if (!L.mix && t != KERNEL_TYPE_AIV_ONLY && t != KERNEL_TYPE_MIX_AIV_1_0)
        Fail("KERNEL_TASK_TYPE_DEFAULT",
             Fmt("%s declared but launched with twin::LaunchAiv (vector cores only)", KernelTypeName(t)),
             "P:设置Kernel类型");
}

inline bool IsAic() { return Cur("ASCEND_IS_AIC").type == CoreType::AIC; }
inline bool IsAiv() { return Cur("ASCEND_IS_AIV").type == CoreType::AIV; }

namespace detail {
struct PoolFree {
    static void F(void* p) { std::free(p); }
};
inline void SetupCore(CoreCtx& c)
{
    for (int h = 0; h < static_cast<int>(Hw::COUNT); ++h) {
        Hw hw = static_cast<Hw>(h);
        if (hw == Hw::GM || !HwOnCore(hw, c.type)) continue;
        uint32_t sz = HwSize(hw);
        auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, RoundUp(sz, 4096)));
        std::memset(p, kPoisonByte, sz);
        c.pool[h] = p;
        c.owned.emplace_back(p, &PoolFree::F);
    }
}

// End-of-kernel checks of one core (called on its thread).
inline void FinishCore(CoreCtx& c)
{
    for (int e = 0; e < kNumHardEvents; ++e)
        for (int id = 0; id < 8; ++id)
            if (c.eventSet[e][id])
                Fail("SetFlag",
                     Fmt("HardEvent::%s id %d set but never waited at kernel end (SetFlag/WaitFlag must pair)",
                         HardEventName(e), id),
                     "P:SetFlag-WaitFlag(ISASI)");
}

inline void RunLaunch(bool mix, uint32_t numBlocks, const std::function<void()>& body)
{
    const char* api = mix ? "LaunchMix" : "LaunchAiv";
    if (t_core != nullptr) Fail(api, "nested launch from inside a kernel", "twin");
    std::lock_guard<std::mutex> launchLock(LaunchMutex());
    int aicNum = GetAicCoreNum();
    int limit = mix ? aicNum : 2 * aicNum;
    // TWIN_TRACE_BLOCKS (trace.h): only the listed blocks run, so a virtual numBlocks may pass the limit
    std::vector<uint32_t> run;
    for (int b : trace::Blocks())
        if (b >= 0 && static_cast<uint32_t>(b) < numBlocks) run.push_back(static_cast<uint32_t>(b));
    const bool selected = !trace::Blocks().empty();
    if (!selected)
        for (uint32_t b = 0; b < numBlocks; ++b) run.push_back(b);
    const int launchId = trace::LaunchSerial().fetch_add(1);
    if (numBlocks < 1 || (!selected && static_cast<int>(numBlocks) > limit))
        Fail(api,
             Fmt("numBlocks %u not in [1, %d]: a %s kernel may not use more %s than the %d physical ones (SyncAll / "
                 "mode-0 flags would deadlock)",
                 numBlocks, limit, mix ? "MIX" : "vector", mix ? "AIC+2AIV groups" : "AIVs", limit),
             "G:编程指南/编程模型/AI-Core-SIMD编程/核函数, P:SyncAll");
    Launch L;
    L.mix = mix;
    L.numBlocks = static_cast<int>(run.size());
    for (uint32_t g = 0; g < run.size(); ++g) {
        const uint32_t b = run[g];  // the block's index in the launch; g: its place among the cores run
        if (mix) {
            auto c = std::make_unique<CoreCtx>();
            c->type = CoreType::AIC;
            c->index = static_cast<int>(g);
            c->group = static_cast<int>(g);
            c->blockIdx = b;
            c->blockNum = numBlocks;
            c->subBlockIdx = 0;
            c->subBlockNum = 1;
            c->taskRatio = 1;
            L.aic.push_back(c.get());
            L.cores.push_back(std::move(c));
            for (int s = 0; s < 2; ++s) {
                auto v = std::make_unique<CoreCtx>();
                v->type = CoreType::AIV;
                v->index = static_cast<int>(2 * g + s);
                v->group = static_cast<int>(g);
                v->sub = s;
                // ascendc-api §1 table / §0.15: AIV GetBlockIdx = 2*block + sub, GetBlockNum = N.
                v->blockIdx = 2 * b + s;
                v->blockNum = numBlocks;
                v->subBlockIdx = s;
                v->subBlockNum = 2;
                v->taskRatio = 2;
                L.aiv.push_back(v.get());
                L.cores.push_back(std::move(v));
            }
        } else {
            auto v = std::make_unique<CoreCtx>();
            v->type = CoreType::AIV;
            v->index = static_cast<int>(g);
            v->group = static_cast<int>(g);
            v->blockIdx = b;
            v->blockNum = numBlocks;
            v->subBlockIdx = 0;
            v->subBlockNum = 1;
            v->taskRatio = 1;
            L.aiv.push_back(v.get());
            L.cores.push_back(std::move(v));
        }
    }
    size_t n = L.cores.size();
    L.cnt.resize(n);
    L.pend0.resize(n);
    L.pend1.resize(n);
    L.pend2.resize(n);
    for (auto& c : L.cores) {
        c->launch = &L;
        SetupCore(*c);
    }
    AbortFlag().store(false);
    L.alive = static_cast<int>(n);
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (auto& cp : L.cores) {
        CoreCtx* c = cp.get();
        threads.emplace_back([c, &L, &body, launchId] {
            t_core = c;
            auto record = [&](const std::string& m) {
                std::lock_guard<std::mutex> lk(L.mu);
                if (L.failure.empty()) L.failure = m;
                L.aborted = true;
                AbortFlag().store(true);
                L.cv.notify_all();
            };
            try {
                body();
                FinishCore(*c);
                trace::Flush(*c, launchId);
            } catch (const Failure& f) {
                record(f.what());
            } catch (const Aborted&) {
            } catch (const std::exception& e) {
                record(Fmt("twin: kernel: uncaught exception: %s [%s]", e.what(), CoreName(c).c_str()));
            }
            try {
                std::unique_lock<std::mutex> lk(L.mu);
                --L.alive;
                if (!L.aborted) DeadlockCheckLocked(L, "kernel end", "P:CrossCoreWaitFlag(ISASI), P:SyncAll");
                L.cv.notify_all();
            } catch (const Failure& f) {
                std::lock_guard<std::mutex> lk(L.mu);
                if (L.failure.empty()) L.failure = f.what();
            }
            t_core = nullptr;
        });
    }
    for (auto& t : threads) t.join();
    AbortFlag().store(false);
    if (!L.failure.empty()) throw Failure(L.failure);
    // Launch-level end checks (host context).
    for (auto& c : L.cores) {
        int s = L.Slot(c.get());
        for (int f = 0; f < kMaxXFlags; ++f) {
            if (L.cnt[s].v[f] != 0)
                Fail(api,
                     Fmt("%s ends the kernel with %d pending CrossCoreSetFlag set(s) on flagId %d never waited "
                         "(every Set needs a matching Wait)",
                         CoreName(c.get()).c_str(), L.cnt[s].v[f], f),
                     "P:CrossCoreSetFlag(ISASI)");
            int p = L.pend0[s].v[f] + L.pend1[s].v[f] + L.pend2[s].v[f];
            if (p != 0)
                Fail(api,
                     Fmt("%s ends the kernel with %d unmatched mode-0/1/2 CrossCoreSetFlag(s) on flagId %d (the "
                         "other cores of the set never signalled)",
                         CoreName(c.get()).c_str(), p, f),
                     "P:CrossCoreSetFlag(ISASI)");
        }
    }
    CheckAllGuards(api);
}
}  // namespace detail

// Launch a MIX_AIC_1_2 kernel: numBlocks groups of 1 AIC + 2 AIV, each core a thread that runs
// kernel(args...). numBlocks must not exceed the physical AIC count (default 24, twin::SetAicCoreNum).
// Equivalent of kernel<<<numBlocks, 0, stream>>>(args...) (dynUBufSize 0) followed by a stream sync.
template <typename F, typename... Args>
inline void LaunchMix(uint32_t numBlocks, F&& kernel, Args... args)
{
    detail::RunLaunch(true, numBlocks, [&]() { kernel(args...); });
}
// Launch a vector-only (AIV_ONLY) kernel on numBlocks AIVs (<= 2x AIC count).
template <typename F, typename... Args>
inline void LaunchAiv(uint32_t numBlocks, F&& kernel, Args... args)
{
    detail::RunLaunch(false, numBlocks, [&]() { kernel(args...); });
}

}  // namespace twin

// ---------------------------------------------------------------------------------------------
// Kernel-side macros and identity queries.
// ---------------------------------------------------------------------------------------------
// [P:设置Kernel类型] statement inside the kernel body; the twin checks it against the launcher.
#define KERNEL_TASK_TYPE_DEFAULT(t) ::twin::DeclareKernelType(static_cast<int>(t))
#define KERNEL_TASK_TYPE(key, t) ((void)(key), (void)(t))
// [G:…/SIMD-BuiltIn关键字] `if ASCEND_IS_AIC { ... }`. On the device (impl/utils/sys_macros.h:83-86 at
// asc-devkit@0da921b9) these expand to `constexpr(g_coreType == AscendC::AIC)`, valid only right after
// `if`. The twin selects at run time (each core is a thread) but keeps that rule: the expansion is a C++17
// if-statement head with an empty init-statement, `(; cond)`, so `x = ASCEND_IS_AIC ? a : b`,
// `if (ASCEND_IS_AIC)` or `bool b = ASCEND_IS_AIV` fail to compile here as they do under bisheng.
#define ASCEND_IS_AIC (; ::twin::IsAic())
#define ASCEND_IS_AIV (; ::twin::IsAiv())
#define ASCEND_IS_NOT_AIC (; !::twin::IsAic())
#define ASCEND_IS_NOT_AIV (; !::twin::IsAiv())
#define g_coreType (::twin::IsAic() ? ::AscendC::AIC : ::AscendC::AIV)

namespace AscendC {
// ascendc-api §1 table [I:dav_c220/kernel_operator_sys_var_impl.h, Z:…/GetBlockIdx, P:GetSubBlockNum(ISASI), P:GetTaskRatio]
inline int64_t GetBlockIdx() { return twin::Cur("GetBlockIdx").blockIdx; }
inline int64_t GetBlockNum() { return twin::Cur("GetBlockNum").blockNum; }
inline int64_t GetSubBlockIdx() { return twin::Cur("GetSubBlockIdx").subBlockIdx; }
inline int64_t GetSubBlockNum() { return twin::Cur("GetSubBlockNum").subBlockNum; }
inline int64_t GetTaskRatio() { return twin::Cur("GetTaskRatio").taskRatio; }

// [P:CrossCoreSetFlag(ISASI)]
template <uint8_t modeId, pipe_t pipe>
inline void CrossCoreSetFlag(uint16_t flagId)
{
    twin::detail::CrossSet(modeId, pipe, flagId);
}
// [P:CrossCoreWaitFlag(ISASI)]
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S>
inline void CrossCoreWaitFlag(uint16_t flagId)
{
    twin::detail::CrossWait(flagId);
}

// Hard SyncAll [P:SyncAll, I:dav_c220/kernel_operator_sync_impl.h]: <true> = barrier of all AIVs,
// AIV only; <false> = barrier of every AIC and AIV of a MIX launch.
template <bool isAIVOnly = true>
inline void SyncAll()
{
    const char* api = isAIVOnly ? "SyncAll<true>" : "SyncAll<false>";
    twin::CoreCtx& c = twin::Cur(api);
    if (isAIVOnly && c.type == twin::CoreType::AIC)
        twin::Fail(api, "SyncAll<true> (isAIVOnly) is an all-AIV barrier; an AIC must not call it", "P:SyncAll");
    if (!isAIVOnly && !c.launch->mix)
        twin::Fail(api, "SyncAll<false> needs AICs (MIX launch)", "P:SyncAll");
    twin::detail::FinishCore(c);  // every SetFlag of the phase before the barrier waited for, as at a kernel's end
    twin::order::BarrierAll(c);   // SyncAllImpl begins with PipeBarrier<PIPE_ALL> (order.h)
    // the timeline splits each core's trace here: what follows starts once every core has arrived
    twin::trace::Rec("S", "SyncAll", isAIVOnly ? 0 : 1, 0, 0);
    twin::detail::Barrier(isAIVOnly ? 0 : 1, api);
}

}  // namespace AscendC

#endif  // TILEGEN_TWIN_LAUNCH_H
