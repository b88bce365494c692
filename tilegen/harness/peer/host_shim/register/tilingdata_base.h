// Host-side stand-in for CANN metadef's register/tilingdata_base.h, enough to compile asc-devkit's matmul
// and softmax tiling sources (impl/adv_api/tiling/) on a plain host: BEGIN_TILING_DATA_DEF declares a class
// whose TILING_DATA_FIELD_DEF(type, name) fields have set_<name>/get_<name> accessors, stored in declaration
// order; SaveToBuffer copies them out as they lie (every class the tiling sources declare holds only 4-byte
// fields, so the bytes are the packed field list the kernel-side struct of kernel_tiling.h reads).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#define BEGIN_TILING_DATA_DEF(name)                                                                  \
    class name {                                                                                     \
    public:                                                                                          \
        void SaveToBuffer(void* b, size_t n) const { std::memcpy(b, this, n < sizeof(*this) ? n : sizeof(*this)); } \
        size_t GetDataSize() const { return sizeof(*this); }
#define TILING_DATA_FIELD_DEF(type, f)                                                               \
    type f##_ = 0;                                                                                   \
    void set_##f(type v) { f##_ = v; }                                                               \
    type get_##f() const { return f##_; }
#define TILING_DATA_FIELD_DEF_ARR(type, n, f)                                                        \
    type f##_[n] = {};                                                                               \
    void set_##f(const type* v) { std::memcpy(f##_, v, sizeof(f##_)); }                              \
    const type* get_##f() const { return f##_; }
#define TILING_DATA_FIELD_DEF_STRUCT(type, f) type f;
#define END_TILING_DATA_DEF }
#define REGISTER_TILING_DATA_CLASS(a, b)
