// Test helpers for the tilegen CPU twin: a name -> function registry (one binary, test chosen by
// argv[1]), RAII GM buffers and small reference helpers.
#pragma once
#include "kernel_operator.h"

#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace AscendC;

namespace tt {

using Fn = std::function<int()>;
inline std::map<std::string, Fn>& Registry()
{
    static std::map<std::string, Fn> r;
    return r;
}
struct Reg {
    Reg(const char* n, Fn f) { Registry()[n] = std::move(f); }
};

#define TWIN_TEST(name)                                \
    static int name();                                 \
    static ::tt::Reg reg_##name(#name, [] { return name(); }); \
    static int name()

#define EXPECT(cond, ...)                                                  \
    do {                                                                   \
        if (!(cond)) {                                                     \
            std::fprintf(stderr, "EXPECT failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                             \
            std::fprintf(stderr, "\n");                                    \
            return 1;                                                      \
        }                                                                  \
    } while (0)

template <typename T>
struct Gm {
    T* p = nullptr;
    size_t n = 0;
    explicit Gm(size_t count, const char* tag = "") : n(count) { p = static_cast<T*>(twin::GmAlloc(count * sizeof(T), tag)); }
    Gm(const std::vector<T>& v, const char* tag = "") : Gm(v.size(), tag) { std::memcpy(p, v.data(), v.size() * sizeof(T)); }
    ~Gm()
    {
        if (p) twin::GmFree(p);
    }
    Gm(const Gm&) = delete;
    Gm& operator=(const Gm&) = delete;
    GM_ADDR addr() const { return reinterpret_cast<GM_ADDR>(p); }
    std::vector<T> vec() const { return std::vector<T>(p, p + n); }
    void zero() { std::memset(p, 0, n * sizeof(T)); }
    T& operator[](size_t i) { return p[i]; }
};

inline std::vector<float> Rand(size_t n, float lo, float hi, unsigned seed)
{
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
}
template <typename T>
inline std::vector<T> To(const std::vector<float>& v)
{
    std::vector<T> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<T>(v[i]);
    return r;
}
template <typename T>
inline std::vector<float> F(const std::vector<T>& v)
{
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<float>(v[i]);
    return r;
}
inline bool Close(float a, float b, float rtol, float atol)
{
    if (std::isnan(a) || std::isnan(b)) return false;
    return std::fabs(a - b) <= atol + rtol * std::fabs(b);
}
template <typename T>
inline uint32_t Bits(T v)
{
    uint32_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}

}  // namespace tt
