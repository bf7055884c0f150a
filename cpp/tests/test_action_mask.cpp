// Legality rules of the masker on a small hand-made catalog (3 substations, 4 lines).
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "ace_hybrid/action_mask.hpp"
#include "test_util.hpp"

using namespace ace_hybrid;

namespace {

// 0: do nothing
// 1: set buses at sub 0 (has a load; lines 0, 1)
// 2: set buses at sub 1 (lines only: 1, 2)
// 3: set line 3 status +1        4: set line 3 status -1
// 5: set buses at sub 0 and sub 2 (sub 2: a gen; lines 2, 3)
// 6: same footprint as 1
ActionFootprint catalog() {
    return ActionFootprint(3, 4, {0, 0, 1, 2, 2, 2, 4, 5}, {0, 1, 0, 2, 0}, {1, 0, 1, 1, 1}, {0, 2, 4, 6, 8, 10},
                           {0, 1, 1, 2, 0, 1, 2, 3, 0, 1}, {0, 0, 0, 0, 1, 2, 2, 2}, {3, 3}, {1, -1});
}

struct State {
    std::vector<std::uint8_t> status{1, 1, 1, 1};
    std::vector<std::int32_t> cd_line{0, 0, 0, 0};
    std::vector<std::int32_t> cd_sub{0, 0, 0};
};

std::vector<int> run(const LegalityMasker& m, const State& s) {
    std::unique_ptr<bool[]> out(new bool[static_cast<std::size_t>(m.n_actions())]);
    m.mask(s.status.data(), s.cd_line.data(), s.cd_sub.data(), out.get());
    return std::vector<int>(out.get(), out.get() + m.n_actions());
}

LegalityMasker masker(std::int32_t max_sub = 1, std::int32_t max_line = 1) {
    LegalityRules r;
    r.max_sub_changed = max_sub;
    r.max_line_status_changed = max_line;
    return LegalityMasker(catalog(), r);
}

}  // namespace

ACE_TEST(calm_grid_allows_every_single_substation_action) {
    CHECK(run(masker(), State{}) == std::vector<int>({1, 1, 1, 1, 1, 0, 1}));  // 5 changes two substations
    CHECK(run(masker(2), State{}) == std::vector<int>({1, 1, 1, 1, 1, 1, 1}));
}

ACE_TEST(substation_cooldown_blocks_its_actions_only) {
    State s;
    s.cd_sub[0] = 2;
    CHECK(run(masker(2), s) == std::vector<int>({1, 0, 1, 1, 1, 0, 0}));
}

ACE_TEST(setting_a_bus_on_a_disconnected_line_is_a_reconnection) {
    State s;
    s.status[1] = 0;  // line 1 (subs 0 and 1) disconnected, no cooldown: one line change, allowed
    CHECK(run(masker(), s) == std::vector<int>({1, 1, 1, 1, 1, 0, 1}));
    s.cd_line[1] = 3;  // ... but not during its cooldown
    CHECK(run(masker(), s) == std::vector<int>({1, 0, 0, 1, 1, 0, 0}));
    // a connected line's cooldown does not matter to bus assignments
    State t;
    t.cd_line[0] = 3;
    CHECK(run(masker(), t) == std::vector<int>({1, 1, 1, 1, 1, 0, 1}));
}

ACE_TEST(two_reconnections_exceed_the_line_limit) {
    State s;
    s.status[1] = s.status[2] = 0;
    CHECK(run(masker(), s)[2] == 0);
    CHECK(run(masker(1, 2), s)[2] == 1);
}

ACE_TEST(substation_with_only_disconnected_lines_is_not_impacted) {
    State s;
    s.status[1] = s.status[2] = 0;
    s.cd_sub[1] = 5;  // its only elements are ends of disconnected lines: no substation change, the cooldown is moot
    CHECK(run(masker(1, 2), s)[2] == 1);
    s.status[2] = 1;  // now line 2 is connected: the substation is impacted and in cooldown
    CHECK(run(masker(1, 2), s)[2] == 0);
    // a load / generator always makes the substation impacted
    State t;
    t.status[0] = t.status[1] = 0;
    t.cd_sub[0] = 1;
    CHECK(run(masker(1, 2), t)[1] == 0);
}

ACE_TEST(line_status_actions_count_even_on_connected_lines) {
    State s;
    s.cd_line[3] = 1;  // line 3 is connected; setting +1 still "impacts" it
    CHECK(run(masker(), s) == std::vector<int>({1, 1, 1, 0, 0, 0, 1}));
    LegalityRules r;
    r.max_line_status_changed = 0;
    CHECK(run(LegalityMasker(catalog(), r), State{}) == std::vector<int>({1, 1, 1, 0, 0, 0, 1}));
}

ACE_TEST(limits_apply_per_area) {
    LegalityRules r;
    r.sub_area = {0, 1, 1};
    r.line_area = {0, 0, 1, 1};
    LegalityMasker m(catalog(), r);
    CHECK(m.n_area() == 2);
    CHECK(run(m, State{})[5] == 1);  // subs 0 and 2 are in different areas
    r.sub_area = {0, 1, 0};
    CHECK(run(LegalityMasker(catalog(), r), State{})[5] == 0);
}

ACE_TEST(rules_can_be_switched_off) {
    State s;
    s.cd_sub[0] = 2;
    LegalityRules r;
    r.check_cooldowns = false;
    CHECK(run(LegalityMasker(catalog(), r), s) == std::vector<int>({1, 1, 1, 1, 1, 0, 1}));
    r.check_cooldowns = true;
    r.check_limits = false;
    CHECK(run(LegalityMasker(catalog(), r), State{}) == std::vector<int>({1, 1, 1, 1, 1, 1, 1}));
}

ACE_TEST(equal_footprints_share_a_group) {
    auto f = catalog();
    CHECK(f.n_groups() == 6);
    CHECK(f.group_of()[1] == f.group_of()[6]);
    State s;
    s.status[1] = 0;
    s.cd_line[1] = 2;
    auto m = masker();
    std::unique_ptr<bool[]> g(new bool[6]);
    m.group_mask(s.status.data(), s.cd_line.data(), s.cd_sub.data(), g.get());
    auto full = run(m, s);
    for (std::size_t a = 0; a < full.size(); ++a) CHECK(full[a] == static_cast<int>(g[f.group_of()[a]]));
}

ACE_TEST(batch_equals_rows) {
    auto m = masker();
    State a, b;
    b.status[1] = 0;
    b.cd_sub[2] = 1;
    std::vector<std::uint8_t> st(a.status);
    st.insert(st.end(), b.status.begin(), b.status.end());
    std::vector<std::int32_t> cl(a.cd_line), cs(a.cd_sub);
    cl.insert(cl.end(), b.cd_line.begin(), b.cd_line.end());
    cs.insert(cs.end(), b.cd_sub.begin(), b.cd_sub.end());
    std::unique_ptr<bool[]> out(new bool[14]);
    m.mask_batch(2, st.data(), cl.data(), cs.data(), out.get());
    auto ra = run(m, a), rb = run(m, b);
    for (int k = 0; k < 7; ++k) CHECK(out[k] == static_cast<bool>(ra[k]) && out[7 + k] == static_cast<bool>(rb[k]));
}

ACE_TEST(factories_and_concatenation) {
    auto dn = ActionFootprint::do_nothing(3, 4, 2);
    auto ls = ActionFootprint::line_status(3, 4, {0, 3}, {1, -1});
    auto cat = catalog();
    auto all = ActionFootprint::concatenate({&dn, &cat, &ls});
    CHECK(all.n_actions() == 2 + 7 + 2);
    CHECK(all.status_idx() == std::vector<std::int32_t>({3, 3, 0, 3}));
    CHECK(all.sub_idx() == cat.sub_idx());
    auto m = LegalityMasker(all, LegalityRules{});
    State s;
    s.cd_line[0] = 1;
    auto r = run(m, s);
    CHECK(r == std::vector<int>({1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1}));
    auto other = ActionFootprint::do_nothing(4, 4);
    CHECK_THROWS(ActionFootprint::concatenate({&dn, &other}), std::invalid_argument);
    CHECK_THROWS(ActionFootprint::concatenate({}), std::invalid_argument);
}

ACE_TEST(footprint_rejects_malformed_csr) {
    // pointer not starting at 0 / decreasing / wrong end
    CHECK_THROWS(ActionFootprint(1, 1, {1, 1}, {0}, {1}, {0, 0}, {}, {0, 0}, {}, {}), std::invalid_argument);
    CHECK_THROWS(ActionFootprint(1, 1, {0, 2}, {0}, {1}, {0, 0}, {}, {0, 0}, {}, {}), std::invalid_argument);
    // substation / line ids out of range
    CHECK_THROWS(ActionFootprint(1, 1, {0, 1}, {1}, {1}, {0, 0}, {}, {0, 0}, {}, {}), std::out_of_range);
    CHECK_THROWS(ActionFootprint(1, 1, {0, 1}, {0}, {1}, {0, 1}, {1}, {0, 0}, {}, {}), std::out_of_range);
    // duplicate substation in one action, duplicate status line, bad status value
    CHECK_THROWS(ActionFootprint(1, 1, {0, 2}, {0, 0}, {1, 1}, {0, 0, 0}, {}, {0, 0}, {}, {}), std::invalid_argument);
    CHECK_THROWS(ActionFootprint(1, 1, {0, 0}, {}, {}, {0}, {}, {0, 2}, {0, 0}, {1, 1}), std::invalid_argument);
    CHECK_THROWS(ActionFootprint(1, 1, {0, 0}, {}, {}, {0}, {}, {0, 1}, {0}, {0}), std::invalid_argument);
    CHECK_THROWS(ActionFootprint(-1, 1, {0}, {}, {}, {0}, {}, {0}, {}, {}), std::invalid_argument);
    CHECK_THROWS(ActionFootprint::do_nothing(1, 1, -1), std::invalid_argument);
}

ACE_TEST(masker_rejects_bad_rules) {
    LegalityRules r;
    r.max_sub_changed = -1;
    CHECK_THROWS(LegalityMasker(catalog(), r), std::invalid_argument);
    r.max_sub_changed = 1;
    r.sub_area = {0, 0};
    CHECK_THROWS(LegalityMasker(catalog(), r), std::invalid_argument);
    r.sub_area = {0, 0, 3};
    CHECK_THROWS(LegalityMasker(catalog(), r), std::out_of_range);
    r.sub_area = {0, 0, 0};
    r.line_area = {0, 0, 0, -1};
    CHECK_THROWS(LegalityMasker(catalog(), r), std::out_of_range);
}
