// Harness of tests/twin_real/strict_kernels.asc: strict_main <kernel>; runs it on one AI Core with
// x[i] = i (128 floats) and checks y = x + 1 (exit 3 when wrong). The real-API twin itself exits 1 with
// one line on any misuse.
#include <cstdio>
#include <string>

#include "strict_kernels.asc"

int main(int argc, char** argv)
{
    if (argc != 2) return 2;
    const std::string which = argv[1];
    auto* x = static_cast<float*>(twin::GmAlloc(128 * sizeof(float), "x"));
    auto* y = static_cast<float*>(twin::GmAlloc(128 * sizeof(float), "y"));
    for (int i = 0; i < 128; ++i) x[i] = static_cast<float>(i);
    const twin::Kernel* k = which == "ok" ? &strict_ok
                            : which == "ub_out_of_bounds" ? &strict_ub_out_of_bounds
                            : which == "uninitialised" ? &strict_uninitialised
                            : which == "missing_wait" ? &strict_missing_wait
                            : nullptr;
    if (k == nullptr) return 2;
    twin::LaunchMix(1, *k, (GM_ADDR)x, (GM_ADDR)y);
    for (int i = 0; i < 128; ++i)
        if (y[i] != x[i] + 1.0f) {
            std::fprintf(stderr, "strict_main: y[%d] = %g, expected %g\n", i, y[i], x[i] + 1.0f);
            return 3;
        }
    return 0;
}
