// A tiny registry of test functions and CHECK macros for the C++ unit tests.
#pragma once
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace ace_hybrid::testing {

struct TestCase {
    const char* name;
    std::function<void()> fn;
};

inline std::vector<TestCase>& registry() {
    static std::vector<TestCase> tests;
    return tests;
}

inline int& failures() {
    static int count = 0;
    return count;
}

struct Register {
    Register(const char* name, std::function<void()> fn) { registry().push_back({name, std::move(fn)}); }
};

inline int run_all() {
    int failed_tests = 0;
    for (const auto& t : registry()) {
        const int before = failures();
        try {
            t.fn();
        } catch (const std::exception& e) {
            std::printf("  exception in %s: %s\n", t.name, e.what());
            ++failures();
        }
        const bool ok = failures() == before;
        failed_tests += ok ? 0 : 1;
        std::printf("%s %s\n", ok ? "PASS" : "FAIL", t.name);
    }
    const int passed = static_cast<int>(registry().size()) - failed_tests;
    std::printf("%d passed, %d failed\n", passed, failed_tests);
    return failed_tests == 0 && !registry().empty() ? 0 : 1;
}

}  // namespace ace_hybrid::testing

#define ACE_CONCAT_(a, b) a##b
#define ACE_CONCAT(a, b) ACE_CONCAT_(a, b)
#define ACE_TEST(name)                                                                           \
    static void name();                                                                          \
    static ::ace_hybrid::testing::Register ACE_CONCAT(register_, name)(#name, &name);            \
    static void name()
#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            std::printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
            ++::ace_hybrid::testing::failures();                                                 \
        }                                                                                        \
    } while (0)
#define CHECK_THROWS(expr, ExcType)                                                              \
    do {                                                                                         \
        bool thrown_ = false;                                                                    \
        try {                                                                                    \
            (void)(expr);                                                                        \
        } catch (const ExcType&) {                                                               \
            thrown_ = true;                                                                      \
        }                                                                                        \
        if (!thrown_) {                                                                          \
            std::printf("  %s:%d: %s did not throw %s\n", __FILE__, __LINE__, #expr, #ExcType);  \
            ++::ace_hybrid::testing::failures();                                                 \
        }                                                                                        \
    } while (0)
#define CHECK_NEAR(a, b, tol) CHECK(std::fabs(static_cast<double>(a) - static_cast<double>(b)) <= (tol))
