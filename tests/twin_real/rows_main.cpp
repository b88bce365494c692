// Harness of tests/twin_real/rows_kernels.asc: rows_main X V Y runs it on one AI Core with x (16 x 128
// floats) and v (16 floats) read from the files X and V, and writes y to the file Y: the max and the sum
// of each row's first 100 columns, v with -inf replaced by 0, x - v[r], x * v[r], x / v[r] (0 where
// v[r] = 0), then 37 + c for c < 128, then x masked by each MaskTile case of rows_kernels.asc.
#include <cstdio>

#include "rows_kernels.asc"

int main(int argc, char** argv)
{
    if (argc != 4) return 2;
    constexpr int nx = 16 * 128, nv = 16, ny = 3 * 16 + 3 * 16 * 128 + 128 + 7 * 16 * 128;  // 7: the MaskTile cases (rows::NMASK) and the first without cutOnly
    auto* x = static_cast<float*>(twin::GmAlloc(nx * sizeof(float), "x"));
    auto* v = static_cast<float*>(twin::GmAlloc(nv * sizeof(float), "v"));
    auto* y = static_cast<float*>(twin::GmAlloc(ny * sizeof(float), "y"));
    FILE* f = std::fopen(argv[1], "rb");
    if (!f || std::fread(x, sizeof(float), nx, f) != nx) return 2;
    std::fclose(f);
    f = std::fopen(argv[2], "rb");
    if (!f || std::fread(v, sizeof(float), nv, f) != nv) return 2;
    std::fclose(f);
    twin::LaunchMix(1, rows_helpers, (GM_ADDR)x, (GM_ADDR)v, (GM_ADDR)y);
    f = std::fopen(argv[3], "wb");
    if (!f || std::fwrite(y, sizeof(float), ny, f) != ny) return 2;
    std::fclose(f);
    twin::GmFree(x);
    twin::GmFree(v);
    twin::GmFree(y);
    return 0;
}
