// tilegen real-API twin: the state of one simulated core (its local buffers, special registers,
// pipes and flags) and the checks every intrinsic shares. Defined in runtime.cpp (the harness
// executable); the kernel passes (shared objects) reach it through cce_rt::Cur().
#ifndef TILEGEN_CCE_CORE_H
#define TILEGEN_CCE_CORE_H

#include <cstdint>
#include <cstring>
#include <cmath>
#include <type_traits>

#include "cce_types.h"
#include "trace.h"
#include "../include/twin/rules.h"

namespace cce_rt {

// Physical local buffers of a 910B AI Core (ascend-910b.md §2; asc-devkit
// impl/basic_api/kernel_tpipe_impl.h buffer pools): UB on each AIV, L1/L0A/L0B/L0C on the AIC.
enum Buf : int { UB = 0, L1, L0A, L0B, L0C, NBUF };
constexpr uint32_t kBufSize[NBUF] = {196608, 524288, 65536, 65536, 131072};
constexpr const char* kBufName[NBUF] = {"UB", "L1", "L0A", "L0B", "L0C"};
constexpr uint8_t kPoison = 0xFF;  // fresh local memory: NaN in fp16, bf16 and fp32
constexpr int kPipes = 11;         // pipe_t values PIPE_S .. PIPE_FIX
constexpr const char* kPipeName[kPipes] = {"PIPE_S", "PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3",
                                           "PIPE_ALL", "PIPE_MTE4", "PIPE_MTE5", "PIPE_V2", "PIPE_FIX"};

struct Shadow {            // one per 32-byte block of a local buffer
    uint32_t op;           // index (in its pipe) of the last instruction that wrote the block
    uint8_t pipe;          // that instruction's pipe; 0xFF: never written by an instruction
    uint32_t rd[11];       // per pipe: index of the last instruction of that pipe that read the block
};

struct Core {
    bool aic = false;          // cube core (AIC) or vector core (AIV)
    int block = 0, sub = 0, blocks = 1;
    const char* kernel = "";  // the running kernel's name
    uint8_t* buf[NBUF] = {};   // null where the core has no such buffer
    Shadow* shadow[NBUF] = {};
    // special registers
    bool maskCount = false;    // CTRL counter mode (set_mask_count) vs normal bit mode
    uint64_t maskHi = ~0ull, maskLo = ~0ull;
    uint64_t movPadVal = 0;    // set_mov_pad_val
    int64_t accVal = 0;        // ACC_VAL written by vcadd (get_acc_val)
    uint8_t cmpMask[16] = {};  // CMPMASK register (set_cmpmask)
    uint64_t ndPara = 1, quantPre = 0, padding = 0, l13dSize = 0;
    int atomic = 0;            // 0 none, 1 add; atomicType: 1 f32, 2 f16, 3 bf16 ...
    int atomicType = 0;
    // pipes: vector clocks. clock[p][q] = index of the last instruction of pipe q that pipe p is
    // ordered after (through SetFlag/WaitFlag or barriers); clock[p][p] = instructions issued on p.
    uint32_t clock[kPipes][kPipes] = {};
    // intra-core flags: set[src][dst][event] holds the snapshot of src's clock taken by set_flag.
    bool flagSet[kPipes][kPipes][8] = {};
    uint32_t flagClock[kPipes][kPipes][8][kPipes] = {};
};

// defined in runtime.cpp
Core& Cur();
[[noreturn]] void Fail(const char* what, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// A failure of one of the semantic rules (include/twin/rules.h): "rule <name>: <message> (<page>[; detail])".
[[noreturn]] void FailRule(const char* what, const twin_rules::Rule& rule, const char* detail, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
void CheckGm(const char* what, const void* p, uint64_t bytes);   // inside one GM allocation
void CrossCoreSet(int mode, int pipe, int flag);
void CrossCoreWait(int flag);
void AtomicLock();
void AtomicUnlock();

// ---- local buffers -----------------------------------------------------------------------------
template <typename P>
inline uint64_t AddrOf(P p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

// Bytes [off, off + len) of buffer b on this core: the buffer must exist on the core type (rule core-type)
// and the range lie inside it (rule local-capacity). Returns the host address.
inline uint8_t* Local(const char* what, Buf b, uint64_t off, uint64_t len)
{
    Core& c = Cur();
    if (c.buf[b] == nullptr)
        FailRule(what, twin_rules::kCoreType, nullptr, "%s does not exist on %s", kBufName[b], c.aic ? "the AIC" : "an AIV");
    if (off + len > kBufSize[b] || off + len < off)
        FailRule(what, twin_rules::kLocalCapacity, b == L0A || b == L0B ? twin_rules::kCapacityL0 : twin_rules::kCapacity2201,
                 "%s bytes [%llu, %llu) outside the %u-byte buffer", kBufName[b], (unsigned long long)off,
                 (unsigned long long)(off + len), kBufSize[b]);
    return c.buf[b] + off;
}
inline void Align(const char* what, Buf b, uint64_t off, uint64_t align)
{
    if (off % align != 0)
        Fail(what, "%s address %llu is not %llu-byte aligned", kBufName[b], (unsigned long long)off,
             (unsigned long long)align);
}

// ---- pipe ordering (flag discipline) -----------------------------------------------------------
// Pipes run concurrently on the NPU; an instruction is ordered after another pipe's instructions only
// through SetFlag/WaitFlag (or a chain of them) or PipeBarrier<PIPE_ALL> (SetFlag-WaitFlag(ISASI).md).
// Every instruction calls Issue first; then an access of a 32-byte block must be ordered after
//  - the block's last write by another pipe (read after write, write after write), and
//  - for a write, the block's last read by every other pipe (write after read).
// Scalar accesses (GetValue/SetValue, the headers' `*ptr`) go straight to memory and are not tracked.
inline uint32_t Issue(int pipe)
{
    Core& c = Cur();
    TraceBegin(pipe);
    return ++c.clock[pipe][pipe];
}
inline void CheckWriter(const char* what, const Core& c, int pipe, Buf b, uint64_t blk)
{
    const Shadow& s = c.shadow[b][blk];
    if (s.pipe != 0xFF && s.pipe != pipe && c.clock[pipe][s.pipe] < s.op)
        Fail(what, "%s accesses %s bytes [%llu, +32) written by %s without a SetFlag/WaitFlag between them",
             kPipeName[pipe], kBufName[b], (unsigned long long)(blk * 32), kPipeName[s.pipe]);
}
inline void TouchRead(const char* what, int pipe, Buf b, uint64_t off, uint64_t len)
{
    Core& c = Cur();
    if (len == 0) return;
    TraceLocal(what, b, off, len, false);
    for (uint64_t blk = off / 32; blk <= (off + len - 1) / 32; ++blk) {
        CheckWriter(what, c, pipe, b, blk);
        c.shadow[b][blk].rd[pipe] = c.clock[pipe][pipe];
    }
}
inline void TouchWrite(const char* what, int pipe, uint32_t op, Buf b, uint64_t off, uint64_t len)
{
    Core& c = Cur();
    if (len == 0) return;
    TraceLocal(what, b, off, len, true);
    for (uint64_t blk = off / 32; blk <= (off + len - 1) / 32; ++blk) {
        CheckWriter(what, c, pipe, b, blk);
        Shadow& s = c.shadow[b][blk];
        for (int q = 0; q < kPipes; ++q)
            if (q != pipe && s.rd[q] > c.clock[pipe][q])
                Fail(what, "%s overwrites %s bytes [%llu, +32) that %s reads, without a SetFlag/WaitFlag between them",
                     kPipeName[pipe], kBufName[b], (unsigned long long)(blk * 32), kPipeName[q]);
        s.op = op;
        s.pipe = static_cast<uint8_t>(pipe);
    }
}

// ---- poison ------------------------------------------------------------------------------------
// Local memory is 0xFF-filled at launch. Data leaving a core (to GM) must not be poison: a byte
// pattern all-ones element means the kernel stored memory nothing wrote.
template <typename T>
inline bool IsPoison(const uint8_t* p)
{
    for (size_t i = 0; i < sizeof(T); ++i)
        if (p[i] != kPoison) return false;
    return true;
}

// ---- numbers -----------------------------------------------------------------------------------
template <typename T>
inline float ToF(T v) { return static_cast<float>(v); }
template <typename T>
inline T FromF(float v) { return static_cast<T>(v); }
template <typename T>
inline T Load(const uint8_t* p) { T v; std::memcpy(&v, p, sizeof(T)); return v; }
template <typename T>
inline void Store(uint8_t* p, T v) { std::memcpy(p, &v, sizeof(T)); }

}  // namespace cce_rt

#endif  // TILEGEN_CCE_CORE_H
