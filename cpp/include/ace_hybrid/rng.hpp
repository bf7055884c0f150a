// Portable, seedable pseudo-random generator: xoshiro256** (Blackman & Vigna, 2018) seeded by splitmix64.
//
// No std:: distributions are used anywhere (their output differs between standard libraries), so a given seed
// yields the same stream on every platform and compiler. The full state is 4 uint64 words; it can be read and
// restored exactly (get_state / set_state), which is what makes save/load and "two buffers seeded alike return
// identical batches" possible.
//
// Thread safety: none (a Rng is owned by one object whose own lock guards it).
#pragma once
#include <array>
#include <cstdint>
#include <stdexcept>

namespace ace_hybrid {

class Rng {
public:
    using State = std::array<std::uint64_t, 4>;

    explicit Rng(std::uint64_t seed = 0) { reseed(seed); }

    // Fills the state from splitmix64(seed). O(1). splitmix64 never yields four zero words in a row.
    void reseed(std::uint64_t seed) {
        std::uint64_t x = seed;
        for (auto& w : s_) w = splitmix64(x);
    }

    // Next 64 random bits. O(1).
    std::uint64_t next_u64() {
        const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const std::uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    // Uniform double in [0, 1) from the top 53 bits: k * 2^-53, k in [0, 2^53). O(1). Never returns 1.0.
    double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

    const State& state() const { return s_; }

    // Restores a state previously read with state(). Throws std::invalid_argument for the all-zero state (the one
    // fixed point of xoshiro, which would then return zeros forever).
    void set_state(const State& s) {
        if (s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0)
            throw std::invalid_argument("rng state must not be all zero (xoshiro256** would only return zeros)");
        s_ = s;
    }

    static std::uint64_t splitmix64(std::uint64_t& x) {
        std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }

private:
    static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    State s_{};
};

}  // namespace ace_hybrid
