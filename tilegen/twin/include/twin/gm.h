// tilegen CPU twin: global memory. Every GM buffer a kernel touches must come from twin::GmAlloc
// (or twin::GmRegister); every access through a GlobalTensor is bounds-checked against it.
// The official CPU twin does not check GM bounds; msSanitizer does on NPU [ascendc-api §0.4, §8].
#ifndef TILEGEN_TWIN_GM_H
#define TILEGEN_TWIN_GM_H

#include "base.h"

namespace twin {

struct GmBlock {
    uint8_t* user = nullptr;  // first byte handed out
    size_t bytes = 0;         // user size
    uint8_t* raw = nullptr;   // allocation incl. guards (null for registered host memory)
    size_t guard = 0;
    std::mutex mu;            // serialises atomic read-modify-write stores into this block
    std::string tag;
};

constexpr size_t kGmGuard = 4096;
constexpr uint8_t kGuardByte = 0xA5;
constexpr uint8_t kPoisonByte = 0xFF;  // 0xFFFF / 0xFFFFFFFF are NaN in fp16, bf16 and fp32

namespace detail {
struct GmRegistry {
    std::mutex mu;
    std::map<uintptr_t, GmBlock*> blocks;  // keyed by user start
};
inline GmRegistry& Gm()
{
    static GmRegistry r;
    return r;
}
inline GmBlock* FindGmLocked(const void* p)
{
    auto& reg = Gm();
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = reg.blocks.upper_bound(a);
    if (it == reg.blocks.begin()) return nullptr;
    --it;
    GmBlock* b = it->second;
    if (a >= reinterpret_cast<uintptr_t>(b->user) && a <= reinterpret_cast<uintptr_t>(b->user) + b->bytes) return b;
    return nullptr;
}
inline bool GuardsIntact(const GmBlock* b)
{
    if (b->raw == nullptr) return true;
    for (size_t i = 0; i < b->guard; ++i)
        if (b->raw[i] != kGuardByte) return false;
    const uint8_t* tail = b->user + b->bytes;
    size_t tailLen = b->guard + (RoundUp(b->bytes, 64) - b->bytes);
    for (size_t i = 0; i < tailLen; ++i)
        if (tail[i] != kGuardByte) return false;
    return true;
}
}  // namespace detail

// Find the GM block containing p (p may be one past the end). Null if none.
inline GmBlock* FindGm(const void* p)
{
    std::lock_guard<std::mutex> lk(detail::Gm().mu);
    return detail::FindGmLocked(p);
}

// Allocate GM for a kernel: user area 4 KiB aligned, NaN-poisoned (0xFF), between guard zones
// that are verified on GmFree and after every launch. Analogue of AscendC::GmAlloc [P:GmAlloc].
inline void* GmAlloc(size_t bytes, const char* tag = "")
{
    size_t body = RoundUp(bytes == 0 ? 1 : bytes, 64);
    size_t total = kGmGuard + body + kGmGuard;
    uint8_t* raw = static_cast<uint8_t*>(std::aligned_alloc(4096, RoundUp(total, 4096)));
    if (raw == nullptr) Fail("GmAlloc", Fmt("out of host memory for %zu bytes", bytes), "twin");
    std::memset(raw, kGuardByte, total);
    auto* b = new GmBlock();
    b->raw = raw;
    b->guard = kGmGuard;
    b->user = raw + kGmGuard;
    b->bytes = bytes;
    b->tag = tag;
    std::memset(b->user, kPoisonByte, bytes);
    std::lock_guard<std::mutex> lk(detail::Gm().mu);
    detail::Gm().blocks[reinterpret_cast<uintptr_t>(b->user)] = b;
    return b->user;
}

// Register existing host memory (e.g. a NumPy buffer) as GM without guards.
inline void GmRegister(void* p, size_t bytes, const char* tag = "")
{
    auto* b = new GmBlock();
    b->user = static_cast<uint8_t*>(p);
    b->bytes = bytes;
    b->tag = tag;
    std::lock_guard<std::mutex> lk(detail::Gm().mu);
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    for (auto& kv : detail::Gm().blocks) {
        GmBlock* o = kv.second;
        uintptr_t s = reinterpret_cast<uintptr_t>(o->user);
        if (a < s + o->bytes && s < a + bytes) Fail("GmRegister", "range overlaps an existing GM block", "twin");
    }
    detail::Gm().blocks[a] = b;
}

inline void GmFree(void* p)
{
    GmBlock* b = nullptr;
    {
        std::lock_guard<std::mutex> lk(detail::Gm().mu);
        auto it = detail::Gm().blocks.find(reinterpret_cast<uintptr_t>(p));
        if (it == detail::Gm().blocks.end())
            Fail("GmFree", Fmt("pointer %p was not returned by twin::GmAlloc/GmRegister", p), "P:GmFree");
        b = it->second;
        detail::Gm().blocks.erase(it);
    }
    if (!detail::GuardsIntact(b))
        Fail("GmFree", Fmt("guard zone of GM block %p (%zu bytes%s%s) was overwritten: out-of-bounds write",
                           p, b->bytes, b->tag.empty() ? "" : ", ", b->tag.c_str()),
             "twin");
    if (b->raw != nullptr) std::free(b->raw);
    delete b;
}
inline void GmUnregister(void* p) { GmFree(p); }

inline void CheckAllGuards(const char* when)
{
    std::lock_guard<std::mutex> lk(detail::Gm().mu);
    for (auto& kv : detail::Gm().blocks)
        if (!detail::GuardsIntact(kv.second))
            Fail(when, Fmt("guard zone of GM block %p (%zu bytes) was overwritten: out-of-bounds write",
                           static_cast<void*>(kv.second->user), kv.second->bytes),
                 "twin");
}

// Bounds check of a GM byte range against its block.
inline void GmCheck(const char* api, const GmBlock* b, const void* p, uint64_t bytes, const char* src)
{
    if (b == nullptr)
        Fail(api, Fmt("GlobalTensor at %p is not inside any twin::GmAlloc block (SetGlobalBuffer with a foreign "
                      "or null pointer)", p),
             src);
    uintptr_t a = reinterpret_cast<uintptr_t>(p), s = reinterpret_cast<uintptr_t>(b->user);
    if (a < s || a + bytes > s + b->bytes)
        Fail(api, Fmt("GM access out of bounds: bytes [%lld, %lld) of a %zu-byte GM block%s%s",
                      static_cast<long long>(a - s), static_cast<long long>(a - s + bytes), b->bytes,
                      b->tag.empty() ? "" : " ", b->tag.c_str()),
             src);
}

}  // namespace twin

#endif  // TILEGEN_TWIN_GM_H
