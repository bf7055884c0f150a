// Unit tests of the mixed replay core (cpp/include/ace_hybrid/replay.hpp), without Python.
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "ace_hybrid/replay.hpp"
#include "test_util.hpp"

using namespace ace_hybrid;

namespace {

constexpr std::size_t kD = 3;

struct Out {
    explicit Out(std::size_t n)
        : obs(n * kD), next(n * kD), reward(n), weight(n), orig(n), imp(n), action(n), index(n), episode(n),
          decision(n), done(new bool[n]), trunc(new bool[n]), llm(new bool[n]), valid(new bool[n]) {}
    std::vector<float> obs, next, reward, weight, orig, imp;
    std::vector<std::int64_t> action, index, episode, decision;
    std::unique_ptr<bool[]> done, trunc, llm, valid;
    BatchOut out() {
        return BatchOut{kD, obs.data(), action.data(), reward.data(), next.data(), done.get(), trunc.get(),
                        weight.data(), index.data(), llm.get(), orig.data(), episode.data(), decision.data(),
                        imp.data(), valid.get()};
    }
};

// One transition's input columns (n = 1); the LLM-only columns stay unset.
TransitionsIn one(const float* obs, const float* nxt, const std::int64_t* action, const float* reward, const bool* done,
                  const bool* trunc, const std::int64_t* episode, const std::int64_t* decision) {
    TransitionsIn in;
    in.n = 1;
    in.obs_dim = kD;
    in.obs = obs;
    in.next_obs = nxt;
    in.action = action;
    in.reward = reward;
    in.done = done;
    in.truncated = trunc;
    in.episode = episode;
    in.decision = decision;
    return in;
}

// Adds one RL transition whose observations encode (episode, decision).
std::int64_t add(MixedReplay& r, std::int64_t ep, std::int64_t t, bool done = false, bool trunc = false) {
    const float obs[kD] = {static_cast<float>(ep), static_cast<float>(t), 0.f};
    const float nxt[kD] = {static_cast<float>(ep), static_cast<float>(t + 1), 0.f};
    const std::int64_t action = t;
    const float reward = static_cast<float>(t);
    const TransitionsIn in = one(obs, nxt, &action, &reward, &done, &trunc, &ep, &t);
    std::int64_t h = -1;
    r.add_rl(in, &h);
    return h;
}

// Adds one LLM transition with the given improvement and validation flag.
std::int64_t add_llm(MixedReplay& r, std::int64_t i, float improvement, bool valid) {
    const float obs[kD] = {9.f, static_cast<float>(i), 1.f};
    const float nxt[kD] = {9.f, static_cast<float>(i + 1), 1.f};
    const std::int64_t action = i, episode = 9;
    const float reward = 0.f;
    const bool no = false;
    TransitionsIn in = one(obs, nxt, &action, &reward, &no, &no, &episode, &i);
    in.improvement = &improvement;
    in.valid = &valid;
    std::int64_t h = -1;
    r.add_llm(in, &h);
    return h;
}

ReplayConfig config(std::uint64_t cap = 10, std::uint64_t llm = 4) {
    ReplayConfig c;
    c.obs_dim = kD;
    c.rl_capacity = cap;
    c.llm_capacity = llm;
    return c;
}

}  // namespace

ACE_TEST(replay_rejects_bad_configs) {
    ReplayConfig c = config();
    c.rl_capacity = 2;
    CHECK_THROWS(MixedReplay(c, 0), std::invalid_argument);
    c = config();
    c.alpha = std::nan("");
    CHECK_THROWS(MixedReplay(c, 0), std::invalid_argument);
    c = config();
    c.obs_dim = 1ULL << 20;
    c.rl_capacity = 1ULL << 30;
    CHECK_THROWS(MixedReplay(c, 0), std::invalid_argument);
}

ACE_TEST(replay_refuses_negative_actions_from_any_caller) {
    MixedReplay r(config(), 0);
    const float obs[kD] = {0.f, 0.f, 0.f};
    const std::int64_t action = -1, ep = 0, decision = 0;
    const float reward = 0.f;
    const bool no = false;
    const TransitionsIn in = one(obs, obs, &action, &reward, &no, &no, &ep, &decision);
    std::int64_t h = -1;
    CHECK_THROWS(r.add_rl(in, &h), std::invalid_argument);  // the invariant load() checks holds for C++ callers too
    CHECK(r.rl_size() == 0 && r.check_invariants().empty());
}

ACE_TEST(replay_chains_observations_and_pairs_next_obs_across_wrap) {
    MixedReplay r(config(7), 1);
    std::vector<std::int64_t> handles;
    for (int ep = 0; ep < 5; ++ep)
        for (int t = 0; t < 4; ++t) handles.push_back(add(r, ep, t, t == 3));
    CHECK(r.check_invariants().empty());
    // Each episode of 4 chained transitions uses 5 slots; capacity 7 keeps the newest transitions only.
    Out o(64);
    r.sample(64, 0.4, o.out());
    for (std::size_t i = 0; i < 64; ++i) {
        CHECK(o.obs[i * kD] == o.next[i * kD]);              // same episode
        CHECK(o.obs[i * kD + 1] + 1 == o.next[i * kD + 1]);  // next decision
        CHECK(o.decision[i] == static_cast<std::int64_t>(o.obs[i * kD + 1]));
        CHECK(o.done[i] == (o.decision[i] == 3));
    }
    std::size_t live = 0;
    for (auto h : handles) {
        Out g(1);
        try {
            r.get(&h, 1, g.out());
            ++live;
            CHECK(g.obs[1] + 1 == g.next[1]);
        } catch (const std::out_of_range&) {
        }
    }
    CHECK(live == r.rl_size());
}

ACE_TEST(replay_llm_partition_is_sampled_from_its_first_valid_item) {
    ReplayConfig c = config(200, 8);
    c.beta = 0.25;
    MixedReplay r(c, 3);
    for (int ep = 0; ep < 4; ++ep)
        for (int t = 0; t < 10; ++t) add(r, ep, t, t == 9);
    Out o(128);
    add_llm(r, 0, 0.5f, false);  // invalid items are never sampled: the batch stays RL only
    r.sample(128, 0.4, o.out());
    for (std::size_t i = 0; i < 128; ++i) CHECK(!o.llm[i]);
    add_llm(r, 1, 0.5f, true);
    add_llm(r, 2, -1.0f, true);
    add_llm(r, 3, 2.0f, true);
    for (int k = 0; k < 20; ++k) {
        r.sample(128, 1.0, o.out());
        std::size_t from_llm = 0;
        for (std::size_t i = 0; i < 128; ++i) from_llm += o.llm[i] ? 1 : 0;
        CHECK(from_llm == 3);  // min(round(0.25 * 128), 3 valid items), RL rows first
        for (std::size_t i = 0; i < 125; ++i) CHECK(!o.llm[i]);
    }
    for (int t = 4; t < 40; ++t) add_llm(r, t, 0.0f, true);  // 8 valid live items (capacity 8)
    r.sample(128, 0.4, o.out());
    std::size_t from_llm = 0;
    for (std::size_t i = 0; i < 128; ++i) from_llm += o.llm[i] ? 1 : 0;
    CHECK(from_llm == 8);
    r.sample(16, 0.4, o.out());
    from_llm = 0;
    for (std::size_t i = 0; i < 16; ++i) from_llm += o.llm[i] ? 1 : 0;
    CHECK(from_llm == 4);  // the nominal share once the partition holds enough
}

ACE_TEST(replay_stale_handles_are_skipped_by_updates) {
    MixedReplay r(config(5), 1);
    const std::int64_t old = add(r, 0, 0, true);
    for (int t = 0; t < 6; ++t) add(r, 1, t);
    const double p = 3.0;
    CHECK(r.update_priorities(&old, &p, 1) == 0);
    CHECK(r.update_rewards(&old, &p, 1) == 0);
    const std::int64_t future = 1000;
    CHECK_THROWS(r.update_priorities(&future, &p, 1), std::out_of_range);
    const double nan = std::nan("");
    const std::int64_t live = add(r, 1, 6);
    CHECK_THROWS(r.update_priorities(&live, &nan, 1), std::invalid_argument);
    CHECK(r.update_priorities(&live, &p, 1) == 1);
    CHECK(r.max_priority() == 3.0);
    CHECK(r.check_invariants().empty());
}

ACE_TEST(replay_save_load_round_trip_and_corruption) {
    MixedReplay a(config(11, 3), 5);
    for (int t = 0; t < 9; ++t) add(a, 2, t);
    const std::string path = "/tmp/ace_replay_cpp_test.bin";
    a.save(path);
    MixedReplay b(config(4, 1), 0);
    b.load(path);
    Out oa(16), ob(16);
    a.sample(16, 0.4, oa.out());
    b.sample(16, 0.4, ob.out());
    CHECK(oa.index == ob.index && oa.obs == ob.obs && oa.weight == ob.weight);
    // Only the used slots are written: the same adds into a much larger buffer give a file of the same size.
    MixedReplay big(config(5000, 3000), 5);
    for (int t = 0; t < 9; ++t) add(big, 2, t);
    const std::string big_path = "/tmp/ace_replay_cpp_test_big.bin";
    big.save(big_path);
    auto file_size = [](const std::string& p) { return std::ifstream(p, std::ios::binary | std::ios::ate).tellg(); };
    CHECK(file_size(big_path) == file_size(path));
    CHECK(file_size(path) < static_cast<std::streamoff>(200 + 10 * (4 * kD + 64)));  // 10 used slots
    std::remove(big_path.c_str());
    // Flip one byte in the middle: checksum mismatch, b unchanged.
    {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(200);
        char c;
        f.read(&c, 1);
        c ^= 0x10;
        f.seekp(200);
        f.write(&c, 1);
    }
    CHECK_THROWS(b.load(path), std::invalid_argument);
    CHECK(b.rl_size() == a.rl_size());
    std::remove(path.c_str());
    CHECK_THROWS(b.load(path), std::system_error);
}

namespace {

// Overwrites the 8 bytes at `offset` of a file (no checksum update).
void poke_u64(const std::string& path, std::streamoff offset, std::uint64_t value) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offset);
    f.write(reinterpret_cast<const char*>(&value), sizeof(value));
}

// Byte offset of the header's rl_capacity field: magic 8, version 4, byte-order tag 4, obs_dim 8.
constexpr std::streamoff kRlCapacityOffset = 8 + 4 + 4 + 8;

bool message_has(const std::exception& e, const char* text) {
    return std::string(e.what()).find(text) != std::string::npos;
}

}  // namespace

ACE_TEST(checksum_streamed_through_a_small_buffer_equals_the_block_checksum) {
    // Sizes around the reader's 1 MiB chunk and odd tails: hash_through(n) must equal checksum_block over n bytes.
    const std::uint64_t chunk = CheckedFileReader::kChunk;
    const std::vector<std::uint64_t> sizes = {0, 1, 7, 8, 13, chunk - 1, chunk, chunk + 5, 2 * chunk + 13};
    std::vector<unsigned char> data(2 * chunk + 13);
    Rng rng;
    rng.reseed(3);
    for (auto& b : data) b = static_cast<unsigned char>(rng.uniform() * 256);
    const std::string path = "/tmp/ace_checksum_cpp_test.bin";
    {
        std::ofstream f(path, std::ios::binary);
        f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    }
    for (std::uint64_t n : sizes) {
        CheckedFileReader r(path);
        r.hash_through(n);
        CHECK(r.hash() == checksum_block(kChecksumSeed, data.data(), n));
        CHECK(r.offset() == n);
    }
    // Two blocks in a row, then a second pass from the first block's end gives the same value.
    CheckedFileReader r(path);
    r.hash_through(chunk + 3);
    const std::uint64_t at = r.offset(), h = r.hash();
    r.hash_through(chunk);
    const std::uint64_t both = r.hash();
    const std::uint64_t first = checksum_block(kChecksumSeed, data.data(), chunk + 3);
    CHECK(both == checksum_block(first, data.data() + chunk + 3, chunk));
    r.seek(at, h);
    std::vector<unsigned char> second(chunk);
    r.read(second.data(), second.size());
    CHECK(r.hash() == both);
    CHECK_THROWS(r.hash_through(data.size()), std::invalid_argument);  // past the end: "file is truncated"
    std::remove(path.c_str());
}

ACE_TEST(replay_a_corrupted_capacity_is_a_checksum_error_not_an_allocation) {
    // 9 transitions in a buffer of capacity 5000: the file holds the 10 used slots, so a capacity field that reads
    // 2^36 (824 GB of observations at obs_dim 3, within the config limits) keeps the file's size. load() must fail
    // on the checksum before it allocates; an allocation first would throw std::bad_alloc (or worse) instead.
    MixedReplay a(config(5000, 3), 5);
    for (int t = 0; t < 9; ++t) add(a, 2, t);
    const std::string path = "/tmp/ace_replay_cpp_capacity.bin";
    a.save(path);
    for (std::uint64_t cap : {std::uint64_t(1) << 24, std::uint64_t(1) << 36, std::uint64_t(5001)}) {
        poke_u64(path, kRlCapacityOffset, cap);
        MixedReplay b(config(4, 1), 0);
        bool named = false;
        try {
            b.load(path);
        } catch (const ReplayFileError& e) {
            named = message_has(e, "checksum mismatch") && message_has(e, path.c_str());
        }
        CHECK(named);
        CHECK(b.config().rl_capacity == 4);  // unchanged
    }
    std::remove(path.c_str());
}

ACE_TEST(replay_num_actions_limits_adds_and_the_files_a_buffer_loads) {
    CHECK_THROWS(MixedReplay(config(), 0, std::uint64_t(1) << 63), std::invalid_argument);
    MixedReplay limited(config(), 0, 5);
    CHECK(limited.num_actions() == 5);
    add(limited, 0, 4);  // add() stores action = t
    CHECK_THROWS(add(limited, 0, 5), std::invalid_argument);
    CHECK_THROWS(add_llm(limited, 7, 0.f, true), std::invalid_argument);
    CHECK(limited.rl_size() == 1 && limited.llm_size() == 0 && limited.check_invariants().empty());
    MixedReplay any(config(), 0);
    add(any, 0, 3);
    add_llm(any, 6, 0.f, true);  // action 6
    const std::string path = "/tmp/ace_replay_cpp_actions.bin";
    any.save(path);
    bool named = false;
    try {
        limited.load(path);
    } catch (const ReplayFileError& e) {
        named = message_has(e, "llm.action[slot 0] = 6 is not an action of this buffer: out of range [0, 5)");
    }
    CHECK(named);
    CHECK(limited.rl_size() == 1);  // unchanged
    MixedReplay wide(config(), 0, 7);
    wide.load(path);
    CHECK(wide.llm_size() == 1 && wide.num_actions() == 7 && wide.check_invariants().empty());
    std::remove(path.c_str());
}

ACE_TEST(replay_state_bytes_is_what_the_constructor_allocates) {
    for (auto [cap, llm] : {std::pair<std::uint64_t, std::uint64_t>{3, 1}, {10, 4}, {4097, 300}, {70000, 17}}) {
        const ReplayConfig c = config(cap, llm);
        MixedReplay r(c, 0);
        CHECK(r.nbytes() == MixedReplay::state_bytes(c));
        CHECK(r.rl_nbytes() < r.nbytes());
    }
}

ACE_TEST(replay_one_writer_one_sampler_threads) {
    MixedReplay r(config(257, 8), 9);
    for (int t = 0; t < 20; ++t) add(r, 0, t);
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0};
    std::thread sampler([&] {
        Out o(32);
        std::vector<double> pr(32, 0.5);
        while (!stop) {
            r.sample(32, 0.4, o.out());
            for (std::size_t i = 0; i < 32; ++i)
                if (o.obs[i * kD + 1] + 1 != o.next[i * kD + 1] || o.obs[i * kD] != o.next[i * kD]) ++bad;
            r.update_priorities(o.index.data(), pr.data(), 32);
        }
    });
    for (int ep = 1; ep < 300; ++ep)
        for (int t = 0; t < 10; ++t) add(r, ep, t, t == 9);
    stop = true;
    sampler.join();
    CHECK(bad == 0);
    CHECK(r.check_invariants().empty());
}
