// tilegen CPU twin: instruction trace for the timeline (tilegen/backends/ascendc/timeline.py).
//
// With TWIN_TRACE=<file>, every core records each hardware instruction the kernel issues, in program
// order: the pipe it runs on (S, V, M, MTE1, MTE2, MTE3, FIX), its kind, the sizes its duration depends
// on and the byte ranges it writes and reads; and every synchronisation (SetFlag/WaitFlag, PipeBarrier,
// CrossCoreSetFlag/CrossCoreWaitFlag). Nothing is timed here: the trace is the input of a discrete-event
// schedule computed from a cost table (tilegen/backends/ascendc/timeline.py). A core's records are appended to <file> when
// the core finishes, as one block:
//
//   core <launch> <block> <AIC|AIV> <sub>
//   <pipe> <kind> <a> <b> <c> <nW> [<space> <lo> <hi>]... <nR> [<space> <lo> <hi>]...
//   end
//
// space: G (GM, host address), U (UB), 1 (L1), A (L0A), B (L0B), C (L0C); lo/hi: byte range [lo, hi).
// GM is the process's address space; UB/L1/L0 are per core. a, b, c by kind (README "Timeline trace").
//
// With TWIN_TRACE_BLOCKS=<b0,b1,...> a launch runs only the listed blocks of its numBlocks (each with
// the GetBlockIdx/GetBlockNum of the full launch), and numBlocks may then exceed the physical core count:
// the cost-only timeline runs chosen program instances alone (cross-core flags are per block, mode 2).
#ifndef TILEGEN_TWIN_TRACE_H
#define TILEGEN_TWIN_TRACE_H

#include "gm.h"
#include "order.h"

namespace twin {
namespace trace {

inline bool On()
{
    static const bool on = std::getenv("TWIN_TRACE") != nullptr && *std::getenv("TWIN_TRACE") != '\0';
    return on;
}

// The blocks a launch runs (empty: all).
inline const std::vector<int>& Blocks()
{
    static const std::vector<int> blocks = [] {
        std::vector<int> out;
        const char* e = std::getenv("TWIN_TRACE_BLOCKS");
        if (e == nullptr) return out;
        const char* p = e;
        while (*p) {
            char* end = nullptr;
            long v = std::strtol(p, &end, 10);
            if (end == p) break;
            out.push_back(static_cast<int>(v));
            p = *end == ',' ? end + 1 : end;
        }
        return out;
    }();
    return blocks;
}

inline std::atomic<int>& LaunchSerial()
{
    static std::atomic<int> n{0};
    return n;
}

struct Rng {
    char space;
    uint64_t lo, hi;
};

inline char SpaceOf(Hw h)
{
    switch (h) {
        case Hw::GM: return 'G';
        case Hw::UB: return 'U';
        case Hw::L1: return '1';
        case Hw::L0A: return 'A';
        case Hw::L0B: return 'B';
        case Hw::L0C: return 'C';
        default: return 'X';
    }
}

// A local tensor's first `bytes` bytes (its physical buffer, byte offset inside it).
template <class Tensor>
inline Rng Loc(const Tensor& t, uint64_t bytes)
{
    const auto& r = t.Ref();
    return Rng{SpaceOf(r.hw), r.addr, r.addr + bytes};
}
inline Rng Gm(const void* p, uint64_t bytes)
{
    uint64_t a = reinterpret_cast<uint64_t>(p);
    return Rng{'G', a, a + bytes};
}
// 1 when `p` lies in the per-core hand-off workspace (L2-resident: its size does not grow with N), else
// 0 (an HBM tensor). The harness tags that block "handoff workspace" (twin_main.cpp).
inline int64_t GmLevel(const void* p)
{
    if (!On()) return 0;  // evaluated as an argument of Rec: no registry lookup when not tracing
    GmBlock* b = FindGm(p);
    return (b != nullptr && b->tag == "handoff workspace") ? 1 : 0;
}

inline std::string& Buf() { return t_core->trace; }

// One record on the calling core (no-op unless TWIN_TRACE is set). A record with byte ranges is an
// instruction on `pipe`: its local-memory ranges go through the pipe-ordering check first (order.h),
// traced or not, so the twin checks the ranges the timeline schedules.
inline void Rec(const char* pipe, const char* kind, int64_t a, int64_t b, int64_t c, std::initializer_list<Rng> w = {},
                std::initializer_list<Rng> r = {})
{
    if (t_core != nullptr && (w.size() != 0 || r.size() != 0) && order::On()) {
        const int p = order::PipeOf(pipe);
        if (p >= 0 && p != order::kPipeS && p != order::kPipeAll) {
            const uint32_t op = order::Issue(*t_core, p, kind);
            for (const Rng& x : r) order::Touch(*t_core, kind, p, op, x.space, x.lo, x.hi, false);
            for (const Rng& x : w) order::Touch(*t_core, kind, p, op, x.space, x.lo, x.hi, true);
        }
    }
    if (!On() || t_core == nullptr) return;
    std::string& s = Buf();
    char line[160];
    int n = std::snprintf(line, sizeof line, "%s %s %lld %lld %lld %zu", pipe, kind, static_cast<long long>(a),
                          static_cast<long long>(b), static_cast<long long>(c), w.size());
    s.append(line, static_cast<size_t>(n));
    for (const Rng& x : w) {
        n = std::snprintf(line, sizeof line, " %c %llu %llu", x.space, static_cast<unsigned long long>(x.lo),
                          static_cast<unsigned long long>(x.hi));
        s.append(line, static_cast<size_t>(n));
    }
    n = std::snprintf(line, sizeof line, " %zu", r.size());
    s.append(line, static_cast<size_t>(n));
    for (const Rng& x : r) {
        n = std::snprintf(line, sizeof line, " %c %llu %llu", x.space, static_cast<unsigned long long>(x.lo),
                          static_cast<unsigned long long>(x.hi));
        s.append(line, static_cast<size_t>(n));
    }
    s.push_back('\n');
}

// Append the calling core's records to $TWIN_TRACE as one block (on its thread, when it finished).
inline void Flush(CoreCtx& c, int launch)
{
    if (!On()) return;
    static std::mutex mu;
    std::lock_guard<std::mutex> lk(mu);
    if (FILE* f = std::fopen(std::getenv("TWIN_TRACE"), "a")) {
        std::fprintf(f, "core %d %lld %s %d\n", launch, static_cast<long long>(c.type == CoreType::AIC ? c.blockIdx : c.blockIdx / c.taskRatio),
                     c.type == CoreType::AIC ? "AIC" : "AIV", c.sub);
        std::fwrite(c.trace.data(), 1, c.trace.size(), f);
        std::fputs("end\n", f);
        std::fclose(f);
    }
    c.trace.clear();
}

// "MTE2" for PIPE_MTE2 (the pipe names of the trace).
inline const char* Short(const char* pipeName) { return std::strncmp(pipeName, "PIPE_", 5) == 0 ? pipeName + 5 : pipeName; }

}  // namespace trace
}  // namespace twin

#endif  // TILEGEN_TWIN_TRACE_H
