// A small seeded pseudo-random generator for the scheduler: the per-run node order and the Random
// policy's draws. xoshiro256** seeded through SplitMix64, with unbiased bounded draws (Lemire's
// method), so a seed gives the same sequence on every platform and compiler, unlike the
// implementation-defined std:: distributions.
// Thread-safety: a value type; one owner.
#pragma once

#include <cstdint>

namespace tessera::sched {

__extension__ typedef unsigned __int128 Uint128;  // GCC's 128-bit type, for the bounded draw.

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) s = SplitMix(seed);
  }

  // The next 64 random bits.
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n). n must be positive.
  uint64_t Uniform(uint64_t n) {
    Uint128 m = static_cast<Uint128>(Next()) * n;
    auto low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<Uint128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t s_[4];
};

}  // namespace tessera::sched
