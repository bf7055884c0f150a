// Unit tests of the B-ary sum / max trees (cpp/include/ace_hybrid/sum_tree.hpp).
#include <cmath>
#include <vector>

#include "ace_hybrid/rng.hpp"
#include "ace_hybrid/sum_tree.hpp"
#include "test_util.hpp"

using ace_hybrid::MaxTree;
using ace_hybrid::Rng;
using ace_hybrid::SumTree;

ACE_TEST(sum_tree_root_equals_rebuild_after_random_updates) {
    for (std::size_t n : {1u, 2u, 15u, 16u, 17u, 255u, 256u, 257u, 1000u, 4097u}) {
        SumTree t(n);
        Rng rng(n);
        std::vector<double> leaves(n, 0.0);
        for (int k = 0; k < 3000; ++k) {
            const std::size_t i = static_cast<std::size_t>(rng.next_u64() % n);
            const double v = rng.uniform() < 0.2 ? 0.0 : rng.uniform() * 1e3;
            t.set(i, v);
            leaves[i] = v;
        }
        CHECK(t.check());
        long double exact = 0;
        for (double v : leaves) exact += v;
        CHECK_NEAR(t.root(), static_cast<double>(exact), 1e-9 * static_cast<double>(exact) + 1e-12);
        const double before = t.root();
        t.rebuild();
        CHECK(t.root() == before);  // bit-identical: ancestors are always recomputed from children
    }
}

ACE_TEST(sum_tree_find_returns_the_leaf_whose_interval_holds_u) {
    SumTree t(21);
    std::vector<double> v(21);
    for (std::size_t i = 0; i < 21; ++i) {
        v[i] = (i % 3 == 0) ? 0.0 : static_cast<double>(i);
        t.set(i, v[i]);
    }
    double acc = 0;
    for (std::size_t i = 0; i < 21; ++i) {
        if (v[i] == 0.0) continue;
        CHECK(t.find(acc) == i);
        CHECK(t.find(acc + 0.5 * v[i]) == i);
        acc += v[i];
    }
    // Past the end (rounding): the last positive leaf, never a zero leaf.
    CHECK(t.find(t.root()) == 20);
    CHECK(t.find(t.root() * 2) == 20);
}

ACE_TEST(sum_tree_find_never_returns_a_zero_leaf) {
    SumTree t(300);
    Rng rng(1);
    for (std::size_t i = 0; i < 300; i += 7) t.set(i, rng.uniform() + 1e-12);
    for (int k = 0; k < 20000; ++k) {
        const std::size_t i = t.find(rng.uniform() * t.root());
        CHECK(i % 7 == 0);
    }
}

ACE_TEST(sum_tree_stratified_frequencies_match_leaves) {
    const std::size_t n = 37;
    SumTree t(n);
    for (std::size_t i = 0; i < n; ++i) t.set(i, 1.0 + static_cast<double>(i % 5));
    Rng rng(3);
    std::vector<double> counts(n, 0.0);
    const int batches = 400, b = 128;
    for (int k = 0; k < batches; ++k)
        for (int j = 0; j < b; ++j) counts[t.find((j + rng.uniform()) * t.root() / b)] += 1;
    for (std::size_t i = 0; i < n; ++i) {
        const double expected = batches * b * t.leaf(i) / t.root();
        CHECK(std::fabs(counts[i] - expected) < 5 * std::sqrt(expected));
    }
}

ACE_TEST(max_tree_tracks_the_maximum_when_it_decreases) {
    MaxTree m(40);
    for (std::size_t i = 0; i < 40; ++i) m.set(i, static_cast<float>(i));
    CHECK(m.root() == 39.0f);
    m.set(39, 0.5f);
    CHECK(m.root() == 38.0f);
    for (std::size_t i = 0; i < 40; ++i) m.set(i, 0.0f);
    CHECK(m.root() == 0.0f);
    CHECK(m.check());
}

ACE_TEST(rng_is_deterministic_and_uniform_in_unit_interval) {
    Rng a(42), b(42), c(43);
    bool differ = false;
    double mean = 0;
    for (int i = 0; i < 100000; ++i) {
        const double x = a.uniform();
        CHECK(x >= 0.0 && x < 1.0);
        CHECK(x == b.uniform());
        differ |= x != c.uniform();
        mean += x;
    }
    CHECK(differ);
    CHECK_NEAR(mean / 100000, 0.5, 0.005);
    Rng d(0);
    d.set_state(a.state());
    CHECK(d.next_u64() == a.next_u64());
    CHECK_THROWS(d.set_state(Rng::State{0, 0, 0, 0}), std::invalid_argument);
}
