// Prelude of a peer kernel built on the real-API twin (tilegen/harness/ascend_peer.py): what CANN's op build
// generates into a kernel's tiling header and that the ops-transformer kernels expect to find.
//
// GET_TILING_DATA_WITH_STRUCT / GET_TILING_DATA_MEMBER / REGISTER_TILING_DEFAULT: as the generator writes them
// for a runtime tiling (asc-devkit tools/build/asc_op_compile_base/asc_op_compiler/get_op_tiling.py,
// _get_tiling_data_without_time_stamp): the kernel's copy of the tiling struct (or of one member) read from
// the tiling argument in GM; REGISTER_TILINGDATA_SIZE only registers the size for the build and expands to
// nothing here.
#ifndef TILEGEN_PEER_KERNEL_PRELUDE_H
#define TILEGEN_PEER_KERNEL_PRELUDE_H

#include <cstddef>
#include <cstdint>

#define REGISTER_TILINGDATA_SIZE(tiling_struct, counter)

template <class T>
inline void PeerInitTilingData(const uint8_t* tiling, T* out)
{
    for (size_t i = 0; i < sizeof(T); ++i) reinterpret_cast<uint8_t*>(out)[i] = tiling[i];
}

#define GET_TILING_DATA_WITH_STRUCT(tiling_struct, tiling_data, tiling_arg) \
    tiling_struct tiling_data;                                              \
    PeerInitTilingData<tiling_struct>(tiling_arg, &tiling_data);

#define GET_TILING_DATA_MEMBER(tiling_type, member, var, tiling)                                                 \
    decltype(((tiling_type*)0)->member) var;                                                                     \
    PeerInitTilingData<decltype(((tiling_type*)0)->member)>(tiling + (size_t)(&((tiling_type*)0)->member), &var);

#endif  // TILEGEN_PEER_KERNEL_PRELUDE_H
