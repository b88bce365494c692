// tilegen real-API twin, host runtime: core threads, local buffers, GM allocations, cross-core flags,
// kernel loading. Linked into the harness executable (exported with -rdynamic) so that the two kernel
// passes share one instance of it.
#include <asm/prctl.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core.h"
#include "host.h"
#include "kfc.h"
#include "load3d.h"
#include "unitflag.h"
#include "vector_more.h"
#include "regs.h"
#include "trace.h"

namespace cce_rt {

namespace {
thread_local Core* t_core = nullptr;
std::mutex g_mu;                 // GM registry, cross-core flags, deadlock accounting
std::condition_variable g_cv;
std::mutex g_atomic;

struct GmBlock {
    uint8_t* base;
    size_t bytes;
    std::string tag;
};
std::map<uintptr_t, GmBlock> g_gm;  // by start address

// Cross-core flags (CrossCoreSetFlag(ISASI).md and CrossCoreWaitFlag(ISASI).md, 约束说明 "flagId相关的约束";
// 核间同步/关键特性说明.md): every AIC and every AIV has its own 16 flag ids, each a counter 0-15. A wait
// (wait_flag_dev) blocks while the counter is 0, then takes 1. A set (ffts_cross_core_sync) reports to the
// scheduler, which raises counters once every core the mode involves has set that flag:
//  - mode 0: all cores of the setter's type in the launch (N AICs, or 2N AIVs); then the counter of every
//    core of that type rises by 1 (one wait released on each);
//  - mode 2, inside one AI Core: an AIC set raises the counter of each of its two AIVs; once both AIVs set,
//    the AIC's counter rises.
// A core's sets the scheduler still holds (its partners have not all set) are `pending`.
struct CoreFlags {
    int count[16] = {};    // the core's counter per flag id
    int pending[16] = {};  // this core's sets not yet turned into counter increments
    int mode[16] = {};     // the mode of those pending sets
    int syncAll = -1;      // the SyncAllImpl sequence this core is in (kSyncAll), -1: none
    int syncAllStep = 0;   // its next step
};

// Rule cross-core-flag-id: flags 11-14 are SyncAll's (CrossCoreSetFlag(ISASI).md 约束说明). The twin tells
// SyncAllImpl's own sets and waits (impl/basic_api/dav_c220/kernel_operator_sync_impl.h:384-405) from a
// kernel's by their sequence: each core's cross-core operations on 11-14 must follow one of these, step by
// step, with no other cross-core operation in between (SyncAllImpl has none). A kernel repeating SyncAll's
// exact sequence is indistinguishable from SyncAll and passes.
struct SyncStep {
    bool set;       // a set (ffts_cross_core_sync) or a wait (wait_flag_dev)
    int mode, pipe; // of a set
    int flag;
};
struct SyncAllSeq {
    const char* name;
    bool aic;       // the core type that runs it
    int steps;
    SyncStep step[4];
};
constexpr SyncAllSeq kSyncAll[] = {
    // SyncAll<false> on the AIC: wait SYNC_AIV_FLAG, set SYNC_AIC_FLAG (mode 0, PIPE_FIX), wait it, set SYNC_AIC_AIV_FLAG (mode 2, PIPE_MTE3)
    {"SyncAll<false> (AIC)", true, 4, {{false, 0, 0, 12}, {true, 0, PIPE_FIX, 11}, {false, 0, 0, 11}, {true, 2, PIPE_MTE3, 13}}},
    // SyncAll<false> on an AIV: set SYNC_AIV_FLAG (mode 2, PIPE_MTE3), wait SYNC_AIC_AIV_FLAG
    {"SyncAll<false> (AIV)", false, 2, {{true, 2, PIPE_MTE3, 12}, {false, 0, 0, 13}}},
    // SyncAll<true>: set SYNC_AIV_ONLY_ALL (mode 0, PIPE_MTE3), wait it (the headers run it on either core type)
    {"SyncAll<true>", false, 2, {{true, 0, PIPE_MTE3, 14}, {false, 0, 0, 14}}},
    {"SyncAll<true>", true, 2, {{true, 0, PIPE_MTE3, 14}, {false, 0, 0, 14}}},
};
bool Matches(const SyncStep& s, bool set, int mode, int pipe, int flag)
{
    return s.set == set && s.flag == flag && (!set || (s.mode == mode && s.pipe == pipe));
}

std::vector<CoreFlags> g_flags;  // 3 per AI Core: AIC, AIV 0, AIV 1
int g_running = 0, g_blocked = 0;
struct Waiter {
    const Core* core;
    int flag;
};
std::vector<Waiter> g_waiters;  // the cores blocked in wait_flag_dev

int Slot(int block, bool aic, int sub) { return 3 * block + (aic ? 0 : 1 + sub); }
int Slot(const Core& c) { return Slot(c.block, c.aic, c.sub); }
std::string SlotName(int slot)
{
    char b[64];
    if (slot % 3 == 0) std::snprintf(b, sizeof b, "AIC %d", slot / 3);
    else std::snprintf(b, sizeof b, "AIV %d (block %d, sub %d)", 2 * (slot / 3) + slot % 3 - 1, slot / 3, slot % 3 - 1);
    return b;
}

bool Ready(const Core& c, int flag) { return g_flags[Slot(c)].count[flag] > 0; }
// Deadlock: every running core waits and none of the waits can be satisfied.
bool Deadlocked()
{
    if (g_blocked < g_running) return false;
    for (const Waiter& w : g_waiters)
        if (Ready(*w.core, w.flag)) return false;
    return true;
}

std::string Who()
{
    if (t_core == nullptr) return "host";
    char b[64];
    if (t_core->aic) std::snprintf(b, sizeof b, "AIC %d", t_core->block);
    else std::snprintf(b, sizeof b, "AIV %d (block %d, sub %d)", 2 * t_core->block + t_core->sub, t_core->block, t_core->sub);
    return std::string(t_core->kernel) + ", " + b;
}
// Follows this core's SyncAll sequence (kSyncAll) through one cross-core operation; fails an operation on
// flags 11-14 that is no step of one, and any operation breaking into a sequence under way.
void FollowSyncAll(const char* what, const Core& c, bool set, int mode, int pipe, int flag)
{
    CoreFlags& f = g_flags[Slot(c)];
    if (f.syncAll >= 0) {
        const SyncAllSeq& q = kSyncAll[f.syncAll];
        if (!Matches(q.step[f.syncAllStep], set, mode, pipe, flag))
            FailRule(what, twin_rules::kCrossCoreFlagId, "impl/basic_api/dav_c220/kernel_operator_sync_impl.h:384-405",
                     "%s of flag %d inside %s, whose step %d is a %s of flag %d", set ? "a set" : "a wait", flag, q.name,
                     f.syncAllStep + 1, q.step[f.syncAllStep].set ? "set" : "wait", q.step[f.syncAllStep].flag);
        if (++f.syncAllStep == q.steps) f.syncAll = -1;
        return;
    }
    if (flag < 11 || flag > 14) return;
    for (int i = 0; i < static_cast<int>(sizeof kSyncAll / sizeof kSyncAll[0]); ++i)
        if (kSyncAll[i].aic == c.aic && Matches(kSyncAll[i].step[0], set, mode, pipe, flag)) {
            f.syncAll = i;
            f.syncAllStep = 1;
            return;
        }
    FailRule(what, twin_rules::kCrossCoreFlagId, nullptr,
             "%s of flag %d: 11-14 are SyncAll's (SYNC_AIC_FLAG 11, SYNC_AIV_FLAG 12, SYNC_AIC_AIV_FLAG 13, "
             "SYNC_AIV_ONLY_ALL 14), and this is no step of SyncAllImpl; use 0-10", set ? "a set" : "a wait", flag);
}
}  // namespace

Core& Cur()
{
    if (t_core == nullptr) Fail("intrinsic", "called outside a kernel launch");
    return *t_core;
}

// ---- the instruction trace (trace.h) ------------------------------------------------------------------
namespace {
struct TraceRange {
    bool any = false;
    uint64_t lo = 0, hi = 0;
    void Add(uint64_t a, uint64_t b)
    {
        if (!any || a < lo) lo = a;
        if (!any || b > hi) hi = b;
        any = true;
    }
};
constexpr int kGmSpace = NBUF;          // index of GM among the ranges
constexpr char kSpaceChar[NBUF + 1] = {'U', '1', 'A', 'B', 'C', 'G'};
struct TracePending {
    bool open = false;
    int pipe = 0;
    const char* kind = nullptr;
    TraceRange rd[NBUF + 1], wr[NBUF + 1];
    uint64_t gmBytes = 0, gmRuns = 0;
    bool gmAllWorkspace = true;
    bool sizes = false;
    int64_t sa = 0, sb = 0, sc = 0;
    uint64_t repeats = 0, wBytes = 0;
    bool wroteL0B = false;
};
thread_local TracePending t_pend;
thread_local uint64_t t_nextRepeats = 0;
thread_local std::string t_trace;
std::atomic<int> g_launchSerial{0};
int g_launch = 0;
const char* PipeShort(int p) { return p >= 0 && p < kPipes ? kPipeName[p] + 5 : "?"; }

void TraceFlushPending()
{
    TracePending& t = t_pend;
    if (!t.open) return;
    t.open = false;
    int64_t a, b, c;
    if (t.gmRuns > 0) {
        a = static_cast<int64_t>(t.gmBytes);
        b = static_cast<int64_t>(t.gmRuns);
        c = t.gmAllWorkspace ? 1 : 0;
    } else if (t.sizes) {
        a = t.sa;
        b = t.sb;
        c = t.sc;
    } else if (t.pipe == PIPE_V) {
        a = static_cast<int64_t>(t.repeats);
        b = c = 0;
    } else {
        a = static_cast<int64_t>(t.wBytes);
        b = t.wroteL0B ? 1 : 0;
        c = 0;
    }
    char line[200];
    int n = std::snprintf(line, sizeof line, "%s %s %lld %lld %lld", PipeShort(t.pipe), t.kind ? t.kind : "unknown",
                          static_cast<long long>(a), static_cast<long long>(b), static_cast<long long>(c));
    t_trace.append(line, static_cast<size_t>(n));
    for (const TraceRange* set : {t.wr, t.rd}) {
        int cnt = 0;
        for (int i = 0; i <= NBUF; ++i) cnt += set[i].any;
        n = std::snprintf(line, sizeof line, " %d", cnt);
        t_trace.append(line, static_cast<size_t>(n));
        for (int i = 0; i <= NBUF; ++i)
            if (set[i].any) {
                n = std::snprintf(line, sizeof line, " %c %llu %llu", kSpaceChar[i], static_cast<unsigned long long>(set[i].lo),
                                  static_cast<unsigned long long>(set[i].hi));
                t_trace.append(line, static_cast<size_t>(n));
            }
    }
    t_trace.push_back('\n');
}
bool InWorkspace(const void* p);  // below
}  // namespace

bool TraceOn()
{
    static const bool on = std::getenv("TWIN_TRACE") != nullptr && *std::getenv("TWIN_TRACE") != '\0';
    return on;
}
void TraceBegin(int pipe)
{
    KfcRelease();
    if (!TraceOn()) return;
    TraceFlushPending();
    t_pend = TracePending{};
    t_pend.open = true;
    t_pend.pipe = pipe;
    t_pend.repeats = t_nextRepeats;
    t_nextRepeats = 0;
}
void TraceLocal(const char* what, int buf, uint64_t off, uint64_t len, bool write)
{
    if (!TraceOn() || !t_pend.open) return;
    TracePending& t = t_pend;
    if (t.kind == nullptr) t.kind = what;
    (write ? t.wr : t.rd)[buf].Add(off, off + len);
    if (write) {
        t.wBytes += len;
        t.wroteL0B = t.wroteL0B || buf == L0B;
    }
}
void TraceGm(const char* what, const void* p, uint64_t bytes)
{
    if (!TraceOn() || !t_pend.open) return;
    TracePending& t = t_pend;
    if (t.kind == nullptr) t.kind = what;
    const uint64_t a = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
    (t.pipe == PIPE_MTE2 ? t.rd : t.wr)[kGmSpace].Add(a, a + bytes);
    t.gmBytes += bytes;
    t.gmRuns += 1;
    t.gmAllWorkspace = t.gmAllWorkspace && InWorkspace(p);
}
void TraceRepeats(uint64_t repeats)
{
    if (TraceOn()) t_nextRepeats = repeats;
}
void TraceSizes(int64_t a, int64_t b, int64_t c)
{
    if (!TraceOn() || !t_pend.open) return;
    t_pend.sizes = true;
    t_pend.sa = a;
    t_pend.sb = b;
    t_pend.sc = c;
}
// Appends this core's records to $TWIN_TRACE as one block (on its thread, when it finished).
void TraceFlushCore(const Core& c)
{
    if (!TraceOn()) return;
    TraceFlushPending();
    static std::mutex mu;
    std::lock_guard<std::mutex> lk(mu);
    if (FILE* f = std::fopen(std::getenv("TWIN_TRACE"), "a")) {
        std::fprintf(f, "core %d %d %s %d\n", g_launch, c.block, c.aic ? "AIC" : "AIV", c.aic ? 0 : c.sub);
        std::fwrite(t_trace.data(), 1, t_trace.size(), f);
        std::fputs("end\n", f);
        std::fclose(f);
    }
    t_trace.clear();
}
void TraceSync(const char* pipe, const char* kind, int64_t a, int64_t b, int64_t c)
{
    KfcRelease();
    if (!TraceOn()) return;
    TraceFlushPending();
    char line[160];
    const int n = std::snprintf(line, sizeof line, "%s %s %lld %lld %lld 0 0\n", pipe, kind, static_cast<long long>(a),
                                static_cast<long long>(b), static_cast<long long>(c));
    t_trace.append(line, static_cast<size_t>(n));
}

// ---- the matmul server's messages (kfc.h) ------------------------------------------------------------
namespace {
thread_local uint8_t* t_kfcWorkspace = nullptr;
std::mutex g_kfcMu;
uint64_t g_kfcMsgBytes = 0;                // the message area at the workspace's start (0: not traced)
std::map<uintptr_t, int> g_kfcPosted;      // message address -> the AIV sub that posted it, not yet looked at
thread_local bool t_kfcHeld = false;       // the AIC holds g_kfcMu (from a look to its next intrinsic)
thread_local const uint8_t* t_postDst = nullptr;  // an AIV's message post under way (holds g_kfcMu)
bool InMessageArea(const void* p)
{
    const uint8_t* ws = t_kfcWorkspace;
    const uint8_t* a = static_cast<const uint8_t*>(p);
    return ws != nullptr && g_kfcMsgBytes > 0 && a >= ws && a < ws + g_kfcMsgBytes;
}
}  // namespace

uint8_t*& KfcWorkspace() { return t_kfcWorkspace; }
namespace {
std::atomic<bool> g_kfcLaunch{false};  // some core of this launch set a system workspace (kfc.h)
}  // namespace
void SetKfcWorkspace(uint8_t* p)
{
    t_kfcWorkspace = p;
    g_kfcLaunch = true;
}
uint64_t& RsvdCntRegister()
{
    thread_local uint64_t n = 0;
    return n;
}
UnitFlags& CoreUnitFlags()
{
    thread_local UnitFlags u;
    return u;
}
uint64_t& FmatrixRegister(bool b)
{
    thread_local uint64_t fm[2] = {0, 0};
    return fm[b ? 1 : 0];
}
uint64_t& CtrlRegister()
{
    thread_local uint64_t ctrl = 0;
    return ctrl;
}
void SetKfcMessageArea(uint64_t bytes) { g_kfcMsgBytes = bytes; }
void KfcPostBegin(const uint8_t* dst)
{
    if (!TraceOn() || t_core == nullptr || t_core->aic || !InMessageArea(dst)) return;
    g_kfcMu.lock();
    t_postDst = dst;
}
void KfcPostEnd()
{
    if (t_postDst == nullptr) return;
    const int sub = t_core->sub;
    TraceSync("MTE3", "CrossCoreSetFlag", 2, 16 + sub, 0);
    g_kfcPosted[reinterpret_cast<uintptr_t>(t_postDst)] = sub;
    t_postDst = nullptr;
    g_kfcMu.unlock();
}
void KfcLook(const void* addr)
{
    KfcRelease();
    if (!TraceOn() || t_core == nullptr || !t_core->aic || !InMessageArea(addr)) return;
    g_kfcMu.lock();
    t_kfcHeld = true;
    auto it = g_kfcPosted.find(reinterpret_cast<uintptr_t>(addr));
    if (it != g_kfcPosted.end()) {
        const int sub = it->second;
        g_kfcPosted.erase(it);
        TraceFlushPending();
        char line[96];
        const int n = std::snprintf(line, sizeof line, "S CrossCoreWaitFlag 0 %d %d 0 0\n", 16 + sub, 1 + sub);
        t_trace.append(line, static_cast<size_t>(n));
    }
}
void KfcRelease()
{
    if (!t_kfcHeld) return;
    t_kfcHeld = false;
    g_kfcMu.unlock();
}

// The first failing core prints its line and ends the process; a core failing at the same time waits
// for that exit, so there is exactly one line.
[[noreturn]] void FailOnce(const std::string& line)
{
    static std::atomic<bool> failing{false};
    if (failing.exchange(true))
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    std::_Exit(1);
}

void Fail(const char* what, const char* fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    FailOnce(std::string("twin(real API): ") + what + ": " + msg + " [" + Who() + "]\n");
}

void FailRule(const char* what, const twin_rules::Rule& rule, const char* detail, const char* fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    FailOnce(std::string("twin(real API): ") + what + ": rule " + rule.name + ": " + msg + " (" + rule.page +
             (detail != nullptr ? std::string("; ") + detail : std::string()) + ") [" + Who() + "]\n");
}

namespace {
// p lies in an allocation tagged "handoff workspace" (the launch's workspace; the timeline prices its copies
// at L2 rates). Takes g_mu.
bool InWorkspace(const void* p)
{
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_gm.upper_bound(a);
    if (it == g_gm.begin()) return false;
    --it;
    return a < it->first + it->second.bytes && it->second.tag == "handoff workspace";
}
}  // namespace

void CheckGm(const char* what, const void* p, uint64_t bytes)
{
    TraceGm(what, p, bytes);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_gm.upper_bound(a);
    if (it != g_gm.begin()) {
        --it;
        const uintptr_t lo = it->first, hi = lo + it->second.bytes;
        if (a >= lo && a + bytes <= hi) return;
        if (a >= lo && a < hi) {
            char b[512];
            std::snprintf(b, sizeof b, "twin(real API): %s: GM bytes [%zu, %zu) of \"%s\" (%zu bytes) out of bounds [%s]\n", what,
                          static_cast<size_t>(a - lo), static_cast<size_t>(a - lo + bytes), it->second.tag.c_str(),
                          it->second.bytes, Who().c_str());
            FailOnce(b);
        }
    }
    char b[512];
    std::snprintf(b, sizeof b, "twin(real API): %s: GM address %p (+%llu bytes) outside every allocation [%s]\n", what, p,
                  static_cast<unsigned long long>(bytes), Who().c_str());
    FailOnce(b);
}

void AtomicLock() { g_atomic.lock(); }
void AtomicUnlock() { g_atomic.unlock(); }

// The counter of `slot` for `flag` rises by 1 (a set of the scheduler completed). 4-bit counter: past 15 the
// hardware raises an exception (CrossCoreSetFlag(ISASI).md, 约束说明).
void Raise(int slot, int flag, bool saturate = false)
{
    if (saturate && g_flags[slot].count[flag] == 15) return;  // a matmul server's notification (kfc.h)
    if (++g_flags[slot].count[flag] > 15)
        Fail("ffts_cross_core_sync", "16th pending set of flag %d on %s (the counter is 4 bits)", flag, SlotName(slot).c_str());
}

void CrossCoreSet(int mode, int pipe, int flag)
{
    Core& c = Cur();
    // Rule cross-core-mode: A2 has modes 0, 1, 2 (CrossCoreSetFlag(ISASI).md, "modeId支持的取值说明"); GetffstMsg
    // keeps the low 2 bits of the template's modeId, so only 3 arrives here (a mode 4 arrives as 0). Mode 1 (the
    // two AIVs of one AI Core) is not modelled.
    if (mode != 0 && mode != 1 && mode != 2)
        FailRule("ffts_cross_core_sync", twin_rules::kCrossCoreMode, nullptr, "mode %d does not exist on A2 (modes 0, 1, 2)", mode);
    if (mode == 1) Fail("ffts_cross_core_sync", "mode 1 is not modelled (modes 0 and 2 are)");
    // Modes 0, 1, 2 take no PIPE_S and no PIPE_ALL (CrossCoreSetFlag(ISASI).md, "pipe支持的流水类型说明").
    if (pipe < 0 || pipe >= kPipes) Fail("ffts_cross_core_sync", "pipe %d", pipe);
    if (pipe == PIPE_S || pipe == PIPE_ALL) Fail("ffts_cross_core_sync", "pipe %s is not allowed in mode %d", kPipeName[pipe], mode);
    // Ids 0-15 exist: GetffstMsg keeps the low 4 bits of a larger id (kernel_operator_sync_impl.h:124), as the
    // hardware does (CrossCoreSetFlag(ISASI).md 约束说明), so a set of 16 arrives here as a set of 0 (its wait,
    // wait_flag_dev(16), is refused). 11-14 are SyncAll's (SyncAll.md, CrossCoreSetFlag(ISASI).md 约束说明:
    // "SyncAll硬件同步接口flagId占用范围为[11-14]"; SYNC_AIC_FLAG 11, SYNC_AIV_FLAG 12, SYNC_AIC_AIV_FLAG 13,
    // SYNC_AIV_ONLY_ALL 14 at impl/basic_api/dav_c220/kernel_operator_sync_impl.h:117-120): only SyncAllImpl's
    // own sequence may use them (FollowSyncAll). 15 is the KFC's (KFC_SYNC_ID,
    // impl/basic_api/dav_c220/kfc/kfc_comm.h:113; WORKSPACE_SYNC_ID, impl/adv_api/detail/kfc/kernel_kfc.h:29).
    if (flag == 15 && KfcWorkspace() == nullptr)
        Fail("ffts_cross_core_sync", "flag id 15 is reserved (KFC_SYNC_ID of the matmul server, whose kernels set a system workspace)");
    FollowSyncAll("ffts_cross_core_sync", c, true, mode, pipe, flag);
    TraceSync(PipeShort(pipe), "CrossCoreSetFlag", mode, flag, 0);
    std::lock_guard<std::mutex> lk(g_mu);
    if (std::getenv("TILEGEN_TWIN_TRACE")) std::fprintf(stderr, "trace: %s sets flag %d (mode %d)\n", Who().c_str(), flag, mode);
    const int me = Slot(c);
    CoreFlags& f = g_flags[me];
    // "同一核上，若同一个flagId需用于不同核间同步模式，须在模式切换前完成前一个模式的所有同步操作" (CrossCoreSetFlag(ISASI).md)
    if (f.pending[flag] > 0 && f.mode[flag] != mode)
        Fail("ffts_cross_core_sync", "flag %d set in mode %d while this core's mode-%d sets of it are pending", flag, mode, f.mode[flag]);
    if (mode == 2 && c.aic) {
        for (int s = 0; s < 2; ++s) Raise(Slot(c.block, false, s), flag, g_kfcLaunch);
    } else {
        // The core this set finally raises: the AIC (mode 2 from an AIV) or the setter itself (mode 0). Its
        // sets not yet taken by a wait there are bounded by the counter's 15.
        const int target = mode == 2 ? Slot(c.block, true, 0) : me;
        f.mode[flag] = mode;
        if (++f.pending[flag] + g_flags[target].count[flag] > 15)
            Fail("ffts_cross_core_sync", "16th pending set of flag %d (the counter is 4 bits)", flag);
        std::vector<int> group;  // every core the mode involves
        if (mode == 2) {
            group = {Slot(c.block, false, 0), Slot(c.block, false, 1)};
        } else {
            for (int b = 0; b < static_cast<int>(g_flags.size()) / 3; ++b)
                if (c.aic) group.push_back(Slot(b, true, 0));
                else for (int s = 0; s < 2; ++s) group.push_back(Slot(b, false, s));
        }
        bool all = true;
        for (int g : group) all = all && g_flags[g].pending[flag] > 0 && g_flags[g].mode[flag] == mode;
        if (all) {
            for (int g : group) --g_flags[g].pending[flag];
            if (mode == 2) Raise(target, flag);
            else for (int g : group) Raise(g, flag);
        }
    }
    g_cv.notify_all();
}

void CrossCoreWait(int flag)
{
    Core& c = Cur();
    // Rule cross-core-flag-id: the hardware keeps the low 4 bits of a larger id (CrossCoreSetFlag(ISASI).md);
    // WaitEventImpl passes the id unmasked, so here it is seen.
    if (flag < 0 || flag > 15)
        FailRule("wait_flag_dev", twin_rules::kCrossCoreFlagId, nullptr,
                 "flag id %d not in [0, 15] (the hardware would keep its low 4 bits: flag %d)", flag, flag & 15);
    if (flag == 15 && KfcWorkspace() == nullptr)
        Fail("wait_flag_dev", "flag id 15 is reserved (KFC_SYNC_ID of the matmul server, whose kernels set a system workspace)");
    FollowSyncAll("wait_flag_dev", c, false, 0, 0, flag);
    TraceSync("S", "CrossCoreWaitFlag", 0, flag, 0);
    std::unique_lock<std::mutex> lk(g_mu);
    if (std::getenv("TILEGEN_TWIN_TRACE")) std::fprintf(stderr, "trace: %s waits flag %d\n", Who().c_str(), flag);
    ++g_blocked;
    g_waiters.push_back(Waiter{&c, flag});
    while (!Ready(c, flag)) {
        if (Deadlocked()) {
            lk.unlock();
            Fail("wait_flag_dev", "deadlock: waits for flag %d and every running core is blocked", flag);
        }
        g_cv.wait_for(lk, std::chrono::milliseconds(200));
    }
    --g_blocked;
    for (size_t i = 0; i < g_waiters.size(); ++i)
        if (g_waiters[i].core == &c) {
            g_waiters.erase(g_waiters.begin() + static_cast<long>(i));
            break;
        }
    --g_flags[Slot(c)].count[flag];
}

}  // namespace cce_rt

namespace twin {

using cce_rt::Core;

void* GmAlloc(size_t bytes, const char* tag)
{
    const size_t n = bytes == 0 ? 1 : bytes;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096));
    std::memset(p, cce_rt::kPoison, n);
    std::lock_guard<std::mutex> lk(cce_rt::g_mu);
    cce_rt::g_gm[reinterpret_cast<uintptr_t>(p)] = cce_rt::GmBlock{p, bytes, tag ? tag : ""};
    return p;
}

void GmFree(void* p)
{
    {
        std::lock_guard<std::mutex> lk(cce_rt::g_mu);
        cce_rt::g_gm.erase(reinterpret_cast<uintptr_t>(p));
    }
    std::free(p);
}

namespace {

std::string ExeDir()
{
    char b[4096];
    ssize_t n = readlink("/proc/self/exe", b, sizeof b - 1);
    if (n <= 0) return ".";
    b[n] = 0;
    std::string s(b);
    return s.substr(0, s.rfind('/'));
}

void* Symbol(const std::string& label, const char* pass, const char* name)
{
    static std::map<std::string, void*> handles;
    const std::string path = ExeDir() + "/" + label + "_" + pass + ".so";
    void*& h = handles[path];
    if (h == nullptr) h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) cce_rt::Fail("launch", "cannot load %s: %s", path.c_str(), dlerror());
    void* f = dlsym(h, name);
    if (f == nullptr) cce_rt::Fail("launch", "%s has no kernel %s", path.c_str(), name);
    return f;
}

constexpr int kMaxArgs = 48;  // a mod's parameters and gradient partials add kernel arguments

template <size_t... I>
void CallN(void* fn, void* const* args, std::index_sequence<I...>)
{
    reinterpret_cast<void (*)(decltype((void)I, static_cast<void*>(nullptr))...)>(fn)(args[I]...);
}
// Calls fn with nargs pointer arguments (every kernel parameter is a GM_ADDR).
template <size_t... N>
bool CallWith(void* fn, void* const* args, int nargs, std::index_sequence<N...>)
{
    return ((nargs == static_cast<int>(N) ? (CallN(fn, args, std::make_index_sequence<N>{}), true) : false) || ...);
}

// UB of an AIV: mmap'd between PROT_NONE guards of 64 KiB, so that a scalar access past either end
// (through GS) faults instead of reaching other memory.
constexpr size_t kGuard = 64 * 1024;
uint8_t* MapUb()
{
    const size_t n = cce_rt::kBufSize[cce_rt::UB] + 2 * kGuard;
    void* p = mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) cce_rt::Fail("launch", "cannot map UB");
    uint8_t* ub = static_cast<uint8_t*>(p) + kGuard;
    if (mprotect(ub, cce_rt::kBufSize[cce_rt::UB], PROT_READ | PROT_WRITE) != 0) cce_rt::Fail("launch", "cannot map UB");
    std::memset(ub, cce_rt::kPoison, cce_rt::kBufSize[cce_rt::UB]);
    return ub;
}
void UnmapUb(uint8_t* ub) { munmap(ub - kGuard, cce_rt::kBufSize[cce_rt::UB] + 2 * kGuard); }

void OnSegv(int)
{
    cce_rt::Fail("scalar access", "segmentation fault: a scalar access outside this core's UB, or scalar code "
                                  "dereferencing an L1/L0 address (or a fault in tilegen's twin)");
}

void RunCore(Core* core, void* fn, void* const* args, int nargs)
{
    cce_rt::t_core = core;
    if (!core->aic && syscall(SYS_arch_prctl, ARCH_SET_GS, reinterpret_cast<unsigned long>(core->buf[cce_rt::UB])) != 0)
        cce_rt::Fail("launch", "cannot point GS at the UB of this core");
    if (!CallWith(fn, args, nargs, std::make_index_sequence<kMaxArgs + 1>{}))
        cce_rt::Fail("launch", "kernels with %d arguments are not supported (at most %d)", nargs, kMaxArgs);
    cce_rt::KfcRelease();
    cce_rt::TraceFlushCore(*core);
    for (int s = 0; s < cce_rt::kPipes; ++s)
        for (int d = 0; d < cce_rt::kPipes; ++d)
            for (int e = 0; e < 8; ++e)
                if (core->flagSet[s][d][e]) cce_rt::Fail("kernel end", "flag %d -> %d event %d still set (SetFlag without WaitFlag)", s, d, e);
    std::lock_guard<std::mutex> lk(cce_rt::g_mu);
    if (std::getenv("TILEGEN_TWIN_TRACE")) std::fprintf(stderr, "trace: %s ends\n", cce_rt::Who().c_str());
    --cce_rt::g_running;
    cce_rt::t_core = nullptr;
    if (cce_rt::g_running > 0 && cce_rt::Deadlocked()) {
        const cce_rt::Waiter w = cce_rt::g_waiters.front();
        cce_rt::t_core = const_cast<Core*>(w.core);
        cce_rt::Fail("wait_flag_dev", "deadlock: waits for flag %d that no running core can set", w.flag);
    }
    cce_rt::g_cv.notify_all();
}

}  // namespace

void LaunchRaw(uint32_t blocks, const Kernel& k, void* const* args, int nargs)
{
    const bool chosen = std::getenv("TWIN_TRACE_BLOCKS") != nullptr && *std::getenv("TWIN_TRACE_BLOCKS") != '\0';
    if (blocks < 1 || (blocks > 24 && !chosen)) cce_rt::Fail("launch", "blocks %u not in [1, 24] (AI Cores of a 910B)", blocks);
    void* cube = Symbol(k.label, "cube", k.name);
    void* vec = Symbol(k.label, "vec", k.name);
    // TWIN_TRACE_BLOCKS=b0,b1,...: only those blocks run, each with the block index and count of the full launch
    // (trace.h); numBlocks may then exceed the 24 AI Cores.
    std::vector<bool> run(blocks, true);
    if (const char* e = std::getenv("TWIN_TRACE_BLOCKS"); e != nullptr && *e != '\0') {
        run.assign(blocks, false);
        for (const char* p = e; *p;) {
            char* end = nullptr;
            const long v = std::strtol(p, &end, 10);
            if (end == p) cce_rt::Fail("launch", "TWIN_TRACE_BLOCKS=%s is not a list of block indices", e);
            if (v < 0 || v >= static_cast<long>(blocks)) cce_rt::Fail("launch", "TWIN_TRACE_BLOCKS names block %ld of a %u-block launch", v, blocks);
            run[static_cast<size_t>(v)] = true;
            p = *end == ',' ? end + 1 : end;
        }
    }
    cce_rt::g_launch = cce_rt::g_launchSerial++;
    cce_rt::g_kfcLaunch = false;
    std::vector<Core> cores(3 * blocks);
    std::vector<std::vector<uint8_t>> mem;
    std::vector<std::vector<cce_rt::Shadow>> shadows;
    for (uint32_t b = 0; b < blocks; ++b)
        for (int i = 0; i < 3; ++i) {
            if (!run[b]) continue;
            Core& c = cores[3 * b + i];
            c.aic = i == 0;
            c.block = static_cast<int>(b);
            c.sub = i == 0 ? 0 : i - 1;
            c.blocks = static_cast<int>(blocks);
            c.kernel = k.name;
            for (int m = 0; m < cce_rt::NBUF; ++m) {
                if ((m == cce_rt::UB) == c.aic) continue;
                if (m == cce_rt::UB) {
                    c.buf[m] = MapUb();
                } else {
                    mem.emplace_back(cce_rt::kBufSize[m], cce_rt::kPoison);
                    c.buf[m] = mem.back().data();
                }
                shadows.emplace_back(cce_rt::kBufSize[m] / 32, cce_rt::Shadow{0, 0xFF, {}});
                c.shadow[m] = shadows.back().data();
            }
        }
    {
        std::lock_guard<std::mutex> lk(cce_rt::g_mu);
        cce_rt::g_flags.assign(3 * blocks, cce_rt::CoreFlags{});
        cce_rt::g_running = 3 * static_cast<int>(std::count(run.begin(), run.end(), true));
        cce_rt::g_blocked = 0;
        cce_rt::g_waiters.clear();
    }
    struct sigaction sa {};
    sa.sa_handler = OnSegv;
    sigaction(SIGSEGV, &sa, nullptr);
    std::vector<std::thread> threads;
    for (uint32_t b = 0; b < blocks; ++b)
        if (run[b])
            for (int i = 0; i < 3; ++i) threads.emplace_back(RunCore, &cores[3 * b + i], i == 0 ? cube : vec, args, nargs);
    for (std::thread& t : threads) t.join();
    for (Core& c : cores)
        if (!c.aic && c.buf[cce_rt::UB] != nullptr) UnmapUb(c.buf[cce_rt::UB]);
    for (int slot = 0; slot < static_cast<int>(3 * blocks); ++slot)
        for (int f = 0; f < 16; ++f) {
            const cce_rt::CoreFlags& cf = cce_rt::g_flags[slot];
            if (cf.count[f] && !(cce_rt::g_kfcLaunch && slot % 3 != 0))  // an AIV's counter of a matmul-server launch: kfc.h
                cce_rt::Fail("kernel end", "block %d: cross-core flag %d has sets nobody waited for (%s)", slot / 3, f,
                             cce_rt::SlotName(slot).c_str());
            if (cf.pending[f])
                cce_rt::Fail("kernel end", "block %d: cross-core flag %d: mode-%d sets of %s that not every core of the mode matched",
                             slot / 3, f, cf.mode[f], cce_rt::SlotName(slot).c_str());
        }
}

}  // namespace twin
