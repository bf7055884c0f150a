// Minimal test runner for the header-only core (no framework: it must build under sanitizers anywhere).
#include "test_util.hpp"

int main() { return ace_hybrid::testing::run_all(); }
