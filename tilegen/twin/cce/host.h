// tilegen real-API twin, host side: what the CPU-twin harness (templates/ascendc/twin_main.cpp.jinja)
// calls: twin::GmAlloc / GmFree / LaunchMix. The kernels themselves live in two shared objects per
// program, <label>_cube.so (the __DAV_CUBE__ pass) and <label>_vec.so (the __DAV_VEC__ pass), next to
// the executable; a kernel is named by a twin::Kernel.
#ifndef TILEGEN_CCE_HOST_H
#define TILEGEN_CCE_HOST_H

#include <cstddef>
#include <cstdint>

#include "cce_types.h"  // half, bfloat16_t (the harness sizes tensors with them)

#define GM_ADDR uint8_t*

namespace twin {

struct Kernel {
    const char* name;   // the extern "C" symbol
    const char* label;  // the program: fwd / bwd
};

void* GmAlloc(size_t bytes, const char* tag = "");
void GmFree(void* p);
// Runs `blocks` AI Cores of 1 AIC + 2 AIV threads on the kernel; returns when all finished. Fails (exit 1,
// one line on stderr) on any intrinsic misuse.
void LaunchRaw(uint32_t blocks, const Kernel& k, void* const* args, int nargs);

template <typename... A>
inline void LaunchMix(uint32_t blocks, const Kernel& k, A... args)
{
    void* const list[] = {static_cast<void*>(args)...};
    LaunchRaw(blocks, k, list, static_cast<int>(sizeof...(A)));
}

}  // namespace twin

#endif  // TILEGEN_CCE_HOST_H
