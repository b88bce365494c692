// tilegen CPU twin: TPipe, TQue (TQueBind), TBuf — per-core buffer pools and the queue state machine.
#ifndef TILEGEN_TWIN_PIPE_H
#define TILEGEN_TWIN_PIPE_H

#include "sync.h"

namespace twin {

// Poison new local allocations with 0xFF (NaN in fp16/bf16/fp32). AllocTensor re-poisons the buffer
// it hands out ("contents undefined" [P:AllocTensor]) unless TWIN_POISON_ALLOC=0.
inline bool PoisonOnAlloc()
{
    static int v = [] {
        const char* e = std::getenv("TWIN_POISON_ALLOC");
        return (e != nullptr && e[0] == '0') ? 0 : 1;
    }();
    return v == 1;
}

constexpr uint32_t kL1PipeLimit = 524288 - 128;  // TOTAL_L1_SIZE on 2201: top 128 B reserved [ascendc-api §0.1]
constexpr uint32_t kUbScratch = 184 * 1024;      // TMP_UB_OFFSET on 2201 [ascendc-api §0.2]
constexpr int kMaxQueBufsPerPos = 8;             // [P:TQue简介] 8 event IDs per TPosition on A2
constexpr int kMaxBufsPerPipe = 64;              // [I:impl/basic_api/kernel_tpipe_impl.h]

enum class BufState : uint8_t { FREE = 0, OCCUPIED, ENQUE, DEQUE };
inline const char* BufStateName(BufState s)
{
    static const char* n[] = {"FREE", "OCCUPIED", "ENQUE", "DEQUE"};
    return n[static_cast<int>(s)];
}

struct QueImpl {
    CoreCtx* core = nullptr;
    uint64_t gen = 0;
    Hw hw = Hw::COUNT;
    AscendC::TPosition pos = AscendC::TPosition::MAX;
    int depth = 1;
    uint32_t base = 0, len = 0;
    int num = 0;
    std::vector<BufState> state;
    int cursor = 0;
    std::deque<int> fifo;
    int used = 0;
    // per buffer: the pipe clocks at its last EnQue and FreeTensor (order.h: a hand-over orders every
    // pipe's earlier work before the DeQue / AllocTensor that takes it)
    std::vector<order::Snap> enqued, freed;

    void Valid(const char* api) const
    {
        CoreCtx& c = Cur(api);
        if (core == nullptr) Fail(api, "queue was never initialised with TPipe::InitBuffer", "P:InitBuffer");
        if (core != &c) Fail(api, Fmt("queue belongs to %s", CoreName(core).c_str()), "P:TQue简介");
        if (c.pipe == nullptr || gen != c.pipeGen)
            Fail(api, "queue belongs to a TPipe that was destroyed or reset", "P:Destroy, P:Reset");
    }
    int Find(const char* api, const LocalRef& r) const
    {
        if (r.core != core || r.hw != hw || r.addr < base || (r.addr - base) % len != 0 ||
            static_cast<int>((r.addr - base) / len) >= num)
            Fail(api, Fmt("tensor at %s+%u is not the start of a buffer of this queue", HwName(r.hw), r.addr),
                 "P:EnQue, P:FreeTensor");
        return static_cast<int>((r.addr - base) / len);
    }
    uint32_t Key(int b) const { return (static_cast<uint32_t>(hw) << 24) | (base + static_cast<uint32_t>(b) * len); }
};

struct BufImpl {
    CoreCtx* core = nullptr;
    uint64_t gen = 0;
    Hw hw = Hw::COUNT;
    AscendC::TPosition pos = AscendC::TPosition::MAX;
    uint32_t base = 0, len = 0;
    void Valid(const char* api) const
    {
        CoreCtx& c = Cur(api);
        if (core == nullptr) Fail(api, "TBuf was never initialised with TPipe::InitBuffer", "P:InitBuffer");
        if (core != &c) Fail(api, Fmt("TBuf belongs to %s", CoreName(core).c_str()), "P:TBuf简介");
        if (c.pipe == nullptr || gen != c.pipeGen)
            Fail(api, "TBuf belongs to a TPipe that was destroyed or reset", "P:Destroy, P:Reset");
    }
};

}  // namespace twin

namespace AscendC {

class TPipe;

// [P:TQue简介, P:AllocTensor, P:EnQue, P:DeQue, P:FreeTensor, I:impl/basic_api/kernel_tquebind_impl.h]
// State machine per buffer: FREE -Alloc-> OCCUPIED -EnQue-> ENQUE -DeQue-> DEQUE -Free-> FREE
// (EnQue also from DEQUE). At most `depth` buffers enqueued at once. Buffers handed out round-robin.
template <TPosition src, TPosition dst, int32_t depth, auto mask = 0>
class TQueBind {
    static_assert(depth >= 1, "twin: TQue depth 0 (in-place AllocTensor/DeQue overloads) is not emulated");

public:
    static constexpr TPosition kPos = src;
    template <typename T>
    LocalTensor<T> AllocTensor()
    {
        const char* api = "TQue::AllocTensor";
        q_.Valid(api);
        int pick = -1;
        for (int i = 0; i < q_.num; ++i) {
            int b = q_.cursor;
            q_.cursor = (q_.cursor + 1) % q_.num;
            if (q_.state[b] == twin::BufState::FREE) {
                pick = b;
                break;
            }
        }
        if (pick < 0)
            twin::Fail(api,
                       twin::Fmt("no FREE buffer among the %d of this %s queue (on NPU AllocTensor spins forever); "
                                 "FreeTensor before allocating again",
                                 q_.num, twin::PosName(q_.pos)),
                       "P:AllocTensor, I:kernel_tquebind_impl.h");
        q_.state[pick] = twin::BufState::OCCUPIED;
        twin::order::Merge(*q_.core, q_.freed[pick]);
        twin::LocalRef r;
        r.core = q_.core;
        r.hw = q_.hw;
        r.pos = q_.pos;
        r.addr = q_.base + static_cast<uint32_t>(pick) * q_.len;
        r.bytes = q_.len;
        r.gen = q_.gen;
        r.bufKey = q_.Key(pick);
        r.serial = ++q_.core->nextSerial;
        q_.core->bufSerial[r.bufKey] = r.serial;
        if (twin::PoisonOnAlloc()) std::memset(r.Ptr(), twin::kPoisonByte, r.bytes);
        LocalTensor<T> t;
        t.SetRef(r);
        return t;
    }
    template <typename T>
    bool EnQue(const LocalTensor<T>& tensor)
    {
        const char* api = "TQue::EnQue";
        q_.Valid(api);
        tensor.ValidCore(api);
        int b = q_.Find(api, tensor.Ref());
        if (q_.used >= depth)
            twin::Fail(api, twin::Fmt("%d tensors already enqueued, which is the queue depth %d; DeQue first", q_.used, depth),
                       "P:TQue简介, I:kernel_tquebind_impl.h");
        if (q_.state[b] != twin::BufState::OCCUPIED && q_.state[b] != twin::BufState::DEQUE)
            twin::Fail(api, twin::Fmt("buffer %d is %s; EnQue needs OCCUPIED (after AllocTensor) or DEQUE", b,
                                      twin::BufStateName(q_.state[b])),
                       "P:EnQue, I:kernel_tquebind_impl.h");
        q_.state[b] = twin::BufState::ENQUE;
        q_.enqued[b] = twin::order::Snapshot(*q_.core);
        q_.fifo.push_back(b);
        q_.used++;
        return true;
    }
    template <typename T>
    LocalTensor<T> DeQue()
    {
        const char* api = "TQue::DeQue";
        q_.Valid(api);
        if (q_.used == 0 || q_.fifo.empty())
            twin::Fail(api, "DeQue on an empty queue (on NPU it waits forever)", "P:DeQue, I:kernel_tquebind_impl.h");
        int b = q_.fifo.front();
        q_.fifo.pop_front();
        q_.used--;
        q_.state[b] = twin::BufState::DEQUE;
        twin::order::Merge(*q_.core, q_.enqued[b]);
        twin::LocalRef r;
        r.core = q_.core;
        r.hw = q_.hw;
        r.pos = q_.pos;
        r.addr = q_.base + static_cast<uint32_t>(b) * q_.len;
        r.bytes = q_.len;
        r.gen = q_.gen;
        r.bufKey = q_.Key(b);
        r.serial = q_.core->bufSerial[r.bufKey];
        LocalTensor<T> t;
        t.SetRef(r);
        return t;
    }
    template <typename T>
    void FreeTensor(LocalTensor<T>& tensor)
    {
        const char* api = "TQue::FreeTensor";
        q_.Valid(api);
        tensor.ValidCore(api);
        int b = q_.Find(api, tensor.Ref());
        if (q_.state[b] == twin::BufState::FREE)
            twin::Fail(api, twin::Fmt("buffer %d is already FREE (double FreeTensor)", b),
                       "P:FreeTensor, I:kernel_tquebind_impl.h");
        if (q_.state[b] == twin::BufState::ENQUE)
            twin::Fail(api, twin::Fmt("buffer %d is still enqueued; DeQue it before FreeTensor", b), "P:FreeTensor");
        q_.state[b] = twin::BufState::FREE;
        q_.freed[b] = twin::order::Snapshot(*q_.core);
        q_.core->bufSerial.erase(q_.Key(b));
    }
    bool VacantInQue() const { return q_.used < depth; }
    bool HasTensorInQue() const { return q_.used > 0; }
    int32_t GetTensorCountInQue() const { return q_.used; }
    bool HasIdleBuffer() const
    {
        for (auto s : q_.state)
            if (s == twin::BufState::FREE) return true;
        return false;
    }
    twin::QueImpl& Impl() { return q_; }

private:
    twin::QueImpl q_;
};

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue : public TQueBind<pos, pos, depth, mask> {};

// [P:TBuf简介, P:Get, P:GetWithOffset] scratch buffer, no queue semantics.
template <TPosition pos = TPosition::VECCALC>
class TBuf {
public:
    static constexpr TPosition kPos = pos;
    template <typename T>
    LocalTensor<T> Get()
    {
        b_.Valid("TBuf::Get");
        return Make<T>(0, b_.len);
    }
    template <typename T>
    LocalTensor<T> Get(uint32_t len)
    {
        b_.Valid("TBuf::Get");
        uint64_t bytes = static_cast<uint64_t>(len) * sizeof(T);
        if (bytes > b_.len)
            twin::Fail("TBuf::Get", twin::Fmt("%u elements (%llu B) exceed the buffer of %u B", len,
                                              static_cast<unsigned long long>(bytes), b_.len),
                       "P:Get");
        return Make<T>(0, static_cast<uint32_t>(bytes));
    }
    template <typename T>
    LocalTensor<T> GetWithOffset(uint32_t size, uint32_t bufOffset)
    {
        b_.Valid("TBuf::GetWithOffset");
        if (bufOffset % 32 != 0)
            twin::Fail("TBuf::GetWithOffset", twin::Fmt("bufOffset %u is not 32-byte aligned", bufOffset), "P:GetWithOffset");
        uint64_t end = bufOffset + static_cast<uint64_t>(size) * sizeof(T);
        if (end > b_.len)
            twin::Fail("TBuf::GetWithOffset",
                       twin::Fmt("[%u, %llu) exceeds the buffer of %u B", bufOffset, static_cast<unsigned long long>(end), b_.len),
                       "P:GetWithOffset");
        return Make<T>(bufOffset, static_cast<uint32_t>(size * sizeof(T)));
    }
    twin::BufImpl& Impl() { return b_; }

private:
    template <typename T>
    LocalTensor<T> Make(uint32_t off, uint32_t bytes)
    {
        twin::LocalRef r;
        r.core = b_.core;
        r.hw = b_.hw;
        r.pos = b_.pos;
        r.addr = b_.base + off;
        r.bytes = bytes;
        r.gen = b_.gen;
        LocalTensor<T> t;
        t.SetRef(r);
        return t;
    }
    twin::BufImpl b_;
};

// [P:TPipe简介, P:InitBuffer, P:Destroy, P:Reset, I:impl/basic_api/kernel_tpipe_impl.h]
// One active TPipe per core; InitBuffer rounds to 32 B, allocates contiguously in call order per
// physical buffer, fails on overflow (L1 end <= 512 KiB - 128 B), <= 64 buffers per TPipe,
// <= 8 queue buffers per TPosition; new allocations are NaN-poisoned.
class TPipe {
public:
    TPipe()
    {
        const char* api = "TPipe::TPipe";
        core_ = &twin::Cur(api);
        if (core_->pipe != nullptr)
            twin::Fail(api, "another TPipe is active on this core; call Destroy() on it first", "P:TPipe简介, P:Destroy");
        core_->pipe = this;
        active_ = true;
        ResetState();
        InitSocState();
    }
    ~TPipe()
    {
        if (active_ && twin::t_core == core_) Release();
    }
    TPipe(const TPipe&) = delete;
    TPipe& operator=(const TPipe&) = delete;

    void Init() {}
    void Destroy()
    {
        Check("TPipe::Destroy");
        Release();
    }
    void Reset()
    {
        Check("TPipe::Reset");
        ResetState();
    }

    template <TPosition s, TPosition d, int32_t depth, auto mask>
    bool InitBuffer(TQueBind<s, d, depth, mask>& que, uint8_t num, uint32_t len)
    {
        const char* api = "TPipe::InitBuffer";
        Check(api);
        twin::QueImpl& q = que.Impl();
        if (q.core != nullptr && q.gen == core_->pipeGen)
            twin::Fail(api, "InitBuffer called twice for the same queue", "P:InitBuffer");
        if (num == 0) twin::Fail(api, "num must be >= 1", "P:InitBuffer");
        if (len == 0) twin::Fail(api, "buffer length is 0", "P:InitBuffer, I:kernel_tquebind_impl.h");
        TPosition pos = s == TPosition::GM ? d : s;
        int pi = static_cast<int>(pos);
        if (queBufs_[pi] + num > twin::kMaxQueBufsPerPos)
            twin::Fail(api,
                       twin::Fmt("%d queue buffers at TPosition %s; at most %d per TPosition on A2 (event IDs)",
                                 queBufs_[pi] + num, twin::PosName(pos), twin::kMaxQueBufsPerPos),
                       "P:TQue简介");
        uint32_t rlen = static_cast<uint32_t>(twin::RoundUp(len, 32));
        uint32_t base = Alloc(api, pos, static_cast<uint64_t>(rlen) * num, num);
        queBufs_[pi] += num;
        q = twin::QueImpl();
        q.core = core_;
        q.gen = core_->pipeGen;
        q.hw = twin::PosToHw(pos);
        q.pos = pos;
        q.depth = depth;
        q.base = base;
        q.len = rlen;
        q.num = num;
        q.state.assign(num, twin::BufState::FREE);
        q.enqued.assign(num, twin::order::Snap{});
        q.freed.assign(num, twin::order::Snap{});
        return true;
    }
    template <TPosition pos>
    bool InitBuffer(TBuf<pos>& buf, uint32_t len)
    {
        const char* api = "TPipe::InitBuffer";
        Check(api);
        twin::BufImpl& b = buf.Impl();
        if (b.core != nullptr && b.gen == core_->pipeGen)
            twin::Fail(api, "InitBuffer called twice for the same TBuf", "P:InitBuffer");
        if (len == 0) twin::Fail(api, "buffer length is 0", "P:InitBuffer");
        uint32_t rlen = static_cast<uint32_t>(twin::RoundUp(len, 32));
        uint32_t base = Alloc(api, pos, rlen, 1);
        b = twin::BufImpl();
        b.core = core_;
        b.gen = core_->pipeGen;
        b.hw = twin::PosToHw(pos);
        b.pos = pos;
        b.base = base;
        b.len = rlen;
        return true;
    }

    // Event IDs [P:AllocEventID, P:ReleaseEventID, P:FetchEventID]: 8 per HardEvent.
    template <HardEvent evt>
    TEventID AllocEventID()
    {
        Check("TPipe::AllocEventID");
        uint8_t& m = evMask_[static_cast<int>(evt)];
        for (int i = 0; i < 8; ++i)
            if (!(m & (1u << i))) {
                m |= static_cast<uint8_t>(1u << i);
                return static_cast<TEventID>(i);
            }
        twin::Fail("TPipe::AllocEventID",
                   twin::Fmt("all 8 event IDs of HardEvent::%s are allocated", twin::HardEventName(static_cast<int>(evt))),
                   "P:AllocEventID");
    }
    template <HardEvent evt>
    void ReleaseEventID(TEventID id)
    {
        Check("TPipe::ReleaseEventID");
        if (id < 0 || id > 7 || !(evMask_[static_cast<int>(evt)] & (1u << id)))
            twin::Fail("TPipe::ReleaseEventID", twin::Fmt("event ID %d was not allocated", id), "P:ReleaseEventID");
        evMask_[static_cast<int>(evt)] &= static_cast<uint8_t>(~(1u << id));
    }
    TEventID FetchEventID(HardEvent evt)
    {
        Check("TPipe::FetchEventID");
        uint8_t m = evMask_[static_cast<int>(evt)];
        for (int i = 0; i < 8; ++i)
            if (!(m & (1u << i))) return static_cast<TEventID>(i);
        twin::Fail("TPipe::FetchEventID", "no free event ID", "P:FetchEventID");
    }
    template <HardEvent evt>
    TEventID FetchEventID()
    {
        return FetchEventID(evt);
    }

    // twin internals
    uint32_t UbEnd() const { return end_[static_cast<int>(twin::Hw::UB)]; }

private:
    void Check(const char* api)
    {
        twin::CoreCtx& c = twin::Cur(api);
        if (&c != core_) twin::Fail(api, twin::Fmt("TPipe belongs to %s", twin::CoreName(core_).c_str()), "P:TPipe简介");
        if (!active_ || c.pipe != this) twin::Fail(api, "TPipe was destroyed", "P:Destroy");
    }
    void ResetState()
    {
        for (auto& e : end_) e = 0;
        for (auto& q : queBufs_) q = 0;
        for (auto& m : evMask_) m = 0;
        // On the AIC of a 2201 core, TPipe::Init allocates M_MTE1 IDs 0-2 for the matmul macro (and sets
        // them; Destroy waits for them) [I:kernel_tpipe_impl.h:101-115, :583-593 at asc-devkit 0da921b9]:
        // AllocEventID<M_MTE1> hands out 3 and up there. (The twin does not model those three flags.)
        if (core_->type == twin::CoreType::AIC) evMask_[static_cast<int>(HardEvent::M_MTE1)] = 0x7;
        nbufs_ = 0;
        core_->pipeGen++;
        core_->bufSerial.clear();
    }
    void Release()
    {
        active_ = false;
        core_->pipe = nullptr;
        core_->pipeGen++;
        core_->bufSerial.clear();
    }
    uint32_t Alloc(const char* api, TPosition pos, uint64_t bytes, int nb)
    {
        twin::Hw hw = twin::PosToHw(pos);
        if (hw == twin::Hw::COUNT || hw == twin::Hw::GM)
            twin::Fail(api, twin::Fmt("TPosition %s is not a local buffer", twin::PosName(pos)), "P:TPosition");
        if (!twin::HwOnCore(hw, core_->type))
            twin::FailRule(api, twin_rules::kCoreType,
                           twin::Fmt("%s (%s) does not exist on %s; guard the InitBuffer with ASCEND_IS_AIV/ASCEND_IS_AIC",
                                     twin::HwName(hw), twin::PosName(pos), core_->type == twin::CoreType::AIC ? "an AIC" : "an AIV"),
                           "P:TPosition");
        if (nbufs_ + nb > twin::kMaxBufsPerPipe)
            twin::Fail(api, twin::Fmt("more than %d buffers in one TPipe", twin::kMaxBufsPerPipe), "I:kernel_tpipe_impl.h");
        uint32_t& end = end_[static_cast<int>(hw)];
        uint64_t limit = hw == twin::Hw::L1 ? twin::kL1PipeLimit : twin::HwSize(hw);
        uint64_t newEnd = end + bytes;
        if (newEnd > limit)
            twin::FailRule(api, twin_rules::kLocalCapacity,
                           twin::Fmt("%s over-allocated: %llu B requested at offset %u, ends at %llu > %llu B available", twin::HwName(hw),
                                     static_cast<unsigned long long>(bytes), end, static_cast<unsigned long long>(newEnd),
                                     static_cast<unsigned long long>(limit)),
                           twin::CapacityLine(hw));
        uint32_t base = end;
        std::memset(core_->pool[static_cast<int>(hw)] + base, twin::kPoisonByte, bytes);
        end = static_cast<uint32_t>(newEnd);
        nbufs_ += nb;
        return base;
    }

    twin::CoreCtx* core_ = nullptr;
    bool active_ = false;
    uint32_t end_[static_cast<int>(twin::Hw::COUNT)] = {};
    int queBufs_[static_cast<int>(TPosition::MAX) + 1] = {};
    uint8_t evMask_[64] = {};
    int nbufs_ = 0;
};

inline TPipe* GetTPipePtr()
{
    twin::CoreCtx& c = twin::Cur("GetTPipePtr");
    if (c.pipe == nullptr) twin::Fail("GetTPipePtr", "no active TPipe on this core", "P:TPipe简介");
    return static_cast<TPipe*>(c.pipe);
}

}  // namespace AscendC

#endif  // TILEGEN_TWIN_PIPE_H
