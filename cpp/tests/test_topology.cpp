// Enumeration of bus-assignment actions on small hand-made substations, with counts derived by hand, and
// against a literal port of Grid2Op's product-then-filter algorithm on random small substations.
#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "ace_hybrid/topology.hpp"
#include "test_util.hpp"

using namespace ace_hybrid;

namespace {

// One substation per entry of `subs`; each is a string of element kinds: 'L' line end, 'd' load, 'g' gen,
// 's' storage. Line ends are paired up as origin/extremity in order of appearance (a leftover end gets its
// other end on an extra 1-element substation appended at the end).
GridLayout make_layout(const std::vector<std::string>& subs) {
    std::vector<std::int32_t> sub_info, load_sub, load_pos, gen_sub, gen_pos, sto_sub, sto_pos;
    std::vector<std::pair<std::int32_t, std::int32_t>> ends;
    for (std::size_t s = 0; s < subs.size(); ++s) {
        sub_info.push_back(static_cast<std::int32_t>(subs[s].size()));
        for (std::size_t j = 0; j < subs[s].size(); ++j) {
            const auto sj = static_cast<std::int32_t>(s), pj = static_cast<std::int32_t>(j);
            switch (subs[s][j]) {
                case 'L': ends.emplace_back(sj, pj); break;
                case 'd': load_sub.push_back(sj); load_pos.push_back(pj); break;
                case 'g': gen_sub.push_back(sj); gen_pos.push_back(pj); break;
                case 's': sto_sub.push_back(sj); sto_pos.push_back(pj); break;
                default: throw std::logic_error("bad kind");
            }
        }
    }
    if (ends.size() % 2) {
        sub_info.push_back(1);
        ends.emplace_back(static_cast<std::int32_t>(sub_info.size()) - 1, 0);
    }
    std::vector<std::int32_t> or_sub, or_pos, ex_sub, ex_pos;
    for (std::size_t k = 0; k < ends.size(); k += 2) {
        or_sub.push_back(ends[k].first);
        or_pos.push_back(ends[k].second);
        ex_sub.push_back(ends[k + 1].first);
        ex_pos.push_back(ends[k + 1].second);
    }
    return GridLayout(sub_info, load_sub, load_pos, gen_sub, gen_pos, or_sub, or_pos, ex_sub, ex_pos, sto_sub, sto_pos);
}

BusAssignmentActions enumerate(const std::vector<std::string>& subs, int K = 2, bool alone = true) {
    EnumerationOptions o;
    o.n_busbar_per_sub = K;
    o.add_alone_line = alone;
    return BusAssignmentActions(make_layout(subs), o);
}

std::int64_t count_at(const BusAssignmentActions& a, int s) { return a.sub_offsets()[s + 1] - a.sub_offsets()[s]; }

// Literal port of Grid2Op's _is_ok_symmetry / _is_ok_line / _is_ok_2 over itertools.product order.
bool ok_symmetry(int K, const std::vector<int>& t, int bus_start = 2, std::size_t id = 1) {
    if (id >= t.size()) return true;
    if (bus_start >= K) return true;
    if (t[id] < bus_start) return ok_symmetry(K, t, bus_start, id + 1);
    if (t[id] == bus_start) return ok_symmetry(K, t, bus_start + 1, id + 1);
    return false;
}
std::vector<std::vector<int>> brute_force(int n, int K, const std::vector<bool>& is_line, bool alone) {
    std::vector<std::vector<int>> out;
    std::vector<int> t(n, 1);
    std::int64_t total = 1;
    for (int i = 1; i < n; ++i) total *= K;
    for (std::int64_t code = 0; code < total; ++code) {
        std::int64_t c = code;
        for (int i = n - 1; i >= 1; --i) {  // last element varies fastest, like itertools.product
            t[i] = static_cast<int>(c % K) + 1;
            c /= K;
        }
        if (!ok_symmetry(K, t)) continue;
        int mx = 0, with_line = 0;
        for (int v : t) mx = std::max(mx, v);
        for (int b = 1; b <= K; ++b) {
            bool any = false;
            for (int i = 0; i < n; ++i) any = any || (is_line[i] && t[i] == b);
            with_line += any;
        }
        if (with_line != mx) continue;
        bool two = true;
        for (int b = 1; b <= mx; ++b) {
            int cnt = 0;
            for (int v : t) cnt += v == b;
            two = two && cnt >= 2;
        }
        if (!alone && !two) continue;
        out.push_back(t);
    }
    if (out.size() < 2) out.clear();
    return out;
}

}  // namespace

ACE_TEST(two_lines_give_both_topologies) {
    auto a = enumerate({"LL"});
    CHECK(a.n_actions() == 2);
    CHECK(a.patterns() == std::vector<std::int8_t>({1, 1, 1, 2}));
}

ACE_TEST(load_alone_on_a_bus_is_rejected) {
    // (1,1) only: (1,2) leaves the load alone on bus 2 -> one topology -> substation dropped.
    auto a = enumerate({"Ld"});
    CHECK(a.n_actions() == 0);
    // line at 0, load + line: 2 elements free -> 4 tuples; (1,2,1)? bus 2 = load alone -> rejected.
    auto b = enumerate({"LdL"});
    // (1,1,1) (1,1,2) (1,2,1)x (1,2,2)  -> 3
    CHECK(count_at(b, 0) == 3);
}

ACE_TEST(all_lines_count_is_two_to_the_n_minus_one) {
    for (int n = 2; n <= 10; ++n) {
        auto a = enumerate({std::string(static_cast<std::size_t>(n), 'L')});
        CHECK(count_at(a, 0) == (std::int64_t{1} << (n - 1)));
    }
}

ACE_TEST(three_busbars_count_set_partitions) {
    // n = 4 line ends, at most 3 buses: S(4,1) + S(4,2) + S(4,3) = 1 + 7 + 6 = 14.
    auto a = enumerate({"LLLL"}, 3);
    CHECK(count_at(a, 0) == 14);
    // at most 4 buses: + S(4,4) = 15 (Bell number B4).
    CHECK(count_at(enumerate({"LLLL"}, 4), 0) == 15);
    // 5 ends, 3 buses: 1 + 15 + 25 = 41.
    CHECK(count_at(enumerate({"LLLLL"}, 3), 0) == 41);
}

ACE_TEST(load_first_needs_a_line_on_its_bus) {
    // load at position 0 on bus 1, three lines free on 2 buses: 8 tuples minus "all lines on bus 2" = 7.
    CHECK(count_at(enumerate({"dLLL"}), 0) == 7);
}

ACE_TEST(no_alone_element_when_add_alone_line_false) {
    // 4 lines, 2 buses, each bus >= 2 elements: {all} + 3 splits 2+2 = 4.
    CHECK(count_at(enumerate({"LLLL"}, 2, false), 0) == 4);
    // 3 elements: only "all on bus 1" survives -> dropped.
    CHECK(count_at(enumerate({"LLL"}, 2, false), 0) == 0);
}

ACE_TEST(one_busbar_gives_no_action) {
    CHECK(enumerate({"LLLL", "LL"}, 1).n_actions() == 0);
}

ACE_TEST(order_is_lexicographic) {
    auto a = enumerate({"LLL"});
    CHECK(a.patterns() == std::vector<std::int8_t>({1, 1, 1, 1, 1, 2, 1, 2, 1, 1, 2, 2}));
    auto b = enumerate({"LLL"}, 3);
    // restricted growth strings of length 3 starting with 1: 111 112 121 122 123
    CHECK(b.patterns() == std::vector<std::int8_t>({1, 1, 1, 1, 1, 2, 1, 2, 1, 1, 2, 2, 1, 2, 3}));
}

ACE_TEST(set_bus_places_the_pattern_at_the_substation) {
    auto a = enumerate({"Ld", "LLg", "LL"});  // sub 0: no action (line + load)
    CHECK(count_at(a, 0) == 0);
    CHECK(count_at(a, 1) == 3);  // (1,1,1) (1,1,2)x gen alone (1,2,1) (1,2,2)
    CHECK(count_at(a, 2) == 2);
    const auto dim = a.layout().dim_topo();
    CHECK(dim == 8);  // + the 1-element substation holding the leftover line end
    std::vector<std::int8_t> v(static_cast<std::size_t>(dim));
    a.set_bus(a.sub_offsets()[2] + 1, v.data());
    CHECK(v == std::vector<std::int8_t>({0, 0, 0, 0, 0, 1, 2, 0}));
    a.set_bus(a.sub_offsets()[1] + 1, v.data());
    CHECK(v == std::vector<std::int8_t>({0, 0, 1, 2, 1, 0, 0, 0}));
    CHECK(a.substation()[0] == 1 && a.substation()[4] == 2);
}

ACE_TEST(matches_grid2op_brute_force_on_random_substations) {
    std::mt19937 rng(12345);
    for (int trial = 0; trial < 300; ++trial) {
        const int n = 1 + static_cast<int>(rng() % 8);
        const int K = 2 + static_cast<int>(rng() % 3);
        const bool alone = rng() % 2;
        std::string kinds;
        std::vector<bool> is_line;
        for (int i = 0; i < n; ++i) {
            const bool line = rng() % 3 != 0;
            kinds.push_back(line ? 'L' : "dgs"[rng() % 3]);
            is_line.push_back(line);
        }
        auto a = enumerate({kinds}, K, alone);
        auto expected = brute_force(n, K, is_line, alone);
        bool same = static_cast<std::size_t>(count_at(a, 0)) == expected.size();
        for (std::size_t k = 0; same && k < expected.size(); ++k)
            for (int i = 0; i < n; ++i) same = same && a.patterns()[k * n + i] == expected[k][i];
        CHECK(same);
    }
}

ACE_TEST(footprint_lists_the_lines_and_other_elements) {
    auto a = enumerate({"LdL", "LL"});  // lines: (0,0)-(0,2) = line 0 both ends at sub 0; (1,0)-(1,1) = line 1
    auto f = a.footprint();
    CHECK(f.n_actions() == a.n_actions());
    CHECK(f.n_groups() == 2);
    const auto e = a.sub_offsets()[1];  // first action of sub 1
    CHECK(f.sub_idx()[e] == 1 && f.sub_sets_other()[e] == 0);
    CHECK(f.sub_idx()[0] == 0 && f.sub_sets_other()[0] == 1);
    // line 0 has both ends at sub 0: listed twice per entry, once among the action's distinct bus lines
    CHECK(f.sub_line_ptr()[1] - f.sub_line_ptr()[0] == 2);
    CHECK(f.bus_line_ptr()[1] - f.bus_line_ptr()[0] == 1);
}

ACE_TEST(layout_rejects_inconsistent_input) {
    // two elements at one position
    CHECK_THROWS(GridLayout({2}, {0}, {0}, {0}, {0}, {}, {}, {}, {}, {}, {}), std::invalid_argument);
    // a position holding nothing
    CHECK_THROWS(GridLayout({3}, {0}, {0}, {0}, {1}, {}, {}, {}, {}, {}, {}), std::invalid_argument);
    // substation out of range, position out of range
    CHECK_THROWS(GridLayout({1}, {1}, {0}, {}, {}, {}, {}, {}, {}, {}, {}), std::out_of_range);
    CHECK_THROWS(GridLayout({1}, {0}, {1}, {}, {}, {}, {}, {}, {}, {}, {}), std::out_of_range);
    // mismatched lengths, negative sub_info
    CHECK_THROWS(GridLayout({1}, {0}, {}, {}, {}, {}, {}, {}, {}, {}, {}), std::invalid_argument);
    CHECK_THROWS(GridLayout({-1}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}), std::invalid_argument);
    CHECK_THROWS(GridLayout({2}, {}, {}, {}, {}, {0}, {0}, {}, {}, {}, {}), std::invalid_argument);
}

ACE_TEST(enumeration_rejects_bad_options) {
    EnumerationOptions o;
    o.n_busbar_per_sub = 0;
    CHECK_THROWS(BusAssignmentActions(make_layout({"LL"}), o), std::invalid_argument);
    o.n_busbar_per_sub = 128;
    CHECK_THROWS(BusAssignmentActions(make_layout({"LL"}), o), std::invalid_argument);
    o.n_busbar_per_sub = 2;
    o.max_actions = 5;
    CHECK_THROWS(BusAssignmentActions(make_layout({"LLLL"}), o), std::invalid_argument);  // 8 > 5
    o.max_actions = 8;
    CHECK(BusAssignmentActions(make_layout({"LLLL"}), o).n_actions() == 8);
}

ACE_TEST(empty_and_tiny_substations_give_nothing) {
    auto a = enumerate({"", "L", "d"});
    CHECK(a.n_actions() == 0);
    CHECK(a.sub_offsets().size() == a.layout().n_sub() + 1u);
}
