// tilegen real-API twin: the unit flags of L0C (Mmad计算/关键特性说明/UnitFlag.md, asc-devkit 0da921b9):
// with unitFlag 2 or 3 on both mad and copy_matrix_cc_to_gm (Fixpipe), every 512-byte block of L0C has a
// flag: a mad writes a block only while its flag is 0, a Fixpipe reads it only while it is 1; afterwards
// unitFlag 3 flips the flag (mad: to 1, Fixpipe: to 0), unitFlag 2 leaves it. The flags order the cube's
// write of a block before the Fixpipe's read of it, and that read before the next write, as a
// SetFlag/WaitFlag pair would. The twin runs a core's instructions in program order, so an instruction
// that would wait for a flag no later instruction flips is a hang on the NPU: it fails here.
//
// For the pipe-ordering check (core.h) and the timeline, the flip by a mad (unitFlag 3) counts as a
// SetFlag M -> FIX after it, and the first Fixpipe that reads one of its blocks as the matching WaitFlag
// (and the other way round for the Fixpipe's flip and the next mad): the trace gets
// "M SetFlag <16*M+FIX> <1000 + n> FIX" / "FIX WaitFlag <16*M+FIX> <1000 + n> M" (n: the mad's number) and
// "FIX SetFlag <16*FIX+M> <2000 + n> M" / "M WaitFlag <16*FIX+M> <2000 + n> FIX".
#ifndef TILEGEN_CCE_UNITFLAG_H
#define TILEGEN_CCE_UNITFLAG_H

#include <cstdint>

#include "core.h"

namespace cce_rt {

struct UnitFlags {
    static constexpr int kBlocks = 131072 / 512;  // L0C in 512-byte blocks
    uint8_t flag[kBlocks] = {};
    uint32_t setBy[kBlocks] = {};      // number of the mad that last set the block's flag (1-based; 0: none)
    uint32_t setOp[kBlocks] = {};      // that mad's index on PIPE_M
    uint32_t clearedBy[kBlocks] = {};  // number of the Fixpipe that last cleared it
    uint32_t clearedOp[kBlocks] = {};  // that Fixpipe's index on PIPE_FIX
    uint32_t mads = 0, fixpipes = 0;   // unit-flag flips so far
    uint32_t madWaited = 0, fixWaited = 0;  // the newest flip each side is already ordered after
};
UnitFlags& CoreUnitFlags();  // defined in runtime.cpp (per core)

// Before a mad (write = true) or Fixpipe (false) with unitFlag 2/3 touching L0C [off, off + len): checks the
// flags (a hang fails) and orders the instruction after the flip it depends on. Call before Issue.
inline void UnitFlagsBefore(const char* what, bool write, uint64_t off, uint64_t len)
{
    UnitFlags& u = CoreUnitFlags();
    Core& c = Cur();
    uint32_t need = 0, op = 0;
    for (uint64_t b = off / 512; b <= (off + len - 1) / 512 && b < UnitFlags::kBlocks; ++b) {
        if (write && u.flag[b] != 0)
            Fail(what, "unitFlag: L0C block %llu is still waiting to be read (flag 1): the mad would wait forever",
                 (unsigned long long)b);
        if (!write && u.flag[b] != 1)
            Fail(what, "unitFlag: L0C block %llu was never released by a mad with unitFlag 3 (flag 0): the Fixpipe would "
                       "wait forever", (unsigned long long)b);
        const uint32_t by = write ? u.clearedBy[b] : u.setBy[b];
        if (by > need) {
            need = by;
            op = write ? u.clearedOp[b] : u.setOp[b];
        }
    }
    uint32_t& waited = write ? u.madWaited : u.fixWaited;
    if (need > waited) {
        waited = need;
        const int self = write ? PIPE_M : PIPE_FIX, other = write ? PIPE_FIX : PIPE_M;
        if (c.clock[self][other] < op) c.clock[self][other] = op;
        TraceSync(write ? "M" : "FIX", "WaitFlag", 16 * other + self, (write ? 2000 : 1000) + need, other);
    }
}

// After a mad (write = true) or Fixpipe with unitFlag 3: flips the flags of the blocks it touched.
inline void UnitFlagsAfter(bool write, uint64_t off, uint64_t len)
{
    UnitFlags& u = CoreUnitFlags();
    Core& c = Cur();
    const int self = write ? PIPE_M : PIPE_FIX, other = write ? PIPE_FIX : PIPE_M;
    const uint32_t n = write ? ++u.mads : ++u.fixpipes;
    for (uint64_t b = off / 512; b <= (off + len - 1) / 512 && b < UnitFlags::kBlocks; ++b) {
        u.flag[b] = write ? 1 : 0;
        (write ? u.setBy : u.clearedBy)[b] = n;
        (write ? u.setOp : u.clearedOp)[b] = c.clock[self][self];
    }
    TraceSync(write ? "M" : "FIX", "SetFlag", 16 * self + other, (write ? 1000 : 2000) + n, other);
}

}  // namespace cce_rt

#endif  // TILEGEN_CCE_UNITFLAG_H
