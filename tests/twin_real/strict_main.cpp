// Harness of tests/twin_real/strict_kernels.asc: strict_main <kernel>; runs it on one AI Core with
// x[i] = (37 i mod 128) - 50 (128 floats) and checks y = x + 1, or for "reduce" y[0] = max and y[1] = sum
// of x[0..100) (exit 3 when wrong). The real-API twin itself exits 1 with one line on any misuse.
#include <cstdio>
#include <string>

#include "strict_kernels.asc"

int main(int argc, char** argv)
{
    if (argc != 2) return 2;
    const std::string which = argv[1];
    auto* x = static_cast<float*>(twin::GmAlloc(128 * sizeof(float), "x"));
    auto* y = static_cast<float*>(twin::GmAlloc(128 * sizeof(float), "y"));
    for (int i = 0; i < 128; ++i) x[i] = static_cast<float>((37 * i) % 128 - 50);
    if (which == "reduce") {
        twin::LaunchMix(1, strict_reduce, (GM_ADDR)x, (GM_ADDR)y);
        float mx = x[0], sum = 0.0f;
        for (int i = 0; i < 100; ++i) {
            mx = x[i] > mx ? x[i] : mx;
            sum += x[i];
        }
        if (y[0] != mx || y[1] != sum) {
            std::fprintf(stderr, "strict_main: max %g sum %g, expected %g %g\n", y[0], y[1], mx, sum);
            return 3;
        }
        return 0;
    }
    const twin::Kernel* k = which == "ok" ? &strict_ok
                            : which == "ub_out_of_bounds" ? &strict_ub_out_of_bounds
                            : which == "uninitialised" ? &strict_uninitialised
                            : which == "missing_wait" ? &strict_missing_wait
                            : which == "scalar_out_of_bounds" ? &strict_scalar_out_of_bounds
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
