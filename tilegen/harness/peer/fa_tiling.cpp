// The tiling of Huawei's FlashAttentionScore forward (hicann/ops-transformer,
// attention/flash_attention_score) for one shape, written from the rules of its host tiling code and
// computed with asc-devkit's own matmul and softmax tiling libraries (compiled from the snapshot:
// impl/adv_api/tiling/matmul/*.cpp, impl/adv_api/tiling/activation/softmax_tiling.cpp).
//
// Usage: fa_tiling B N1 N2 S1 S2 D DTYPE LAYOUT MASK SCALE OUT
//   DTYPE fp16|bf16, LAYOUT BSND|BNSD, MASK none|causal; the platform from PEER_* (host_shim/platform_shim.cpp).
// Writes the FlashAttentionScoreGeneralTilingData bytes (op_kernel/flash_attention_score_tiling.h, read in
// place from $OPS_TRANSFORMER) to OUT and prints one JSON object on stdout: the template, its kernel
// template arguments (the tiling key fields of op_kernel/flash_attention_score_template_tiling_key.h), the
// launch's block count, the user workspace bytes and the split. A shape no template of this file covers
// ends with one line on stderr naming the rule and exit 2.
//
// Rules followed, all from attention/flash_attention_score/op_host/flash_attention_score_tiling_general.cpp
// (class::function); the call order is TilingBaseClass::DoTiling (common/include/tiling_base/tiling_base.h):
// GetShapeAttrsInfo, GetPlatformInfo, IsCapable, DoOpTiling, DoLibApiTiling, GetWorkspaceSize, PostTiling,
// GetTilingKey; the templates are tried in their registration priority (the REGISTER_TILING_TEMPLATE lines
// at the end of that file): DropMask 90, VarLen 94, SameAB 95, S1s2 96, S1 97, B 98.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "adv_api/activation/softmax_tiling.h"
#include "adv_api/matmul/matmul_tiling.h"
#include "flash_attention_score_tiling.h"
#include "peer_platform.h"

namespace {

// constants of flash_attention_score_tiling_general.cpp (top of file)
constexpr int64_t FRACTAL_NUM = 16;
constexpr int64_t S1_VEC2_BASE_SIZE_MAX = 512;
constexpr int64_t HIGH_PERF_API_BUFFER_MULTIPLE = 2;
constexpr int64_t S2_NZTOND_SIZE_64 = 64;
constexpr int64_t D_SPECIFIC_SIZE = 64;
constexpr int64_t D_SPECIFIC_SIZE_96 = 96;
constexpr int64_t BMM1_BASICBLOCK_K_64 = 64;
constexpr int64_t BMM1_BASICBLOCK_K_128 = 128;
constexpr int64_t BMM1_BASICBLOCK_N_128 = 128;
constexpr int64_t BMM2_BASICBLOCK_M_64 = 64;
constexpr int64_t BMM2_BASICBLOCK_K_256 = 256;
constexpr int64_t S2_REUSE_SIZE_512 = 512;
constexpr int64_t SAMEAB_D_LIMIT_128 = 128;
constexpr int64_t SAMEAB_D_LIMIT_196 = 196;
constexpr int64_t S2_SPECIFIC_SIZE_18432 = 18432;
constexpr int64_t L1REUSE_D_LIMIT = 128;
constexpr int64_t L1REUSE_BNG_LIMIT = 10;
constexpr int64_t L1REUSE_S2_LIMIT_256 = 256;
constexpr int64_t L1REUSE_S2_LIMIT_2048 = 2048;
constexpr int64_t L1REUSE_S2_LIMIT_4032 = 4032;
constexpr int64_t L1REUSE_S2_LIMIT_42192 = 42192;
constexpr int64_t AICAIV_RATIO_2 = 2;
constexpr int64_t INVALID_ROW_SPARSE_RATIO = 6;
constexpr int64_t MAX_AIV_NUM = 48;
constexpr int64_t HIGH_PERF_BLOCK_SIZE = 128;
constexpr int64_t SPACE_NUM_2 = 2, SPACE_NUM_3 = 3, SPACE_NUM_4 = 4;
constexpr int64_t WORK_SPACE_RESERVE_SIZE = 16 * 1024 * 1024;
constexpr int64_t ATTEN_MASK_COMPRESS_LIMIT = 2048;
constexpr uint32_t BYTE_BLOCK = 32;

// enums of the same file and of common/include/tiling_base/tiling_type.h
enum LayoutType : uint8_t { LAYOUT_BSND = 1, LAYOUT_BNSD = 3 };
enum AttenMaskShapeType : uint8_t { ATTEN_1_1_1_S1_S2 = 2 };
enum PseShapeType : uint8_t { PSE_B_N2_G_1_S2 = 1 };
enum SparseMode : int64_t { NO_MASK = 0, LEFT_UP_CAUSAL = 2 };
enum AttenMaskCompressMode : uint8_t { NO_COMPRESS_MODE = 0, LEFT_UP_CAUSAL_MODE = 1 };
enum ImplMode : uint8_t { AA_HIGH_PRECISION = 0 };
enum PseType : int64_t { PSE_OUTER_ADD_MUL_TYPE = 1 };
enum class SparseEnum : uint8_t { ALL = 0, NONE = 1, ANY = 2, CAUSAL = 3, BAND = 4 };
enum class DtypeEnum : uint8_t { FLOAT16 = 0, FLOAT32 = 1, BFLOAT16 = 2, FLOAT16_PRECISION = 3 };
enum class AxisEnum : uint8_t { S1 = 3, S2 = 4, NONE = 9 };

template <typename T> T AlignUp(T a, T b) { return b == 0 ? 0 : (a + b - 1) / b * b; }
template <typename T> T CeilDivision(T a, T b) { return b == 0 ? 0 : (a + b - 1) / b; }
template <typename T> T CeilDiv(T a, T b) { return a == 0 ? 0 : (b != 0 ? (a - 1) / b + 1 : a); }
template <typename T> T CalcTailSize(T a, T b)
{
    if (b == 0) return 0;
    T m = a % b;
    return m != 0 ? m : b;
}

[[noreturn]] void Refuse(const char* fmt, const char* rule, long long a = 0, long long b = 0)
{
    std::fprintf(stderr, "peer tiling: ");
    std::fprintf(stderr, fmt, a, b);
    std::fprintf(stderr, " (%s)\n", rule);
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 12) {
        std::fprintf(stderr, "usage: fa_tiling B N1 N2 S1 S2 D fp16|bf16 BSND|BNSD none|causal SCALE OUT\n");
        return 2;
    }
    const int64_t bSize = std::atoll(argv[1]), n1Size = std::atoll(argv[2]), n2Size = std::atoll(argv[3]);
    const int64_t s1Size = std::atoll(argv[4]), s2Size = std::atoll(argv[5]), dSize = std::atoll(argv[6]);
    const std::string dtype = argv[7], layout = argv[8], mask = argv[9];
    const float scaleValue = static_cast<float>(std::atof(argv[10]));
    const char* out = argv[11];
    if (bSize < 1 || n1Size < 1 || n2Size < 1 || s1Size < 1 || s2Size < 1 || dSize < 1 || n1Size % n2Size != 0)
        Refuse("sizes B N1 N2 S1 S2 D must be >= 1 with N1 %% N2 == 0%.0lld%.0lld", "AnalyzeLayout");
    if (dtype != "fp16" && dtype != "bf16") Refuse("dtype must be fp16 or bf16%.0lld%.0lld", "AnalyzeDtype");
    if (layout != "BSND" && layout != "BNSD") Refuse("layout must be BSND or BNSD%.0lld%.0lld", "Analyze4DimLayout");
    if (mask != "none" && mask != "causal") Refuse("mask must be none or causal%.0lld%.0lld", "AnalyzeOptionalInput");

    FlashAttentionScoreGeneralTilingData td{};
    td.reset();
    auto& in = td.inputParams;

    // ---- GetPlatformInfo -------------------------------------------------------------------------------
    const int64_t aivNum = static_cast<int64_t>(PeerPlatformFigure("PEER_AIV"));
    const int64_t aicNum = static_cast<int64_t>(PeerPlatformFigure("PEER_AIC"));
    const uint64_t l1Size = PeerPlatformFigure("PEER_L1"), l0cSize = PeerPlatformFigure("PEER_L0C");

    // ---- GetShapeAttrsInfo: AnalyzeAttrs, AnalyzeDtype, AnalyzeLayout, AnalyzeOptionalInput ------------
    // AnalyzeAttrs: keep_prob 1, inner_precise 0 -> AA_HIGH_PRECISION with isHighPercision; sparse_mode 2
    // (LEFT_UP_CAUSAL) sets attenMaskCompressMode LEFT_UP_CAUSAL_MODE; pse_type default 1.
    const bool causal = mask == "causal";
    const int64_t sparseMode = causal ? LEFT_UP_CAUSAL : NO_MASK;
    const uint8_t attenMaskCompressMode = causal ? LEFT_UP_CAUSAL_MODE : NO_COMPRESS_MODE;
    // the attrs a causal call passes (FlashAttentionScore's pre_tockens / next_tockens defaults: 2147483647)
    int64_t preTokens = std::numeric_limits<int32_t>::max(), nextTokens = std::numeric_limits<int32_t>::max();
    uint8_t implMode = AA_HIGH_PRECISION;
    bool isHighPercision = true;
    // AnalyzeDtype
    const bool bf16 = dtype == "bf16";
    const int64_t inputDtypeBytes = 2;
    matmul_tiling::DataType bmmDtype = bf16 ? matmul_tiling::DataType::DT_BF16 : matmul_tiling::DataType::DT_FLOAT16;
    const matmul_tiling::DataType bmm1OutDtype = matmul_tiling::DataType::DT_FLOAT;  // fp16 high precision / bf16
    const matmul_tiling::DataType bmm2OutDtype = bmm1OutDtype;
    const DtypeEnum tilingKeyDType = bf16 ? DtypeEnum::BFLOAT16 : DtypeEnum::FLOAT16_PRECISION;
    const int64_t calcTypeSize = 4;  // float: fp16 with isHighPercision, and bf16
    if (bf16) isHighPercision = false;
    // AnalyzeLayout -> Analyze4DimLayout
    const int64_t gSize = n1Size / n2Size, d2Size = dSize;
    int64_t s1StrideSize, s2StrideSize;
    LayoutType tilingKeyLayout;
    if (layout == "BSND") {
        s1StrideSize = gSize * n2Size * dSize;
        s2StrideSize = n2Size * dSize;
        tilingKeyLayout = LAYOUT_BSND;
    } else {
        s1StrideSize = dSize;
        s2StrideSize = dSize;
        tilingKeyLayout = LAYOUT_BNSD;
    }
    in.set_layoutType(tilingKeyLayout);
    // AnalyzeOptionalInput: no pse -> PSE_B_N2_G_1_S2; a [2048, 2048] uint8 mask with a compress mode ->
    // ATTEN_1_1_1_S1_S2, attenMaskDataType 1, attenMaskS2Size 2048; no drop mask -> needDropMaskOp 0.
    in.set_pseShapeType(PSE_B_N2_G_1_S2);
    const uint8_t attenMaskExistFlag = causal ? 1 : 0;
    if (causal) {
        in.set_attenMaskDataType(1);
        in.set_attenMaskShapeType(ATTEN_1_1_1_S1_S2);
        in.set_attenMaskS2Size(ATTEN_MASK_COMPRESS_LIMIT);
    }
    in.set_needDropMaskOp(0);
    // GetShapeAttrsInfo
    const int64_t alignedS1 = AlignUp(s1Size, FRACTAL_NUM), alignedS2 = AlignUp(s2Size, FRACTAL_NUM);
    const int64_t alignedD = AlignUp(dSize, FRACTAL_NUM);
    in.set_bSize(bSize);
    in.set_n2Size(n2Size);
    in.set_gSize(gSize);
    in.set_s1Size(s1Size);
    in.set_s2Size(s2Size);
    in.set_dSize(dSize);
    in.set_keepProb(1.0f);
    in.set_scaleValue(scaleValue);
    in.set_alignedS2(alignedS2);
    in.set_pseType(PSE_OUTER_ADD_MUL_TYPE);
    in.set_tndSoftmaxOut(0);

    // ---- template choice (registration priority) -------------------------------------------------------
    // FlashAttentionScoreTilingDropMask (90): needs needDropMaskOp; FlashAttentionVarLenScoreTiling (94): TND only.
    // FlashAttentionScoreTilingS1s2Bn2gs1SameAB::IsCapable (95):
    if ((dSize % FRACTAL_NUM != 0 || dSize == D_SPECIFIC_SIZE_96) && s2Size >= S2_REUSE_SIZE_512)
        Refuse("D %lld with S2 %lld takes the SameAB template, which this peer does not build",
               "FlashAttentionScoreTilingS1s2Bn2gs1SameAB::IsCapable", dSize, s2Size);
    if (s2Size > 1024 && dSize > SAMEAB_D_LIMIT_128 && dSize < SAMEAB_D_LIMIT_196)
        Refuse("D %lld with S2 %lld takes the SameAB template, which this peer does not build",
               "FlashAttentionScoreTilingS1s2Bn2gs1SameAB::IsCapable", dSize, s2Size);
    if (dSize == D_SPECIFIC_SIZE && s2Size % 64 != 0 && s2Size > 2048 && s2Size < S2_SPECIFIC_SIZE_18432)
        Refuse("D %lld with S2 %lld takes the SameAB template, which this peer does not build",
               "FlashAttentionScoreTilingS1s2Bn2gs1SameAB::IsCapable", dSize, s2Size);
    // FlashAttentionScoreTilingS1s2Bn2gs1::IsCapable (96): s2Size > s2sizeLimitMin (1024)
    if (s2Size <= 1024)
        Refuse("S2 %lld <= 1024 takes the S1 or B template, which this peer does not build%.0lld",
               "FlashAttentionScoreTilingS1s2Bn2gs1::IsCapable", s2Size);
    // expectTemplate of the S1s2 constructor: splitS1 = splitS2 = 1, splitD = 0

    // ---- DoOpTiling ------------------------------------------------------------------------------------
    // MatchTemplate -> S1s2::CalcS1S2BasicBlock
    int64_t s1BasicBlock = std::min<int64_t>(64, alignedS1);
    if (bSize * n1Size * gSize * CeilDiv(s1Size, s1BasicBlock) > aivNum) s1BasicBlock = std::min<int64_t>(128, alignedS1);
    const int64_t s2BasicBlock = std::min<int64_t>(128, alignedS2);
    uint8_t tilingKeyBmm1Format = 0;  // CubeFormatEnum::ND
    if (s2Size % S2_NZTOND_SIZE_64 != 0 && dSize != D_SPECIFIC_SIZE) tilingKeyBmm1Format = 1;  // NZ
    // S1s2::CalcNRatio
    int64_t nRatio = 8;
    if (s2Size / s2BasicBlock == 8 && s2Size % s2BasicBlock > 0 && s2Size % s2BasicBlock <= 16) nRatio = 5;
    if (s2Size <= 2304 && s2Size >= 2049 && dSize == 64 && tilingKeyLayout == LAYOUT_BNSD) nRatio = 6;
    // S1s2::CalcDBasicBlock
    const int64_t dBasicBlock = std::min<int64_t>(128, alignedD);
    // MatchTemplate: IsTemplateMatched() is true for S1s2; then CalcUBSize(s1BasicBlock, s2BasicBlock)
    const int64_t apiMaxUBSize = HIGH_PERF_API_BUFFER_MULTIPLE * s1BasicBlock * s2BasicBlock * static_cast<int64_t>(sizeof(float));

    // GetSparseInfo (mask present, not TND): sparse_mode 2 -> SparseModeProcess -> PretokenAndNexttokenAdjustment:
    // LEFT_UP_CAUSAL resets preTokens = s1Size, nextTokens = 0 and gives SparseEnum::CAUSAL.
    SparseEnum sparseType = SparseEnum::ALL;
    if (attenMaskExistFlag == 1 && sparseMode == LEFT_UP_CAUSAL) {
        preTokens = s1Size;
        nextTokens = 0;
        sparseType = SparseEnum::CAUSAL;
    }
    // SetSparseTilingInfo
    in.set_attenMaskCompressMode(attenMaskCompressMode);
    in.set_sparseType(static_cast<uint8_t>(sparseType));
    in.set_preTokens(preTokens);
    in.set_nextTokens(nextTokens);
    in.set_implMode(implMode);
    // isSparseValidSizeAligned is false on these paths
    const int64_t s1SparseValidSize = preTokens, s2SparseValidSize = nextTokens;
    // SetQKVStartIdx: no q_start_idx / kv_start_idx inputs
    in.set_qStartIdx(0);
    in.set_kvStartIdx(0);
    // SetCoreParams (expectTemplate.splitS2 == 1)
    auto& cp = td.coreParams;
    cp.set_s1BaseSize(s1BasicBlock);
    cp.set_s1BaseTailSize(CalcTailSize(s1Size, s1BasicBlock));
    cp.set_s1OuterSize(CeilDivision(s1Size, s1BasicBlock));
    cp.set_s2BaseSize(s2BasicBlock);
    cp.set_s2BaseTailSize(CalcTailSize(s2Size, s2BasicBlock));
    cp.set_s2OuterSize(CeilDivision(s2Size, s2BasicBlock));
    nRatio = std::min<int64_t>(nRatio, cp.get_s2OuterSize());  // GetNRatio() is S1s2's nRatio
    cp.set_s2OuterSize(CeilDivision<int64_t>(cp.get_s2OuterSize(), nRatio));
    cp.set_nRatio(nRatio);
    cp.set_dBaseSize(dBasicBlock);
    cp.set_dBaseTailSize(CalcTailSize(dSize, dBasicBlock));
    cp.set_dOuterSize(CeilDivision(dSize, dBasicBlock));
    const int64_t s1Vec2BaseSize = 8 * 1024 * 2 / (alignedD * inputDtypeBytes);
    cp.set_s1Vec2BaseSize(std::min(s1Vec2BaseSize, S1_VEC2_BASE_SIZE_MAX));
    cp.set_s1Vec2BaseTailSize(s1Size % cp.get_s1Vec2BaseSize());
    cp.set_dRopeSize(0);
    cp.set_d2Size(d2Size);
    // SetMultiBatchCoreParams
    cp.set_bBaseSize(1);
    cp.set_bBaseTailSize(1);
    cp.set_bOuterSize(bSize);
    cp.set_n2BaseSize(1);
    cp.set_n2BaseTailSize(1);
    cp.set_n2OuterSize(n2Size);
    cp.set_gBaseSize(1);
    cp.set_gBaseTailSize(1);
    cp.set_gOuterSize(gSize);
    // SetMultiCoreParams (base class; S1s2 does not override it)
    auto& mc = td.multiCoreParams;
    const int64_t totalSize = cp.get_bOuterSize() * cp.get_n2OuterSize() * cp.get_gOuterSize() * cp.get_s1OuterSize();
    const int64_t actualUsedAivNum = std::min(totalSize, aivNum);
    mc.set_coreNum(static_cast<int32_t>(actualUsedAivNum));
    mc.set_totalSize(totalSize);
    mc.set_splitFactorSize(CeilDivision(totalSize, actualUsedAivNum));
    mc.set_splitFactorTailSize(CalcTailSize(totalSize, mc.get_splitFactorSize()));
    // SetTensorSizeParams (batchInnerSize 1)
    auto& ts = td.tensorSizeParams;
    ts.set_bmm1ResUbSize(s1BasicBlock * s2BasicBlock);
    ts.set_attenMaskUbSize(attenMaskExistFlag * s1BasicBlock * s2BasicBlock);
    ts.set_pseUbSize(0);
    ts.set_dropMaskUbSize(0);
    const bool hasAttenMask = ts.get_attenMaskUbSize() > 0;
    if (bf16 || isHighPercision) ts.set_castUbSize(s1BasicBlock * std::max(s2BasicBlock, dBasicBlock));
    ts.set_softmaxMaxUbSize(s1BasicBlock * (BYTE_BLOCK / sizeof(float)));
    ts.set_softmaxSumUbSize(s1BasicBlock * (BYTE_BLOCK / sizeof(float)));
    ts.set_softmaxExpUbSize(s1BasicBlock * (BYTE_BLOCK / calcTypeSize));
    ts.set_apiTmpBufferBytes(static_cast<int32_t>(apiMaxUBSize));
    ts.set_bmm2ResUbSize(s1BasicBlock * dBasicBlock);
    // SetSparseParams (sparse type not ALL; splitS2 == 1)
    int64_t maxValidS2Len = 0;
    if (in.get_sparseType() != static_cast<uint8_t>(SparseEnum::ALL)) {
        cp.set_s1SparseValidSize(s1SparseValidSize);
        cp.set_s2SparseValidSize(s2SparseValidSize);
        // InitSparseValidArray (not PREFIX)
        std::vector<int64_t> valid(cp.get_s1OuterSize(), 0);
        const int64_t s2BlkNum = CeilDivision(s2Size, s2BasicBlock);
        const int64_t validS1Size = CeilDivision(s1SparseValidSize, s1BasicBlock);
        const int64_t validS2Size = CeilDivision(s2SparseValidSize, s2BasicBlock);
        const int64_t invalidRowSparseRatio = s2Size <= s2BasicBlock ? 1 : INVALID_ROW_SPARSE_RATIO;
        for (int64_t i = 0; i < static_cast<int64_t>(valid.size()); i++) {
            const int64_t reduceBlk =
                (i < validS1Size) ? 0 : (CeilDivision((i + 1) * s1BasicBlock - s1SparseValidSize, s2BasicBlock) - 1);
            const int64_t addBlk = std::min(s2BlkNum - validS2Size,
                                            CeilDivision((i + 1) * s1BasicBlock + s2SparseValidSize, s2BasicBlock) - validS2Size);
            const int64_t validBlockNum = validS2Size - reduceBlk + addBlk;
            valid[i] = validBlockNum > 0 ? validBlockNum : invalidRowSparseRatio;
            maxValidS2Len = std::max(valid[i] * s1BasicBlock, maxValidS2Len);
        }
        // SetSparseStartIdx (not SameAB): validCoreNum = min(coreNum, MAX_AIV_NUM)
        const int64_t validCoreNum = std::min<int64_t>(mc.get_coreNum(), MAX_AIV_NUM);
        int64_t* start = mc.get_sparseStartIdx();
        for (int64_t idx = 0; idx < MAX_AIV_NUM; ++idx) start[idx] = totalSize;
        if (totalSize <= validCoreNum) {
            for (int64_t idx = 0; idx < totalSize; ++idx) start[idx] = idx;
        } else {
            std::vector<int64_t> part(validCoreNum, totalSize), last(validCoreNum, totalSize);
            const int64_t sum = std::accumulate(valid.begin(), valid.end(), 0LL);
            const int64_t loadTotal = sum * (totalSize / static_cast<int64_t>(valid.size()));
            int64_t lo = loadTotal / validCoreNum - 1;
            int64_t hi = CeilDivision(loadTotal, validCoreNum) + *std::max_element(valid.begin(), valid.end());
            // PartitionSparseData
            auto partition = [&](int64_t loadMax, std::vector<int64_t>& result) {
                const int64_t cutEach = loadMax / sum, loadEach = cutEach * sum;
                const int64_t numEach = cutEach * static_cast<int64_t>(valid.size());
                const int64_t target = static_cast<int64_t>(result.size());
                int64_t core = 0, roll = 0, load = loadEach;
                result[0] = 0;
                for (int64_t i = numEach; i < totalSize; i++, roll++) {
                    roll = roll >= static_cast<int64_t>(valid.size()) ? 0 : roll;
                    const int64_t next = valid[roll];
                    const bool more = load + next > loadMax;
                    if (more && core >= target - 1) return false;
                    if (more) {
                        result[++core] = i;
                        i += numEach;
                        i--;
                        roll--;
                        load = loadEach;
                        continue;
                    }
                    load += next;
                }
                std::fill(result.begin() + core + 1, result.end(), totalSize);
                return true;
            };
            while (lo + 1 < hi) {
                const int64_t loadMax = lo + (hi - lo) / 2;
                if (loadMax * validCoreNum >= loadTotal && partition(loadMax, part)) {
                    hi = loadMax;
                    last.swap(part);
                    continue;
                }
                lo = loadMax;
            }
            for (int64_t idx = 0; idx < validCoreNum; ++idx) start[idx] = last[idx];
        }
    }
    // SetPseAlibiParams (S1s2 override): no pse input -> nothing

    // ---- DoLibApiTiling: SetMatMulTiling(s1BasicBlock, s2BasicBlock, dBasicBlock, 1), SetSoftMaxTiling --
    platform_ascendc::PlatformAscendC platform(nullptr);
    matmul_tiling::MatmulApiTiling bmm1(platform), bmm2(platform);
    // S1s2::SetBmm1TilingInput
    bmm1.SetAType(matmul_tiling::TPosition::GM, matmul_tiling::CubeFormat::ND, bmmDtype, false);
    bmm1.SetBType(matmul_tiling::TPosition::GM, matmul_tiling::CubeFormat::ND, bmmDtype, true);
    bmm1.SetCType(matmul_tiling::TPosition::GM, matmul_tiling::CubeFormat::ND, bmm1OutDtype);
    bmm1.SetShape(std::min(s1BasicBlock, s1Size), std::min(s2BasicBlock * nRatio, s2Size), dSize);
    bmm1.SetOrgShape(s1Size, s2BasicBlock * nRatio, s1StrideSize, s2StrideSize);
    bmm1.SetBias(false);
    if (bmm1.SetBufferSpace(l1Size, l0cSize) != 0) Refuse("bmm1 SetBufferSpace failed%.0lld%.0lld", "S1s2::SetBmm1TilingInput");
    if (dSize > BMM1_BASICBLOCK_K_64 && dSize <= BMM1_BASICBLOCK_K_128)  // inputDtypeBytes != FP32
        bmm1.SetFixSplit(std::min(s1BasicBlock, AlignUp(s1Size, FRACTAL_NUM)), BMM1_BASICBLOCK_N_128, dSize);
    // IsSpecialShape (B 8, N 32, S 2048, SBH, ...) is never true for BSND/BNSD
    // S1s2::SetBmm2TilingInput
    const int64_t singleM = std::min(s1BasicBlock, s1Size);
    bmm2.SetAType(matmul_tiling::TPosition::GM, matmul_tiling::CubeFormat::ND, bmmDtype, false);
    bmm2.SetBType(matmul_tiling::TPosition::GM, matmul_tiling::CubeFormat::ND, bmmDtype, false);
    bmm2.SetCType(matmul_tiling::TPosition::GM, matmul_tiling::CubeFormat::ND, bmm2OutDtype);
    bmm2.SetShape(singleM, dSize, std::min(s2BasicBlock * nRatio, s2Size));
    bmm2.SetOrgShape(s1Size, s2StrideSize, std::min(s2BasicBlock * nRatio, s2Size), s2StrideSize);
    bmm2.SetBias(false);
    if (bmm2.SetBufferSpace(l1Size, l0cSize) != 0) Refuse("bmm2 SetBufferSpace failed%.0lld%.0lld", "S1s2::SetBmm2TilingInput");
    if (dSize == D_SPECIFIC_SIZE && tilingKeyLayout == LAYOUT_BNSD && in.get_sparseType() == static_cast<uint8_t>(SparseEnum::ALL) &&
        singleM >= BMM2_BASICBLOCK_M_64)
        bmm2.SetFixSplit(BMM2_BASICBLOCK_M_64, BMM2_BASICBLOCK_M_64, BMM2_BASICBLOCK_K_256);
    // FlashAttentionScoreTilingBase::SetMatMulTiling (isSameAB false, MATMUL_POLICY_NORMAL)
    if (bmm1.GetTiling(td.bmm1TilingData) == -1) Refuse("BMM1 tiling failed%.0lld%.0lld", "SetMatMulTiling");
    td.bmm1TilingData.shareMode = 0;
    td.bmm1TilingData.shareL1Size = static_cast<int32_t>(l1Size);
    td.bmm1TilingData.shareL0CSize = static_cast<int32_t>(l0cSize);
    if (bmm2.GetTiling(td.bmm2TilingData) == -1) Refuse("BMM2 tiling failed%.0lld%.0lld", "SetMatMulTiling");
    td.bmm2TilingData.shareMode = 0;
    td.bmm2TilingData.shareL1Size = static_cast<int32_t>(l1Size);
    td.bmm2TilingData.shareL0CSize = static_cast<int32_t>(l0cSize);
    // S1s2::SetSoftMaxTiling: shape [s1BasicBlock / nRatio, s2BasicBlock * nRatio], IsBasicBlockInSoftMax
    const int64_t smM = s1BasicBlock / nRatio, smK = s2BasicBlock * nRatio;
    const bool basic = smK <= 2048 && smK % 64 == 0 && smM % 8 == 0;
    AscendC::SoftMaxFlashV2TilingFunc(ge::Shape({smM, smK}), static_cast<uint32_t>(calcTypeSize), sizeof(float),
                                      static_cast<uint32_t>(apiMaxUBSize), td.softmaxFlashTilingData, true, basic);
    // SetDataCopyTransposeTiling: the kernel struct's GetDataCopyTransposeTiling is empty; SetScalarConst:
    // CheckScalarConstCondation() is false for S1s2, so the S/D template types stay S_TEMPLATE_UNKNOW (0).

    // ---- S1s2::GetWorkspaceSize (RefreshSplitFactor first) ---------------------------------------------
    bool enableL1Reuse = false;
    {   // S1s2::SetEnableL1Reuse
        const uint8_t sp = in.get_sparseType();
        if (dSize > L1REUSE_D_LIMIT) {
        } else if (dSize == D_SPECIFIC_SIZE && tilingKeyLayout == LAYOUT_BNSD &&
                   !(s2Size % L1REUSE_S2_LIMIT_256 == 0 || s2Size == L1REUSE_S2_LIMIT_4032) && s2Size != L1REUSE_S2_LIMIT_42192) {
        } else if (sp == static_cast<uint8_t>(SparseEnum::ALL)) {
            enableL1Reuse = true;
        } else if (tilingKeyLayout == LAYOUT_BSND && s2Size <= L1REUSE_S2_LIMIT_2048 && dSize <= D_SPECIFIC_SIZE &&
                   bSize * n1Size <= L1REUSE_BNG_LIMIT) {
        } else if (sp == static_cast<uint8_t>(SparseEnum::CAUSAL)) {
            enableL1Reuse = !(bSize * n1Size * gSize <= L1REUSE_BNG_LIMIT && s2Size <= L1REUSE_S2_LIMIT_2048);
        }
    }
    if (enableL1Reuse) {  // RefreshSplitFactor
        mc.set_splitFactorSize(CeilDivision<int64_t>(mc.get_totalSize(), mc.get_coreNum()) * AICAIV_RATIO_2);
        mc.set_splitFactorTailSize(CalcTailSize<int64_t>(mc.get_totalSize(), mc.get_splitFactorSize()));
    }
    const int64_t bmm1Bytes = cp.get_nRatio() * ts.get_bmm1ResUbSize() * calcTypeSize;
    int64_t workspace = (bmm1Bytes * SPACE_NUM_2 + SPACE_NUM_4 * cp.get_s1BaseSize() * alignedD * calcTypeSize) * aivNum +
                        WORK_SPACE_RESERVE_SIZE;
    if (s2Size % S2_NZTOND_SIZE_64 != 0)
        workspace = (bmm1Bytes * SPACE_NUM_3 + SPACE_NUM_4 * cp.get_s1BaseSize() * alignedD * calcTypeSize) * aivNum +
                    WORK_SPACE_RESERVE_SIZE;
    // ---- PostTiling: blockDim = CalcTschBlockDim(coreNum, aicNum, aivNum) (CalcTschNumBlocks.md: the
    // number of AIC + 2 AIV groups covering coreNum vector slices) ----------------------------------------
    const int64_t blockDim = CeilDivision<int64_t>(static_cast<int64_t>(mc.get_coreNum()) * aicNum, aivNum);

    // ---- S1s2::GetTilingKey: GET_TPL_TILING_KEY(0, S1, S2, NONE, implMode, dtype, layout, bmm1Format,
    // bmm2Source GM, SparseEnum::ANY, BIG_DOUBLE_BUFFER, dropout, attenMask, pse, l1Reuse, rope, policy,
    // s1Type, s2Type, dType) -----------------------------------------------------------------------------
    FILE* f = std::fopen(out, "wb");
    if (f == nullptr || std::fwrite(&td, sizeof(td), 1, f) != 1) {
        std::fprintf(stderr, "peer tiling: cannot write %s\n", out);
        return 2;
    }
    std::fclose(f);
    std::printf("{\"template\": \"FlashAttentionScoreS1s2Bn2gs1\", \"tiling_bytes\": %zu, "
                "\"key\": [0, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d], "
                "\"block_dim\": %lld, \"workspace_bytes\": %lld, \"core_num\": %d, \"total_size\": %lld, "
                "\"split_factor\": %lld, \"s1_base\": %lld, \"s2_base\": %lld, \"n_ratio\": %lld, \"sparse_type\": %d, "
                "\"bmm1\": {\"baseM\": %d, \"baseN\": %d, \"baseK\": %d, \"stepM\": %d, \"stepN\": %d, \"stepKa\": %d, "
                "\"stepKb\": %d, \"depthA1\": %d, \"depthB1\": %d, \"dbL0C\": %d, \"iterateOrder\": %d}, "
                "\"bmm2\": {\"baseM\": %d, \"baseN\": %d, \"baseK\": %d, \"stepM\": %d, \"stepN\": %d, \"stepKa\": %d, "
                "\"stepKb\": %d, \"depthA1\": %d, \"depthB1\": %d, \"dbL0C\": %d, \"iterateOrder\": %d}, "
                "\"sparse_start\": [",
                sizeof(td), static_cast<int>(AxisEnum::S1), static_cast<int>(AxisEnum::S2), static_cast<int>(AxisEnum::NONE),
                implMode, static_cast<int>(tilingKeyDType), static_cast<int>(tilingKeyLayout), tilingKeyBmm1Format, 0,
                static_cast<int>(SparseEnum::ANY), 2, 0, hasAttenMask ? 1 : 0, 0, enableL1Reuse ? 1 : 0, 0, 0, 0, 0, 0,
                static_cast<long long>(blockDim), static_cast<long long>(workspace), mc.get_coreNum(),
                static_cast<long long>(mc.get_totalSize()), static_cast<long long>(mc.get_splitFactorSize()),
                static_cast<long long>(s1BasicBlock), static_cast<long long>(s2BasicBlock), static_cast<long long>(nRatio),
                in.get_sparseType(), td.bmm1TilingData.baseM, td.bmm1TilingData.baseN, td.bmm1TilingData.baseK,
                td.bmm1TilingData.stepM, td.bmm1TilingData.stepN, td.bmm1TilingData.stepKa, td.bmm1TilingData.stepKb,
                td.bmm1TilingData.depthA1, td.bmm1TilingData.depthB1, td.bmm1TilingData.dbL0C, td.bmm1TilingData.iterateOrder,
                td.bmm2TilingData.baseM, td.bmm2TilingData.baseN, td.bmm2TilingData.baseK, td.bmm2TilingData.stepM,
                td.bmm2TilingData.stepN, td.bmm2TilingData.stepKa, td.bmm2TilingData.stepKb, td.bmm2TilingData.depthA1,
                td.bmm2TilingData.depthB1, td.bmm2TilingData.dbL0C, td.bmm2TilingData.iterateOrder);
    for (int i = 0; i < MAX_AIV_NUM; ++i) std::printf("%s%lld", i ? ", " : "", static_cast<long long>(mc.get_sparseStartIdx()[i]));
    std::printf("]}\n");
    return 0;
}
