// Unit tests of the B-ary sum / max trees (cpp/include/ace_hybrid/sum_tree.hpp).
#include <algorithm>
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

ACE_TEST(sum_tree_find_batch_equals_find_including_rounding_edges) {
    for (std::size_t n : {1u, 5u, 16u, 17u, 300u, 4097u, 70000u}) {
        SumTree t(n);
        Rng rng(n + 7);
        for (std::size_t i = 0; i < n; ++i) t.set(i, rng.uniform() < 0.3 ? 0.0 : rng.uniform() * 10.0);
        t.set(n - 1, 0.0);  // a zero last leaf: u past the end must still land on a positive leaf
        if (t.root() == 0.0) t.set(0, 1.0);
        const std::size_t b = 257;
        std::vector<double> u(b), scratch(b);
        for (std::size_t j = 0; j < b; ++j) u[j] = (j + rng.uniform()) * t.root() / static_cast<double>(b);
        u[b - 1] = t.root();       // exactly the total: past every interval
        u[b - 2] = 2 * t.root();   // far past it
        scratch = u;
        std::vector<std::size_t> leaf(b);
        t.find_batch(scratch.data(), leaf.data(), b);
        for (std::size_t j = 0; j < b; ++j) {
            CHECK(leaf[j] == t.find(u[j]));
            CHECK(t.leaf(leaf[j]) > 0.0);
        }
    }
}

ACE_TEST(set_many_equals_the_same_sets_one_by_one_bit_for_bit) {
    for (std::size_t n : {1u, 16u, 33u, 1000u, 5000u}) {
        SumTree a(n), b(n);
        MaxTree ma(n), mb(n);
        Rng rng(n);
        for (int round = 0; round < 20; ++round) {
            const std::size_t m = 1 + static_cast<std::size_t>(rng.next_u64() % 300);
            std::vector<std::size_t> idx(m);
            std::vector<double> v(m);
            std::vector<float> f(m);
            for (std::size_t j = 0; j < m; ++j) {
                // sorted runs with repeats (a sampled batch) mixed with arbitrary order
                idx[j] = round % 2 ? (j * n / m) : static_cast<std::size_t>(rng.next_u64() % n);
                v[j] = rng.uniform() < 0.1 ? 0.0 : rng.uniform() * 1e3;
                f[j] = static_cast<float>(v[j]);
            }
            a.set_many(idx.data(), v.data(), m);
            ma.set_many(idx.data(), f.data(), m);
            for (std::size_t j = 0; j < m; ++j) {
                b.set(idx[j], v[j]);
                mb.set(idx[j], f[j]);
            }
            CHECK(a.data() == b.data());
            CHECK(ma.data() == mb.data());
            CHECK(a.check() && ma.check());
        }
    }
}

ACE_TEST(max_tree_with_early_stop_equals_its_rebuild_after_random_updates) {
    for (std::size_t n : {2u, 16u, 17u, 257u, 4097u}) {
        MaxTree m(n);
        Rng rng(n);
        for (int k = 0; k < 20000; ++k) {
            const std::size_t i = static_cast<std::size_t>(rng.next_u64() % n);
            // few distinct values, so ties and "the maximum fell" are frequent
            const float v = static_cast<float>(rng.next_u64() % 5);
            m.set(i, v);
        }
        CHECK(m.check());
        float expect = 0.0f;
        for (std::size_t i = 0; i < n; ++i) expect = std::max(expect, m.leaf(i));
        CHECK(m.root() == expect);
    }
}
