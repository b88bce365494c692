// tilegen CPU twin: TPosition, GlobalTensor, LocalTensor.
#ifndef TILEGEN_TWIN_TENSOR_H
#define TILEGEN_TWIN_TENSOR_H

#include "gm.h"
#include "numeric.h"
#include "trace.h"

namespace AscendC {

// [P:TPosition], ascendc-api §2.1.
enum class TPosition : uint8_t {
    GM,
    A1,
    A2,
    B1,
    B2,
    C1,
    C2,
    CO1,
    CO2,
    VECIN,
    VECOUT,
    VECCALC,
    LCM = VECCALC,
    SPM,
    SHM = SPM,
    TSCM,
    C2PIPE2GM,
    C2PIPE2LOCAL,
    MAX,
};
using QuePosition = TPosition;

enum AscendCoreType : uint8_t { AIC = 0, AIV = 1 };  // for g_coreType == AscendC::AIC/AIV

}  // namespace AscendC

namespace twin {

using AscendC::TPosition;

// TPosition -> physical buffer on A2 [P:通用说明和约束 表1].
inline Hw PosToHw(TPosition p)
{
    switch (p) {
        case TPosition::GM:
        case TPosition::CO2:
        case TPosition::SPM: return Hw::GM;
        case TPosition::VECIN:
        case TPosition::VECOUT:
        case TPosition::VECCALC: return Hw::UB;
        case TPosition::A1:
        case TPosition::B1:
        case TPosition::C1:
        case TPosition::TSCM: return Hw::L1;
        case TPosition::A2: return Hw::L0A;
        case TPosition::B2: return Hw::L0B;
        case TPosition::CO1: return Hw::L0C;
        case TPosition::C2: return Hw::BT;
        case TPosition::C2PIPE2GM: return Hw::FB;
        default: return Hw::COUNT;
    }
}
inline const char* PosName(TPosition p)
{
    switch (p) {
        case TPosition::GM: return "GM";
        case TPosition::A1: return "A1";
        case TPosition::A2: return "A2";
        case TPosition::B1: return "B1";
        case TPosition::B2: return "B2";
        case TPosition::C1: return "C1";
        case TPosition::C2: return "C2";
        case TPosition::CO1: return "CO1";
        case TPosition::CO2: return "CO2";
        case TPosition::VECIN: return "VECIN";
        case TPosition::VECOUT: return "VECOUT";
        case TPosition::VECCALC: return "VECCALC";
        case TPosition::SPM: return "SPM";
        case TPosition::TSCM: return "TSCM";
        case TPosition::C2PIPE2GM: return "C2PIPE2GM";
        default: return "?";
    }
}
// Which physical buffers exist on which core type (split architecture) [ascend-910b §1.2].
inline bool HwOnCore(Hw h, CoreType t)
{
    if (h == Hw::UB) return t == CoreType::AIV;
    return h == Hw::L1 || h == Hw::L0A || h == Hw::L0B || h == Hw::L0C || h == Hw::BT || h == Hw::FB
               ? t == CoreType::AIC
               : false;
}

// Untyped view of a local operand: used by all checks.
struct LocalRef {
    CoreCtx* core = nullptr;
    Hw hw = Hw::COUNT;
    TPosition pos = TPosition::MAX;
    uint32_t addr = 0;   // byte offset inside the core's physical buffer
    uint32_t bytes = 0;  // remaining length in bytes
    uint64_t gen = 0;     // TPipe layout generation (0: static tensor, not checked)
    uint32_t bufKey = 0;  // queue buffer this view belongs to (with serial != 0)
    uint32_t serial = 0;  // allocation serial of that queue buffer (0: not a queue tensor)
    uint8_t* Ptr() const { return core->pool[static_cast<int>(hw)] + addr; }
};

}  // namespace twin

namespace AscendC {

template <typename T>
class LocalTensor;

// ---------------------------------------------------------------------------------------------
// GlobalTensor<T> [P:SetGlobalBuffer, P:GetValue-1, P:SetValue-3, ascendc-api §2.2].
// operator[] moves the address and keeps GetSize() (as the library does [I:kernel_tensor_impl.h]).
// Every access is bounds-checked against the twin::GmAlloc block the buffer points into.
// Scalar GM access goes through the per-core DCache on NPU; the twin does not model it (README).
// ---------------------------------------------------------------------------------------------
template <typename T>
class GlobalTensor {
public:
    using PrimType = T;
    GlobalTensor() = default;
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize)
    {
        addr_ = buffer;
        size_ = bufferSize;
        blk_ = twin::FindGm(buffer);
    }
    void SetGlobalBuffer(__gm__ T* buffer) { SetGlobalBuffer(buffer, 0); }
    GlobalTensor operator[](uint64_t offset) const
    {
        GlobalTensor r = *this;
        r.addr_ = addr_ + offset;
        return r;
    }
    T GetValue(uint64_t offset) const
    {
        twin::PollAbort();
        twin::GmCheck("GlobalTensor::GetValue", blk_, addr_ + offset, sizeof(T), "P:GetValue-1");
        T v;
        std::memcpy(&v, addr_ + offset, sizeof(T));
        return v;
    }
    template <typename U>
    void SetValue(uint64_t offset, U value) const
    {
        twin::PollAbort();
        twin::GmCheck("GlobalTensor::SetValue", blk_, addr_ + offset, sizeof(T), "P:SetValue-3");
        T v = static_cast<T>(value);
        std::memcpy(addr_ + offset, &v, sizeof(T));
    }
    uint64_t GetSize() const { return size_; }
    __gm__ T* GetPhyAddr() const { return addr_; }
    __gm__ T* GetPhyAddr(uint64_t offset) const { return addr_ + offset; }
    template <typename U>
    GlobalTensor<U> ReinterpretCast() const
    {
        GlobalTensor<U> r;
        r.SetRaw(reinterpret_cast<U*>(addr_), size_ * sizeof(T) / sizeof(U), blk_);
        return r;
    }
    // twin internals
    void SetRaw(T* a, uint64_t s, twin::GmBlock* b)
    {
        addr_ = a;
        size_ = s;
        blk_ = b;
    }
    twin::GmBlock* Block() const { return blk_; }
    void Check(const char* api, uint64_t byteOff, uint64_t bytes, const char* src) const
    {
        twin::GmCheck(api, blk_, reinterpret_cast<const uint8_t*>(addr_) + byteOff, bytes, src);
    }
    uint8_t* Bytes() const { return reinterpret_cast<uint8_t*>(addr_); }

private:
    T* addr_ = nullptr;
    uint64_t size_ = 0;
    twin::GmBlock* blk_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// LocalTensor<T> [P:LocalTensor简介, P:operator, P:GetSize, P:ReinterpretCast, P:LocalTensor构造函数,
// I:impl/basic_api/kernel_tensor_impl.h]: a (core, buffer, byte address, remaining length) view.
// t[off] requires off < length and shrinks the length by off; GetValue/SetValue only on UB, on AIV.
// ---------------------------------------------------------------------------------------------
template <typename T>
class LocalTensor {
public:
    using PrimType = T;
    LocalTensor() = default;
    // Static tensor at a fixed byte address of the current core's buffer [P:LocalTensor构造函数].
    LocalTensor(TPosition pos, uint32_t addr, uint32_t tileSize)
    {
        const char* api = "LocalTensor(pos, addr, tileSize)";
        twin::CoreCtx& c = twin::Cur(api);
        twin::Hw hw = twin::PosToHw(pos);
        if (hw == twin::Hw::COUNT || hw == twin::Hw::GM) twin::Fail(api, "position is not a local buffer", "P:LocalTensor构造函数");
        if (!twin::HwOnCore(hw, c.type))
            twin::FailRule(api, twin_rules::kCoreType,
                           twin::Fmt("%s does not exist on %s", twin::HwName(hw), c.type == twin::CoreType::AIC ? "an AIC" : "an AIV"),
                           "P:LocalTensor构造函数");
        if (addr % 32 != 0) twin::Fail(api, twin::Fmt("address %u is not 32-byte aligned", addr), "P:LocalTensor构造函数");
        uint64_t end = static_cast<uint64_t>(addr) + static_cast<uint64_t>(tileSize) * sizeof(T);
        if (end > twin::HwSize(hw))
            twin::FailRule(api, twin_rules::kLocalCapacity,
                           twin::Fmt("[%u, %llu) exceeds %s size %u", addr, static_cast<unsigned long long>(end),
                                     twin::HwName(hw), twin::HwSize(hw)),
                           twin::CapacityLine(hw));
        ref_.core = &c;
        ref_.hw = hw;
        ref_.pos = pos;
        ref_.addr = addr;
        ref_.bytes = static_cast<uint32_t>(tileSize * sizeof(T));
    }

    LocalTensor operator[](uint32_t offset) const
    {
        Valid("LocalTensor::operator[]");
        uint64_t off = static_cast<uint64_t>(offset) * sizeof(T);
        if (off >= ref_.bytes)
            twin::Fail("LocalTensor::operator[]",
                       twin::Fmt("offset %u elements is not < tensor length %u", offset, GetSize()), "P:operator");
        LocalTensor r = *this;
        r.ref_.addr += static_cast<uint32_t>(off);
        r.ref_.bytes -= static_cast<uint32_t>(off);
        return r;
    }
    uint32_t GetSize() const { return ref_.bytes / sizeof(T); }
    uint32_t GetLength() const { return ref_.bytes; }
    TPosition GetPosition() const { return ref_.pos; }
    T* GetPhyAddr() const
    {
        Valid("LocalTensor::GetPhyAddr");
        return reinterpret_cast<T*>(ref_.Ptr());
    }
    T* GetPhyAddr(uint32_t off) const { return GetPhyAddr() + off; }
    // Scalar access (PIPE_S) only to VECIN/VECCALC/VECOUT [P:LocalTensor简介; ascendc-api §0.6].
    T GetValue(uint32_t index) const
    {
        ScalarCheck("LocalTensor::GetValue", index);
        const uint64_t at = ref_.addr + static_cast<uint64_t>(index) * sizeof(T);
        twin::trace::Rec("S", "GetValue", 1, 0, 0, {}, {twin::trace::Rng{twin::trace::SpaceOf(ref_.hw), at, at + sizeof(T)}});
        T v;
        std::memcpy(&v, ref_.Ptr() + static_cast<uint64_t>(index) * sizeof(T), sizeof(T));
        return v;
    }
    template <typename U>
    void SetValue(uint32_t index, U value) const
    {
        ScalarCheck("LocalTensor::SetValue", index);
        const uint64_t at = ref_.addr + static_cast<uint64_t>(index) * sizeof(T);
        twin::trace::Rec("S", "SetValue", 1, 0, 0, {twin::trace::Rng{twin::trace::SpaceOf(ref_.hw), at, at + sizeof(T)}}, {});
        T v = static_cast<T>(value);
        std::memcpy(ref_.Ptr() + static_cast<uint64_t>(index) * sizeof(T), &v, sizeof(T));
    }
    template <typename U>
    LocalTensor<U> ReinterpretCast() const
    {
        LocalTensor<U> r;
        twin::LocalRef x = ref_;
        x.bytes = ref_.bytes / sizeof(U) * sizeof(U);
        r.SetRef(x);
        return r;
    }
    void SetSize(uint32_t size)
    {
        Valid("LocalTensor::SetSize");
        ref_.bytes = static_cast<uint32_t>(size * sizeof(T));
    }

    // twin internals
    const twin::LocalRef& Ref() const { return ref_; }
    void SetRef(const twin::LocalRef& r) { ref_ = r; }
    // Initialised, owned by this core (queue bookkeeping calls only this).
    void ValidCore(const char* api) const
    {
        twin::CoreCtx& c = twin::Cur(api);
        if (ref_.core == nullptr) twin::Fail(api, "LocalTensor is not initialised (no AllocTensor/Get)", "P:LocalTensor简介");
        if (ref_.core != &c)
            twin::Fail(api, twin::Fmt("LocalTensor belongs to %s", twin::CoreName(ref_.core).c_str()), "P:LocalTensor简介");
    }
    // ... and still alive: its TPipe layout was not reset/destroyed and its queue buffer was not freed.
    void Valid(const char* api) const
    {
        ValidCore(api);
        twin::CoreCtx& c = *ref_.core;
        if (ref_.gen != 0 && ref_.gen != c.pipeGen)
            twin::Fail(api, "LocalTensor comes from a TPipe layout that was reset or destroyed", "P:Reset, P:Destroy");
        if (ref_.serial != 0) {
            auto it = c.bufSerial.find(ref_.bufKey);
            if (it == c.bufSerial.end() || it->second != ref_.serial)
                twin::Fail(api, "use of a queue tensor after FreeTensor (its buffer was freed or re-allocated)",
                           "P:FreeTensor, P:AllocTensor");
        }
    }

private:
    void ScalarCheck(const char* api, uint32_t index) const
    {
        Valid(api);
        if (ref_.hw != twin::Hw::UB)
            twin::Fail(api, twin::Fmt("scalar access to %s (%s) is not possible; only VECIN/VECCALC/VECOUT",
                                      twin::HwName(ref_.hw), twin::PosName(ref_.pos)),
                       "P:LocalTensor简介");
        twin::RequireAiv(api, "I:impl/basic_api/kernel_tensor_impl.h");
        if (static_cast<uint64_t>(index) * sizeof(T) + sizeof(T) > ref_.bytes)
            twin::Fail(api, twin::Fmt("index %u out of tensor length %u", index, GetSize()), "P:LocalTensor简介");
    }
    twin::LocalRef ref_;
};

}  // namespace AscendC

namespace twin {

// Common operand checks: initialised, on this core, expected buffer, aligned start, byte range in length.
template <typename T>
inline const LocalRef& Operand(const char* api, const AscendC::LocalTensor<T>& t, const char* what, const char* src)
{
    t.Valid(api);
    (void)what;
    (void)src;
    return t.Ref();
}
inline void CheckHw(const char* api, const LocalRef& r, Hw want, const char* what, const char* src)
{
    if (r.hw != want)
        Fail(api, Fmt("%s must be in %s, got %s (%s)", what, HwName(want), HwName(r.hw), PosName(r.pos)), src);
}
inline void CheckAlign(const char* api, const LocalRef& r, uint32_t align, const char* what, const char* src)
{
    if (r.addr % align != 0)
        Fail(api, Fmt("%s start %s+%u is not %u-byte aligned", what, HwName(r.hw), r.addr, align), src);
}
inline void CheckRange(const char* api, const LocalRef& r, uint64_t begin, uint64_t end, const char* what,
                       const char* src)
{
    if (end > r.bytes || begin > end)
        Fail(api, Fmt("%s touches bytes [%llu, %llu) but the tensor holds only %u bytes (tensor size overflow)", what,
                      static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end), r.bytes),
             src);
}

}  // namespace twin

#endif  // TILEGEN_TWIN_TENSOR_H
