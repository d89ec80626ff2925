// The refit's state in a checkpoint (checkpoint_profile.h): what is saved
// comes back bit for bit, and a damaged, cut or foreign entry is refused in
// one line that names the file and the entry, never half restored.
#include "train/checkpoint_profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fulcrum/core/bytes.h"

namespace fulcrum::train {
namespace {

constexpr double kKvBytes = 2.0 * 32 * 2 * 8;  // hidden 32, 2 layers, float64
constexpr std::int32_t kGroups = 8;            // random states' largest group

CostProfile start_profile() {
  CostProfile p;
  p.name = "cpu_gloo";
  p.tile_seconds = 1e-5;
  p.token_seconds = 2e-7;
  p.slot_seconds = 6.6e-3;
  p.kv_bytes_per_token = 512;
  p.intra_node_bytes_per_second = 1e9;
  p.inter_node_bytes_per_second = 1e9;
  p.latency_seconds = 1e-4;
  p.ranks_per_node = 8;
  return p;
}

// A state drawn at random: a profile of odd doubles, windows of 0 to 5
// steps of 0 to 7 samples.
ProfileRefit::State random_state(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(1e-9, 1.0);
  std::uniform_int_distribution<std::int64_t> count(0, 1 << 20);
  ProfileRefit::State state;
  state.profile = start_profile();
  state.profile.tile_seconds = unit(rng) * 1e-3;
  state.profile.token_seconds = unit(rng) * 1e-5;
  state.profile.slot_seconds = unit(rng) * 1e-2;
  state.profile.intra_node_bytes_per_second = 1e6 + unit(rng) * 1e10;
  state.profile.inter_node_bytes_per_second = state.profile.intra_node_bytes_per_second;
  state.profile.exchange_overlap = unit(rng);
  state.profile.row_token_seconds = unit(rng) * 1e-5;
  state.profile.partial_tile_seconds = unit(rng) * 1e-4;
  state.profile.name = "auto" + std::to_string(rng() % 1000);
  state.refits = static_cast<std::int64_t>(rng() % 50);
  const std::size_t steps = rng() % 6;
  for (std::size_t i = 0; i < steps; ++i) {
    std::vector<calibrate::SlotSample>& step = state.window.emplace_back();
    const std::size_t n = rng() % 8;
    for (std::size_t j = 0; j < n; ++j) {
      const auto group = static_cast<std::int32_t>(1 + rng() % kGroups);
      const std::int64_t tiles = count(rng);
      // -1 (not recorded) up to the tiles.
      const std::int64_t partial =
          static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(tiles + 2)) - 1;
      step.push_back({group, count(rng), tiles, static_cast<std::int64_t>(rng() % group),
                      count(rng), unit(rng), count(rng), partial});
    }
  }
  return state;
}

// Field by field, every double by its bits.
void expect_same_state(const ProfileRefit::State& a, const ProfileRefit::State& b) {
  const auto bits = [](double v) {
    std::uint64_t out = 0;
    std::memcpy(&out, &v, sizeof out);
    return out;
  };
  EXPECT_EQ(profile_fingerprint(a.profile), profile_fingerprint(b.profile));
  EXPECT_EQ(a.profile.name, b.profile.name);
  EXPECT_EQ(bits(a.profile.exchange_overlap), bits(b.profile.exchange_overlap));
  EXPECT_EQ(bits(a.profile.row_token_seconds), bits(b.profile.row_token_seconds));
  EXPECT_EQ(bits(a.profile.partial_tile_seconds), bits(b.profile.partial_tile_seconds));
  EXPECT_EQ(a.refits, b.refits);
  ASSERT_EQ(a.window.size(), b.window.size());
  for (std::size_t i = 0; i < a.window.size(); ++i) {
    ASSERT_EQ(a.window[i].size(), b.window[i].size());
    for (std::size_t j = 0; j < a.window[i].size(); ++j) {
      const calibrate::SlotSample& x = a.window[i][j];
      const calibrate::SlotSample& y = b.window[i][j];
      EXPECT_EQ(x.group, y.group);
      EXPECT_EQ(x.tokens, y.tokens);
      EXPECT_EQ(x.tiles, y.tiles);
      EXPECT_EQ(x.peers, y.peers);
      EXPECT_EQ(x.kv_bytes, y.kv_bytes);
      EXPECT_EQ(bits(x.seconds), bits(y.seconds));
      EXPECT_EQ(x.row_tokens, y.row_tokens);
      EXPECT_EQ(x.partial_tiles, y.partial_tiles);
    }
  }
}

TEST(CheckpointProfile, EveryStateComesBackBitForBit) {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 200; ++trial) {
    const ProfileRefit::State state = random_state(rng);
    Result<ProfileRefit::State> back =
        decode_refit_state(encode_refit_state(state, kKvBytes), kKvBytes);
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    expect_same_state(state, *back);
  }
}

// Every proper prefix of an entry is refused, and so is any byte after it:
// a cut entry never reads as a shorter window.
TEST(CheckpointProfile, EveryTruncationAndAnyTailIsRefused) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const std::string bytes = encode_refit_state(random_state(rng), kKvBytes);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(decode_refit_state(bytes.substr(0, n), kKvBytes).is_ok())
          << n << " of " << bytes.size() << " bytes";
    }
    EXPECT_FALSE(decode_refit_state(bytes + std::string(1, '\0'), kKvBytes).is_ok());
  }
}

// The offset of the first sample's seconds in an entry with one step of one
// sample, and of the window's step count.
struct Layout {
  std::size_t steps = 0;
  std::size_t seconds = 0;
};
Layout layout_of(const ProfileRefit::State& state) {
  const std::size_t head = 4 + 8 + 8 + 8 + state.profile.name.size() + 10 * 8 + 4;
  return {head, head + 8 + 8 + 4 + 4 * 8};
}

template <typename T>
std::string with(std::string bytes, std::size_t at, T value) {
  std::string patch;
  ByteWriter<std::string>(patch).put(value);
  bytes.replace(at, patch.size(), patch);
  return bytes;
}

TEST(CheckpointProfile, DamagedOrForeignEntriesAreRefusedSayingWhy) {
  ProfileRefit::State state;
  state.profile = start_profile();
  state.refits = 3;
  state.window = {{{2, 100, 40, 1, 4096, 0.25, 150, 12}}};
  const std::string good = encode_refit_state(state, kKvBytes);
  ASSERT_TRUE(decode_refit_state(good, kKvBytes).is_ok());
  const Layout at = layout_of(state);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::size_t kv_at = 4;
  const std::size_t group_at = at.steps + 16;
  const struct {
    std::string name;
    std::string bytes;
    double kv_bytes;
    std::string says;
  } cases[] = {
      {"a newer version", with<std::uint32_t>(good, 0, 3), kKvBytes, "version 3"},
      {"version 0", with<std::uint32_t>(good, 0, 0), kKvBytes, "version 0"},
      {"partial tiles past the tiles", with<std::int64_t>(good, at.seconds + 16, 41), kKvBytes,
       "partial tiles 41"},
      {"partial tiles below -1", with<std::int64_t>(good, at.seconds + 16, -2), kKvBytes,
       "partial tiles -2"},
      {"another model", good, kKvBytes * 2, "K/V bytes per token"},
      {"the model's figure changed", with(good, kv_at, 1.0), kKvBytes, "K/V bytes per token"},
      {"negative refits", with<std::int64_t>(good, 12, -1), kKvBytes, "-1 refits"},
      {"huge name", with<std::uint64_t>(good, 20, 1ull << 40), kKvBytes, "profile name"},
      {"invalid profile", with(good, 28 + state.profile.name.size(), -1.0), kKvBytes,
       "profile is not valid"},
      {"huge step count", with<std::uint64_t>(good, at.steps, 1ull << 62), kKvBytes,
       "more than its"},
      {"huge sample count", with<std::uint64_t>(good, at.steps + 8, 1ull << 62), kKvBytes,
       "more than its"},
      {"group 0", with<std::int32_t>(good, group_at, 0), kKvBytes, "group 0"},
      {"negative tokens", with<std::int64_t>(good, group_at + 4, -5), kKvBytes, "tokens -5"},
      // A member exchanges with at most its slot's other members; the
      // refit would fit 2^20 peers into the profile (and priced as a slot
      // they would be a 2^40-entry exchange table).
      {"peers past the group", with<std::int64_t>(good, group_at + 20, 1 << 20), kKvBytes,
       "peers 1048576"},
      {"a group past the 2^20 ranks a schedule places",
       with<std::int32_t>(good, group_at, (1 << 20) + 1), kKvBytes, "group 1048577"},
      {"NaN seconds", with(good, at.seconds, nan), kKvBytes, "nan"},
      {"negative seconds", with(good, at.seconds, -1.0), kKvBytes, "-1"},
      {"infinite seconds", with(good, at.seconds, HUGE_VAL), kKvBytes, "inf"},
  };
  for (const auto& c : cases) {
    Result<ProfileRefit::State> r = decode_refit_state(c.bytes, c.kv_bytes);
    ASSERT_FALSE(r.is_ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << c.name << ": " << r.status().message();
  }
}

TEST(CheckpointProfile, TheModeSavesRestoresAndRefusesWithoutChangingTheRefit) {
  ProfileRefit refit(start_profile(), 1, kKvBytes);
  ProfileRefit::State fitted;
  fitted.profile = start_profile();
  fitted.profile.slot_seconds = 1e-3;
  fitted.refits = 2;
  fitted.window = {{{1, 10, 4, 0, 0, 0.5}}, {{2, 20, 8, 1, 640, 0.75}}};
  refit.restore(fitted);
  Checkpoint saved;
  RefitCheckpoint(refit, kKvBytes, "cpu_gloo").save(saved);
  ASSERT_NE(saved.find(kProfileRefitEntry), nullptr);

  // Into a fresh job: restored, the same state.
  ProfileRefit fresh(start_profile(), 1, kKvBytes);
  RefitCheckpoint mode(fresh, kKvBytes, "cpu_gloo");
  ASSERT_TRUE(mode.read(saved, "ck/step-00000002.ckpt", false).is_ok());
  EXPECT_FALSE(mode.restored()) << "nothing is in place before install";
  EXPECT_EQ(fresh.refits(), 0);
  mode.install();
  EXPECT_TRUE(mode.restored());
  expect_same_state(fitted, fresh.state());

  // A checkpoint without the entry: the start profile stays.
  ProfileRefit older(start_profile(), 1, kKvBytes);
  RefitCheckpoint none(older, kKvBytes, "cpu_gloo");
  ASSERT_TRUE(none.read(Checkpoint(), "old.ckpt", false).is_ok());
  none.install();
  EXPECT_FALSE(none.restored());
  EXPECT_EQ(profile_fingerprint(older.profile()), profile_fingerprint(start_profile()));

  // A damaged entry: one line naming the file and the entry; nothing moves.
  Checkpoint bad;
  bad.add(kProfileRefitEntry, saved.find(kProfileRefitEntry)->substr(0, 30));
  ProfileRefit kept(start_profile(), 1, kKvBytes);
  RefitCheckpoint refused(kept, kKvBytes, "cpu_gloo");
  const Status s = refused.read(bad, "ck/step-00000002.ckpt", false);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("checkpoint ck/step-00000002.ckpt entry 'schedule/profile_refit'"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_NE(s.message().find("; "), std::string::npos) << "says what to do";
  refused.install();
  EXPECT_FALSE(refused.restored());
  EXPECT_EQ(kept.refits(), 0);
}

// A window longer than this job's 2 x refit_every (it was written with a
// larger one) keeps its newest steps.
TEST(CheckpointProfile, ALongerWindowKeepsItsNewestSteps) {
  ProfileRefit refit(start_profile(), 1, kKvBytes);
  ProfileRefit::State state;
  state.profile = start_profile();
  for (int i = 0; i < 5; ++i) state.window.push_back({{1, 10 + i, 4, 0, 0, 0.5}});
  refit.restore(state);
  const ProfileRefit::State kept = refit.state();
  ASSERT_EQ(kept.window.size(), 2u);
  EXPECT_EQ(kept.window[0][0].tokens, 13);
  EXPECT_EQ(kept.window[1][0].tokens, 14);
}

// A version-1 entry (before partial tiles), as that fulcrum wrote it: read
// with the term 0 and every sample's partial tiles not recorded (-1), and
// written back as the current version.
TEST(CheckpointProfile, AVersionOneEntryIsReadWithoutPartialTiles) {
  const CostProfile p = start_profile();
  std::string bytes;
  ByteWriter<std::string> out(bytes);
  out.put(std::uint32_t{1}).put(kKvBytes).i64(4).str(p.name);
  for (double v : {p.tile_seconds, p.token_seconds, p.slot_seconds, p.kv_bytes_per_token,
                   p.intra_node_bytes_per_second, p.inter_node_bytes_per_second, p.latency_seconds,
                   0.25, 3e-6}) {
    out.put(v);
  }
  out.put(p.ranks_per_node).u64(1).u64(2);
  out.put(std::int32_t{2}).i64(100).i64(40).i64(1).i64(4096).put(0.5).i64(180);
  out.put(std::int32_t{1}).i64(50).i64(9).i64(0).i64(0).put(0.125).i64(50);
  Result<ProfileRefit::State> v1 = decode_refit_state(bytes, kKvBytes);
  ASSERT_TRUE(v1.is_ok()) << v1.status().message();
  EXPECT_EQ(v1->refits, 4);
  EXPECT_EQ(v1->profile.exchange_overlap, 0.25);
  EXPECT_EQ(v1->profile.row_token_seconds, 3e-6);
  EXPECT_EQ(v1->profile.partial_tile_seconds, 0.0);
  ASSERT_EQ(v1->window.size(), 1u);
  ASSERT_EQ(v1->window[0].size(), 2u);
  EXPECT_EQ(v1->window[0][0].tiles, 40);
  EXPECT_EQ(v1->window[0][0].row_tokens, 180);
  EXPECT_EQ(v1->window[0][1].seconds, 0.125);
  EXPECT_EQ(v1->window[0][0].partial_tiles, -1);
  EXPECT_EQ(v1->window[0][1].partial_tiles, -1);
  const std::string again = encode_refit_state(*v1, kKvBytes);
  std::uint32_t version = 0;
  std::memcpy(&version, again.data(), sizeof version);
  EXPECT_EQ(version, kProfileRefitVersion);
  Result<ProfileRefit::State> back = decode_refit_state(again, kKvBytes);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  expect_same_state(*v1, *back);
  // Cut inside its last sample: refused, as any cut entry.
  EXPECT_FALSE(decode_refit_state(bytes.substr(0, bytes.size() - 1), kKvBytes).is_ok());
}

// The entry lists CostProfile's fields one by one: a field added to the
// struct must be added to the entry (and its version raised), or a resumed
// job would lose it. This size is the struct's on LP64 libstdc++.
TEST(CheckpointProfile, EveryCostProfileFieldIsSaved) {
#if defined(__GLIBCXX__) && __SIZEOF_POINTER__ == 8
  EXPECT_EQ(sizeof(CostProfile), 120u)
      << "CostProfile changed: save the new field in checkpoint_profile.cpp";
#else
  GTEST_SKIP() << "the size is pinned for LP64 libstdc++ only";
#endif
}

}  // namespace
}  // namespace fulcrum::train
