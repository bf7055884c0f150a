// Unit tests for cpp/include/ace_hybrid/masked_sampling.hpp (no Python).
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "ace_hybrid/masked_sampling.hpp"
#include "test_util.hpp"

namespace {

using namespace ace_hybrid::sampling;
using ace_hybrid::Rng;
constexpr float kInf = std::numeric_limits<float>::infinity();

MaskedRows rows_of(const std::vector<float>& logits, std::int64_t batch, const std::vector<std::uint8_t>* mask,
                   bool shared) {
    MaskedRows r;
    r.logits = logits.data();
    r.batch = batch;
    r.n = static_cast<std::int64_t>(logits.size()) / batch;
    r.mask = mask == nullptr ? nullptr : mask->data();
    r.mask_shared = shared;
    return r;
}

std::vector<double> uniforms(Rng& g, std::int64_t count) {
    std::vector<double> u(static_cast<std::size_t>(count));
    for (auto& v : u) v = g.uniform();
    return u;
}

}  // namespace

ACE_TEST(xoshiro_matches_reference_sequence_and_round_trips_state) {
    // splitmix64 from seed 0 gives the documented first output 0xe220a8397b1dcdaf.
    std::uint64_t x = 0;
    CHECK(Rng::splitmix64(x) == 0xe220a8397b1dcdafULL);
    Rng a(42), b(7);
    b.set_state(a.state());
    for (int i = 0; i < 100; ++i) CHECK(a.next_u64() == b.next_u64());
    CHECK_THROWS(a.set_state({0, 0, 0, 0}), std::invalid_argument);
    double lo = 1.0, hi = 0.0;
    for (int i = 0; i < 10000; ++i) {
        const double u = a.uniform();
        lo = std::min(lo, u);
        hi = std::max(hi, u);
    }
    CHECK(lo >= 0.0 && lo < 0.01 && hi < 1.0 && hi > 0.99);
}

ACE_TEST(exp_kernel_relative_error_is_below_3e_7) {
    const int n = 4096;
    std::vector<float> x(n), out(n);
    double worst = 0.0;
    for (int rep = 0; rep < 22; ++rep) {  // t in [-88, 0] in fine steps
        for (int i = 0; i < n; ++i) x[i] = -88.0f * static_cast<float>(rep * n + i) / static_cast<float>(22 * n);
        detail::exp_kernel(x.data(), nullptr, n, 0.0f, 1.0f, out.data());
        for (int i = 0; i < n; ++i) {
            if (x[i] < -87.0f) {
                CHECK(out[i] == 0.0f);
                continue;
            }
            const double ref = std::exp(static_cast<double>(x[i]));
            worst = std::max(worst, std::fabs(out[i] - ref) / ref);
        }
    }
    CHECK(worst < 3e-7);
    CHECK(worst > 0.0);  // it is an approximation: the test must be able to see it
}

ACE_TEST(exp_kernel_zeroes_masked_and_minus_inf_entries) {
    const std::vector<float> x = {0.0f, -1.0f, -kInf, std::nanf(""), kInf, -2.0f};
    const std::vector<std::uint8_t> m = {1, 1, 1, 0, 0, 0};
    std::vector<float> out(x.size(), 7.0f);
    detail::exp_kernel(x.data(), m.data(), static_cast<int>(x.size()), 0.0f, 1.0f, out.data());
    CHECK(out[0] == 1.0f);
    CHECK_NEAR(out[1], std::exp(-1.0), 1e-7);
    CHECK(out[2] == 0.0f && out[3] == 0.0f && out[4] == 0.0f && out[5] == 0.0f);
}

ACE_TEST(float_keys_preserve_order) {
    const std::vector<float> v = {-kInf, -3e38f, -1.0f, -1e-40f, -0.0f, 0.0f, 1e-40f, 1.0f, 3e38f, kInf};
    for (std::size_t i = 0; i + 1 < v.size(); ++i) CHECK(detail::fkey(v[i]) < detail::fkey(v[i + 1]));
    for (float f : v) CHECK(detail::from_key(detail::fkey(f)) == f);
    CHECK(detail::fkey(-kInf) == detail::kKeyNegInf);
    CHECK(detail::fkey(std::numeric_limits<float>::max()) == detail::kKeyFltMax);
}

ACE_TEST(sampling_frequencies_match_softmax_over_legal_logits) {
    // n = 1300 spans three 512-wide blocks, with mass in each; several legal actions carry most mass.
    const std::int64_t n = 1300, draws = 200000;
    std::vector<float> logits(static_cast<std::size_t>(n), -kInf);
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(n), 0);
    const std::int64_t legal[] = {3, 511, 512, 700, 1023, 1024, 1299};
    const float vals[] = {0.5f, 1.0f, -0.3f, 2.0f, 0.0f, 1.5f, -1.0f};
    for (int j = 0; j < 7; ++j) {
        logits[static_cast<std::size_t>(legal[j])] = vals[j];
        mask[static_cast<std::size_t>(legal[j])] = 1;
    }
    logits[5] = 50.0f;  // masked, large: must never be drawn
    const float temperature = 0.8f;
    double z = 0.0;
    for (float v : vals) z += std::exp(v / temperature);
    Rng g(123);
    std::vector<std::int64_t> counts(static_cast<std::size_t>(n), 0);
    auto rows = rows_of(logits, 1, &mask, true);
    for (std::int64_t d = 0; d < draws; ++d) {
        const double u = g.uniform();
        std::int64_t a = -1;
        double lp = 0.0;
        std::uint8_t e = 9;
        masked_sample(rows, &u, temperature, &a, &lp, &e, 1);
        CHECK(e == 0);
        CHECK(mask[static_cast<std::size_t>(a)] == 1);
        ++counts[static_cast<std::size_t>(a)];
        CHECK_NEAR(lp, logits[static_cast<std::size_t>(a)] / temperature - std::log(z), 1e-6);
    }
    double chi2 = 0.0;
    for (int j = 0; j < 7; ++j) {
        const double expected = draws * std::exp(vals[j] / temperature) / z;
        const double diff = static_cast<double>(counts[static_cast<std::size_t>(legal[j])]) - expected;
        chi2 += diff * diff / expected;
    }
    CHECK(chi2 < 22.46);  // chi-square, 6 degrees of freedom, p = 0.001
}

ACE_TEST(results_do_not_depend_on_thread_count) {
    const std::int64_t batch = 37, n = 3001;
    std::vector<float> logits(static_cast<std::size_t>(batch * n));
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(batch * n));
    Rng g(5);
    for (auto& v : logits) v = static_cast<float>(g.uniform() * 8.0 - 4.0);
    for (auto& m : mask) m = g.uniform() < 0.3 ? 1 : 0;
    const auto u = uniforms(g, batch);
    auto rows = rows_of(logits, batch, &mask, false);
    std::vector<std::int64_t> a1(batch), a4(batch), m1(batch), m4(batch), t1(batch * 4), t4(batch * 4);
    std::vector<double> l1(batch), l4(batch);
    std::vector<std::uint8_t> e1(batch), e4(batch);
    std::vector<float> v1(batch * 4), v4(batch * 4);
    masked_sample(rows, u.data(), 1.0f, a1.data(), l1.data(), e1.data(), 1);
    masked_sample(rows, u.data(), 1.0f, a4.data(), l4.data(), e4.data(), 4);
    masked_argmax(rows, m1.data(), 1);
    masked_argmax(rows, m4.data(), 4);
    masked_topk(rows, 4, t1.data(), v1.data(), 1);
    masked_topk(rows, 4, t4.data(), v4.data(), 4);
    CHECK(a1 == a4 && l1 == l4 && m1 == m4 && t1 == t4 && v1 == v4);
    for (std::int64_t r = 0; r < batch; ++r) {
        CHECK(mask[static_cast<std::size_t>(r * n + a1[r])] == 1);
        CHECK(t1[static_cast<std::size_t>(r * 4)] == m1[static_cast<std::size_t>(r)]);
    }
}

ACE_TEST(argmax_and_topk_break_ties_by_lowest_index) {
    // 600 columns (two search chunks and a tail); ties at 10, 300, 599 with value 2; -0.0 ties with +0.0.
    const std::int64_t n = 600;
    std::vector<float> logits(static_cast<std::size_t>(n), 1.0f);
    logits[10] = logits[300] = logits[599] = 2.0f;
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(n), 1);
    mask[10] = 0;
    auto rows = rows_of(logits, 1, &mask, true);
    std::int64_t a = -1;
    masked_argmax(rows, &a, 1);
    CHECK(a == 300);
    std::vector<std::int64_t> idx(4);
    std::vector<float> val(4);
    masked_topk(rows, 4, idx.data(), val.data(), 1);
    CHECK(idx[0] == 300 && idx[1] == 599 && idx[2] == 0 && idx[3] == 1);
    CHECK(val[0] == 2.0f && val[2] == 1.0f);

    std::vector<float> zeros = {-1.0f, -0.0f, 0.0f, -0.0f};
    auto zr = rows_of(zeros, 1, nullptr, true);
    masked_argmax(zr, &a, 1);
    CHECK(a == 1);
}

ACE_TEST(empty_rows_raise_or_return_the_fallback) {
    const std::int64_t n = 20;
    std::vector<float> logits(static_cast<std::size_t>(2 * n), 0.0f);
    for (std::int64_t i = n; i < 2 * n; ++i) logits[static_cast<std::size_t>(i)] = -kInf;  // row 1: all -inf
    auto rows = rows_of(logits, 2, nullptr, true);
    const double u[2] = {0.5, 0.5};
    std::int64_t a[2];
    double lp[2];
    std::uint8_t e[2];
    try {
        masked_sample(rows, u, 1.0f, a, lp, e, 1);
        CHECK(false);
    } catch (const std::invalid_argument& ex) {
        CHECK(std::string(ex.what()).find("row 1") != std::string::npos);
    }
    CHECK_THROWS(masked_argmax(rows, a, 1), std::invalid_argument);
    rows.on_empty = OnEmpty::Index;
    rows.fallback_index = 0;
    masked_sample(rows, u, 1.0f, a, lp, e, 1);
    CHECK(e[0] == 0 && e[1] == 1 && a[1] == 0 && lp[1] == 0.0);
    CHECK_NEAR(lp[0], -std::log(20.0), 1e-6);
    std::int64_t idx[6];
    float val[6];
    masked_topk(rows, 3, idx, val, 1);
    CHECK(idx[3] == 0 && idx[4] == 0 && val[5] == -kInf);
    rows.fallback_index = n;
    CHECK_THROWS(masked_argmax(rows, a, 1), std::out_of_range);
}

ACE_TEST(nan_and_plus_inf_at_legal_positions_are_errors_naming_row_and_column) {
    const std::int64_t n = 1000;
    std::vector<float> logits(static_cast<std::size_t>(3 * n), 0.0f);
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(n), 1);
    mask[7] = 0;
    logits[static_cast<std::size_t>(n + 7)] = std::nanf("");  // masked: ignored
    logits[static_cast<std::size_t>(2 * n + 7)] = kInf;       // masked: ignored
    auto rows = rows_of(logits, 3, &mask, true);
    const double u[3] = {0.1, 0.2, 0.3};
    std::int64_t a[3], idx[3];
    double lp[3];
    std::uint8_t e[3];
    float val[3];
    masked_sample(rows, u, 1.0f, a, lp, e, 1);  // fine: bad values only at masked positions
    logits[static_cast<std::size_t>(2 * n + 900)] = -std::nanf("");
    logits[static_cast<std::size_t>(n + 600)] = kInf;
    for (int which = 0; which < 3; ++which) {
        try {
            if (which == 0) masked_sample(rows, u, 1.0f, a, lp, e, 2);
            if (which == 1) masked_argmax(rows, a, 3);
            if (which == 2) masked_topk(rows, 1, idx, val, 1);
            CHECK(false);
        } catch (const std::invalid_argument& ex) {
            CHECK(std::string(ex.what()).find("logits[1, 600]") != std::string::npos);
        }
    }
}

ACE_TEST(bad_parameters_throw_before_any_work) {
    std::vector<float> logits(10, 0.0f);
    auto rows = rows_of(logits, 1, nullptr, true);
    const double u = 0.5;
    std::int64_t a, idx[11];
    double lp;
    std::uint8_t e;
    float val[11];
    CHECK_THROWS(masked_sample(rows, &u, 0.0f, &a, &lp, &e, 1), std::invalid_argument);
    CHECK_THROWS(masked_sample(rows, &u, std::nanf(""), &a, &lp, &e, 1), std::invalid_argument);
    CHECK_THROWS(masked_topk(rows, 0, idx, val, 1), std::invalid_argument);
    CHECK_THROWS(masked_topk(rows, 11, idx, val, 1), std::invalid_argument);
    rows.n = 0;
    CHECK_THROWS(masked_argmax(rows, &a, 1), std::invalid_argument);
}

ACE_TEST(tiny_temperature_approaches_argmax_and_huge_logit_gaps_stay_finite) {
    std::vector<float> logits = {1.0f, 3.0f, -3e38f, 3e38f, 2.9f};
    std::vector<std::uint8_t> mask = {1, 1, 1, 0, 1};
    auto rows = rows_of(logits, 1, &mask, true);
    Rng g(9);
    for (int i = 0; i < 200; ++i) {
        const double u = g.uniform();
        std::int64_t a;
        double lp;
        std::uint8_t e;
        masked_sample(rows, &u, 1e-3f, &a, &lp, &e, 1);
        CHECK(a == 1);
        CHECK(std::isfinite(lp) && lp <= 0.0);
    }
}
