// tilegen CPU twin of the Ascend C API subset (Atlas A2 / 910B, __NPU_ARCH__ 2201).
// base.h: keyword macros, scalar types, enums, failure reporting, per-core context.
//
// Written from the API documentation and the crib sheet /work/shared/reference/ascendc-api.md;
// citations use its tags: [P:Name] = asc-devkit docs/api/context/Name.md @452bbfb9,
// [G:path] = programming guide, [I:path] = library behaviour (facts only, no code copied),
// [Z:path] = restructured reference, [OT:...] = ops-transformer FAG kernel.
#ifndef TILEGEN_TWIN_BASE_H
#define TILEGEN_TWIN_BASE_H

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rules.h"

// ---------------------------------------------------------------------------------------------
// Keyword macros. In CPU twin mode all address-space qualifiers are empty
// [G:编程指南/语言扩展层/SIMD-BuiltIn关键字, G:编程指南/调试调优/功能调试/CPU域孪生调试].
#define __global__
#define __aicore__
#define __schedmode__(mode)  // the launch's scheduling mode [G:…/SIMD-BuiltIn关键字]: nothing to do in the twin
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ca__
#define __cb__
#define __cc__
#define __fbuf__
#define __inout_pipe__(x)
#define __sync_alias__
#ifndef __NPU_ARCH__
#define __NPU_ARCH__ 2201
#endif
#ifndef __CCE_AICORE__
#define __CCE_AICORE__ 220
#endif
#define TILEGEN_TWIN 1
// Kernel entry arguments: #define GM_ADDR __gm__ uint8_t* [G:编程指南/编程模型/AI-Core-SIMD编程/核函数]
#define GM_ADDR __gm__ uint8_t*

// Scalar types. half = IEEE binary16 (_Float16, round-to-nearest-even conversions).
using half = _Float16;

// bfloat16_t: 1/8/7 bits [P:Cast]. Conversion from float rounds to nearest even; NaN stays NaN.
struct bfloat16_t {
    uint16_t bits;
    bfloat16_t() : bits(0) {}
    bfloat16_t(float f) : bits(FromFloat(f)) {}
    operator float() const
    {
        uint32_t u = static_cast<uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    static bfloat16_t FromBits(uint16_t b)
    {
        bfloat16_t r;
        r.bits = b;
        return r;
    }
    static uint16_t FromFloat(float f)
    {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
        uint32_t lsb = (u >> 16) & 1u;
        u += 0x7fffu + lsb;
        return static_cast<uint16_t>(u >> 16);
    }
};

namespace twin {

// =============================================================================================
// Failure reporting. Every violation is one line
//     twin: <API>: <what> (<source>) [core ...]
// on stderr followed by abort() (non-zero exit). With TWIN_THROW=1 in the environment, or after
// twin::SetFailMode(twin::FailMode::Throw), a failure throws twin::Failure instead (tests).
// =============================================================================================
enum class FailMode { Abort, Throw };

struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// Thrown in the other cores of a launch after one core failed (throw mode only).
struct Aborted : std::exception {
    const char* what() const noexcept override { return "twin: launch aborted after a failure on another core"; }
};

namespace detail {
inline std::atomic<int>& FailModeVar()
{
    static std::atomic<int> v{-1};
    return v;
}
}  // namespace detail

inline void SetFailMode(FailMode m) { detail::FailModeVar().store(static_cast<int>(m)); }
inline FailMode GetFailMode()
{
    int v = detail::FailModeVar().load();
    if (v < 0) {
        const char* e = std::getenv("TWIN_THROW");
        v = (e != nullptr && e[0] != '\0' && e[0] != '0') ? 1 : 0;
        detail::FailModeVar().store(v);
    }
    return v == 1 ? FailMode::Throw : FailMode::Abort;
}

inline std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string Fmt(const char* fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return std::string(buf);
}

enum class CoreType : uint8_t { AIC = 0, AIV = 1 };

struct Launch;
struct CoreCtx;
inline thread_local CoreCtx* t_core = nullptr;

// Hardware buffers (physical) [P:通用说明和约束 表1].
enum class Hw : uint8_t { GM = 0, UB, L1, L0A, L0B, L0C, BT, FB, COUNT };
inline const char* HwName(Hw h)
{
    static const char* n[] = {"GM", "UB", "L1", "L0A", "L0B", "L0C", "BiasTable", "FixpipeBuffer"};
    return n[static_cast<int>(h)];
}
// Pool capacities per core, bytes [ascendc-api §0.1; ascend-910b §1.2; I:kernel_utils_mode_cpu.h].
inline uint32_t HwSize(Hw h)
{
    switch (h) {
        case Hw::UB: return 196608;
        case Hw::L1: return 524288;
        case Hw::L0A: return 65536;
        case Hw::L0B: return 65536;
        case Hw::L0C: return 131072;
        case Hw::BT: return 1024;
        case Hw::FB: return 7168;
        default: return 0;
    }
}
// The asc-devkit line giving a level's capacity (rule local-capacity), or null for the ones it does not list.
inline const char* CapacityLine(Hw h)
{
    if (h == Hw::L0A || h == Hw::L0B) return twin_rules::kCapacityL0;
    if (h == Hw::UB || h == Hw::L1 || h == Hw::L0C) return twin_rules::kCapacity2201;
    return nullptr;
}
// Start alignment per buffer [P:通用说明和约束 表2 通用地址对齐约束].
inline uint32_t HwAlign(Hw h)
{
    switch (h) {
        case Hw::UB: return 32;
        case Hw::L1: return 32;
        case Hw::L0A: return 512;
        case Hw::L0B: return 512;
        case Hw::L0C: return 64;
        case Hw::BT: return 64;
        case Hw::FB: return 64;
        default: return 1;
    }
}

// Per-core atomic store state [P:SetAtomicAdd, P:SetAtomicType, ascendc-api §7.4].
enum class AtomicOp : uint8_t { None = 0, Add, Max, Min };
enum class DType : uint8_t { None = 0, F16, BF16, F32, I8, U8, I16, U16, I32, U32, I64, U64, Other };
template <typename T>
constexpr DType DTypeOf()
{
    if constexpr (std::is_same_v<T, half>) return DType::F16;
    else if constexpr (std::is_same_v<T, bfloat16_t>) return DType::BF16;
    else if constexpr (std::is_same_v<T, float>) return DType::F32;
    else if constexpr (std::is_same_v<T, int8_t>) return DType::I8;
    else if constexpr (std::is_same_v<T, uint8_t>) return DType::U8;
    else if constexpr (std::is_same_v<T, int16_t>) return DType::I16;
    else if constexpr (std::is_same_v<T, uint16_t>) return DType::U16;
    else if constexpr (std::is_same_v<T, int32_t>) return DType::I32;
    else if constexpr (std::is_same_v<T, uint32_t>) return DType::U32;
    else if constexpr (std::is_same_v<T, int64_t>) return DType::I64;
    else if constexpr (std::is_same_v<T, uint64_t>) return DType::U64;
    else return DType::Other;
}
inline const char* DTypeName(DType d)
{
    static const char* n[] = {"none", "half", "bfloat16_t", "float", "int8_t", "uint8_t", "int16_t",
                              "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "other"};
    return n[static_cast<int>(d)];
}
template <typename T>
const char* TypeName()
{
    return DTypeName(DTypeOf<T>());
}

// Pipes of each core type (for SetFlag/WaitFlag/PipeBarrier/CrossCoreSetFlag checks) [ascendc-api §6].
enum class PipeBit : uint32_t { S = 1, V = 2, M = 4, MTE1 = 8, MTE2 = 16, MTE3 = 32, FIX = 64 };
constexpr uint32_t kAivPipes = 1 | 2 | 16 | 32;
constexpr uint32_t kAicPipes = 1 | 4 | 8 | 16 | 32 | 64;

constexpr int kNumHardEvents = 40;
constexpr int kMaxXFlags = 16;

// Pipe ordering state of one core (order.h). Pipes are indexed by their pipe_t value (PIPE_S 0 ..
// PIPE_FIX 10); the shadow of a local buffer has one entry per 32-byte block and keeps, for the
// block's last write and for its last read on each pipe that touches local memory (V, M, MTE1, MTE2,
// MTE3, FIX), that instruction's index in its pipe.
constexpr int kOrderPipes = 11;
constexpr int kOrderSlots = 6;  // shadow slots: V, M, MTE1, MTE2, MTE3, FIX
struct OrderBlock {
    uint32_t wop;               // index (in its pipe) of the last instruction that wrote the block
    uint32_t wpipe;             // its pipe; 0 (PIPE_S, never a tracked writer): not written yet
    uint32_t rop[kOrderSlots];  // per slot: index of that pipe's last instruction that read the block
};
struct PipeOrder {
    // clock[p][q]: index of the last instruction of pipe q that pipe p is ordered after (through
    // SetFlag/WaitFlag chains, PipeBarrier<PIPE_ALL> or a TQue hand-over); clock[p][p]: instructions
    // issued on p so far.
    uint32_t clock[kOrderPipes][kOrderPipes] = {};
    // SetFlag<E>(id) takes a copy of its source pipe's clock; WaitFlag<E>(id) merges it into the
    // destination pipe's.
    uint32_t flag[kNumHardEvents][8][kOrderPipes] = {};
    // per pipe: the API of its last kOrderApis instructions (instruction i at i % kOrderApis), for messages
    static constexpr uint32_t kOrderApis = 1024;
    const char* api[kOrderPipes][kOrderApis] = {};
    std::unique_ptr<OrderBlock, void (*)(void*)> shadow[8] = {
        {nullptr, std::free}, {nullptr, std::free}, {nullptr, std::free}, {nullptr, std::free},
        {nullptr, std::free}, {nullptr, std::free}, {nullptr, std::free}, {nullptr, std::free}};  // per Hw, on first touch
};
static_assert(static_cast<int>(Hw::COUNT) == 8, "PipeOrder::shadow has one entry per Hw");

struct CoreCtx {
    Launch* launch = nullptr;
    CoreType type = CoreType::AIV;
    int index = 0;      // index among the cores of its type (AIC: group, AIV: 2*group+sub or block)
    int group = 0;      // MIX: the block (1 AIC + 2 AIV); AIV-only: the block
    int sub = 0;        // AIV: 0/1 in MIX, 0 in AIV-only
    int64_t blockIdx = 0, blockNum = 1, subBlockIdx = 0, subBlockNum = 1, taskRatio = 1;
    uint8_t* pool[static_cast<int>(Hw::COUNT)] = {};
    void* pipe = nullptr;      // active AscendC::TPipe*
    uint64_t pipeGen = 0;      // bumped on every TPipe construction/Reset/Destroy
    bool eventSet[kNumHardEvents][8] = {};
    AtomicOp atomicOp = AtomicOp::None;
    DType atomicType = DType::None;
    // vector mask register [Z:…/掩码/接口外设置Mask, P:SetMaskCount, P:SetMaskNorm]
    bool maskCounter = false;
    uint64_t maskLo = ~0ull, maskHi = ~0ull;
    uint32_t ubPipeEndMax = 0;  // highest end of any TPipe UB allocation (184 KiB rule)
    std::string waitingOn;              // description while blocked (deadlock reports)
    std::function<bool()> waitPred;     // while blocked: the condition it waits for (under the launch lock)
    std::vector<std::unique_ptr<uint8_t, void (*)(void*)>> owned;
    // queue buffers currently allocated: key (hw << 24 | address) -> allocation serial
    std::unordered_map<uint32_t, uint32_t> bufSerial;
    uint32_t nextSerial = 0;
    std::string trace;  // TWIN_TRACE records of this core (trace.h), written when it finishes
    PipeOrder order;    // pipe ordering of this core's local-memory accesses (order.h)
};

inline std::string CoreName(const CoreCtx* c)
{
    if (c == nullptr) return "host";
    if (c->type == CoreType::AIC) return Fmt("AIC %d (block %d)", c->index, c->group);
    return Fmt("AIV %d (block %d, sub %d)", c->index, c->group, c->sub);
}

// Set when any core of the running launch failed in throw mode; every API entry polls it.
inline std::atomic<bool>& AbortFlag()
{
    static std::atomic<bool> f{false};
    return f;
}
inline void PollAbort()
{
    if (AbortFlag().load(std::memory_order_relaxed) && t_core != nullptr) throw Aborted();
}

[[noreturn]] inline void Fail(const char* api, const std::string& what, const char* source)
{
    std::string line = Fmt("twin: %s: %s (%s) [%s]", api, what.c_str(), source, CoreName(t_core).c_str());
    if (GetFailMode() == FailMode::Throw) throw Failure(line);
    // abort mode: exactly one failure line per process, even when several cores fail at once
    static std::atomic<bool> failing{false};
    if (failing.exchange(true))
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the first failure aborts the process
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    std::abort();
}

// The current core; API calls outside a launched kernel fail.
inline CoreCtx& Cur(const char* api)
{
    if (t_core == nullptr) Fail(api, "called outside a kernel launched with twin::LaunchMix/LaunchAiv", "twin");
    PollAbort();
    return *t_core;
}

// A failure of one of the semantic rules of rules.h: "rule <name>: <what>", the rule's page as the source
// (then `detail`, e.g. a header line or the API's own tag).
[[noreturn]] inline void FailRule(const char* api, const twin_rules::Rule& rule, const std::string& what, const char* detail = nullptr)
{
    std::string source = rule.page;
    if (detail != nullptr) source += std::string("; ") + detail;
    Fail(api, std::string("rule ") + rule.name + ": " + what, source.c_str());
}

// Rule core-type: the headers wrap every vector instruction in `if ASCEND_IS_AIV` and every cube one in
// `if ASCEND_IS_AIC` (e.g. impl/basic_api/dav_c220/kernel_operator_vec_binary_impl.h:70,
// kernel_operator_mm_impl.h:33), so bisheng compiles a call on the other core type to nothing.
inline void RequireAiv(const char* api, const char* src)
{
    CoreCtx& c = Cur(api);
    if (c.type != CoreType::AIV)
        FailRule(api, twin_rules::kCoreType,
                 "vector/UB operation issued on an AIC; the Vector unit and UB are on the AIVs, and the headers compile it "
                 "out of the cube pass (if ASCEND_IS_AIV): on the NPU it does nothing",
                 src);
}
inline void RequireAic(const char* api, const char* src)
{
    CoreCtx& c = Cur(api);
    if (c.type != CoreType::AIC)
        FailRule(api, twin_rules::kCoreType,
                 "cube/L1/L0 operation issued on an AIV; the Cube unit, L1, L0A/L0B/L0C and Fixpipe are on the AIC, and the "
                 "headers compile it out of the vector pass (if ASCEND_IS_AIC): on the NPU it does nothing",
                 src);
}

// Checked narrowing of a descriptor field [tilegen_runtime.h TILEGEN_NARROW]: the caller's int64 value must
// lie in the field's accepted range [lo, hi] (its type's range or narrower, as the header documents);
// otherwise the static_cast would wrap it silently (a uint16 row pitch of 66560 becomes 1024) and the API
// would run with a value nobody intended. `field` is "Struct_member" (printed as Struct.member).
// With TWIN_FIELD_LOG=<file>, the smallest and largest value each field took are appended to <file> at
// exit ("<field> <min> <max>" per line), so that tests can hold them against the generator's proof.
struct FieldLog {
    std::mutex mu;
    std::map<std::string, std::pair<int64_t, int64_t>> seen;
    ~FieldLog()
    {
        const char* path = std::getenv("TWIN_FIELD_LOG");
        if (path == nullptr || seen.empty()) return;
        if (FILE* f = std::fopen(path, "a")) {
            for (auto& kv : seen)
                std::fprintf(f, "%s %lld %lld\n", kv.first.c_str(), static_cast<long long>(kv.second.first),
                             static_cast<long long>(kv.second.second));
            std::fclose(f);
        }
    }
};
inline FieldLog& Fields()
{
    static FieldLog log;
    return log;
}

template <typename T>
inline T CheckedNarrow(int64_t value, int64_t lo, int64_t hi, const char* field)
{
    static const bool logging = std::getenv("TWIN_FIELD_LOG") != nullptr;
    if (logging) {
        FieldLog& log = Fields();
        std::lock_guard<std::mutex> lk(log.mu);
        auto it = log.seen.find(field);
        if (it == log.seen.end()) log.seen.emplace(field, std::make_pair(value, value));
        else it->second = {std::min(it->second.first, value), std::max(it->second.second, value)};
    }
    static_assert(std::is_integral<T>::value, "twin: CheckedNarrow narrows to an integer field");
    std::string name(field);
    size_t cut = name.find('_');
    if (cut != std::string::npos) name[cut] = '.';
    const T narrow = static_cast<T>(value);
    if (value < lo || value > hi || static_cast<int64_t>(narrow) != value)
        Fail(name.c_str(),
             Fmt("value %lld is outside the accepted range [%lld, %lld]; the cast to its %d-bit %s type would pass %lld",
                 static_cast<long long>(value), static_cast<long long>(lo), static_cast<long long>(hi),
                 static_cast<int>(8 * sizeof(T)), std::is_signed<T>::value ? "signed" : "unsigned",
                 static_cast<long long>(narrow)),
             "tilegen_runtime.h TILEGEN_NARROW; range from the asc-devkit header");
    return narrow;
}

inline uint64_t RoundUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
inline uint64_t CeilDiv(uint64_t x, uint64_t a) { return (x + a - 1) / a; }

}  // namespace twin

#endif  // TILEGEN_TWIN_BASE_H
