// Host harness of the peer kernels on the real-API twin (tilegen/harness/ascend_peer.py builds it with
// tilegen/twin/cce/runtime.cpp): allocates GM, loads the inputs, launches one MIX kernel on `blocks` AI Cores
// and writes the outputs back.
//
// Usage: peer_main KERNEL LABEL DIR BLOCKS
//   DIR/args.txt lists the kernel's GM arguments in order, one per line: "<name> <bytes> <in|out|ws|tiling>";
//   an "in", "ws" or "tiling" argument is loaded from DIR/<name>.bin (a "ws" one is tagged
//   "handoff workspace": the timeline treats its copies as L2-resident, as the hand twin's harness does);
//   an "out" one starts as GM poison (0xFF) and is written to DIR/<name>.out after the launch.
//   A size of 0 passes a null pointer (an absent optional input).
// The kernel is <LABEL>_cube.so / <LABEL>_vec.so next to this executable (tilegen/twin/cce/README.md).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "host.h"

namespace {
[[noreturn]] void Die(const std::string& msg)
{
    std::fprintf(stderr, "peer harness: %s\n", msg.c_str());
    std::exit(2);
}

struct Arg {
    std::string name, role;
    size_t bytes = 0;
    void* ptr = nullptr;
};
}  // namespace

int main(int argc, char** argv)
{
    if (argc != 5) Die("usage: peer_main KERNEL LABEL DIR BLOCKS");
    const std::string kernel = argv[1], label = argv[2], dir = argv[3];
    const int blocks = std::atoi(argv[4]);
    std::ifstream list(dir + "/args.txt");
    if (!list) Die("no " + dir + "/args.txt");
    std::vector<Arg> args;
    for (std::string line; std::getline(list, line);) {
        if (line.empty()) continue;
        std::istringstream s(line);
        Arg a;
        if (!(s >> a.name >> a.bytes >> a.role)) Die("bad line in args.txt: " + line);
        if (a.role != "in" && a.role != "out" && a.role != "ws" && a.role != "tiling") Die("bad role in args.txt: " + line);
        if (a.bytes > 0) {
            a.ptr = twin::GmAlloc(a.bytes, a.role == "ws" ? "handoff workspace" : a.name.c_str());
            if (a.role != "out") {
                std::ifstream f(dir + "/" + a.name + ".bin", std::ios::binary);
                if (!f) Die("no " + dir + "/" + a.name + ".bin");
                f.read(static_cast<char*>(a.ptr), static_cast<std::streamsize>(a.bytes));
                if (static_cast<size_t>(f.gcount()) != a.bytes) Die(a.name + ".bin holds fewer than " + std::to_string(a.bytes) + " bytes");
            }
        }
        args.push_back(a);
    }
    if (args.size() > 24) Die("more than 24 kernel arguments");
    std::vector<void*> ptrs;
    for (const Arg& a : args) ptrs.push_back(a.ptr);
    static std::string name, lab;
    name = kernel;
    lab = label;
    const twin::Kernel k{name.c_str(), lab.c_str()};
    twin::LaunchRaw(static_cast<uint32_t>(blocks), k, ptrs.data(), static_cast<int>(ptrs.size()));
    for (const Arg& a : args) {
        if (a.role == "out" && a.bytes > 0) {
            std::ofstream f(dir + "/" + a.name + ".out", std::ios::binary);
            f.write(static_cast<const char*>(a.ptr), static_cast<std::streamsize>(a.bytes));
        }
    }
    for (const Arg& a : args)
        if (a.ptr != nullptr) twin::GmFree(a.ptr);
    return 0;
}
