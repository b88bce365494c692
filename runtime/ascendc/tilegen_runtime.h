// tilegen runtime for Ascend C kernels on 910B (NPU arch 2201, `--npu-arch=dav-2201`).
//
// Small fixed building blocks that the generated kernels call with the parameters the compiler
// computed: integer helpers in 64 bits, tile moves (GM <-> UB with DataCopyPad, GM -> L1 with the ND->NZ
// DataCopy, L1 -> L0A/L0B with LoadData, L0C -> GM with Fixpipe), a tile matmul on the cube, row-wise
// vector helpers and the cube<->vector hand-off through a per-core GM workspace with cross-core flags.
// Pipe synchronisation is conservative: every move is followed by its consumer's wait, so no two pipes
// overlap (correctness first; overlap is future work). Row reductions, row broadcasts and masks run on the
// vector pipe without per-row scalar loops (ReduceRepeat, Brcb, CreateVecIndex, Compares/Select).
//
// Target: CANN 9.1.0 (Ascend C API names of 9.1.0: Fill, Compares, DisableDmaAtomic; the older
// InitConstValue, CompareScalar, SetAtomicNone are deprecated aliases there). Every API below is cited
// by its declaration in asc-devkit (cannmirror/asc-devkit@0da921b91aeb2abdc6e8d74423b0bbe7040c3fd1,
// CANN 9.1.0; I = include/basic_api/, M = impl/basic_api/) and its page under docs/zh/api/SIMD-API/基础API/
// (D = that folder; tilegen/twin/README.md lists every page):
//   DataCopyPad, DataCopyExtParams, DataCopyPadExtParams  I/kernel_operator_data_copy_intf.h:399,420,
//       I/kernel_struct_data_copy.h:194,222; D/Memory矢量计算/数据搬运/GM与UB数据搬运/GMToUB非对齐数据搬运
//       (DataCopyPad).md, UBToGM…  (GM strides in bytes, UB strides in 32 B blocks; GM->UB rows padded to 32 B)
//   DataCopy + Nd2NzParams (GM -> L1 ND->NZ)     I/kernel_operator_data_copy_intf.h:75, I/kernel_struct_data_copy.h:259
//   LoadData + LoadData2DParams (L1 -> L0A/L0B)  I/kernel_operator_mm_intf.h:64, I/kernel_struct_mm.h:42
//   Mmad + MmadParams (cmatrixInitVal: C starts from 0)  I/kernel_operator_mm_intf.h:281, I/kernel_struct_mm.h:392
//   Fixpipe + FixpipeParamsV220, CFG_ROW_MAJOR   I/kernel_operator_fixpipe_intf.h:93 (L0C -> GM), I/kernel_struct_fixpipe.h:97,106
//   Fill + InitConstValueParams                  I/kernel_operator_mm_intf.h:379, I/kernel_struct_mm.h:444;
//       D/矩阵计算（ISASI）/矩阵计算的搬入/辅助配置接口/Fill.md (repeatTimes repeats of blockNum blocks,
//       dstGap blocks apart; a block is 32 B in L1, 512 B in L0A/L0B; blockNum = 0 does nothing)
//   Duplicate                                    I/kernel_operator_vec_duplicate_intf.h:71
//   Adds, Muls                                   I/kernel_operator_vec_binary_scalar_intf.h:113-119,202-208
//   Add, Sub, Mul, Max                           I/kernel_operator_vec_binary_intf.h:82,124,166,310
//   Exp, Ln                                      I/kernel_operator_vec_unary_intf.h:125,175
//   ReduceMax, ReduceSum (sharedTmpBuffer size)  I/kernel_operator_vec_reduce_intf.h:170,183;
//       D/Memory矢量计算/归约计算/ReduceMax.md, ReduceSum.md
//   ReduceRepeat<ReduceType> (9.1.0 name of WholeReduceMax/Sum)  I/kernel_operator_vec_reduce_intf.h:72;
//       ReduceType impl/utils/common_types.h:25; D/Memory矢量计算/归约计算/ReduceRepeat.md (dstRepStride unit)
//   Add, Sub, Mul level 0 + BinaryRepeatParams  I/kernel_operator_vec_binary_intf.h:69,111,153, I/kernel_struct_binary.h:45
//   Brcb + BrcbRepeatParams                      I/kernel_operator_vec_brcb_intf.h:51, I/kernel_struct_brcb.h:37;
//       D/Memory矢量计算/数据填充/Brcb.md
//   CreateVecIndex (count form)                  I/kernel_operator_vec_createvecindex_intf.h:50; its dav-c220
//       body (M/dav_c220/kernel_operator_vec_createvecindex_impl.h): 8 SetValue, an S->V pair, Adds on V
//   Reciprocal (count form)                      I/kernel_operator_vec_unary_intf.h:276
//   ResetMask                                    include/basic_api/kernel_common.h:135
//   Compares, Select (count * sizeof(T) a multiple of 256 B)  I/kernel_operator_vec_cmpsel_intf.h:155,277;
//       D/Memory矢量计算/比较与选择/Compares.md, Select.md; CMPMODE, SELMODE M/utils/kernel_utils_mode.h:111,120
//   Cast + RoundMode                             I/kernel_operator_vec_vconv_intf.h:81
//   SetFlag/WaitFlag<HardEvent>, PipeBarrier     I/kernel_operator_block_sync_intf.h:43,46,49; M/kernel_event.h:38
//   CrossCoreSetFlag/CrossCoreWaitFlag           I/kernel_operator_block_sync_intf.h:90,93;
//       D/同步控制/核间同步/CrossCoreSetFlag(ISASI).md (mode 2; flag ids 0-15, 11-14 taken by SyncAll)
//   SetAtomicAdd, DisableDmaAtomic               I/kernel_operator_set_atomic_intf.h:39,41; D/原子操作/DisableDmaAtomic.md
//   TPipe, TBuf, InitBuffer, Get, GetWithOffset  I/kernel_tpipe.h:448,463 (TPipe, InitBuffer), 206,210,214 (TBuf)
//   LocalTensor GetValue/SetValue/GetSize, GlobalTensor SetGlobalBuffer  I/kernel_tensor.h:176,181,195,265
//   GetBlockIdx, GetBlockNum, GetSubBlockIdx, GetTaskRatio  I/kernel_operator_sys_var_intf.h:39-45
//   KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2), ASCEND_IS_AIC/AIV  M/utils/kernel_utils_macros.h:94,381,
//       impl/utils/sys_macros.h:84 (only valid after `if`)
// The build (tilegen_ops.asc, CMakeLists.txt) needs bisheng from CANN >= 9.1.0.
#ifndef TILEGEN_RUNTIME_H
#define TILEGEN_RUNTIME_H

#include "kernel_operator.h"

namespace tilegen {
using namespace AscendC;

// Cross-core flag ids (mode 2, inside one AI Core). Without the pipeline-handoffs pass "ready" has one id
// per direction (tiles are consumed in the order they are produced) and "free" one id per hand-off
// (FLAG_FREE_BASE + k): hand-offs are refilled at different rates, so each waits for its own consumer.
// A pipelined kernel numbers its flags itself (@handoff_slots ready: a ready id per hand-off, or per direction
// and stage when too few ids remain; the free ids after them). Mode 2 takes ids 0-15 on A2, SyncAll uses
// 11-14 (CrossCoreSetFlag(ISASI).md), so these stay in 0-10; a producer never runs more than its slots
// (1 or 2) tiles per hand-off ahead, so no counter passes 15.
constexpr uint16_t FLAG_C2V_READY = 0;
constexpr uint16_t FLAG_V2C_READY = 1;
constexpr uint16_t FLAG_FREE_BASE = 2;

// IEEE infinities as compile-time constants: the device headers include <cmath> (INFINITY) only under
// ASCENDC_CPU_DEBUG, so the kernels must not rely on it.
constexpr float POS_INF = __builtin_huge_valf();
constexpr float NEG_INF = -__builtin_huge_valf();

// ---------------------------------------------------------------------------------------------------
// Integers: every offset and size is int64 (a tensor can pass 2^31 elements).
__aicore__ inline int64_t FloorDiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__aicore__ inline int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }
__aicore__ inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }
__aicore__ inline int64_t Max64(int64_t a, int64_t b) { return a > b ? a : b; }
__aicore__ inline int64_t Clip(int64_t x, int64_t lo, int64_t hi) { return Min64(Max64(x, lo), hi); }
// @first_plain: false on a program's first store into its tile (a plain write: nothing zeroed the tile),
// true on the later ones (an atomic add). `mark` holds 1 + the program id of the last store, 0 at first.
__aicore__ inline bool AddAfterFirst(int64_t& mark, int64_t pid)
{
    const bool add = mark == pid + 1;
    mark = pid + 1;
    return add;
}

// An immediate SetFlag/WaitFlag pair on a free event ID of the TPipe. A literal ID may collide with one the
// TPipe holds: on dav-c220 the AIC's TPipe::Init sets M_MTE1 events 0-2 (impl/basic_api/kernel_tpipe_impl.h
// at asc-devkit 0da921b9), and "相同流水、相同eventID下，连续使用SetFlag会引发未定义行为" (docs/zh/api/SIMD-API/
// 基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md, which asks TPipe code for FetchEventID/AllocEventID).
template <HardEvent E>
__aicore__ inline void SetWait()
{
    const int32_t id = static_cast<int32_t>(GetTPipePtr()->FetchEventID(E));
    SetFlag<E>(id);
    WaitFlag<E>(id);
}

// ---------------------------------------------------------------------------------------------------
// Descriptor fields. Every computed value a helper writes into a hardware descriptor or a narrow API
// argument goes through TILEGEN_NARROW(Struct_member, value): the accepted range of each field below
// (type on arch 2201 from asc-devkit@0da921b9 include/basic_api/kernel_struct_{data_copy,mm,fixpipe}.h,
// range from impl/basic_api/kernel_operator_{data_copy,mm}_check.h, impl/basic_api/dav_c220/
// kernel_operator_mm_impl.h, impl/basic_api/kernel_npu_debug.h or the API page; the table with each
// source is FIELDS in tilegen/backends/ascendc/__init__.py). tilegen proved every value in range for the spec when
// it generated these files, and the host refuses run-time sizes past that proof (TilegenRefusal in
// tiling.h); on the NPU the narrowing is a plain cast, on the CPU twin (TILEGEN_TWIN) a value out of range
// fails with one line instead of wrapping.
namespace field {
// impl/basic_api/dav_c220/kernel_operator_sync_impl.h
struct CrossCoreSetFlag_flagId {
    using T = uint16_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 10LL;
};
// include/basic_api/kernel_struct_data_copy.h, impl/basic_api/kernel_operator_data_copy_check.h
struct DataCopyExtParams_blockCount {
    using T = uint16_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 4095LL;
};
// include/basic_api/kernel_struct_data_copy.h, impl/basic_api/kernel_operator_data_copy_check.h
struct DataCopyExtParams_blockLen {
    using T = uint32_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 2097151LL;
};
// include/basic_api/kernel_struct_data_copy.h; docs/zh/api/.../GMToUB非对齐数据搬运(DataCopyPad).md table 5
struct DataCopyExtParams_dstStride {
    using T = uint32_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 4294967295LL;
};
// include/basic_api/kernel_struct_data_copy.h; docs/zh/api/.../GMToUB非对齐数据搬运(DataCopyPad).md table 5
struct DataCopyExtParams_srcStride {
    using T = uint32_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 4294967295LL;
};
// include/basic_api/kernel_struct_fixpipe.h, impl/basic_api/kernel_operator_mm_check.h
struct FixpipeParamsV220_dstStride {
    using T = uint32_t;
    static constexpr int64_t lo = 1LL;
    static constexpr int64_t hi = 4294967295LL;
};
// include/basic_api/kernel_struct_fixpipe.h, impl/basic_api/kernel_operator_mm_check.h (NZ2ND)
struct FixpipeParamsV220_mSize {
    using T = uint16_t;
    static constexpr int64_t lo = 1LL;
    static constexpr int64_t hi = 8192LL;
};
// include/basic_api/kernel_struct_fixpipe.h, impl/basic_api/kernel_operator_mm_check.h
struct FixpipeParamsV220_nSize {
    using T = uint16_t;
    static constexpr int64_t lo = 1LL;
    static constexpr int64_t hi = 4095LL;
};
// include/basic_api/kernel_struct_fixpipe.h, impl/basic_api/kernel_operator_mm_check.h; docs/zh/api/.../L0C到GM数据搬运（Fixpipe）.md
struct FixpipeParamsV220_srcStride {
    using T = uint16_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 65535LL;
};
// include/basic_api/kernel_struct_mm.h, impl/basic_api/dav_c220/kernel_operator_mm_impl.h
struct InitConstValueParams_blockNum {
    using T = uint16_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 32767LL;
};
// include/basic_api/kernel_struct_mm.h; docs/zh/api/.../LoadData_2D.md (0 is a no-op)
struct LoadData2DParams_repeatTimes {
    using T = uint8_t;
    static constexpr int64_t lo = 1LL;
    static constexpr int64_t hi = 255LL;
};
// include/basic_api/kernel_struct_mm.h; docs/zh/api/.../LoadData_2D.md
struct LoadData2DParams_srcStride {
    using T = uint16_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 65535LL;
};
// include/basic_api/kernel_struct_mm.h; docs/zh/api/.../LoadData_2D.md
struct LoadData2DParams_startIndex {
    using T = uint16_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 65535LL;
};
// include/basic_api/kernel_struct_mm.h, impl/basic_api/kernel_operator_mm_check.h
struct MmadParams_k {
    using T = uint16_t;
    static constexpr int64_t lo = 1LL;
    static constexpr int64_t hi = 4095LL;
};
// include/basic_api/kernel_struct_mm.h, impl/basic_api/kernel_operator_mm_check.h (m = 1 is GEMV)
struct MmadParams_m {
    using T = uint16_t;
    static constexpr int64_t lo = 2LL;
    static constexpr int64_t hi = 4095LL;
};
// include/basic_api/kernel_struct_mm.h, impl/basic_api/kernel_operator_mm_check.h
struct MmadParams_n {
    using T = uint16_t;
    static constexpr int64_t lo = 1LL;
    static constexpr int64_t hi = 4095LL;
};
// include/basic_api/kernel_struct_data_copy.h, impl/basic_api/kernel_operator_data_copy_check.h
struct Nd2NzParams_dValue {
    using T = uint16_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 65535LL;
};
// include/basic_api/kernel_struct_data_copy.h, impl/basic_api/kernel_operator_data_copy_check.h
struct Nd2NzParams_dstNzC0Stride {
    using T = uint16_t;
    static constexpr int64_t lo = 1LL;
    static constexpr int64_t hi = 16384LL;
};
// include/basic_api/kernel_struct_data_copy.h, impl/basic_api/kernel_operator_data_copy_check.h
struct Nd2NzParams_nValue {
    using T = uint16_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 16384LL;
};
// include/basic_api/kernel_struct_data_copy.h, impl/basic_api/kernel_operator_data_copy_check.h
struct Nd2NzParams_srcDValue {
    using T = uint16_t;
    static constexpr int64_t lo = 1LL;
    static constexpr int64_t hi = 65535LL;
};
// impl/basic_api/kernel_npu_debug.h (counter-mode mask)
struct VectorOp_count {
    using T = int32_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 2147483647LL;
};
// include/basic_api/kernel_struct_binary.h:45 (uint8_t dstRepStride, src0RepStride)
struct VectorOp_repStride {
    using T = uint8_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 255LL;
};
// include/basic_api/kernel_operator_vec_binary_intf.h:69 (const uint8_t repeatTime); docs/zh/api/.../Brcb.md [0, 255]
struct VectorOp_repeatTime {
    using T = uint8_t;
    static constexpr int64_t lo = 0LL;
    static constexpr int64_t hi = 255LL;
};
}  // namespace field
#ifdef TILEGEN_TWIN
#define TILEGEN_NARROW(F, v) \
    (::twin::CheckedNarrow<::tilegen::field::F::T>((v), ::tilegen::field::F::lo, ::tilegen::field::F::hi, #F))
#else
#define TILEGEN_NARROW(F, v) (static_cast<::tilegen::field::F::T>(v))
#endif

// ---------------------------------------------------------------------------------------------------
// Vector side (AIV). A tile of R rows x C columns lives in UB as R rows of `cpad` elements (C rounded
// up to 32 bytes), which is the layout DataCopyPad produces.

template <typename T>
__aicore__ inline void WaitMte2ToV()
{
    SetWait<HardEvent::MTE2_V>();
}
__aicore__ inline void WaitVToMte3()
{
    SetWait<HardEvent::V_MTE3>();
}
__aicore__ inline void WaitMte3ToV()
{
    SetWait<HardEvent::MTE3_V>();
}
__aicore__ inline void WaitVToMte2()
{
    SetWait<HardEvent::V_MTE2>();
}
// Scalar GetValue/SetValue on UB run on PIPE_S: without the compiler's automatic synchronisation a scalar
// access waits for the pipe that wrote the data, and a vector op for the scalar writes it reads
// (docs/zh/guide/技术附录/概念原理和术语/内存访问原理/Scalar读写数据.md, "Scalar读写数据时的同步").
__aicore__ inline void WaitVToS()
{
    SetWait<HardEvent::V_S>();
}
__aicore__ inline void WaitSToV()
{
    SetWait<HardEvent::S_V>();
}
__aicore__ inline void WaitMte2ToS()
{
    SetWait<HardEvent::MTE2_S>();
}
__aicore__ inline void WaitMte3ToS()
{
    SetWait<HardEvent::MTE3_S>();
}
__aicore__ inline void WaitSToMte3()
{
    SetWait<HardEvent::S_MTE3>();
}

// GM rows -> UB: `valid` rows of `cols` elements from `src` (row pitch `pitch` elements) into the first
// `valid` rows of `dst`; rows [valid, rows) get `padValue` when `pad` (the padding of a tile past the
// tensor's extent). Without `closing` (the IR knob @wait_at_read on a received hand-off, no padding)
// the MTE2 -> V wait is left to the caller, who takes it (WaitMte2ToV) just before the tile's first
// reader, so that the vector computes on while the copy runs.
// `freeId` >= 0 (the IR knob @free_early): the copy waits for that V -> MTE2 event alone, which
// FreeForMte2 raised right after dst's last access, instead of for all vector work issued before it.
template <typename T>
__aicore__ inline void LoadRows(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int64_t valid, int64_t rows,
                                int64_t cols, int64_t cpad, int64_t pitch, bool pad, T padValue, bool closing = true,
                                int32_t freeId = -1)
{
    if (freeId < 0) {
        WaitVToMte2();
    } else {
        WaitFlag<HardEvent::V_MTE2>(static_cast<TEventID>(freeId));
    }
    if (valid > 0) {
        DataCopyExtParams p(TILEGEN_NARROW(DataCopyExtParams_blockCount, valid),
                            TILEGEN_NARROW(DataCopyExtParams_blockLen, cols * static_cast<int64_t>(sizeof(T))),
                            TILEGEN_NARROW(DataCopyExtParams_srcStride, (pitch - cols) * static_cast<int64_t>(sizeof(T))), 0, 0);
        DataCopyPadExtParams<T> pp(false, 0, 0, padValue);
        DataCopyPad(dst, src, p, pp);
    }
    if (closing || pad) WaitMte2ToV<T>();
    if (pad && valid < rows) {
        Duplicate(dst[valid * cpad], padValue, TILEGEN_NARROW(VectorOp_count, (rows - valid) * cpad));
    }
}

// The V -> MTE2 event of a UB tile that MTE2 refills every tile pair (the IR knob @free_early): an
// ID allocated for it (TPipe::AllocEventID, include/basic_api/kernel_tpipe.h:469) and raised once, so that
// the first copy may start; FreeForMte2 raises it after each tile's last access on V, the copy of the
// next tile (LoadRows' freeId) waits for it, and FreeDrain takes the last one and releases the ID (:471).
// Set and wait alternate, as SetFlag-WaitFlag(ISASI).md requires of one event ID.
__aicore__ inline TEventID FreeInit()
{
    const TEventID id = GetTPipePtr()->AllocEventID<HardEvent::V_MTE2>();
    SetFlag<HardEvent::V_MTE2>(id);
    return id;
}
__aicore__ inline void FreeForMte2(TEventID id)
{
    SetFlag<HardEvent::V_MTE2>(id);
}
__aicore__ inline void FreeDrain(TEventID id)
{
    WaitFlag<HardEvent::V_MTE2>(id);
    GetTPipePtr()->ReleaseEventID<HardEvent::V_MTE2>(id);
}

// A vector of `valid` consecutive elements GM -> UB; elements [valid, n) get `padValue` when `pad`.
template <typename T>
__aicore__ inline void LoadVector(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int64_t valid, int64_t n, bool pad,
                                  T padValue)
{
    WaitVToMte2();
    if (valid > 0) {
        DataCopyExtParams p(1, TILEGEN_NARROW(DataCopyExtParams_blockLen, valid * static_cast<int64_t>(sizeof(T))), 0, 0, 0);
        DataCopyPadExtParams<T> pp(false, 0, 0, padValue);
        DataCopyPad(dst, src, p, pp);
    }
    WaitMte2ToV<T>();
    if (pad && valid < n) {
        WaitMte2ToS();
        for (int64_t e = valid; e < n; ++e) dst.SetValue(static_cast<uint32_t>(e), padValue);
        WaitSToV();
    }
}

// UB rows -> GM: `valid` rows of `cols` elements to `dst` (row pitch `pitch` elements); `atomic`
// adds into fp32 GM instead of writing. Without `closing` (the IR knob @wait_at_rewrite) the
// MTE3 -> V wait that frees `src` is left to the caller, who takes it (WaitMte3ToV) just before `src`
// is next written, so that the vector computes on while the copy runs.
template <typename T>
__aicore__ inline void StoreRows(const GlobalTensor<T>& dst, const LocalTensor<T>& src, int64_t valid, int64_t cols,
                                 int64_t cpad, int64_t pitch, bool atomic, bool closing = true)
{
    if (valid <= 0) return;
    WaitVToMte3();
    if (atomic) SetAtomicAdd<T>();
    DataCopyExtParams p(TILEGEN_NARROW(DataCopyExtParams_blockCount, valid),
                        TILEGEN_NARROW(DataCopyExtParams_blockLen, cols * static_cast<int64_t>(sizeof(T))), 0,
                        TILEGEN_NARROW(DataCopyExtParams_dstStride, (pitch - cols) * static_cast<int64_t>(sizeof(T))), 0);
    DataCopyPad(dst, src, p);
    if (atomic) DisableDmaAtomic();
    if (closing) WaitMte3ToV();
}

template <typename T>
__aicore__ inline void StoreVector(const GlobalTensor<T>& dst, const LocalTensor<T>& src, int64_t valid, bool atomic)
{
    if (valid <= 0) return;
    WaitVToMte3();
    if (atomic) SetAtomicAdd<T>();
    DataCopyExtParams p(1, TILEGEN_NARROW(DataCopyExtParams_blockLen, valid * static_cast<int64_t>(sizeof(T))), 0, 0, 0);
    DataCopyPad(dst, src, p);
    if (atomic) DisableDmaAtomic();
    WaitMte3ToV();
}

// tilegen:section packed (emitted for a spec with packed_ids: a packed batch)
// Packed batches (DESIGN §3, "Packed batches"; the FAG interface's TND / actual_seq_qlen is the Ascend
// precedent): `ids` are the sequence ids of a tile's rows (an int32 GM row of the spec's packed_ids),
// negative for a row outside every sequence. Such a row is never read from GM (it loads as 0) nor
// written to GM. Per tile: one whole-tile copy when each of its `valid` rows is inside (the common
// case), else one copy per run of consecutive inside rows. The ids are read by the scalar unit from GM
// (GlobalTensor::GetValue, I/kernel_tensor.h:270); they are kernel inputs, never written.
__aicore__ inline bool AllInside(const GlobalTensor<int32_t>& ids, int64_t valid)
{
    for (int64_t r = 0; r < valid; ++r) {
        if (ids.GetValue(static_cast<uint64_t>(r)) < 0) return false;
    }
    return true;
}
// The next run [r0, r1) of inside rows after the previous run (start with r1 = 0); false when none is left.
__aicore__ inline bool NextRun(const GlobalTensor<int32_t>& ids, int64_t valid, int64_t& r0, int64_t& r1)
{
    r0 = r1;
    while (r0 < valid && ids.GetValue(static_cast<uint64_t>(r0)) < 0) ++r0;
    if (r0 >= valid) return false;
    r1 = r0;
    while (r1 < valid && ids.GetValue(static_cast<uint64_t>(r1)) >= 0) ++r1;
    return true;
}

// LoadRows for a packed batch: the rows of a negative id load as 0.
template <typename T>
__aicore__ inline void LoadRowsIn(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const GlobalTensor<int32_t>& ids, int64_t valid,
                                  int64_t rows, int64_t cols, int64_t cpad, int64_t pitch, bool pad, T padValue)
{
    if (AllInside(ids, valid)) {
        LoadRows<T>(dst, src, valid, rows, cols, cpad, pitch, pad, padValue);
        return;
    }
    Duplicate(dst, static_cast<T>(0), TILEGEN_NARROW(VectorOp_count, rows * cpad));
    int64_t r0 = 0, r1 = 0;
    while (NextRun(ids, valid, r0, r1)) {
        LoadRows<T>(dst[r0 * cpad], src[r0 * pitch], r1 - r0, r1 - r0, cols, cpad, pitch, false, padValue);
    }
    WaitMte2ToV<T>();
    if (pad && valid < rows) {
        Duplicate(dst[valid * cpad], padValue, TILEGEN_NARROW(VectorOp_count, (rows - valid) * cpad));
    }
}
// LoadVector for a packed batch: the elements of a negative id load as 0 (a scalar copy: a run may start
// at any element, and DataCopyPad needs a 32-byte aligned UB address).
template <typename T>
__aicore__ inline void LoadVectorIn(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const GlobalTensor<int32_t>& ids, int64_t valid,
                                    int64_t n, bool pad, T padValue)
{
    if (AllInside(ids, valid)) {
        LoadVector<T>(dst, src, valid, n, pad, padValue);
        return;
    }
    WaitVToS();
    for (int64_t e = 0; e < valid; ++e) {
        const bool inside = ids.GetValue(static_cast<uint64_t>(e)) >= 0;
        dst.SetValue(static_cast<uint32_t>(e), inside ? src.GetValue(static_cast<uint64_t>(e)) : static_cast<T>(0));
    }
    for (int64_t e = valid; pad && e < n; ++e) dst.SetValue(static_cast<uint32_t>(e), padValue);
    WaitSToV();
}
// StoreRows for a packed batch: the rows of a negative id are not written.
template <typename T>
__aicore__ inline void StoreRowsIn(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const GlobalTensor<int32_t>& ids, int64_t valid,
                                   int64_t cols, int64_t cpad, int64_t pitch, bool atomic)
{
    if (AllInside(ids, valid)) {
        StoreRows<T>(dst, src, valid, cols, cpad, pitch, atomic);
        return;
    }
    int64_t r0 = 0, r1 = 0;
    while (NextRun(ids, valid, r0, r1)) StoreRows<T>(dst[r0 * pitch], src[r0 * cpad], r1 - r0, cols, cpad, pitch, atomic);
}
// StoreVector for a packed batch: each run is first copied to the start of `stage` (UB scratch of at
// least `valid` elements; DataCopyPad reads UB from a 32-byte aligned address).
template <typename T>
__aicore__ inline void StoreVectorIn(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const GlobalTensor<int32_t>& ids, int64_t valid,
                                     const LocalTensor<T>& stage, bool atomic)
{
    if (AllInside(ids, valid)) {
        StoreVector<T>(dst, src, valid, atomic);
        return;
    }
    int64_t r0 = 0, r1 = 0;
    while (NextRun(ids, valid, r0, r1)) {
        WaitMte3ToS();
        WaitVToS();
        for (int64_t e = r0; e < r1; ++e) stage.SetValue(static_cast<uint32_t>(e - r0), src.GetValue(static_cast<uint32_t>(e)));
        WaitSToMte3();
        StoreVector<T>(dst[r0], stage, r1 - r0, atomic);
    }
    WaitMte3ToS();  // the next scalar writes of `stage` wait for the last read
}
// tilegen:end packed
// tilegen:section sinks (emitted for a spec with sinks)
// The 0-d tile dst (its element 0) = src[0] in GM (a per-head scalar such as the sink logit sigma_h).
template <typename T>
__aicore__ inline void LoadScalar(const LocalTensor<T>& dst, const GlobalTensor<T>& src)
{
    WaitVToS();
    dst.SetValue(0, src.GetValue(0));
    WaitSToV();
}
// dst[0, n) = src[0] (a 0-d tile broadcast over a row vector).
template <typename T>
__aicore__ inline void BroadcastScalar(const LocalTensor<T>& dst, const LocalTensor<T>& src, int64_t n)
{
    WaitVToS();
    const T v = src.GetValue(0);
    Duplicate(dst, v, TILEGEN_NARROW(VectorOp_count, n));
}

// tilegen:end sinks
// Row-wise vector work without scalar loops. The level-0 calls below (a lane mask, a repeat per row)
// leave their mask in the mask register; the count-form Compares of A2 runs under that register
// (impl/basic_api/dav_c220/kernel_operator_vec_cmp_impl.h:370 sets none), so each helper ends with
// ResetMask() (include/basic_api/kernel_common.h:135: all lanes). So does every CreateVecIndex call (its
// dav-c220 body ends with masked Adds). A tile row r starts at r * cpad (cpad a multiple of 8
// floats, so at a 32-byte block); one 256-byte repeat covers 64 fp32 columns of one row, so an
// instruction over a column chunk repeats once per row with a repeat stride of cpad / 8 blocks.
constexpr int64_t LANES_F32 = 64;  // fp32 lanes of a 256 B repeat
enum class RowOp { ADD, SUB, MUL };

// dst row r = src row r (op) vec[r] for r < rows. Brcb spreads vec[r] over the r-th 32-byte block of
// `brc` (brc.GetSize() / 8 rows at a time); per 64 columns one Add/Sub/Mul then runs over those rows,
// a repeat per row, src1 the row's block read for each of the 8 blocks (block stride 0, repeat stride 1).
__aicore__ inline void RowsVecOp(const LocalTensor<float>& dst, const LocalTensor<float>& src, const LocalTensor<float>& vec,
                                 const LocalTensor<float>& brc, int64_t rows, int64_t cpad, RowOp op)
{
    const int64_t group = static_cast<int64_t>(brc.GetSize()) / 8;
    const uint8_t stride = TILEGEN_NARROW(VectorOp_repStride, cpad / 8);
    const BinaryRepeatParams p(1, 1, 0, stride, stride, 1);
    for (int64_t g0 = 0; g0 < rows; g0 += group) {
        const int64_t g = Min64(group, rows - g0);
        Brcb(brc, vec[g0], TILEGEN_NARROW(VectorOp_repeatTime, CeilDiv(g, 8)), BrcbRepeatParams(1, 8));
        const uint8_t rep = TILEGEN_NARROW(VectorOp_repeatTime, g);
        for (int64_t c0 = 0; c0 < cpad; c0 += LANES_F32) {
            const uint64_t mask = static_cast<uint64_t>(Min64(LANES_F32, cpad - c0));
            const int64_t at = g0 * cpad + c0;
            if (op == RowOp::ADD) {
                Add(dst[at], src[at], brc, mask, rep, p);
            } else if (op == RowOp::SUB) {
                Sub(dst[at], src[at], brc, mask, rep, p);
            } else {
                Mul(dst[at], src[at], brc, mask, rep, p);
            }
        }
    }
    ResetMask();
}
// dst row r = src row r + sign * vec[r] (sign -1: Sub, +1: Add).
__aicore__ inline void RowsAddScalar(const LocalTensor<float>& dst, const LocalTensor<float>& src,
                                     const LocalTensor<float>& vec, const LocalTensor<float>& brc, int64_t rows, int64_t cpad,
                                     float sign)
{
    RowsVecOp(dst, src, vec, brc, rows, cpad, sign < 0.0f ? RowOp::SUB : RowOp::ADD);
}
__aicore__ inline void RowsMulScalar(const LocalTensor<float>& dst, const LocalTensor<float>& src,
                                     const LocalTensor<float>& vec, const LocalTensor<float>& brc, int64_t rows, int64_t cpad)
{
    RowsVecOp(dst, src, vec, brc, rows, cpad, RowOp::MUL);
}
// row[0, n) = x[0, n) through a 64-aligned scratch row, so that Compares and Select (count * 4 a multiple
// of 256 B) run on CeilDiv(n, 64) * 64 elements; the elements past n are scratch.
__aicore__ inline int32_t ToScratchRow(const LocalTensor<float>& row, const LocalTensor<float>& x, int64_t n)
{
    Muls(row, x, 1.0f, TILEGEN_NARROW(VectorOp_count, n));
    return TILEGEN_NARROW(VectorOp_count, CeilDiv(n, LANES_F32) * LANES_F32);
}
// dst row r = src row r / vec[r], or 0 where vec[r] == 0 (O of a row with no visible key): the factors
// 1 / vec[r] (0 where vec[r] == 0) in `row`, then RowsVecOp's Mul.
__aicore__ inline void RowsSafeDiv(const LocalTensor<float>& dst, const LocalTensor<float>& src,
                                   const LocalTensor<float>& vec, const LocalTensor<float>& brc, const LocalTensor<float>& row,
                                   const LocalTensor<uint8_t>& bits, int64_t rows, int64_t cpad)
{
    const int32_t n = ToScratchRow(row, vec, rows);
    Compares(bits, row, 0.0f, CMPMODE::NE, n);
    Reciprocal(row, row, n);
    Select(row, bits, row, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, n);
    RowsVecOp(dst, src, row, brc, rows, cpad, RowOp::MUL);
}
// vec[r] = max or sum over the first `cols` columns of row r: per 64 columns one ReduceRepeat (MAX with
// ORDER_ONLY_VALUE, or SUM) over every row, a repeat per row, its result at vec[r] (dstRepStride 1: one
// float, ReduceRepeat.md table 3); the chunks after the first go to `part` and are combined with Max/Add.
__aicore__ inline void RowsReduce(const LocalTensor<float>& vec, const LocalTensor<float>& src, int64_t rows, int64_t cols,
                                  int64_t cpad, const LocalTensor<float>& part, bool isMax)
{
    const int32_t rep = TILEGEN_NARROW(VectorOp_repeatTime, rows);
    const int32_t stride = static_cast<int32_t>(cpad / 8);
    for (int64_t c0 = 0; c0 < cols; c0 += LANES_F32) {
        const int32_t mask = static_cast<int32_t>(Min64(LANES_F32, cols - c0));
        const LocalTensor<float>& out = c0 == 0 ? vec : part;
        if (isMax) {
            ReduceRepeat<ReduceType::MAX, float, float>(out, src[c0], mask, rep, 1, 1, stride, ReduceOrder::ORDER_ONLY_VALUE);
        } else {
            ReduceRepeat<ReduceType::SUM, float, float>(out, src[c0], mask, rep, 1, 1, stride);
        }
        if (c0 == 0) continue;
        ResetMask();
        if (isMax) {
            Max(vec, vec, part, TILEGEN_NARROW(VectorOp_count, rows));
        } else {
            Add(vec, vec, part, TILEGEN_NARROW(VectorOp_count, rows));
        }
    }
    ResetMask();
}
// RowsReduce through a fold (the IR knob @fold; cols >= 128), in two calls: RowsFold sets fold
// row r to the elementwise Max/Add of row r's 64-column blocks (blocks 0 and 1 in one instruction, then
// each later block into fold, a partial last block under a lane mask; a repeat per row: src repeat
// stride cpad / 8 blocks, fold's 8), then RowsReduceFolded runs one ReduceRepeat per row over fold's 64
// columns. The in-repeat reduction runs once per row instead of once per 64 columns; asc-devkit's
// SoftmaxFlashV2 reduces its rows the same way on 2201 (impl/adv_api/detail/activation/softmax/membase/
// v220/softmax_common_impl/softmax_common_nd_reduce.h, NewReduceMaxLastNDImpl). Between the two, src is
// no longer read (a @free_early event may go there).
__aicore__ inline void RowsFold(const LocalTensor<float>& fold, const LocalTensor<float>& src, int64_t rows, int64_t cols,
                                int64_t cpad, bool isMax)
{
    const uint8_t rep = TILEGEN_NARROW(VectorOp_repeatTime, rows);
    const uint8_t stride = TILEGEN_NARROW(VectorOp_repStride, cpad / 8);
    const BinaryRepeatParams first(1, 1, 1, 8, stride, stride);
    const BinaryRepeatParams next(1, 1, 1, 8, 8, stride);
    for (int64_t c0 = LANES_F32; c0 < cols; c0 += LANES_F32) {
        const uint64_t mask = static_cast<uint64_t>(Min64(LANES_F32, cols - c0));
        const LocalTensor<float>& acc = c0 == LANES_F32 ? src : fold;
        if (isMax) {
            Max(fold, acc, src[c0], mask, rep, c0 == LANES_F32 ? first : next);
        } else {
            Add(fold, acc, src[c0], mask, rep, c0 == LANES_F32 ? first : next);
        }
    }
    ResetMask();
}
__aicore__ inline void RowsReduceFolded(const LocalTensor<float>& vec, const LocalTensor<float>& fold, int64_t rows, bool isMax)
{
    const uint8_t rep = TILEGEN_NARROW(VectorOp_repeatTime, rows);
    if (isMax) {
        ReduceRepeat<ReduceType::MAX, float, float>(vec, fold, LANES_F32, rep, 1, 1, 8, ReduceOrder::ORDER_ONLY_VALUE);
    } else {
        ReduceRepeat<ReduceType::SUM, float, float>(vec, fold, LANES_F32, rep, 1, 1, 8);
    }
    ResetMask();
}
// x = 0 where x == -inf (the "safe" running max of a row that has seen no visible key yet), on n
// elements: Compares and Select on the scratch row.
__aicore__ inline void ZeroIfNegInf(const LocalTensor<float>& dst, const LocalTensor<float>& src, const LocalTensor<float>& row,
                                    const LocalTensor<uint8_t>& bits, int64_t n)
{
    const int32_t m = ToScratchRow(row, src, n);
    Compares(bits, row, NEG_INF, CMPMODE::NE, m);
    Select(row, bits, row, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, m);
    Muls(dst, row, 1.0f, TILEGEN_NARROW(VectorOp_count, n));
}
// Cast a tile row by row when the two dtypes pad their rows differently.
template <typename D, typename S>
__aicore__ inline void CastRows(const LocalTensor<D>& dst, const LocalTensor<S>& src, RoundMode mode, int64_t rows,
                                int64_t cols, int64_t dpad, int64_t spad)
{
    if (dpad == spad) {
        Cast(dst, src, mode, TILEGEN_NARROW(VectorOp_count, rows * spad));
        return;
    }
    for (int64_t r = 0; r < rows; ++r) Cast(dst[r * dpad], src[r * spad], mode, TILEGEN_NARROW(VectorOp_count, cols));
}
// One bound of a mask on the first `rows` rows of tile s (row pitch cpad floats, cpad a multiple of 64):
// column c of row r keeps its score where colIdx[c] (cmpMode) thr[r] holds, else it becomes -inf, with
// thr[r] = first + r (CreateVecIndex), at most `cap` (Mins) when `capped`, or `cap` on every row when
// `flat`. Per group of rows (as many as brc holds Brcb blocks and bits holds 8-byte compare results) Brcb
// spreads thr over one 32-byte block per row, then per 64 columns one level-0 Compare writes the row's 64
// result bits (src0 the same 64 indices every repeat: repeat stride 0; src1 the row's block: block stride 0,
// repeat stride 1; dst packed 8 bytes a repeat as the count form packs it, CompareCompute in
// impl/basic_api/dav_c220/kernel_operator_vec_cmp_impl.h:154 with the default BinaryRepeatParams), and one
// level-0 Select in VSEL_TENSOR_SCALAR_MODE (Select.md: each repeat consumes the next 256/sizeof(T) bits of
// selMask) keeps the score or writes -inf, a repeat per row. `thr` must hold CeilDiv(rows, 8) * 8 floats.
__aicore__ inline void MaskBound(const LocalTensor<float>& s, const LocalTensor<float>& colIdx, const LocalTensor<uint8_t>& bits,
                                 const LocalTensor<float>& thr, const LocalTensor<float>& brc, int64_t rows, int64_t cpad,
                                 float first, float cap, bool capped, bool flat, CMPMODE cmpMode)
{
    const int32_t n = TILEGEN_NARROW(VectorOp_count, CeilDiv(rows, 8) * 8);
    if (flat) {
        Duplicate(thr, cap, n);
    } else {
        WaitVToS();  // CreateVecIndex writes thr's first block by scalar stores: after the vector's last read
        CreateVecIndex(thr, first, static_cast<uint32_t>(n));
        if (capped) Mins(thr, thr, cap, n);
    }
    ResetMask();
    const int64_t group = Min64(static_cast<int64_t>(brc.GetSize()) / 8, static_cast<int64_t>(bits.GetSize()) / 8) / 8 * 8;
    const uint8_t stride = TILEGEN_NARROW(VectorOp_repStride, cpad / 8);
    const BinaryRepeatParams cmp(1, 1, 0, 8, 0, 1);
    const BinaryRepeatParams sel(1, 1, 1, stride, stride, 8);
    for (int64_t g0 = 0; g0 < rows; g0 += group) {
        const int64_t g = Min64(group, rows - g0);
        const uint8_t rep = TILEGEN_NARROW(VectorOp_repeatTime, g);
        Brcb(brc, thr[g0], TILEGEN_NARROW(VectorOp_repeatTime, CeilDiv(g, 8)), BrcbRepeatParams(1, 8));
        for (int64_t c0 = 0; c0 < cpad; c0 += LANES_F32) {
            Compare(bits, colIdx[c0], brc, cmpMode, static_cast<uint64_t>(LANES_F32), rep, cmp);
            Select(s[g0 * cpad + c0], bits, s[g0 * cpad + c0], NEG_INF, SELMODE::VSEL_TENSOR_SCALAR_MODE, static_cast<uint64_t>(LANES_F32), rep, sel);
        }
    }
    ResetMask();
}
// DESIGN §3 mask on a tile of `rows` rows starting at global row `row0` and `cpad` columns starting at
// `col0`: key c visible to query r iff r + off - left <= c <= r + off + right (left/right < 0:
// unbounded), r < Sq, c < Sk. Hidden scores become -inf: the rows past Sq by one Duplicate, each bound
// that cuts a row by MaskBound over the tile's other rows (the lower bound grows with the row, so the
// last row decides whether it cuts; the upper bound, clipped to Sk - 1, likewise the first row).
// `colIdx` (cpad floats) receives col0 + c; `bits` (8 bytes per row of a group), `thr` (the rows rounded
// up to 8 floats) and `brc` (8 floats per row of a group) are scratch. cpad must be a multiple of 64.
// `cutOnly` (the IR's schedule knob): issue nothing when the tile is not cut, and only the bounds that
// cut; without it every bound runs on every tile.
__aicore__ inline void MaskTile(const LocalTensor<float>& s, const LocalTensor<float>& colIdx, const LocalTensor<uint8_t>& bits,
                                const LocalTensor<float>& thr, const LocalTensor<float>& brc, int64_t rows, int64_t cpad,
                                int64_t row0, int64_t col0, int64_t sq, int64_t sk, int64_t off, int64_t left, int64_t right,
                                bool cutOnly)
{
    const int64_t valid = Max64(Min64(sq - row0, rows), 0);
    const int64_t last = col0 + cpad - 1;
    const bool cutsLo = left >= 0 && (!cutOnly || (valid > 0 && row0 + valid - 1 + off - left > col0));
    const int64_t hiFirst = right >= 0 ? Min64(row0 + off + right, sk - 1) : sk - 1;
    const bool cutsHi = !cutOnly || (valid > 0 && hiFirst < last);
    if (valid < rows) Duplicate(s[valid * cpad], NEG_INF, TILEGEN_NARROW(VectorOp_count, (rows - valid) * cpad));
    if (valid == 0 || (!cutsLo && !cutsHi)) return;
    WaitVToS();  // CreateVecIndex writes the first block by scalar stores, then the rest on V
    CreateVecIndex(colIdx, static_cast<float>(col0), static_cast<uint32_t>(cpad));
    if (cutsLo)
        MaskBound(s, colIdx, bits, thr, brc, valid, cpad, static_cast<float>(row0 + off - left), 0.0f, false, false, CMPMODE::GE);
    if (cutsHi)
        MaskBound(s, colIdx, bits, thr, brc, valid, cpad, static_cast<float>(row0 + off + Max64(right, 0)),
                  static_cast<float>(sk - 1), right >= 0, right < 0, CMPMODE::LE);
}

// tilegen:section mods (emitted for a spec with a score or mask mod)
// ---------------------------------------------------------------------------------------------------
// Score and mask mods (tilegen/backends/ascendc/mods.py): each mod is compiled into a straight-line list of
// count-form vector calls over UB rows (LineVec in the kernels: Adds, Muls, Maxs, Mins
// (I/kernel_operator_vec_binary_scalar_intf.h), Add, Sub, Mul, Div, Max, Min, And, Or (the last two on the
// ReinterpretCast<int16_t> halves of int32 rows; I/kernel_operator_vec_binary_intf.h, And.md/Or.md),
// Exp, Ln, Abs, Sqrt, Reciprocal (I/kernel_operator_vec_unary_intf.h), Cast float -> float with
// RoundMode::CAST_FLOOR, float -> int32 (CAST_RINT), int32 -> float (CAST_NONE)
// (I/kernel_operator_vec_vconv_intf.h; Cast.md, the A2 table), Compares, Compare, Select
// (I/kernel_operator_vec_cmpsel_intf.h), Duplicate (I/kernel_operator_vec_duplicate_intf.h), Gather
// (I/kernel_operator_vec_gather_intf.h)) and scalar C++ on the scalar unit; the helpers below are its
// pieces that are not one API call. Scalar reads of GM through GlobalTensor::GetValue
// (I/kernel_tensor.h:270), of UB through LocalTensor::GetValue/SetValue (I/kernel_tensor.h:176, 181).

// a mod's integer a mod b for b > 0, in [0, b) (Python's and sympy's Mod of integers).
__aicore__ inline int64_t FloorMod(int64_t a, int64_t b) { return a - b * FloorDiv(a, b); }
// floor of a float on the scalar unit (|x| < 2^62), without a math library.
__aicore__ inline float ModFloorF(float x)
{
    const int64_t t = static_cast<int64_t>(x);  // toward zero
    return static_cast<float>(static_cast<float>(t) > x ? t - 1 : t);
}
__aicore__ inline float ModMinF(float a, float b) { return a < b ? a : b; }
__aicore__ inline float ModMaxF(float a, float b) { return a > b ? a : b; }

// col[c] = col0 + c as floats (the key index of column c; exact while col0 + c <= 2^24).
__aicore__ inline void ModColumns(const LocalTensor<float>& col, int64_t col0, int64_t cpad)
{
    WaitVToS();
    CreateVecIndex(col, static_cast<float>(col0), static_cast<uint32_t>(cpad));
    ResetMask();
}
// The first n elements of a parameter tensor p into UB as floats (a mod's UB table, or the span of a
// row's reads): DataCopyPad GM -> UB after the vector's earlier work (LoadVector), then an int32
// tensor converted in place (Cast int32 -> float, CAST_NONE: exact below 2^24). The mods read t with
// Gather (I/kernel_operator_vec_gather_intf.h; Gather.md: byte offsets, uint32).
__aicore__ inline void ModToFloat(const LocalTensor<float>&, const LocalTensor<float>&, int64_t) {}
__aicore__ inline void ModToFloat(const LocalTensor<float>& t, const LocalTensor<int32_t>& raw, int64_t n)
{
    Cast(t, raw, RoundMode::CAST_NONE, TILEGEN_NARROW(VectorOp_count, n));
}
template <typename T>
__aicore__ inline void ModLoadFloats(const LocalTensor<float>& t, const GlobalTensor<T>& p, int64_t n)
{
    const LocalTensor<T> raw = t.ReinterpretCast<T>();
    LoadVector<T>(raw, p, n, n, false, static_cast<T>(0));
    ModToFloat(t, raw, n);
}
// dst[c] = (float) p[off[c]] for c < n: a parameter read whose index varies along the row, a scalar loop
// (the offsets are whole floats, already clipped into the array).
template <typename T>
__aicore__ inline void ModGather(const LocalTensor<float>& dst, const GlobalTensor<T>& p, const LocalTensor<float>& off, int64_t n)
{
    WaitVToS();
    for (int64_t c = 0; c < n; ++c) {
        const int64_t e = static_cast<int64_t>(off.GetValue(static_cast<uint32_t>(c)));
        dst.SetValue(static_cast<uint32_t>(c), static_cast<float>(p.GetValue(static_cast<uint64_t>(e))));
    }
    WaitSToV();
}
// w[clip(bins[c], 0, width - 1)] += g[c] for c < n, zeros skipped (a parameter-gradient window,
// accumulated in column order: deterministic).
__aicore__ inline void ModScatterAdd(const LocalTensor<float>& w, const LocalTensor<float>& g, const LocalTensor<float>& bins,
                                     int64_t n, int64_t width)
{
    WaitVToS();
    for (int64_t c = 0; c < n; ++c) {
        const float v = g.GetValue(static_cast<uint32_t>(c));
        if (v == 0.0f) continue;
        const uint32_t t = static_cast<uint32_t>(Clip(static_cast<int64_t>(bins.GetValue(static_cast<uint32_t>(c))), 0, width - 1));
        w.SetValue(t, w.GetValue(t) + v);
    }
    WaitSToV();
}
// The gradient window, written by the scalar unit, is read next by MTE3 (StoreVector).
__aicore__ inline void ModWindowToStore()
{
    SetWait<HardEvent::S_MTE3>();
}
// v = 1 where (vec op x), else 0 (one comparison); bits is scratch.
__aicore__ inline void ModCompare(const LocalTensor<float>& v, const LocalTensor<float>& vec, const LocalTensor<uint8_t>& bits, float x,
                                  CMPMODE mode, int64_t n)
{
    const int32_t cnt = TILEGEN_NARROW(VectorOp_count, n);
    Compares(bits, vec, x, mode, cnt);
    Duplicate(v, 1.0f, cnt);
    Select(v, bits, v, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, cnt);
}
// row = -inf where v is 0 (the mask mod hides the key).
__aicore__ inline void ModHide(const LocalTensor<float>& row, const LocalTensor<float>& v, const LocalTensor<uint8_t>& bits, int64_t n)
{
    const int32_t cnt = TILEGEN_NARROW(VectorOp_count, n);
    Compares(bits, v, 0.5f, CMPMODE::GT, cnt);
    Select(row, bits, row, NEG_INF, SELMODE::VSEL_TENSOR_SCALAR_MODE, cnt);
}
// v *= 1 where key col is inside the window of query q and the extent (c < sk), else 0 (DESIGN §3's
// window as MaskTile reads it; left/right < 0: unbounded); t is scratch.
__aicore__ inline void ModWindow(const LocalTensor<float>& v, const LocalTensor<float>& col, const LocalTensor<uint8_t>& bits,
                                 const LocalTensor<float>& t, int64_t q, int64_t sk, int64_t off, int64_t left, int64_t right,
                                 int64_t n)
{
    const int64_t lo = left >= 0 ? Max64(q + off - left, 0) : 0;
    const int64_t hi = right >= 0 ? Min64(q + off + right, sk - 1) : sk - 1;
    ModCompare(t, col, bits, static_cast<float>(lo), CMPMODE::GE, n);
    Mul(v, v, t, TILEGEN_NARROW(VectorOp_count, n));
    ModCompare(t, col, bits, static_cast<float>(hi), CMPMODE::LE, n);
    Mul(v, v, t, TILEGEN_NARROW(VectorOp_count, n));
}
// The number of ones in the first `cols` entries of a 0/1 row (exact: an integer below 2^24).
__aicore__ inline float ModRowCount(const LocalTensor<float>& v, const LocalTensor<float>& out, const LocalTensor<float>& tmp, int64_t cols)
{
    ReduceSum(out, v, tmp, TILEGEN_NARROW(VectorOp_count, cols));
    WaitVToS();
    const float c = out.GetValue(0);
    WaitSToV();
    return c;
}
// tilegen:end mods
// ---------------------------------------------------------------------------------------------------
// Cube side (AIC). An L1 tile of R x C half/bf16 elements is NZ: C/16 column strips of rpad = ceil16(R)
// rows x 16 elements (fractals of 16 x 16). L0C tiles are NZ fp32 with 16 x 16 fractals.

__aicore__ inline void WaitMte2ToMte1()
{
    SetWait<HardEvent::MTE2_MTE1>();
}
__aicore__ inline void WaitMte1ToMte2()
{
    SetWait<HardEvent::MTE1_MTE2>();
}
__aicore__ inline void WaitMte1ToM()
{
    SetWait<HardEvent::MTE1_M>();
}
__aicore__ inline void WaitMToMte1()
{
    SetWait<HardEvent::M_MTE1>();
}
__aicore__ inline void WaitMToFix()
{
    SetWait<HardEvent::M_FIX>();
}
__aicore__ inline void WaitFixToM()
{
    SetWait<HardEvent::FIX_M>();
}

// GM rows [r0, r0 + n) -> the same rows of an L1 NZ tile of rpad (= ceil16(rows)) rows: `cols` elements
// each (row pitch `pitch`), columns zero-padded to 16 by the ND->NZ copy. Row r of the NZ tile starts at
// element r * C0 (C0 = 32 / sizeof(T)); its column strips stay rpad * C0 apart (dstNzC0Stride = rpad).
// `rowwise` (chosen by tilegen when the pitch does not fit the 16-bit srcDValue) issues one ND->NZ copy
// per row.
template <typename T>
__aicore__ inline void CopyNzRows(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int64_t r0, int64_t n, int64_t rpad,
                                  int64_t cols, int64_t pitch, bool rowwise)
{
    constexpr int64_t c0 = 32 / static_cast<int64_t>(sizeof(T));
    if (n > 0 && !rowwise) {
        Nd2NzParams p(1, TILEGEN_NARROW(Nd2NzParams_nValue, n), TILEGEN_NARROW(Nd2NzParams_dValue, cols), 0,
                      TILEGEN_NARROW(Nd2NzParams_srcDValue, pitch), TILEGEN_NARROW(Nd2NzParams_dstNzC0Stride, rpad), 1, 0);
        DataCopy(dst[r0 * c0], src[r0 * pitch], p);
    }
    if (n > 0 && rowwise) {
        for (int64_t r = r0; r < r0 + n; ++r) {
            Nd2NzParams p(1, 1, TILEGEN_NARROW(Nd2NzParams_dValue, cols), 0, TILEGEN_NARROW(Nd2NzParams_srcDValue, cols),
                          TILEGEN_NARROW(Nd2NzParams_dstNzC0Stride, rpad), 1, 0);
            DataCopy(dst[r * c0], src[r * pitch], p);
        }
    }
}

// L1 tile of rpad x cpad (16-padded) elements = 0, in one repeat of 32 B blocks (Fill.md: blockNum
// blocks per repeat).
template <typename T>
__aicore__ inline void ZeroNz(const LocalTensor<T>& dst, int64_t rpad, int64_t cpad)
{
    Fill(dst, InitConstValueParams<T>(1, TILEGEN_NARROW(InitConstValueParams_blockNum, rpad * cpad * static_cast<int64_t>(sizeof(T)) / 32), 0, T(0)));
    PipeBarrier<PIPE_MTE2>();
}

// GM rows -> L1 NZ without the closing wait: `valid` rows of `cols` elements (row pitch `pitch`) by
// CopyNzRows; when `zeroTail`, the rows [valid, rows) of the tile are zeroed first (padding that reaches
// a contraction).
template <typename T>
__aicore__ inline void LoadNzCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int64_t valid, int64_t rows,
                                  int64_t cols, int64_t pitch, bool zeroTail, bool rowwise)
{
    const int64_t rpad = CeilDiv(rows, 16) * 16;
    WaitMte1ToMte2();
    if (zeroTail && valid < rows) ZeroNz(dst, rpad, CeilDiv(cols, 16) * 16);
    CopyNzRows(dst, src, 0, valid, rpad, cols, pitch, rowwise);
}
// LoadNzCopy and its wait: the tile is in L1 when it returns.
template <typename T>
__aicore__ inline void LoadNz(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int64_t valid, int64_t rows,
                              int64_t cols, int64_t pitch, bool zeroTail, bool rowwise)
{
    LoadNzCopy(dst, src, valid, rows, cols, pitch, zeroTail, rowwise);
    WaitMte2ToMte1();
}
// LoadNz without its closing wait (the IR knob @wait_at_read): the MTE2 -> MTE1 flag is set right
// after the copy, on an event ID allocated for it (TPipe::AllocEventID, include/basic_api/kernel_tpipe.h:469),
// so that it orders after this copy alone; WaitLoaded waits on it just before the tile's first reader
// and releases the ID (:471). Between the two, MTE2 runs the next copies and MTE1/M the matmuls of tiles
// already loaded.
template <typename T>
__aicore__ inline TEventID LoadNzAsync(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int64_t valid, int64_t rows,
                                       int64_t cols, int64_t pitch, bool zeroTail, bool rowwise)
{
    LoadNzCopy(dst, src, valid, rows, cols, pitch, zeroTail, rowwise);
    const TEventID id = GetTPipePtr()->AllocEventID<HardEvent::MTE2_MTE1>();
    SetFlag<HardEvent::MTE2_MTE1>(id);
    return id;
}
__aicore__ inline void WaitLoaded(TEventID id)
{
    WaitFlag<HardEvent::MTE2_MTE1>(id);
    GetTPipePtr()->ReleaseEventID<HardEvent::MTE2_MTE1>(id);
}

// tilegen:section packed (emitted for a spec with packed_ids: a packed batch)
// LoadNz for a packed batch (see AllInside): the rows of a negative id are not read; they load as 0.
template <typename T>
__aicore__ inline void LoadNzIn(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const GlobalTensor<int32_t>& ids, int64_t valid,
                                int64_t rows, int64_t cols, int64_t pitch, bool zeroTail, bool rowwise)
{
    if (AllInside(ids, valid)) {
        LoadNz<T>(dst, src, valid, rows, cols, pitch, zeroTail, rowwise);
        return;
    }
    const int64_t rpad = CeilDiv(rows, 16) * 16;
    WaitMte1ToMte2();
    ZeroNz(dst, rpad, CeilDiv(cols, 16) * 16);
    int64_t r0 = 0, r1 = 0;
    while (NextRun(ids, valid, r0, r1)) CopyNzRows(dst, src, r0, r1 - r0, rpad, cols, pitch, rowwise);
    WaitMte2ToMte1();
}

// tilegen:end packed
// The cube's L0 buffers and their ping-pong state. L0A and L0B are used in halves: the k-steps of the
// matmuls take them in turn, and the LoadData into a half waits (its M_MTE1 event) only for the Mmad that
// last read that half, so MTE1 fills one half while M works on the other. In a kernel whose products are
// chunked (the IR knob @n_chunk: Init got an L0C tensor), L0C is used in halves the same way: the
// Mmads into a half wait (its FIX_M event) only for the Fixpipe that last drained it, so FIX drains one
// chunk while M computes the next. Event IDs come from TPipe::AllocEventID (include/basic_api/
// kernel_tpipe.h:469; the AIC's TPipe::Init holds M_MTE1 0-2 itself, impl/basic_api/kernel_tpipe_impl.h:101),
// and Drain waits for the last of each and releases them (:471) before the kernel ends.
template <typename T>
struct Cube {
    LocalTensor<T> l0a, l0b;
    LocalTensor<float> l0c;
    int64_t halfA = 0, halfB = 0, halfC = 0, kStep = 0;
    TEventID abFree[2];
    TEventID cFree[2];
    bool abBusy[2] = {false, false};
    bool cBusy[2] = {false, false};
    int64_t ab = 0, c = 0;

    __aicore__ inline void Init(const LocalTensor<T>& a, const LocalTensor<T>& b, int64_t step)
    {
        l0a = a;
        l0b = b;
        halfA = static_cast<int64_t>(a.GetSize()) / 2;
        halfB = static_cast<int64_t>(b.GetSize()) / 2;
        kStep = step;
        abFree[0] = GetTPipePtr()->AllocEventID<HardEvent::M_MTE1>();
        abFree[1] = GetTPipePtr()->AllocEventID<HardEvent::M_MTE1>();
    }
    __aicore__ inline void InitC(const LocalTensor<float>& acc)
    {
        l0c = acc;
        halfC = static_cast<int64_t>(acc.GetSize()) / 2;
        cFree[0] = GetTPipePtr()->AllocEventID<HardEvent::FIX_M>();
        cFree[1] = GetTPipePtr()->AllocEventID<HardEvent::FIX_M>();
    }
    __aicore__ inline void Drain()
    {
        for (int64_t h = 0; h < 2; ++h) {
            if (abBusy[h]) WaitFlag<HardEvent::M_MTE1>(abFree[h]);
            abBusy[h] = false;
            GetTPipePtr()->ReleaseEventID<HardEvent::M_MTE1>(abFree[h]);
            if (halfC > 0) {
                if (cBusy[h]) WaitFlag<HardEvent::FIX_M>(cFree[h]);
                cBusy[h] = false;
                GetTPipePtr()->ReleaseEventID<HardEvent::FIX_M>(cFree[h]);
            }
        }
    }
};

// c (+)= op(a) @ op(b) on the cube: a, b NZ in L1 (stored with rows ar/br), c NZ fp32 in L0C of m x n.
// op(a) is m x k (a stored m x k, or k x m when transA); op(b) is k x n, the columns [n0, n0 + n) of a
// product bN wide (b stored k x bN, or bN x k when transB). The contraction runs in steps of cube.kStep
// through the halves of L0A and L0B in turn (see Cube). The caller orders c's writes after its earlier
// readers (FixpipeRows waits FIX -> M; MatmulStore the half's FIX_M event).
template <typename T>
__aicore__ inline void MatmulTile(Cube<T>& cube, const LocalTensor<float>& c, const LocalTensor<T>& a, const LocalTensor<T>& b,
                                  int64_t m, int64_t n, int64_t k, bool transA, bool transB, bool accumulate, int64_t n0 = 0,
                                  int64_t bN = -1)
{
    if (bN < 0) bN = n;
    const int64_t m1 = CeilDiv(m, 16);
    const int64_t n1 = CeilDiv(n, 16);
    const int64_t aRows16 = transA ? CeilDiv(k, 16) : m1;   // fractal rows of a as stored
    const int64_t bRows16 = transB ? CeilDiv(bN, 16) : CeilDiv(k, 16);  // fractal rows of b as stored
    const int64_t nOff = n0 / 16;  // the first fractal column of op(b) this product takes
    for (int64_t k0 = 0; k0 < k; k0 += cube.kStep) {
        const int64_t kc = Min64(cube.kStep, k - k0);
        const int64_t kc1 = CeilDiv(kc, 16);
        const int64_t h = cube.ab;
        const LocalTensor<T> la = cube.l0a[h * cube.halfA];
        const LocalTensor<T> lb = cube.l0b[h * cube.halfB];
        if (cube.abBusy[h]) WaitFlag<HardEvent::M_MTE1>(cube.abFree[h]);  // the Mmad that last read this half
        cube.abBusy[h] = false;
        for (int64_t mi = 0; mi < m1; ++mi) {  // ZZ: fractal (mi, kk) at mi * kc1 + kk
            LoadData2DParams p;
            p.repeatTimes = TILEGEN_NARROW(LoadData2DParams_repeatTimes, kc1);
            if (!transA) {
                p.startIndex = TILEGEN_NARROW(LoadData2DParams_startIndex, (k0 / 16) * aRows16 + mi);
                p.srcStride = TILEGEN_NARROW(LoadData2DParams_srcStride, aRows16);
                p.ifTranspose = false;
            } else {
                p.startIndex = TILEGEN_NARROW(LoadData2DParams_startIndex, mi * aRows16 + k0 / 16);
                p.srcStride = 1;
                p.ifTranspose = true;
            }
            LoadData(la[mi * kc1 * 256], a, p);
        }
        for (int64_t kk = 0; kk < kc1; ++kk) {  // ZN: fractal (kk, ni) at kk * n1 + ni
            LoadData2DParams p;
            p.repeatTimes = TILEGEN_NARROW(LoadData2DParams_repeatTimes, n1);
            if (!transB) {
                p.startIndex = TILEGEN_NARROW(LoadData2DParams_startIndex, k0 / 16 + kk + nOff * bRows16);
                p.srcStride = TILEGEN_NARROW(LoadData2DParams_srcStride, bRows16);
                p.ifTranspose = true;
            } else {
                p.startIndex = TILEGEN_NARROW(LoadData2DParams_startIndex, (k0 / 16 + kk) * bRows16 + nOff);
                p.srcStride = 1;
                p.ifTranspose = false;
            }
            LoadData(lb[kk * n1 * 256], b, p);
        }
        WaitMte1ToM();
        MmadParams mp(TILEGEN_NARROW(MmadParams_m, m), TILEGEN_NARROW(MmadParams_n, n), TILEGEN_NARROW(MmadParams_k, kc), 0, false,
                      !accumulate && k0 == 0);
        Mmad(c, la, lb, mp);
        SetFlag<HardEvent::M_MTE1>(cube.abFree[h]);
        cube.abBusy[h] = true;
        cube.ab = 1 - h;
    }
}

// c = 0 (an m x n L0C accumulator): a zero 16-column A tile times a zero 16-row B tile. Each tile is
// CeilDiv(rows, 16) fractals of 16 x 16 2-byte elements, one 512 B block of L0A/L0B each: Fill them in
// one repeat of that many blocks (blockNum; the two-argument InitConstValueParams leaves blockNum = 0,
// which fills nothing: Fill.md).
template <typename T>
__aicore__ inline void ZeroAcc(Cube<T>& cube, const LocalTensor<float>& c, int64_t m, int64_t n)
{
    static_assert(sizeof(T) == 2, "ZeroAcc fills 16 x 16 fractals of 2-byte elements (512 B blocks)");
    WaitMToMte1();  // every Mmad issued so far has read its L0A/L0B operands
    Fill(cube.l0a, InitConstValueParams<T>(1, TILEGEN_NARROW(InitConstValueParams_blockNum, CeilDiv(m, 16)), 0, T(0)));
    Fill(cube.l0b, InitConstValueParams<T>(1, TILEGEN_NARROW(InitConstValueParams_blockNum, CeilDiv(n, 16)), 0, T(0)));
    WaitMte1ToM();
    Mmad(c, cube.l0a, cube.l0b, MmadParams(TILEGEN_NARROW(MmadParams_m, m), TILEGEN_NARROW(MmadParams_n, n), 16, 0, false, true));
    WaitMToMte1();  // the next LoadData into L0A/L0B after this Mmad has read them
}

// L0C (m x n fp32, NZ) -> GM rows (`valid` rows, `cols` columns, row pitch `pitch`), fp32; `atomic` adds.
__aicore__ inline void FixpipeRows(const GlobalTensor<float>& dst, const LocalTensor<float>& c, int64_t m, int64_t valid,
                                   int64_t cols, int64_t pitch, bool atomic)
{
    if (valid <= 0) return;
    WaitMToFix();
    if (atomic) SetAtomicAdd<float>();
    FixpipeParamsV220 p(TILEGEN_NARROW(FixpipeParamsV220_nSize, cols), TILEGEN_NARROW(FixpipeParamsV220_mSize, valid),
                        TILEGEN_NARROW(FixpipeParamsV220_srcStride, CeilDiv(m, 16) * 16),
                        TILEGEN_NARROW(FixpipeParamsV220_dstStride, pitch), false);
    Fixpipe<float, float, CFG_ROW_MAJOR>(dst, c, p);
    if (atomic) DisableDmaAtomic();
    WaitFixToM();
}

// dst (+)= op(a) @ op(b) (m x n fp32, `valid` rows of row pitch `pitch`; `atomic` adds) for a product
// that nothing reads on the cube: computed in column chunks of nChunk (the IR knob @n_chunk), each
// in one half of L0C in turn and drained by Fixpipe while the next chunk is computed in the other half
// (see Cube). Each chunk's Fixpipe waits for its Mmads (M -> FIX); the next Mmads into its half wait for
// it (the half's FIX_M event).
template <typename T>
__aicore__ inline void MatmulStore(Cube<T>& cube, const GlobalTensor<float>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b,
                                   int64_t m, int64_t n, int64_t k, bool transA, bool transB, int64_t nChunk, int64_t valid,
                                   int64_t pitch, bool atomic)
{
    for (int64_t n0 = 0; n0 < n; n0 += nChunk) {
        const int64_t nc = Min64(nChunk, n - n0);
        const int64_t h = cube.c;
        const LocalTensor<float> acc = cube.l0c[h * cube.halfC];
        if (cube.cBusy[h]) WaitFlag<HardEvent::FIX_M>(cube.cFree[h]);  // the Fixpipe that last drained this half
        cube.cBusy[h] = false;
        MatmulTile(cube, acc, a, b, m, nc, k, transA, transB, false, n0, n);
        if (valid > 0) {
            WaitMToFix();
            if (atomic) SetAtomicAdd<float>();
            FixpipeParamsV220 p(TILEGEN_NARROW(FixpipeParamsV220_nSize, nc), TILEGEN_NARROW(FixpipeParamsV220_mSize, valid),
                                TILEGEN_NARROW(FixpipeParamsV220_srcStride, CeilDiv(m, 16) * 16),
                                TILEGEN_NARROW(FixpipeParamsV220_dstStride, pitch), false);
            Fixpipe<float, float, CFG_ROW_MAJOR>(dst[n0], acc, p);
            if (atomic) DisableDmaAtomic();
            SetFlag<HardEvent::FIX_M>(cube.cFree[h]);
            cube.cBusy[h] = true;
        }
        cube.c = 1 - h;
    }
}

}  // namespace tilegen

#endif  // TILEGEN_RUNTIME_H
