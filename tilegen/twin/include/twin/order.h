// tilegen CPU twin: the pipe ordering of each core's local-memory accesses.
//
// On the NPU the pipes of one core (S, V, MTE2, MTE3 on an AIV; S, MTE1, MTE2, M, FIX, MTE3 on the
// AIC) run concurrently: "AI Core内部的执行单元（如MTE2搬运单元、Vector计算单元等）以异步并行的方式运行，在读写同一
// 存储资源时可能存在数据依赖关系" [Z:SIMD-API/基础API/同步控制/核内同步/核内同步能力概述]. An instruction of one
// pipe is ordered after another pipe's instructions only by
//  - SetFlag/WaitFlag: SetFlag fires "当源流水的前序指令的所有读写操作都完成之后", WaitFlag holds the destination
//    pipe's later instructions until it has [Z:SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI)]; chains
//    of them (MTE2 -> S -> V) order transitively;
//  - PipeBarrier<PIPE_ALL>, which "会等待所有流水线中所有先前提交的接口完成" [Z:…/核内同步/PipeBarrier(ISASI)];
//    SyncAll begins with one [I:impl/basic_api/dav_c220/kernel_operator_sync_impl.h, SyncAllImpl];
//  - a TQue hand-over: EnQue sets and DeQue waits (write -> read), FreeTensor sets and AllocTensor waits
//    (read -> rewrite) [G:编程指南/编程模型/AI-Core-SIMD编程/基于TPipe-TQue框架编程/TPipe-TQue框架编程原理,
//    数据依赖与同步机制]. Which pipe pair the framework picks is not modelled: a hand-over orders every pipe's
//    earlier work before every later instruction.
// The guide's static-Tensor example [G:…/基于Tensor的CPP编程/静态Tensor编程] takes MTE2_V before the vector
// reads what DataCopy loaded, and MTE3_V before the vector rewrites the tile DataCopy stores.
//
// The twin runs each instruction at once, in program order, so a missing flag cannot corrupt data here.
// Instead every core keeps vector clocks (PipeOrder in base.h: per pipe, the last instruction of each
// other pipe it is ordered after) and a shadow of UB, L1, L0A, L0B and L0C per 32-byte block, and fails on
//  - an access of a block another pipe last wrote, not ordered after that write (read or write after write);
//  - a write of a block another pipe read, not ordered after that read (write after read).
// Only flags order: a WaitFlag<X_S> that stalls the scalar unit before it issues a vector instruction
// does not order that instruction after X here (the documented pair is X_V; the real-API twin and the
// timeline count flags alone too). Same-pipe order (PipeBarrier<PIPE_V> between dependent vector
// instructions) is not checked. Scalar accesses (GetValue/SetValue on PIPE_S) are not tracked: the
// compiler's automatic synchronisation covers the pairs with PIPE_S [Z:…/核内同步/关键特性说明, 表1]; S's
// flags still carry ordering in a chain.
// An instruction's ranges are the ones it records for the timeline (trace.h: the first to the last byte
// it writes and reads). The same rule is the real-API twin's (cce/core.h) and the timeline's
// (tilegen/backends/ascendc/timeline.py, happens-before race check).
//
// TWIN_ORDER_CHECK=0 turns the check off (the kernel then runs as before it existed; tests use it to give
// the timeline's own race check the trace of a kernel with a flag taken out).
#ifndef TILEGEN_TWIN_ORDER_H
#define TILEGEN_TWIN_ORDER_H

#include <array>

#include "base.h"

namespace twin {
namespace order {

inline bool On()
{
    static const bool on = [] {
        const char* e = std::getenv("TWIN_ORDER_CHECK");
        return !(e != nullptr && std::strcmp(e, "0") == 0);
    }();
    return on;
}

// pipe_t values (launch.h; numbering of the CCE headers)
constexpr int kPipeS = 0, kPipeV = 1, kPipeM = 2, kPipeMte1 = 3, kPipeMte2 = 4, kPipeMte3 = 5, kPipeAll = 6, kPipeFix = 10;

// The pipe of a trace record's pipe name ("V", "MTE2", ..., "ALL"); -1 for none.
inline int PipeOf(const char* s)
{
    if (std::strcmp(s, "S") == 0) return kPipeS;
    if (std::strcmp(s, "V") == 0) return kPipeV;
    if (std::strcmp(s, "M") == 0) return kPipeM;
    if (std::strcmp(s, "MTE1") == 0) return kPipeMte1;
    if (std::strcmp(s, "MTE2") == 0) return kPipeMte2;
    if (std::strcmp(s, "MTE3") == 0) return kPipeMte3;
    if (std::strcmp(s, "FIX") == 0) return kPipeFix;
    if (std::strcmp(s, "ALL") == 0) return kPipeAll;
    return -1;
}
inline const char* Short(int pipe)
{
    switch (pipe) {
        case kPipeS: return "S";
        case kPipeV: return "V";
        case kPipeM: return "M";
        case kPipeMte1: return "MTE1";
        case kPipeMte2: return "MTE2";
        case kPipeMte3: return "MTE3";
        case kPipeFix: return "FIX";
        default: return "?";
    }
}
// The shadow slot of a pipe that touches local memory through instructions; -1 for PIPE_S and the rest.
inline int Slot(int pipe)
{
    switch (pipe) {
        case kPipeV: return 0;
        case kPipeM: return 1;
        case kPipeMte1: return 2;
        case kPipeMte2: return 3;
        case kPipeMte3: return 4;
        case kPipeFix: return 5;
        default: return -1;
    }
}
constexpr int kSlotPipe[kOrderSlots] = {kPipeV, kPipeM, kPipeMte1, kPipeMte2, kPipeMte3, kPipeFix};

inline Hw HwOfSpace(char space)
{
    switch (space) {
        case 'U': return Hw::UB;
        case '1': return Hw::L1;
        case 'A': return Hw::L0A;
        case 'B': return Hw::L0B;
        case 'C': return Hw::L0C;
        default: return Hw::GM;  // GM (and anything else) is not tracked
    }
}

// A new instruction of API `api` on `pipe`: its index in the pipe.
inline uint32_t Issue(CoreCtx& c, int pipe, const char* api)
{
    const uint32_t op = ++c.order.clock[pipe][pipe];
    c.order.api[pipe][op % PipeOrder::kOrderApis] = api;
    return op;
}
// The API of instruction `op` of `pipe` (one of the last kOrderApis of the pipe, else a generic name).
inline const char* ApiOf(const CoreCtx& c, int pipe, uint32_t op)
{
    return c.order.clock[pipe][pipe] - op < PipeOrder::kOrderApis ? c.order.api[pipe][op % PipeOrder::kOrderApis]
                                                                  : "an earlier instruction";
}

constexpr const char* kSource = "Z:SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI), 核内同步能力概述";

// Instruction `op` of `pipe` (API `api`) reads (write = false) or writes bytes [lo, hi) of `space`.
[[noreturn]] inline void FailRead(CoreCtx& c, const char* api, int pipe, Hw h, uint64_t b, const OrderBlock& e, bool write)
{
    Fail(api,
         Fmt("PIPE_%s %s %s bytes [%llu, %llu) that %s on PIPE_%s wrote, with no SetFlag/WaitFlag "
             "(HardEvent::%s_%s, or a chain of them) between the two",
             Short(pipe), write ? "overwrites" : "reads", HwName(h), static_cast<unsigned long long>(b * 32),
             static_cast<unsigned long long>(b * 32 + 32), ApiOf(c, static_cast<int>(e.wpipe), e.wop),
             Short(static_cast<int>(e.wpipe)), Short(static_cast<int>(e.wpipe)), Short(pipe)),
         kSource);
}
[[noreturn]] inline void FailWrite(CoreCtx& c, const char* api, int pipe, Hw h, uint64_t b, int q, uint32_t rop)
{
    Fail(api,
         Fmt("PIPE_%s overwrites %s bytes [%llu, %llu) that %s on PIPE_%s reads, with no SetFlag/WaitFlag "
             "(HardEvent::%s_%s, or a chain of them) between the two",
             Short(pipe), HwName(h), static_cast<unsigned long long>(b * 32), static_cast<unsigned long long>(b * 32 + 32),
             ApiOf(c, q, rop), Short(q), Short(q), Short(pipe)),
         kSource);
}

inline void Touch(CoreCtx& c, const char* api, int pipe, uint32_t op, char space, uint64_t lo, uint64_t hi, bool write)
{
    const Hw h = HwOfSpace(space);
    const int slot = Slot(pipe);
    if (h == Hw::GM || slot < 0 || hi <= lo) return;
    auto& sh = c.order.shadow[static_cast<int>(h)];
    const uint64_t blocks = HwSize(h) / 32;
    if (!sh) {
        sh.reset(static_cast<OrderBlock*>(std::calloc(blocks, sizeof(OrderBlock))));  // all zero: nothing yet
        if (!sh) Fail(api, "out of host memory for the pipe-ordering shadow", "twin");
    }
    // what this pipe is ordered after, per pipe and per slot; its own pipe and PIPE_S (the writer of a
    // block nothing wrote) never conflict
    uint32_t seen[kOrderPipes], seenSlot[kOrderSlots];
    std::memcpy(seen, c.order.clock[pipe], sizeof(seen));
    seen[pipe] = seen[kPipeS] = UINT32_MAX;
    for (int s = 0; s < kOrderSlots; ++s) seenSlot[s] = seen[kSlotPipe[s]];
    OrderBlock* const blk = sh.get();
    const uint64_t first = lo / 32, last = std::min((hi - 1) / 32 + 1, blocks);
    if (!write) {
        for (uint64_t b = first; b < last; ++b) {
            OrderBlock& e = blk[b];
            if (seen[e.wpipe] < e.wop) FailRead(c, api, pipe, h, b, e, false);
            e.rop[slot] = op;
        }
        return;
    }
    for (uint64_t b = first; b < last; ++b) {
        OrderBlock& e = blk[b];
        if (seen[e.wpipe] < e.wop) FailRead(c, api, pipe, h, b, e, true);
        for (int s = 0; s < kOrderSlots; ++s)
            if (e.rop[s] > seenSlot[s]) FailWrite(c, api, pipe, h, b, kSlotPipe[s], e.rop[s]);
        e.wop = op;
        e.wpipe = static_cast<uint32_t>(pipe);
    }
}

// SetFlag<E>(id) on its source pipe: a copy of that pipe's clock (what it is ordered after, and itself).
inline void Set(CoreCtx& c, int event, int id, int src)
{
    std::memcpy(c.order.flag[event][id], c.order.clock[src], sizeof(c.order.flag[event][id]));
}
// WaitFlag<E>(id) on its destination pipe: ordered after what the matching SetFlag's copy holds.
inline void Wait(CoreCtx& c, int event, int id, int dst)
{
    for (int q = 0; q < kOrderPipes; ++q)
        if (q != dst) c.order.clock[dst][q] = std::max(c.order.clock[dst][q], c.order.flag[event][id][q]);
}
// PipeBarrier<PIPE_ALL>: every pipe after every instruction issued so far.
inline void BarrierAll(CoreCtx& c)
{
    for (int p = 0; p < kOrderPipes; ++p)
        for (int q = 0; q < kOrderPipes; ++q)
            if (p != q) c.order.clock[p][q] = std::max(c.order.clock[p][q], c.order.clock[q][q]);
}
// A TQue hand-over: Snapshot at EnQue / FreeTensor, Merge at DeQue / AllocTensor.
using Snap = std::array<uint32_t, kOrderPipes>;
inline Snap Snapshot(const CoreCtx& c)
{
    Snap s{};
    for (int q = 0; q < kOrderPipes; ++q) s[q] = c.order.clock[q][q];
    return s;
}
inline void Merge(CoreCtx& c, const Snap& s)
{
    for (int p = 0; p < kOrderPipes; ++p)
        for (int q = 0; q < kOrderPipes; ++q)
            if (p != q) c.order.clock[p][q] = std::max(c.order.clock[p][q], s[q]);
}

}  // namespace order
}  // namespace twin

#endif  // TILEGEN_TWIN_ORDER_H
