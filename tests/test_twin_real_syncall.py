"""The real-API twin runs the hardware all-core barrier ``AscendC::SyncAll<false>()`` of a MIX_AIC_1_2
kernel: Huawei's ``SyncAllImpl`` (impl/basic_api/dav_c220/kernel_operator_sync_impl.h) over the twin's
cross-core flags, mode 2 inside an AI Core and mode 0 across all AICs (tilegen/twin/cce/runtime.cpp).

A hand-written kernel (built with ``twin.build_real``, like the generated ones): every AIV writes its own
value to a GM slot, all cores call SyncAll<false>(), every AIV reads the slot of the other-numbered AIV
of the next block and stores it, SyncAll<false>() again, and a second round overwrites the slots; the
values read must be the writers' values of that round. A core that skips SyncAll must make the run fail
with one "deadlock" line, not hang. A missing SyncAll with every core running is a race between CPU
threads (a read may or may not see the write or the GM poison), so it is not asserted here.

Needs ``$ASC_DEVKIT`` and clang++-16 (``$ASC_GEN`` as for tests/test_twin_real.py); skips with one line
otherwise.
"""

from __future__ import annotations

import subprocess

import pytest

from helpers import real_api_devkit
from tilegen.backends.ascendc import twin

DEVKIT = real_api_devkit()  # skips the module with one line without a snapshot or clang++-16


ROUNDS = 2
# ctl[0]: the block with a core that does nothing (-1: none); ctl[1]: which of its cores: 0 all three,
# 1 its AIV 1, 2 its AIC; 3: every AIV sets cross-core flag 15 (mode 0) before anything else.
KERNEL = r"""
#include "kernel_operator.h"
using namespace AscendC;

extern "C" __global__ __aicore__ void syncall_exchange(GM_ADDR slots_gm, GM_ADDR out_gm, GM_ADDR ctl_gm)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    const int32_t skipBlock = reinterpret_cast<__gm__ int32_t*>(ctl_gm)[0];
    const int32_t skipWho = reinterpret_cast<__gm__ int32_t*>(ctl_gm)[1];
    const int64_t core = static_cast<int64_t>(GetBlockIdx()) / GetTaskRatio();
    const int64_t cores = static_cast<int64_t>(GetBlockNum());
    if ASCEND_IS_AIC {
        if (core == skipBlock && (skipWho == 0 || skipWho == 2)) return;
        for (int i = 0; i < 2 * ROUNDS; ++i) SyncAll<false>();
    }
    if ASCEND_IS_AIV {
        const int64_t sub = static_cast<int64_t>(GetSubBlockIdx());
        if (core == skipBlock && (skipWho == 0 || (skipWho == 1 && sub == 1))) return;
        if (skipWho == 3) CrossCoreSetFlag<0, PIPE_MTE3>(15);
        const int64_t me = static_cast<int64_t>(GetBlockIdx());  // core * 2 + sub
        const int64_t peer = ((core + 1) % cores) * 2 + (1 - sub);
        GlobalTensor<int32_t> slots, out;
        slots.SetGlobalBuffer((__gm__ int32_t*)slots_gm, static_cast<uint64_t>(cores * 2 * 8));
        out.SetGlobalBuffer((__gm__ int32_t*)out_gm, static_cast<uint64_t>(ROUNDS * cores * 2 * 8));
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, 32);
        LocalTensor<int32_t> t = buf.Get<int32_t>();
        DataCopyExtParams one(1, 32, 0, 0, 0);
        DataCopyPadExtParams<int32_t> nopad(false, 0, 0, 0);
        for (int r = 0; r < ROUNDS; ++r) {
            Duplicate(t, static_cast<int32_t>(1000 * (r + 1) + me), 8);
            SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
            WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
            DataCopyPad(slots[me * 8], t, one);           // this AIV's slot
            SyncAll<false>();                             // every slot written
            DataCopyPad(t, slots[peer * 8], one, nopad);  // another block's
            SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
            WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
            DataCopyPad(out[(r * cores * 2 + me) * 8], t, one);
            SyncAll<false>();                             // every slot read before the next round writes
        }
    }
}
""".replace("ROUNDS", str(ROUNDS))

MAIN = r"""
#include <cstdio>
#include <cstdlib>
#include "sync_kernels.asc"

int main(int argc, char** argv)
{
    if (argc != 4) return 2;
    const int blocks = std::atoi(argv[1]);
    auto* slots = static_cast<int32_t*>(twin::GmAlloc(blocks * 2 * 8 * sizeof(int32_t), "slots"));
    auto* out = static_cast<int32_t*>(twin::GmAlloc(ROUNDS * blocks * 2 * 8 * sizeof(int32_t), "out"));
    auto* ctl = static_cast<int32_t*>(twin::GmAlloc(8 * sizeof(int32_t), "ctl"));
    ctl[0] = std::atoi(argv[2]);
    ctl[1] = std::atoi(argv[3]);
    twin::LaunchMix(blocks, syncall_exchange, (GM_ADDR)slots, (GM_ADDR)out, (GM_ADDR)ctl);
    for (int i = 0; i < ROUNDS * blocks * 2 * 8; ++i) std::printf("%d\n", out[i]);
    return 0;
}
""".replace("ROUNDS", str(ROUNDS))


@pytest.fixture(scope="module")
def exe():
    files = {"sync_kernels.asc": KERNEL, "twin_main.cpp": MAIN, "tiling.h": "// no tiling\n"}
    return twin.build_real(files, DEVKIT)


def _run(exe, blocks, skip_block=-1, skip_who=0):
    return subprocess.run([str(exe), str(blocks), str(skip_block), str(skip_who)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("blocks", [1, 4, 24])
def test_syncall_orders_gm_writes_before_other_blocks_reads(exe, blocks):
    proc = _run(exe, blocks)
    assert proc.returncode == 0, proc.stderr
    got = [int(x) for x in proc.stdout.split()]
    assert len(got) == ROUNDS * blocks * 2 * 8
    for r in range(ROUNDS):
        for core in range(blocks):
            for sub in range(2):
                me, peer = core * 2 + sub, ((core + 1) % blocks) * 2 + (1 - sub)
                row = got[(r * blocks * 2 + me) * 8 : (r * blocks * 2 + me + 1) * 8]
                assert row == [1000 * (r + 1) + peer] * 8, (r, core, sub, row)


@pytest.mark.parametrize(
    "skip_block, skip_who",
    [(2, 0), (1, 1), (3, 2), (0, 0)],
    ids=["block-2-skips", "aiv-1-of-block-1-skips", "aic-of-block-3-skips", "block-0-skips"],
)
def test_a_core_skipping_syncall_is_reported_as_a_deadlock(exe, skip_block, skip_who):
    proc = _run(exe, 4, skip_block, skip_who)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("twin(real API): wait_flag_dev: deadlock"), proc.stderr


def test_flag_15_is_reserved(exe):
    proc = _run(exe, 2, -1, 3)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "ffts_cross_core_sync: flag id 15 is reserved" in proc.stderr, proc.stderr
