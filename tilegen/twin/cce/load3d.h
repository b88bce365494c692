// tilegen real-API twin: LoadData 3Dv2 (img2col) from L1 into L0A / L0B, in the one use the twin models:
// moving a 2-D matrix tile, as the Matmul API does on 2201 (impl/adv_api/detail/matmul/stage/split/
// load_to_l0a/load_to_l0a_loadInstr.h, load_to_l0b/load_to_l0b_loadInstr.h; intrinsics called by
// impl/basic_api/dav_c220/kernel_operator_mm_impl.h LoadData3DV2L12L0ACal / LoadData3DV2L12L0BCal and
// Load3DSetFMatrixCal / Load3DSetFMatrixBCal at asc-devkit 0da921b9).
//
// Semantics (asc-devkit 0da921b9 docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/矩阵计算的搬入/
// 矩阵数据搬入至L0-Buffer/LoadData_3D.md, "LoadData3DParamsV2", "约束说明" and "使用LoadData（卷积数据搬运）完成矩阵
// 计算所需2D格式数据的搬运"): with N = 1, a 1 x 1 filter, stride 1, dilation 1 and no padding, the img2col
// matrix of the NC1HWC0 feature map in L1 (l1H x l1W positions, channelSize channels) is the L1 matrix of
// H*W rows and channelSize columns in NZ fractals: element (r, c) at ((c / C0) * l1H * l1W + r) * C0 + c % C0.
// The instruction takes rows [mStartPt, +mExtension) and columns [kStartPt, +kExtension) of it (call the
// block S, rows r' and columns c' from 0) and writes it at dst in 512-byte fractals of 16 x 16 (b16):
//  - L0A, no transpose: ZZ (the NZ -> ZZ conversion of A2/A3): S(r', c') at fractal (r'/16, c'/16) of a
//    row-major grid kExtension/16 fractals wide, row-major inside: (r' % 16) * 16 + c' % 16;
//  - L0A, enTranspose (b16): "除了每个分形矩阵自身会被转置，每个分形矩阵在整个二维特征图中的位置也会被转置": S^T in ZZ,
//    S(r', c') at fractal (c'/16, r'/16) of a grid mExtension/16 wide, inside (c' % 16) * 16 + r' % 16;
//  - L0B (always transposed, ZN): S(r', c') at fractal (r'/16, c'/16) of a grid kExtension/16 wide,
//    column-major inside: (c' % 16) * 16 + r' % 16.
// Those are the layouts mad reads (cube.h: L0A ZZ, L0B ZN). set_fmatrix / set_fmatrix_b hold l1W [15:0],
// l1H [31:16] and the four pads [63:32] (Load3DSetFMatrixCal); fMatrixCtrl picks the B one. Anything
// else (a filter, stride or dilation other than 1, padding, b8/b32 data, extensions or starts that are not
// whole fractals, rows past the feature map) stops the run naming what is not modelled. Pipe MTE1.
#ifndef TILEGEN_CCE_LOAD3D_H
#define TILEGEN_CCE_LOAD3D_H

#include <cstdint>
#include <cstring>

#include "core.h"

namespace cce_rt {

uint64_t& FmatrixRegister(bool b);  // defined in runtime.cpp (per core): FMATRIX (b = false) and FMATRIX_B

template <typename T>
inline void Load3dV2(const char* what, Buf dstBuf, uint64_t dst, uint64_t src, uint16_t kExt, uint16_t mExt, uint16_t kStart,
                     uint16_t mStart, uint8_t strideW, uint8_t strideH, uint8_t filterW, uint8_t filterH, uint8_t dilW,
                     uint8_t dilH, bool filterSizeW, bool filterSizeH, bool transpose, bool fMatrixB, uint16_t channelSize)
{
    if (Cur().aic == false) Fail(what, "cube instruction on an AIV");
    if (sizeof(T) != 2) Fail(what, "%zu-byte data is not modelled (b16 is)", sizeof(T));
    if (strideW != 1 || strideH != 1 || filterW != 1 || filterH != 1 || dilW != 1 || dilH != 1 || filterSizeW || filterSizeH)
        Fail(what, "filter %ux%u, stride %ux%u, dilation %ux%u: only the 1x1 / 1 / 1 matrix move is modelled", filterW,
             filterH, strideW, strideH, dilW, dilH);
    const uint64_t fm = FmatrixRegister(fMatrixB);
    const uint64_t l1W = fm & 0xffff, l1H = (fm >> 16) & 0xffff;
    if ((fm >> 32) != 0) Fail(what, "padding %#llx is not modelled", (unsigned long long)(fm >> 32));
    if (l1W == 0 || l1H == 0 || channelSize == 0 || kExt == 0 || mExt == 0) return;  // documented NOP
    if (kExt % 16 || mExt % 16 || kStart % 16 || channelSize % 16)
        Fail(what, "kExtension %u, mExtension %u, kStartPt %u, channelSize %u: only whole 16 x 16 fractals are modelled", kExt,
             mExt, kStart, channelSize);
    if (static_cast<uint64_t>(mStart) + mExt > l1H * l1W || static_cast<uint64_t>(kStart) + kExt > channelSize)
        Fail(what, "rows [%u, +%u) / columns [%u, +%u) outside the %llu x %u feature matrix", mStart, mExt, kStart, kExt,
             (unsigned long long)(l1H * l1W), channelSize);
    if (transpose && dstBuf != L0A) Fail(what, "enTranspose applies to L0A only");
    Align(what, dstBuf, dst, 512);
    Align(what, L1, src, 32);
    const uint32_t op = Issue(PIPE_MTE1);
    const uint64_t rows = l1H * l1W, C0 = 16;
    const uint64_t gridW = (transpose ? mExt : kExt) / 16;
    for (uint64_t fr = 0; fr < mExt / 16; ++fr)
        for (uint64_t fc = 0; fc < kExt / 16; ++fc) {
            const uint64_t dFrac = transpose ? fc * gridW + fr : fr * gridW + fc;
            const uint64_t d = dst + dFrac * 512;
            uint8_t* dp = Local(what, dstBuf, d, 512);
            for (uint64_t i = 0; i < 16; ++i) {  // row r' = fr * 16 + i of S
                const uint64_t r = mStart + fr * 16 + i;
                const uint64_t c = kStart + fc * 16;  // 16 columns of one C0 block
                const uint64_t s = src + (((c / C0) * rows + r) * C0 + c % C0) * sizeof(T);
                const uint8_t* sp = Local(what, L1, s, 16 * sizeof(T));
                TouchRead(what, PIPE_MTE1, L1, s, 16 * sizeof(T));
                for (uint64_t j = 0; j < 16; ++j) {
                    const uint64_t inner = (dstBuf == L0A && !transpose) ? i * 16 + j : j * 16 + i;
                    std::memcpy(dp + inner * sizeof(T), sp + j * sizeof(T), sizeof(T));
                }
            }
            TouchWrite(what, PIPE_MTE1, op, dstBuf, d, 512);
        }
}

}  // namespace cce_rt

inline void set_fmatrix(uint64_t v) { cce_rt::FmatrixRegister(false) = v; }
inline void set_fmatrix_b(uint64_t v) { cce_rt::FmatrixRegister(true) = v; }

template <typename T>
inline void img2colv2_cbuf_to_ca(__ca__ T* dst, __cbuf__ T* src, uint16_t kExt, uint16_t mExt, uint16_t kStart, uint16_t mStart,
                                 uint8_t strideW, uint8_t strideH, uint8_t filterW, uint8_t filterH, uint8_t dilW, uint8_t dilH,
                                 bool filterSizeW, bool filterSizeH, bool transpose, bool fMatrixCtrl, uint16_t channelSize)
{
    cce_rt::Load3dV2<T>("img2colv2_cbuf_to_ca", cce_rt::L0A, cce_rt::AddrOf(dst), cce_rt::AddrOf(src), kExt, mExt, kStart, mStart,
                        strideW, strideH, filterW, filterH, dilW, dilH, filterSizeW, filterSizeH, transpose, fMatrixCtrl,
                        channelSize);
}
template <typename T>
inline void img2colv2_cbuf_to_cb(__cb__ T* dst, __cbuf__ T* src, uint16_t kExt, uint16_t mExt, uint16_t kStart, uint16_t mStart,
                                 uint8_t strideW, uint8_t strideH, uint8_t filterW, uint8_t filterH, uint8_t dilW, uint8_t dilH,
                                 bool filterSizeW, bool filterSizeH, bool transpose, bool fMatrixCtrl, uint16_t channelSize)
{
    (void)transpose;  // "在目的操作数的物理存储位置为L0B Buffer（TPosition: B2）时本参数无效"
    cce_rt::Load3dV2<T>("img2colv2_cbuf_to_cb", cce_rt::L0B, cce_rt::AddrOf(dst), cce_rt::AddrOf(src), kExt, mExt, kStart, mStart,
                        strideW, strideH, filterW, filterH, dilW, dilH, filterSizeW, filterSizeH, false, fMatrixCtrl, channelSize);
}

#endif  // TILEGEN_CCE_LOAD3D_H
