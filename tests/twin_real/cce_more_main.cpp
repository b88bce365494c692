// Harness of tests/twin_real/cce_more_kernels.asc: cce_more_main <kernel>; runs it on one AI Core with
// x[i] = (37 i mod 509) - 250 (512 floats) and checks y against the semantics the asc-devkit docs give each
// API (computed here directly; exit 3 with one line when wrong). The real-API twin itself exits 1 with one
// line on any misuse.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "cce_more_kernels.asc"

namespace {
constexpr int kN = 512;
int Bad(const char* what, int i, double got, double want)
{
    std::fprintf(stderr, "cce_more_main: %s: y[%d] = %g, expected %g\n", what, i, got, want);
    return 3;
}
}  // namespace

int main(int argc, char** argv)
{
    if (argc != 2) return 2;
    const std::string which = argv[1];
    auto* x = static_cast<float*>(twin::GmAlloc(kN * sizeof(float), "x"));
    auto* y = static_cast<float*>(twin::GmAlloc(kN * sizeof(float), "y"));
    for (int i = 0; i < kN; ++i) x[i] = static_cast<float>((37 * i) % 509 - 250);
    uint16_t x16[2 * kN];
    uint8_t x8[4 * kN];
    std::memcpy(x16, x, sizeof(x16));
    std::memcpy(x8, x, sizeof(x8));
    if (which == "fold") {
        // Max.md with the overlap 通用说明和约束.md allows (dst = src1, repeat strides 0): repeats fold in order
        twin::LaunchMix(1, more_fold, (GM_ADDR)x, (GM_ADDR)y);
        for (int l = 0; l < 64; ++l) {
            float m = x[l];
            for (int r = 1; r < 8; ++r) m = x[64 * r + l] > m ? x[64 * r + l] : m;
            if (y[l] != m) return Bad("fold", l, y[l], m);
        }
        return 0;
    }
    if (which == "blocks") {  // ReduceDataBlock.md: one max / sum per 32-byte block, 8 per repeat
        twin::LaunchMix(1, more_blocks, (GM_ADDR)x, (GM_ADDR)y);
        for (int k = 0; k < 16; ++k) {
            float m = x[8 * k], s = 0.0f;
            for (int j = 0; j < 8; ++j) {
                m = x[8 * k + j] > m ? x[8 * k + j] : m;
                s += x[8 * k + j];
            }
            if (y[k] != m) return Bad("block max", k, y[k], m);
            if (y[16 + k] != s) return Bad("block sum", 16 + k, y[16 + k], s);
        }
        return 0;
    }
    if (which == "gather") {  // GatherMask.md: pattern 7 keeps all of each repeat's 24 elements, packed
        twin::LaunchMix(1, more_gather, (GM_ADDR)x, (GM_ADDR)y);
        uint16_t got[72];
        std::memcpy(got, y, sizeof(got));
        for (int r = 0; r < 3; ++r)
            for (int i = 0; i < 24; ++i)
                if (got[24 * r + i] != x16[64 * r + i]) return Bad("gather", 24 * r + i, got[24 * r + i], x16[64 * r + i]);
        if (y[kN - 1] != 72.0f) return Bad("rsvdCnt", kN - 1, y[kN - 1], 72);
        return 0;
    }
    if (which == "cast") {  // Cast.md: uint8 -> half exact
        twin::LaunchMix(1, more_cast, (GM_ADDR)x, (GM_ADDR)y);
        for (int i = 0; i < 64; ++i)
            if (y[i] != static_cast<float>(x8[i])) return Bad("cast", i, y[i], x8[i]);
        return 0;
    }
    if (which == "copy_and") {  // UBToUB高维切分数据搬运(DataCopy).md; And.md
        twin::LaunchMix(1, more_copy_and, (GM_ADDR)x, (GM_ADDR)y);
        for (int i = 0; i < 8; ++i) {
            if (y[i] != x[i]) return Bad("copy", i, y[i], x[i]);
            if (y[8 + i] != x[16 + i]) return Bad("copy", 8 + i, y[8 + i], x[16 + i]);
        }
        uint16_t got[64];
        std::memcpy(got, y + 64, sizeof(got));
        for (int i = 0; i < 64; ++i) {
            const uint16_t want = static_cast<uint16_t>(x16[i] & x16[16 + i]);
            if (got[i] != want) return Bad("and", 64 + i / 2, got[i], want);
        }
        return 0;
    }
    return 2;
}
