// Runner: `twin_tests --list` prints the test names; `twin_tests NAME` runs one test.
// Positive tests return 0 and print "PASS NAME"; negative tests are expected to be stopped by the
// twin with a "twin: <API>: ..." line on stderr and a non-zero exit.
#include "common.h"

int main(int argc, char** argv)
{
    auto& reg = tt::Registry();
    if (argc < 2 || std::string(argv[1]) == "--list") {
        for (auto& kv : reg) std::printf("%s\n", kv.first.c_str());
        return 0;
    }
    auto it = reg.find(argv[1]);
    if (it == reg.end()) {
        std::fprintf(stderr, "unknown test %s\n", argv[1]);
        return 2;
    }
    int rc = 1;
    try {
        rc = it->second();
    } catch (const twin::Failure& f) {
        std::fprintf(stderr, "%s\n", f.what());
        return 3;
    }
    if (rc == 0) std::printf("PASS %s\n", argv[1]);
    return rc;
}
