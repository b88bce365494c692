// Host-side definitions that asc-devkit's tiling sources (impl/adv_api/tiling/matmul/*.cpp,
// impl/adv_api/tiling/activation/softmax_tiling.cpp) link against and that CANN ships in closed libraries:
// platform_ascendc::PlatformAscendC's queries (declared in include/utils/tiling/platform/platform_ascendc.h)
// and AscendC::logInstance (declared in impl/adv_api/detail/host_log.h).
//
// The platform answers with the figures of the chip the harness names through environment variables
// (tilegen/harness/ascend_peer.py fills them from the target file, targets/ascend910b2.toml):
// PEER_AIC, PEER_AIV, PEER_UB, PEER_L1, PEER_L0A, PEER_L0B, PEER_L0C, PEER_L2 (bytes). A missing one is an
// error (exit 2), never a silent default.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "adv_api/matmul/matmul_tiling.h"
#include "detail/host_log.h"
#include "peer_platform.h"

uint64_t PeerPlatformFigure(const char* name)
{
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') {
        std::fprintf(stderr, "peer tiling: the platform figure %s is not set\n", name);
        std::exit(2);
    }
    return std::strtoull(v, nullptr, 10);
}

namespace {
int32_t CheckLevel(int32_t, int32_t level) { return level >= DLOG_WARN ? 1 : 0; }
void Record(int32_t, int32_t, const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::fputs("peer tiling (asc-devkit log): ", stderr);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
}
}  // namespace

namespace platform_ascendc {
uint32_t PlatformAscendC::GetCoreNum() const { return static_cast<uint32_t>(PeerPlatformFigure("PEER_AIC")); }
uint32_t PlatformAscendC::GetCoreNumAic() const { return static_cast<uint32_t>(PeerPlatformFigure("PEER_AIC")); }
uint32_t PlatformAscendC::GetCoreNumAiv() const { return static_cast<uint32_t>(PeerPlatformFigure("PEER_AIV")); }
uint32_t PlatformAscendC::GetCoreNumVector() const { return 0; }
void PlatformAscendC::GetCoreMemSize(const CoreMemType& memType, uint64_t& size) const
{
    switch (memType) {
        case CoreMemType::L0_A: size = PeerPlatformFigure("PEER_L0A"); break;
        case CoreMemType::L0_B: size = PeerPlatformFigure("PEER_L0B"); break;
        case CoreMemType::L0_C: size = PeerPlatformFigure("PEER_L0C"); break;
        case CoreMemType::L1: size = PeerPlatformFigure("PEER_L1"); break;
        case CoreMemType::L2: size = PeerPlatformFigure("PEER_L2"); break;
        case CoreMemType::UB: size = PeerPlatformFigure("PEER_UB"); break;
        default: size = 0; break;
    }
}
SocVersion PlatformAscendC::GetSocVersion() const { return SocVersion::ASCEND910B; }
NpuArch PlatformAscendC::GetCurNpuArch() const { return NpuArch::DAV_2201; }

PlatformAscendC* PlatformAscendCManager::platformInfo = nullptr;
std::mutex PlatformAscendCManager::platformInitMtx;
PlatformAscendC* PlatformAscendCManager::PlatformAscendCManagerInit(const char*)
{
    static PlatformAscendC platform(nullptr);
    platformInfo = &platform;
    return platformInfo;
}
}  // namespace platform_ascendc

namespace AscendC {
namespace {
// LoggingSingleton's constructor is private (host_log.h) and its two public members are function pointers:
// the object is storage with those two set.
alignas(UnifiedLog::LoggingSingleton) unsigned char g_log[sizeof(UnifiedLog::LoggingSingleton)];
UnifiedLog::LoggingSingleton* MakeLog()
{
    auto* log = reinterpret_cast<UnifiedLog::LoggingSingleton*>(g_log);
    log->CheckLogLevel = CheckLevel;
    log->DlogRecord = Record;
    return log;
}
}  // namespace
UnifiedLog::LoggingSingleton* logInstance = MakeLog();
}  // namespace AscendC
