// tilegen CPU twin: intra-core synchronisation (SetFlag/WaitFlag/PipeBarrier), atomics, misc.
// The twin executes every instruction synchronously in program order, so pipe hazards cannot
// corrupt data here; what is checked is the protocol (pairing, ranges and legal pipes) and, through
// the ordering each flag carries, every local-memory access against the pipes it depends on (order.h).
#ifndef TILEGEN_TWIN_SYNC_H
#define TILEGEN_TWIN_SYNC_H

#include "launch.h"

namespace twin {
inline void CheckEvent(const char* api, AscendC::HardEvent ev, int32_t id)
{
    CoreCtx& c = Cur(api);
    int e = static_cast<int>(ev);
    if (e < 0 || e >= 32) Fail(api, "invalid HardEvent", "P:SetFlag-WaitFlag(ISASI)");
    if (id < 0 || id > 7) Fail(api, Fmt("eventID %d out of range [0, 7]", id), "P:SetFlag-WaitFlag(ISASI)");
    pipe_t s, d;
    HardEventPipes(e, s, d);
    uint32_t have = CorePipes(c.type);
    if ((PipeMask(s) & have) == 0 || (PipeMask(d) & have) == 0)
        Fail(api,
             Fmt("HardEvent::%s joins %s and %s but %s has no %s (split architecture)", HardEventName(e), PipeName(s),
                 PipeName(d), c.type == CoreType::AIC ? "an AIC" : "an AIV",
                 (PipeMask(s) & have) == 0 ? PipeName(s) : PipeName(d)),
             "P:SetFlag-WaitFlag(ISASI), ascendc-api §6");
    // Rule pipe-s-pair: no pair with PIPE_S exists on the AIC (表2 of the page; the AIV's 表3 has all of its own).
    if (c.type == CoreType::AIC && (s == PIPE_S || d == PIPE_S))
        FailRule(api, twin_rules::kPipeSPair,
                 Fmt("HardEvent::%s joins %s and %s on an AIC, where no SetFlag/WaitFlag pair involves PIPE_S (表2: 不涉及)",
                     HardEventName(e), PipeName(s), PipeName(d)));
}
}  // namespace twin

namespace AscendC {

// [P:SetFlag-WaitFlag(ISASI)] binary flag per (event, id) per core: Set of a set flag and Wait of an
// unset flag (which would deadlock: the twin runs in program order) are errors; flags still set at
// kernel end are reported by the launcher.
template <HardEvent event>
inline void SetFlag(int32_t eventID)
{
    twin::CheckEvent("SetFlag", event, eventID);
    bool& f = twin::t_core->eventSet[static_cast<int>(event)][eventID];
    {
        pipe_t sp, dp;
        twin::HardEventPipes(static_cast<int>(event), sp, dp);
        // queued on the source pipe: a = event, b = id, c = destination pipe
        twin::trace::Rec(twin::trace::Short(twin::PipeName(sp)), "SetFlag", static_cast<int>(event), eventID, static_cast<int>(dp));
    }
    if (f)
        twin::Fail("SetFlag",
                   twin::Fmt("HardEvent::%s id %d set twice without a WaitFlag in between",
                             twin::HardEventName(static_cast<int>(event)), eventID),
                   "P:SetFlag-WaitFlag(ISASI)");
    f = true;
    pipe_t sp, dp;
    twin::HardEventPipes(static_cast<int>(event), sp, dp);
    twin::order::Set(*twin::t_core, static_cast<int>(event), eventID, static_cast<int>(sp));
}
template <HardEvent event>
inline void WaitFlag(int32_t eventID)
{
    twin::CheckEvent("WaitFlag", event, eventID);
    bool& f = twin::t_core->eventSet[static_cast<int>(event)][eventID];
    {
        pipe_t sp, dp;
        twin::HardEventPipes(static_cast<int>(event), sp, dp);
        // queued on the destination pipe: a = event, b = id, c = source pipe
        twin::trace::Rec(twin::trace::Short(twin::PipeName(dp)), "WaitFlag", static_cast<int>(event), eventID, static_cast<int>(sp));
    }
    if (!f)
        twin::Fail("WaitFlag",
                   twin::Fmt("HardEvent::%s id %d waited but never set before (deadlock on NPU)",
                             twin::HardEventName(static_cast<int>(event)), eventID),
                   "P:SetFlag-WaitFlag(ISASI)");
    f = false;
    pipe_t sp, dp;
    twin::HardEventPipes(static_cast<int>(event), sp, dp);
    twin::order::Wait(*twin::t_core, static_cast<int>(event), eventID, static_cast<int>(dp));
}
// [P:PipeBarrier(ISASI)] PipeBarrier<PIPE_S> is illegal; the pipe must exist on the core.
template <pipe_t pipe>
inline void PipeBarrier()
{
    const char* api = "PipeBarrier";
    twin::CoreCtx& c = twin::Cur(api);
    if (pipe == PIPE_S) twin::Fail(api, "PipeBarrier<PIPE_S> is not allowed (hardware error)", "P:PipeBarrier(ISASI)");
    if (pipe != PIPE_ALL && (twin::PipeMask(pipe) & twin::CorePipes(c.type)) == 0)
        twin::Fail(api,
                   twin::Fmt("%s does not exist on %s", twin::PipeName(pipe),
                             c.type == twin::CoreType::AIC ? "an AIC" : "an AIV"),
                   "P:PipeBarrier(ISASI), ascendc-api §6");
    twin::trace::Rec(twin::trace::Short(twin::PipeName(pipe)), "PipeBarrier", 0, 0, 0);
    if (pipe == PIPE_ALL) twin::order::BarrierAll(c);  // every pipe after all earlier work (order.h)
}

// ---------------------------------------------------------------------------------------------
// Atomics [P:SetAtomicAdd, P:SetAtomicType, P:SetAtomicNone, P:DisableDmaAtomic, ascendc-api §7.4].
// Sticky per-core state applied to UB->GM and L1->GM DataCopy/DataCopyPad and Fixpipe stores.
// SetAtomicType<T>() alone enables add (production FAG relies on it, §10.6).
// ---------------------------------------------------------------------------------------------
namespace detail_atomic {
template <typename T>
inline void CheckAtomicType(const char* api)
{
    constexpr twin::DType d = twin::DTypeOf<T>();
    if (d != twin::DType::I8 && d != twin::DType::I16 && d != twin::DType::F16 && d != twin::DType::BF16 &&
        d != twin::DType::I32 && d != twin::DType::F32)
        twin::Fail(api, twin::Fmt("atomic type %s not supported on A2 (int8/int16/half/bf16/int32/float)", twin::TypeName<T>()),
                   "P:SetAtomicAdd");
}
}  // namespace detail_atomic
template <typename T>
inline void SetAtomicAdd()
{
    twin::CoreCtx& c = twin::Cur("SetAtomicAdd");
    detail_atomic::CheckAtomicType<T>("SetAtomicAdd");
    twin::trace::Rec("S", "SetAtomic", 1, 0, 0);  // a = 1: the GM stores that follow accumulate
    c.atomicOp = twin::AtomicOp::Add;
    c.atomicType = twin::DTypeOf<T>();
}
template <typename T>
inline void SetAtomicMax()
{
    twin::CoreCtx& c = twin::Cur("SetAtomicMax");
    detail_atomic::CheckAtomicType<T>("SetAtomicMax");
    twin::trace::Rec("S", "SetAtomic", 1, 0, 0);
    c.atomicOp = twin::AtomicOp::Max;
    c.atomicType = twin::DTypeOf<T>();
}
template <typename T>
inline void SetAtomicMin()
{
    twin::CoreCtx& c = twin::Cur("SetAtomicMin");
    detail_atomic::CheckAtomicType<T>("SetAtomicMin");
    twin::trace::Rec("S", "SetAtomic", 1, 0, 0);
    c.atomicOp = twin::AtomicOp::Min;
    c.atomicType = twin::DTypeOf<T>();
}
template <typename T>
inline void SetAtomicType()
{
    twin::CoreCtx& c = twin::Cur("SetAtomicType");
    detail_atomic::CheckAtomicType<T>("SetAtomicType");
    if (c.atomicOp == twin::AtomicOp::None) {
        twin::trace::Rec("S", "SetAtomic", 1, 0, 0);
        c.atomicOp = twin::AtomicOp::Add;
    }
    c.atomicType = twin::DTypeOf<T>();
}
// DisableDmaAtomic [I:include/basic_api/kernel_operator_set_atomic_intf.h:41, P:DisableDmaAtomic]; SetAtomicNone
// is its pre-9.1.0 name (line 43: "SetAtomicNone has been updated, please use DisableDmaAtomic instead").
inline void DisableDmaAtomic()
{
    twin::CoreCtx& c = twin::Cur("DisableDmaAtomic");
    twin::trace::Rec("S", "SetAtomic", 0, 0, 0);  // a = 0: plain stores again
    c.atomicOp = twin::AtomicOp::None;
    c.atomicType = twin::DType::None;
}
inline void SetAtomicNone() { DisableDmaAtomic(); }

// [P:InitSocState] resets atomic and mask state.
inline void InitSocState()
{
    twin::CoreCtx& c = twin::Cur("InitSocState");
    c.atomicOp = twin::AtomicOp::None;
    c.atomicType = twin::DType::None;
    c.maskCounter = false;
    c.maskLo = c.maskHi = ~0ull;
}

// [P:DataCacheCleanAndInvalid] The twin has no DCache model: scalar GM access is coherent here.
enum class CacheLine : uint8_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst : uint8_t { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };
template <typename T, CacheLine entireType, DcciDst dcciDst>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T>&)
{
    twin::Cur("DataCacheCleanAndInvalid");
}
template <typename T, CacheLine entireType>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T>&)
{
    twin::Cur("DataCacheCleanAndInvalid");
}

// Constants commonly used by kernels [I:impl/basic_api/utils/kernel_utils_constants.h].
constexpr int32_t ONE_BLK_SIZE = 32;
constexpr int32_t ONE_REPEAT_BYTE_SIZE = 256;
constexpr int32_t DEFAULT_REPEAT_STRIDE = 8;
constexpr int32_t DEFAULT_BLK_STRIDE = 1;
constexpr int32_t BLOCK_CUBE = 16;
constexpr int32_t CUBE_MAX_SIZE = 256;
constexpr int32_t MAX_REPEAT_TIMES = 255;
constexpr int32_t TOTAL_UB_SIZE = 196608;
constexpr int32_t TMP_UB_OFFSET = 184 * 1024;

// [P:GetUserWorkspace] The twin follows the official CPU twin: the user workspace is the pointer passed
// (on NPU it is ws + 16 MiB of system workspace reserved for high-level APIs, which the twin does not emulate).
inline GM_ADDR GetUserWorkspace(GM_ADDR workspace) { return workspace; }

}  // namespace AscendC

namespace twin {
// Store n elements of T into GM honouring the core's atomic state. Thread-safe per GM block.
template <typename T>
inline void GmStore(const char* api, CoreCtx& c, GmBlock* blk, uint8_t* dst, const T* src, size_t n, const char* source)
{
    if (c.atomicOp == AtomicOp::None) {
        std::memcpy(dst, src, n * sizeof(T));
        return;
    }
    if (c.atomicType != DTypeOf<T>())
        Fail(api,
             Fmt("atomic type %s does not match the stored data type %s", DTypeName(c.atomicType), TypeName<T>()),
             "P:SetAtomicAdd, P:SetAtomicType");
    std::lock_guard<std::mutex> lk(blk->mu);
    for (size_t i = 0; i < n; ++i) {
        T old;
        std::memcpy(&old, dst + i * sizeof(T), sizeof(T));
        T v = src[i];
        T r;
        if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16_t> || std::is_same_v<T, float>) {
            float a = static_cast<float>(old), b = static_cast<float>(v), o;
            if (c.atomicOp == AtomicOp::Add) o = a + b;
            else if (c.atomicOp == AtomicOp::Max) o = (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
            else o = (std::isnan(a) || std::isnan(b)) ? NAN : std::min(a, b);
            r = num::FromF<T>(o);
        } else {
            int64_t a = static_cast<int64_t>(old), b = static_cast<int64_t>(v), o;
            if (c.atomicOp == AtomicOp::Add) o = a + b;
            else if (c.atomicOp == AtomicOp::Max) o = std::max(a, b);
            else o = std::min(a, b);
            r = static_cast<T>(o);
        }
        std::memcpy(dst + i * sizeof(T), &r, sizeof(T));
    }
    (void)source;
}
}  // namespace twin

#endif  // TILEGEN_TWIN_SYNC_H
