// tilegen real-API twin: the instruction trace for the timeline (tilegen/backends/ascendc/timeline.py), in
// the hand twin's format (../include/twin/trace.h, ../README.md "Timeline trace"). With TWIN_TRACE=<file>
// every core records, in program order, each instruction an intrinsic issues and each synchronisation, and
// appends its records to <file> as one block when it finishes:
//
//   core <launch> <block> <AIC|AIV> <sub>
//   <pipe> <kind> <a> <b> <c> <nW> [<space> <lo> <hi>]... <nR> [<space> <lo> <hi>]...
//   end
//
// Here <kind> is the intrinsic's name (vadd, mad, copy_gm_to_ubuf_align_b16, ...); the harness maps names
// to the timeline's cost kinds (tilegen/harness/ascend_peer.py). The sizes a, b, c: an instruction touching
// GM: bytes moved, GM bursts (one per contiguous GM run the intrinsic checks), 1 when every GM byte lies in
// the launch's "handoff workspace" allocation (L2-resident) else 0; mad: m, n, k; any other vector
// instruction: its 256-byte repeats; LoadData / Fill: bytes written, 1 when the destination is L0B, 0.
// Ranges are first-to-last byte per buffer (U UB, 1 L1, A L0A, B L0B, C L0C, G GM host address).
// Synchronisations: SetFlag/WaitFlag (a = 16 * src pipe + dst pipe, b = event id, c = the other pipe;
// recorded on the source pipe for a set, on the destination pipe for a wait), PipeBarrier on its pipe
// (ALL for PIPE_ALL), CrossCoreSetFlag on its pipe (a = mode, b = flag id), CrossCoreWaitFlag on S
// (b = flag id). A matmul-server (KFC) message is a hand-off through GM: the AIV's copy of a message into
// the KFC message area is followed by "CrossCoreSetFlag MTE3 2 <16 + sub>", and the AIC's receipt of it by
// "CrossCoreWaitFlag S 0 <16 + sub> <1 + sub>" (c: the one AIV it waits for); see kfc.h.
//
// With TWIN_TRACE_BLOCKS=<b0,b1,...> a launch runs only those blocks (each with the block index and count
// of the full launch); the cost-only timeline runs chosen instances alone.
#ifndef TILEGEN_CCE_TRACE_H
#define TILEGEN_CCE_TRACE_H

#include <cstdint>

namespace cce_rt {

// defined in runtime.cpp; every function is a no-op while TWIN_TRACE is unset
bool TraceOn();
// an instruction of `pipe` begins (called by Issue); the previous one's record is complete
void TraceBegin(int pipe);
// the instruction in flight reads (write = false) or writes local bytes [off, off + len) of buffer `buf`
void TraceLocal(const char* what, int buf, uint64_t off, uint64_t len, bool write);
// the instruction in flight (the intrinsic `what`) moves `bytes` GM bytes at host address p (one contiguous run)
void TraceGm(const char* what, const void* p, uint64_t bytes);
// the repeats of the next vector instruction (set by Lanes before its Issue)
void TraceRepeats(uint64_t repeats);
// explicit sizes of the instruction in flight (mad: m, n, k)
void TraceSizes(int64_t a, int64_t b, int64_t c);
// a synchronisation record (the instruction in flight is recorded first)
void TraceSync(const char* pipe, const char* kind, int64_t a, int64_t b, int64_t c);

}  // namespace cce_rt

#endif  // TILEGEN_CCE_TRACE_H
