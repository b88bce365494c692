// tilegen CPU twin: DataCopy (count, DataCopyParams, Nd2NzParams) and DataCopyPad.
#ifndef TILEGEN_TWIN_DATACOPY_H
#define TILEGEN_TWIN_DATACOPY_H

#include "pipe.h"

namespace AscendC {

// [I:include/basic_api/kernel_struct_data_copy.h, P:基础数据搬运] units: 32-byte blocks on both sides.
struct DataCopyParams {
    DataCopyParams() {}
    DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn, const uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn)
    {}
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;
    union {
        uint16_t srcGap = 0;
        uint16_t srcStride;
    };
    union {
        uint16_t dstGap = 0;
        uint16_t dstStride;
    };
};

// [P:DataCopyPad(ISASI)] blockLen in bytes; GM-side stride in bytes, UB-side stride in 32 B blocks.
struct DataCopyExtParams {
    DataCopyExtParams() {}
    DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn, const uint32_t dstStrideIn,
                      const uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn)
    {}
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    DataCopyPadExtParams() {}
    DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue, T padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue)
    {}
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue = T(0);
};

// Legacy pad parameters (paddingValue converted to T by value).
struct DataCopyPadParams {
    DataCopyPadParams() {}
    DataCopyPadParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                      const uint64_t padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue)
    {}
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    uint64_t paddingValue = 0;
};

enum class PaddingMode : uint8_t { Normal = 0, Compact };

// [P:随路转换ND2NZ搬运, ascendc-api §3.2]
struct Nd2NzParams {
    Nd2NzParams() {}
    Nd2NzParams(const uint16_t ndNumIn, const uint16_t nValueIn, const uint16_t dValueIn,
                const uint16_t srcNdMatrixStrideIn, const uint16_t srcDValueIn, const uint16_t dstNzC0StrideIn,
                const uint16_t dstNzNStrideIn, const uint16_t dstNzMatrixStrideIn)
        : ndNum(ndNumIn),
          nValue(nValueIn),
          dValue(dValueIn),
          srcNdMatrixStride(srcNdMatrixStrideIn),
          srcDValue(srcDValueIn),
          dstNzC0Stride(dstNzC0StrideIn),
          dstNzNStride(dstNzNStrideIn),
          dstNzMatrixStride(dstNzMatrixStrideIn)
    {}
    uint16_t ndNum = 0;
    uint16_t nValue = 0;
    uint16_t dValue = 0;
    uint16_t srcNdMatrixStride = 0;
    uint16_t srcDValue = 0;
    uint16_t dstNzC0Stride = 0;
    uint16_t dstNzNStride = 0;
    uint16_t dstNzMatrixStride = 0;
};

}  // namespace AscendC

namespace twin {
namespace dc {

constexpr const char* kSrcDC = "P:基础数据搬运, I:kernel_operator_data_copy_intf_impl.h";

// GM -> local path check [P:基础数据搬运]: GM->UB on AIV, GM->L1 (A1/B1/C1/TSCM) on AIC.
inline void CheckGmToLocal(const char* api, const LocalRef& d, bool allowL1)
{
    if (d.hw == Hw::UB) RequireAiv(api, kSrcDC);
    else if (d.hw == Hw::L1 && allowL1) RequireAic(api, kSrcDC);
    else
        Fail(api, Fmt("GM -> %s (%s) is not a data path on A2%s", HwName(d.hw), PosName(d.pos),
                      allowL1 ? "" : " for this API (GM->UB only)"),
             kSrcDC);
}
inline void CheckLocalToGm(const char* api, const LocalRef& s)
{
    if (s.hw == Hw::UB) RequireAiv(api, kSrcDC);
    else if (s.hw == Hw::L1) RequireAic(api, kSrcDC);
    else Fail(api, Fmt("%s (%s) -> GM is not a DataCopy path on A2 (use Fixpipe for CO1)", HwName(s.hw), PosName(s.pos)), kSrcDC);
}
template <typename T>
inline void CheckGmAlign(const char* api, const AscendC::GlobalTensor<T>& g)
{
    if (reinterpret_cast<uintptr_t>(g.GetPhyAddr()) % sizeof(T) != 0)
        Fail(api, Fmt("GM address %p is not aligned to sizeof(T)=%zu", static_cast<void*>(g.GetPhyAddr()), sizeof(T)),
             "ascendc-api §0.3");
}
inline void CheckParams(const char* api, const AscendC::DataCopyParams& p)
{
    if (p.blockCount < 1 || p.blockCount > 4095)
        Fail(api, Fmt("blockCount %u not in [1, 4095]", p.blockCount), kSrcDC);
    if (p.blockLen < 1) Fail(api, Fmt("blockLen %u not in [1, 65535] (32-byte blocks)", p.blockLen), kSrcDC);
}
inline AscendC::DataCopyParams CountToParams(const char* api, uint64_t bytes)
{
    if (bytes == 0) Fail(api, "count is 0 (blockLen must be >= 1)", kSrcDC);
    if (bytes % 32 != 0)
        Fail(api,
             Fmt("count*sizeof(T) = %llu bytes is not a multiple of 32 (NPU silently floors it; use DataCopyPad)",
                 static_cast<unsigned long long>(bytes)),
             kSrcDC);
    if (bytes / 32 > 65535) Fail(api, "count*sizeof(T)/32 exceeds blockLen 65535", kSrcDC);
    AscendC::DataCopyParams p;
    p.blockCount = 1;
    p.blockLen = static_cast<uint16_t>(bytes / 32);
    return p;
}

template <typename T>
inline void GmToLocal(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src,
                      const AscendC::DataCopyParams& p)
{
    dst.Valid(api);
    const LocalRef& d = dst.Ref();
    CheckGmToLocal(api, d, true);
    CheckAlign(api, d, 32, "dst", kSrcDC);
    CheckGmAlign(api, src);
    CheckParams(api, p);
    uint64_t bl = p.blockLen * 32ull;
    uint64_t dlast = (p.blockCount - 1ull) * (p.blockLen + p.dstGap) * 32ull + bl;
    CheckRange(api, d, 0, dlast, "dst", kSrcDC);
    trace::Rec("MTE2", "DataCopy", p.blockCount * bl, p.blockCount, trace::GmLevel(src.Bytes()), {trace::Loc(dst, dlast)},
               {trace::Gm(src.Bytes(), (p.blockCount - 1ull) * (p.blockLen + p.srcGap) * 32ull + bl)});
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        uint64_t so = b * (p.blockLen + static_cast<uint64_t>(p.srcGap)) * 32ull;
        uint64_t dof = b * (p.blockLen + static_cast<uint64_t>(p.dstGap)) * 32ull;
        src.Check(api, so, bl, kSrcDC);
        std::memcpy(d.Ptr() + dof, src.Bytes() + so, bl);
    }
}

template <typename T>
inline void LocalToGm(const char* api, const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                      const AscendC::DataCopyParams& p)
{
    src.Valid(api);
    const LocalRef& s = src.Ref();
    CheckLocalToGm(api, s);
    CheckAlign(api, s, 32, "src", kSrcDC);
    CheckGmAlign(api, dst);
    CheckParams(api, p);
    uint64_t bl = p.blockLen * 32ull;
    uint64_t slast = (p.blockCount - 1ull) * (p.blockLen + p.srcGap) * 32ull + bl;
    CheckRange(api, s, 0, slast, "src", kSrcDC);
    trace::Rec("MTE3", "DataCopy", p.blockCount * bl, p.blockCount, trace::GmLevel(dst.Bytes()),
               {trace::Gm(dst.Bytes(), (p.blockCount - 1ull) * (p.blockLen + p.dstGap) * 32ull + bl)}, {trace::Loc(src, slast)});
    CoreCtx& c = *t_core;
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        uint64_t so = b * (p.blockLen + static_cast<uint64_t>(p.srcGap)) * 32ull;
        uint64_t dof = b * (p.blockLen + static_cast<uint64_t>(p.dstGap)) * 32ull;
        dst.Check(api, dof, bl, kSrcDC);
        GmStore<T>(api, c, dst.Block(), dst.Bytes() + dof, reinterpret_cast<const T*>(s.Ptr() + so), bl / sizeof(T),
                   kSrcDC);
    }
}

template <typename T>
inline void LocalToLocal(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                         const AscendC::DataCopyParams& p)
{
    dst.Valid(api);
    src.Valid(api);
    const LocalRef& d = dst.Ref();
    const LocalRef& s = src.Ref();
    if (d.hw != Hw::UB || s.hw != Hw::UB)
        Fail(api, Fmt("%s -> %s is not a local DataCopy path emulated on A2 (UB -> UB only)", HwName(s.hw), HwName(d.hw)),
             kSrcDC);
    RequireAiv(api, kSrcDC);
    CheckAlign(api, d, 32, "dst", kSrcDC);
    CheckAlign(api, s, 32, "src", kSrcDC);
    CheckParams(api, p);
    uint64_t bl = p.blockLen * 32ull;
    CheckRange(api, d, 0, (p.blockCount - 1ull) * (p.blockLen + p.dstGap) * 32ull + bl, "dst", kSrcDC);
    CheckRange(api, s, 0, (p.blockCount - 1ull) * (p.blockLen + p.srcGap) * 32ull + bl, "src", kSrcDC);
    trace::Rec("V", "DataCopyUB", p.blockCount * bl / 256 + 1, p.blockCount, 0,
               {trace::Loc(dst, (p.blockCount - 1ull) * (p.blockLen + p.dstGap) * 32ull + bl)},
               {trace::Loc(src, (p.blockCount - 1ull) * (p.blockLen + p.srcGap) * 32ull + bl)});
    for (uint32_t b = 0; b < p.blockCount; ++b)
        std::memmove(d.Ptr() + b * (p.blockLen + static_cast<uint64_t>(p.dstGap)) * 32ull,
                     s.Ptr() + b * (p.blockLen + static_cast<uint64_t>(p.srcGap)) * 32ull, bl);
}

template <typename T>
constexpr bool Nd2NzType()
{
    constexpr DType d = DTypeOf<T>();
    return d == DType::I8 || d == DType::U8 || d == DType::I16 || d == DType::U16 || d == DType::I32 ||
           d == DType::U32 || d == DType::F16 || d == DType::BF16 || d == DType::F32;
}

// Fill helpers for DataCopyPad.
template <typename T>
inline void FillElems(uint8_t* p, uint64_t nElems, T v)
{
    for (uint64_t i = 0; i < nElems; ++i) std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

template <typename T>
inline void PadGmToUb(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src,
                      uint16_t blockCount, uint32_t blockLen, uint64_t srcStride, uint32_t dstStride, bool isPad,
                      uint8_t left, uint8_t right, T padValue)
{
    constexpr const char* S = "P:DataCopyPad(ISASI)";
    dst.Valid(api);
    const LocalRef& d = dst.Ref();
    if (d.hw == Hw::L1) Fail(api, "DataCopyPad GM -> L1 is not supported on A2", S);
    CheckGmToLocal(api, d, false);
    CheckAlign(api, d, 32, "dst", S);
    if (blockCount == 0 || blockLen == 0) return;  // documented no-op
    if (blockCount > 4095) Fail(api, Fmt("blockCount %u not in [1, 4095]", blockCount), S);
    if (blockLen > 2097151) Fail(api, Fmt("blockLen %u bytes not in [1, 2097151]", blockLen), S);
    if (blockLen % sizeof(T) != 0)
        Fail(api, Fmt("blockLen %u bytes is not a multiple of sizeof(T)=%zu", blockLen, sizeof(T)), S);
    if (left * sizeof(T) > 32 || right * sizeof(T) > 32)
        Fail(api, Fmt("leftPadding %u / rightPadding %u elements exceed 32 bytes", left, right), S);
    uint64_t lb = left * sizeof(T), rb = right * sizeof(T);
    uint64_t raw = lb + blockLen + rb;
    uint64_t foot = RoundUp(raw, 32);
    uint64_t dlast = (blockCount - 1ull) * (foot + dstStride * 32ull) + foot;
    CheckRange(api, d, 0, dlast, "dst", S);
    trace::Rec("MTE2", "DataCopyPad", static_cast<int64_t>(blockCount) * blockLen, blockCount, trace::GmLevel(src.Bytes()),
               {trace::Loc(dst, dlast)}, {trace::Gm(src.Bytes(), (blockCount - 1ull) * (blockLen + srcStride) + blockLen)});
    bool aligned = (raw % 32) == 0;
    for (uint32_t b = 0; b < blockCount; ++b) {
        uint64_t so = b * (blockLen + srcStride);
        uint64_t dof = b * (foot + dstStride * 32ull);
        src.Check(api, so, blockLen, S);
        uint8_t* out = d.Ptr() + dof;
        std::memcpy(out + lb, src.Bytes() + so, blockLen);
        uint64_t dummy = foot - raw;
        if (!aligned && left == 0 && right == 0) {
            // dummy = copies of the burst's first element
            T first;
            std::memcpy(&first, out, sizeof(T));
            FillElems<T>(out + blockLen, dummy / sizeof(T), first);
        } else if (isPad) {
            FillElems<T>(out, left, padValue);
            FillElems<T>(out + lb + blockLen, (rb + dummy) / sizeof(T), padValue);
        } else {
            // "random" per the doc: poison
            std::memset(out, kPoisonByte, lb);
            std::memset(out + lb + blockLen, kPoisonByte, rb + dummy);
        }
    }
}

template <typename T>
inline void PadUbToGm(const char* api, const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                      uint16_t blockCount, uint32_t blockLen, uint32_t srcStride, uint64_t dstStride)
{
    constexpr const char* S = "P:DataCopyPad(ISASI)";
    src.Valid(api);
    const LocalRef& s = src.Ref();
    if (s.hw != Hw::UB) Fail(api, Fmt("DataCopyPad source must be UB, got %s (%s)", HwName(s.hw), PosName(s.pos)), S);
    RequireAiv(api, S);
    CheckAlign(api, s, 32, "src", S);
    if (blockCount == 0 || blockLen == 0) return;
    if (blockCount > 4095) Fail(api, Fmt("blockCount %u not in [1, 4095]", blockCount), S);
    if (blockLen > 2097151) Fail(api, Fmt("blockLen %u bytes not in [1, 2097151]", blockLen), S);
    if (blockLen % sizeof(T) != 0)
        Fail(api, Fmt("blockLen %u bytes is not a multiple of sizeof(T)=%zu", blockLen, sizeof(T)), S);
    uint64_t foot = RoundUp(blockLen, 32);
    CheckRange(api, s, 0, (blockCount - 1ull) * (foot + srcStride * 32ull) + blockLen, "src", S);
    trace::Rec("MTE3", "DataCopyPad", static_cast<int64_t>(blockCount) * blockLen, blockCount, trace::GmLevel(dst.Bytes()),
               {trace::Gm(dst.Bytes(), (blockCount - 1ull) * (blockLen + dstStride) + blockLen)},
               {trace::Loc(src, (blockCount - 1ull) * (foot + srcStride * 32ull) + blockLen)});
    CoreCtx& c = *t_core;
    for (uint32_t b = 0; b < blockCount; ++b) {
        uint64_t so = b * (foot + srcStride * 32ull);
        uint64_t dof = b * (blockLen + dstStride);
        dst.Check(api, dof, blockLen, S);
        GmStore<T>(api, c, dst.Block(), dst.Bytes() + dof, reinterpret_cast<const T*>(s.Ptr() + so), blockLen / sizeof(T), S);
    }
}

}  // namespace dc
}  // namespace twin

namespace AscendC {

// ---- DataCopy [P:基础数据搬运, P:DataCopy简介, ascendc-api §3.1, §0.5] ----
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& repeatParams)
{
    twin::dc::GmToLocal("DataCopy", dst, src, repeatParams);
}
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count)
{
    twin::dc::GmToLocal("DataCopy", dst, src, twin::dc::CountToParams("DataCopy", static_cast<uint64_t>(count) * sizeof(T)));
}
template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& repeatParams)
{
    twin::dc::LocalToGm("DataCopy", dst, src, repeatParams);
}
template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count)
{
    twin::dc::LocalToGm("DataCopy", dst, src, twin::dc::CountToParams("DataCopy", static_cast<uint64_t>(count) * sizeof(T)));
}
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& repeatParams)
{
    twin::dc::LocalToLocal("DataCopy", dst, src, repeatParams);
}
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count)
{
    twin::dc::LocalToLocal("DataCopy", dst, src, twin::dc::CountToParams("DataCopy", static_cast<uint64_t>(count) * sizeof(T)));
}

// ---- DataCopy with ND -> NZ [P:随路转换ND2NZ搬运, ascendc-api §3.2] ----
// dst[i*dstNzMatrixStride + (c/C0)*dstNzC0Stride*C0 + r*dstNzNStride*C0 + c%C0] =
//     c < dValue ? src[i*srcNdMatrixStride + r*srcDValue + c] : 0, for c < roundUp(dValue, C0), C0 = 32/sizeof(T).
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p)
{
    const char* api = "DataCopy(Nd2Nz)";
    constexpr const char* S = "P:随路转换ND2NZ搬运";
    static_assert(twin::dc::Nd2NzType<T>(), "twin: Nd2Nz supports int8/uint8/int16/uint16/int32/uint32/half/bf16/float");
    dst.Valid(api);
    const twin::LocalRef& d = dst.Ref();
    twin::dc::CheckGmToLocal(api, d, true);
    twin::CheckAlign(api, d, 32, "dst", S);
    twin::dc::CheckGmAlign(api, src);
    if (p.ndNum > 4095) twin::Fail(api, twin::Fmt("ndNum %u not in [0, 4095]", p.ndNum), S);
    if (p.nValue > 16384) twin::Fail(api, twin::Fmt("nValue %u not in [0, 16384]", p.nValue), S);
    if (p.srcDValue < 1) twin::Fail(api, "srcDValue must be in [1, 65535]", S);
    if (p.dstNzC0Stride < 1 || p.dstNzC0Stride > 16384)
        twin::Fail(api, twin::Fmt("dstNzC0Stride %u not in [1, 16384] (32-byte blocks)", p.dstNzC0Stride), S);
    if (p.dstNzNStride < 1 || p.dstNzNStride > 16384)
        twin::Fail(api, twin::Fmt("dstNzNStride %u not in [1, 16384] (32-byte blocks)", p.dstNzNStride), S);
    if (p.ndNum > 1 && p.dstNzMatrixStride < 1) twin::Fail(api, "dstNzMatrixStride must be in [1, 65535]", S);
    if (p.ndNum == 0 || p.nValue == 0 || p.dValue == 0) return;
    constexpr uint64_t C0 = 32 / sizeof(T);
    uint64_t dPad = twin::RoundUp(p.dValue, C0);
    uint64_t maxIdx = 0;
    maxIdx = (p.ndNum - 1ull) * p.dstNzMatrixStride + ((dPad - 1) / C0) * p.dstNzC0Stride * C0 +
             (p.nValue - 1ull) * p.dstNzNStride * C0 + (C0 - 1);
    twin::CheckRange(api, d, 0, (maxIdx + 1) * sizeof(T), "dst", S);
    {
        const uint64_t srcLast = ((p.ndNum - 1ull) * p.srcNdMatrixStride + (p.nValue - 1ull) * p.srcDValue + p.dValue) * sizeof(T);
        twin::trace::Rec("MTE2", "DataCopyNd2Nz", static_cast<int64_t>(p.ndNum) * p.nValue * p.dValue * sizeof(T),
                         static_cast<int64_t>(p.ndNum) * p.nValue, twin::trace::GmLevel(src.GetPhyAddr()),
                         {twin::trace::Loc(dst, (maxIdx + 1) * sizeof(T))}, {twin::trace::Gm(src.GetPhyAddr(), srcLast)});
    }
    T* out = reinterpret_cast<T*>(d.Ptr());
    const T* in = src.GetPhyAddr();
    for (uint64_t i = 0; i < p.ndNum; ++i)
        for (uint64_t r = 0; r < p.nValue; ++r) {
            uint64_t srow = i * p.srcNdMatrixStride + r * p.srcDValue;
            src.Check(api, srow * sizeof(T), p.dValue * sizeof(T), S);
            for (uint64_t c = 0; c < dPad; ++c) {
                uint64_t di = i * p.dstNzMatrixStride + (c / C0) * p.dstNzC0Stride * C0 + r * p.dstNzNStride * C0 + c % C0;
                out[di] = c < p.dValue ? in[srow + c] : T(0);
            }
        }
}

// ---- DataCopyPad [P:DataCopyPad(ISASI), ascendc-api §3.3] ----
template <typename T, PaddingMode mode = PaddingMode::Normal>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                        const DataCopyPadExtParams<T>& pad)
{
    static_assert(mode == PaddingMode::Normal, "twin: PaddingMode::Compact is not available on A2");
    twin::dc::PadGmToUb<T>("DataCopyPad", dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride, pad.isPad,
                           pad.leftPadding, pad.rightPadding, pad.paddingValue);
}
template <typename T, PaddingMode mode = PaddingMode::Normal>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p)
{
    static_assert(mode == PaddingMode::Normal, "twin: PaddingMode::Compact is not available on A2");
    twin::dc::PadUbToGm<T>("DataCopyPad", dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}
// Legacy overloads: DataCopyParams.blockLen is in bytes here, strides GM bytes / UB blocks.
template <typename T, PaddingMode mode = PaddingMode::Normal>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
                        const DataCopyPadParams& pad)
{
    static_assert(mode == PaddingMode::Normal, "twin: PaddingMode::Compact is not available on A2");
    twin::dc::PadGmToUb<T>("DataCopyPad", dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride, pad.isPad,
                           pad.leftPadding, pad.rightPadding, static_cast<T>(static_cast<float>(pad.paddingValue)));
}
template <typename T, PaddingMode mode = PaddingMode::Normal>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p)
{
    static_assert(mode == PaddingMode::Normal, "twin: PaddingMode::Compact is not available on A2");
    twin::dc::PadUbToGm<T>("DataCopyPad", dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}

}  // namespace AscendC

#endif  // TILEGEN_TWIN_DATACOPY_H
