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

void CheckGm(const char* what, const void* p, uint64_t bytes)
{
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
void Raise(int slot, int flag)
{
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
    if (flag == 15) Fail("ffts_cross_core_sync", "flag id 15 is reserved (KFC_SYNC_ID of the matmul server)");
    FollowSyncAll("ffts_cross_core_sync", c, true, mode, pipe, flag);
    std::lock_guard<std::mutex> lk(g_mu);
    if (std::getenv("TILEGEN_TWIN_TRACE")) std::fprintf(stderr, "trace: %s sets flag %d (mode %d)\n", Who().c_str(), flag, mode);
    const int me = Slot(c);
    CoreFlags& f = g_flags[me];
    // "同一核上，若同一个flagId需用于不同核间同步模式，须在模式切换前完成前一个模式的所有同步操作" (CrossCoreSetFlag(ISASI).md)
    if (f.pending[flag] > 0 && f.mode[flag] != mode)
        Fail("ffts_cross_core_sync", "flag %d set in mode %d while this core's mode-%d sets of it are pending", flag, mode, f.mode[flag]);
    if (mode == 2 && c.aic) {
        for (int s = 0; s < 2; ++s) Raise(Slot(c.block, false, s), flag);
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
    if (flag == 15) Fail("wait_flag_dev", "flag id 15 is reserved (KFC_SYNC_ID of the matmul server)");
    FollowSyncAll("wait_flag_dev", c, false, 0, 0, flag);
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
    if (blocks < 1 || blocks > 24) cce_rt::Fail("launch", "blocks %u not in [1, 24] (AI Cores of a 910B)", blocks);
    void* cube = Symbol(k.label, "cube", k.name);
    void* vec = Symbol(k.label, "vec", k.name);
    std::vector<Core> cores(3 * blocks);
    std::vector<std::vector<uint8_t>> mem;
    std::vector<std::vector<cce_rt::Shadow>> shadows;
    for (uint32_t b = 0; b < blocks; ++b)
        for (int i = 0; i < 3; ++i) {
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
        cce_rt::g_running = static_cast<int>(3 * blocks);
        cce_rt::g_blocked = 0;
        cce_rt::g_waiters.clear();
    }
    struct sigaction sa {};
    sa.sa_handler = OnSegv;
    sigaction(SIGSEGV, &sa, nullptr);
    std::vector<std::thread> threads;
    for (Core& c : cores) threads.emplace_back(RunCore, &c, c.aic ? cube : vec, args, nargs);
    for (std::thread& t : threads) t.join();
    for (Core& c : cores)
        if (!c.aic) UnmapUb(c.buf[cce_rt::UB]);
    for (int slot = 0; slot < static_cast<int>(3 * blocks); ++slot)
        for (int f = 0; f < 16; ++f) {
            const cce_rt::CoreFlags& cf = cce_rt::g_flags[slot];
            if (cf.count[f])
                cce_rt::Fail("kernel end", "block %d: cross-core flag %d has sets nobody waited for (%s)", slot / 3, f,
                             cce_rt::SlotName(slot).c_str());
            if (cf.pending[f])
                cce_rt::Fail("kernel end", "block %d: cross-core flag %d: mode-%d sets of %s that not every core of the mode matched",
                             slot / 3, f, cf.mode[f], cce_rt::SlotName(slot).c_str());
        }
}

}  // namespace twin
