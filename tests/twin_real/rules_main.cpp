// Harness of tests/twin_real/rules_kernels.asc, the same source for both twins (twin::GmAlloc and
// twin::LaunchMix exist in both; a kernel is a function on the hand twin, a twin::Kernel naming the two
// compiled passes on the real-API twin): rules_main <kernel> runs it on one AI Core. For "ok" it checks
// y = 2 (exit 3 when wrong); every other kernel breaks a rule, and the twin ends the run with its one line.
#include <cstdio>
#include <string>

#include "rules_kernels.asc"

int main(int argc, char** argv)
{
    if (argc != 2) return 2;
    const std::string which = argv[1];
    auto* x = static_cast<float*>(twin::GmAlloc(128 * sizeof(float), "x"));
    auto* y = static_cast<float*>(twin::GmAlloc(128 * sizeof(float), "y"));
#define RULES_KERNEL(name) \
    else if (which == #name) twin::LaunchMix(1, rules_##name, (GM_ADDR)x, (GM_ADDR)y);
    if (false) {
    }
    RULES_KERNEL(ok)
    RULES_KERNEL(vector_on_aic)
    RULES_KERNEL(mmad_on_aiv)
    RULES_KERNEL(loaddata_on_aiv)
    RULES_KERNEL(fixpipe_on_aiv)
    RULES_KERNEL(s_pair_on_aic)
    RULES_KERNEL(mode_3)
    RULES_KERNEL(flag_16)
    RULES_KERNEL(flag_11)
    RULES_KERNEL(ub_430k)
    RULES_KERNEL(l0a_80k)
    else return 2;
    if (which == "ok")
        for (int i = 0; i < 128; ++i)
            if (y[i] != 2.0f) {
                std::fprintf(stderr, "rules_main: y[%d] = %g, expected 2\n", i, y[i]);
                return 3;
            }
    std::printf("completed %s\n", which.c_str());
    twin::GmFree(x);
    twin::GmFree(y);
    return 0;
}
