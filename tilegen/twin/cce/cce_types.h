// tilegen real-API twin: what bisheng builds into Ascend C device code (keywords, address spaces,
// half / bfloat16_t, the builtin enums), for a stock clang++-16 on x86-64 compiling the public
// asc-devkit headers (include/, impl/) in device mode for dav-c220 (__NPU_ARCH__ 2201).
//
// Address spaces: UB is __ubuf__ = clang address space 256, which x86-64 code generation addresses
// through the GS segment. Each vector-core thread points its GS base at its own UB, so the headers'
// scalar accesses (`*(__ubuf__ T*)addr`, LocalTensor::GetValue/SetValue) read and write that core's
// UB while every local pointer keeps its device value: a byte offset into its buffer. The other local
// buffers (L1, L0A, L0B, L0C) are distinct address spaces only for type checking; their pointers are
// offsets that only the intrinsics (which know their buffer by name) dereference.
#ifndef TILEGEN_CCE_TYPES_H
#define TILEGEN_CCE_TYPES_H

#include <cstddef>
#include <cstdint>
#include <cstring>

#define __gm__
#define __ubuf__ __attribute__((address_space(256)))
#define __cbuf__ __attribute__((address_space(2)))
#define __ca__ __attribute__((address_space(3)))
#define __cb__ __attribute__((address_space(4)))
#define __cc__ __attribute__((address_space(5)))
#define __fbuf__ __attribute__((address_space(7)))
#define __biasbuf__ __attribute__((address_space(8)))
#define __ssbuf__ __attribute__((address_space(9)))
#define __aicore__
#define __global__ __attribute__((visibility("default")))
#define __schedmode__(mode)  // the launch's scheduling mode (SIMD-BuiltIn关键字.md): nothing on a CPU
#define __vector__
#define __cube__
#define __mix__(...)
#define __inout_pipe__(...)
#define __in_pipe__(...)
#define __out_pipe__(...)
#define __sync_alias__
#define __check_sync_alias__
#define __simd_callee__
#define __simd_vf__
// Per-core globals of the headers ([[block_local]] under bisheng): one copy per core thread.
#define __BLOCK_LOCAL__ thread_local

using half = _Float16;

// bfloat16: the top 16 bits of an IEEE float; conversions from float round to nearest even.
struct bfloat16_t {
    uint16_t bits = 0;
    constexpr bfloat16_t() = default;
    template <typename T>
    bfloat16_t(T v) : bits(FromFloat(static_cast<float>(v))) {}
    operator float() const
    {
        uint32_t u = static_cast<uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    static uint16_t FromFloat(float f)
    {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
        u += 0x7fffu + ((u >> 16) & 1u);
        return static_cast<uint16_t>(u >> 16);
    }
};

// Builtin enums. pipe_t numbering is ours; the headers only pass the names through.
enum pipe_t : int {
    PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_MTE4, PIPE_MTE5, PIPE_V2,
    PIPE_FIX, VIRTUAL_PIPE_MTE2_L1A, VIRTUAL_PIPE_MTE2_L1B
};
enum event_t : int { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };
enum Order_t : int { VALUE_INDEX = 0, INDEX_VALUE, ONLY_VALUE, ONLY_INDEX };
enum class cache_line_t : int { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class dcci_dst_t : int { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };
enum addr_cal_mode_t : int { inc = 0, dec = 1 };
enum pad_t : int { PAD_NONE = 0, PAD_MODE1, PAD_MODE2, PAD_MODE3, PAD_MODE4, PAD_MODE5, PAD_MODE6, PAD_MODE7, PAD_MODE8 };
enum mem_t : int { MEM_NONE = 0 };
enum mem_dsb_t : int { DSB_ALL = 0, DSB_DDR, DSB_UB, DSB_SEQ };
enum atomic_type_t : int { ATOMIC_NONE_T = 0 };
enum atomic_op_t : int { ATOMIC_OP_NONE_T = 0 };
enum ub_addr8_t : int { VA0 = 0, VA1, VA2, VA3, VA4, VA5, VA6, VA7 };
enum vpart_t : int { L128 = 0, H128 };
namespace bisheng { namespace cce { inline void metrics_prof_start() {} inline void metrics_prof_stop() {} } }
enum QuantMode_t : int {
    NoQuant = 0, F322F16, F322BF16, DEQF16, VDEQF16, QF322B8_PRE, VQF322B8_PRE, QF162B8_PRE, VQF162B8_PRE,
    REQ8, VREQ8, QF162S4_PRE, VQF162S4_PRE, REQ4, VREQ4, DEQS16, VDEQS16, QF162S16_PRE, VQF162S16_PRE,
    QF322FP8_PRE, VQF322FP8_PRE, QF322HIF8_PRE, VQF322HIF8_PRE, QF322HIF8_PRE_HYBRID, VQF322HIF8_PRE_HYBRID,
    QS322BF16_PRE, VQS322BF16_PRE, QF322F16_PRE, VQF322F16_PRE, QF322BF16_PRE, VQF322BF16_PRE, QF322F32_PRE,
    VQF322F32_PRE
};
struct vector_address { uint64_t v = 0; };
struct vector_align { uint64_t v = 0; };
struct vector_bool { uint64_t v = 0; };
// device builtins in the global namespace that impl/utils/std/cmath.h names (::abs, ::sqrt)
template <typename T> inline T abs(T v) { return v < T(0) ? T(-v) : v; }
template <typename T> inline T sqrt(T v) { return __builtin_sqrt(v); }

#endif  // TILEGEN_CCE_TYPES_H
