// Host-side stand-in for the bounds-checked C library (securec) the matmul tiling source calls: memcpy_s and
// memset_s copy/fill n bytes when n fits the destination's dmax and return EOK (0), else return 1.
#pragma once
#include <cstddef>
#include <cstring>
typedef int errno_t;
#define EOK 0
inline errno_t memcpy_s(void* d, size_t dmax, const void* s, size_t n)
{
    if (n > dmax) return 1;
    std::memcpy(d, s, n);
    return EOK;
}
inline errno_t memset_s(void* d, size_t dmax, int c, size_t n)
{
    if (n > dmax) return 1;
    std::memset(d, c, n);
    return EOK;
}
