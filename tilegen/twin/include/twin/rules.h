// The semantic rules both twins check at run time that the header check (type checking against the
// real headers) cannot see: the name a failure line gives and the page of the asc-devkit snapshot
// (path relative to its root, @0da921b9, CANN 9.1.0) that states the rule. Shared by the hand twin
// (tilegen/twin/include) and the real-API twin (tilegen/twin/cce), so that the same misuse fails with the
// same rule and page on both; tilegen/twin/README.md ("Rules") tabulates what each twin checks.
// A failure line reads `... <API>: rule <name>: <what> (<page>[; <header line>]) [<core>]`.
#ifndef TILEGEN_TWIN_RULES_H
#define TILEGEN_TWIN_RULES_H

namespace twin_rules {

struct Rule {
    const char* name;
    const char* page;
};

// Vector instructions and UB belong to the AIVs; cube instructions (Mmad, LoadData, Fixpipe) and L1,
// L0A, L0B, L0C to the AIC: "Cube计算单元和Vector计算单元分别部署在AIC核和AIV核上".
inline constexpr Rule kCoreType{"core-type", "docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md"};
// SetFlag/WaitFlag pairs that exist on NPU architecture 2201: 表2 (AIC) has no pair with PIPE_S on either
// side ("不涉及": the pair does not exist in hardware); 表3 (AIV) has S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S.
inline constexpr Rule kPipeSPair{"pipe-s-pair", "docs/zh/api/SIMD-API/基础API/同步控制/核内同步/核内同步能力概述.md"};
// CrossCoreSetFlag on A2: modes 0, 1, 2 ("modeId支持的取值说明") ...
inline constexpr Rule kCrossCoreMode{"cross-core-mode", "docs/zh/api/SIMD-API/基础API/同步控制/核间同步/CrossCoreSetFlag(ISASI).md"};
// ... flag ids 0-15 ("flagId取值范围说明"; a larger id keeps its low 4 bits, 约束说明), of which SyncAll
// takes 11-14 ("SyncAll硬件同步接口flagId占用范围为[11-14]", 约束说明; SYNC_AIC_FLAG 11 ... SYNC_AIV_ONLY_ALL
// 14 at impl/basic_api/dav_c220/kernel_operator_sync_impl.h:117-120).
inline constexpr Rule kCrossCoreFlagId{"cross-core-flag-id", "docs/zh/api/SIMD-API/基础API/同步控制/核间同步/CrossCoreSetFlag(ISASI).md"};
// Buffers from TPipe::InitBuffer lie inside their level: UB 192 KiB, L1 512 KiB less the 128 B the KFC
// reserves, L0A and L0B 64 KiB, L0C 128 KiB (the page allocates; the sizes are the 2201 constants below).
inline constexpr Rule kLocalCapacity{"local-capacity", "docs/zh/api/SIMD-API/基础API/资源管理/Pipe和Que框架/TPipe/InitBuffer.md"};
// TOTAL_L0A_SIZE / TOTAL_L0B_SIZE, and TOTAL_UB_SIZE, TOTAL_L1_SIZE, TOTAL_L0C_SIZE of __NPU_ARCH__ 2201.
inline constexpr const char* kCapacityL0 = "impl/basic_api/utils/kernel_utils_constants.h:50-51";
inline constexpr const char* kCapacity2201 = "impl/basic_api/utils/kernel_utils_constants.h:130-138";

}  // namespace twin_rules

#endif  // TILEGEN_TWIN_RULES_H
