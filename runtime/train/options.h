// Everything a training worker reads from its configuration, checked and
// resolved once (paths made absolute, masks and cost models parsed), so the
// training loop itself never fails on a setting. No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fulcrum/cp_types.h"
#include "fulcrum/dp_types.h"
#include "fulcrum/host/config.h"
#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum::train {

enum class DataSource { kSynthetic, kJsonl, kMegatron };
enum class PositionKind { kRope, kLearned };
enum class Dtype { kFloat32, kFloat64 };
enum class Device { kCpu, kCuda };
enum class Backend { kGloo, kNccl };
enum class ParallelMode { kFixed, kHybrid };

struct ModelOptions {
  std::int64_t hidden_size = 64;
  std::int64_t num_layers = 2;
  std::int64_t num_heads = 4;
  std::int64_t vocab_size = 1024;
  std::int64_t ffn_size = 256;
  PositionKind position = PositionKind::kRope;
  double rope_base = 10000.0;
  // Learned positions only: rows of the table. The trainer sets it to the
  // largest position the data can hold.
  std::int64_t max_positions = 0;
};

struct TrainOptions {
  // parallel. In hybrid mode the world of W ranks is dp_size = W, cp_size = 1
  // (every rank its own CP group) and the schedule places the work.
  ParallelMode mode = ParallelMode::kFixed;
  int dp_size = 1;
  int cp_size = 1;
  std::int64_t max_tokens_per_rank = 0;  // hybrid: T, resolved (>= 1)
  // hybrid: parallel.hybrid.free_single_slots (hybrid_worker.cpp, free slots)
  bool free_single_slots = false;
  bool overlap = true;  // hybrid: parallel.hybrid.overlap (SlotAttentionOptions::overlap)
  // hybrid: parallel.hybrid.overlap_calls is two_a_pass
  // (SlotAttentionOptions::overlap_calls, attention::OverlapCalls)
  bool overlap_two_calls = true;
  std::string schedule_strategy = "hybrid";
  std::string schedule_profile = "cpu_gloo";  // a bundled name or an absolute path
  CostProfile profile;                        // hybrid: schedule_profile, read and checked
  // hybrid, balancer.schedule.profile: auto: `profile` is the start
  // (balancer.schedule.profile_start) and is refitted every refit_every steps
  // from the slots' measured times (profile_refit.h).
  bool profile_auto = false;
  std::int64_t refit_every = 4;
  // hybrid: train.compare_schedulers, distinct names in the order given
  // (empty = no comparison), each run compare_repetitions times per batch.
  std::vector<std::string> compare_schedulers;
  std::int64_t compare_repetitions = 3;
  std::string compare_source;  // what set the list, for messages (host::Config::source)
  // balancer
  std::string plugin = "fulcrum_balancer";
  // balancer.plugin was set (file or --set): an absent plugin is then an
  // error, not the built-in balancer (host::open_balancer's policy).
  bool plugin_named = false;
  std::vector<std::string> plugin_dirs;  // searched before the defaults
  bool check_permissions = true;
  std::string cp_strategy = "auto";
  std::string cp_fallback = "contiguous";
  std::int64_t block_size = kDefaultBlockSize;
  MaskSpec mask;
  std::string dp_strategy = "auto";
  CostModel dp_cost;
  bool dp_equal_count = false;
  std::int64_t dp_window = 1;  // global batches whose DP partition is balanced together
  // data
  DataSource source = DataSource::kSynthetic;
  std::string data_path;  // absolute, or empty (synthetic lengths)
  std::int64_t seq_length = 4096;
  bool packing = true;
  std::int64_t global_batch_size = 8;
  std::int64_t micro_batch_size = 1;
  std::int64_t num_samples = 1024;  // synthetic: documents, or the lengths file's first ones
  bool num_samples_set = false;     // with a lengths file, unset = all of it
  std::int64_t max_length = 4096;
  std::uint64_t data_seed = 1;
  bool shuffle = true;
  // model and loop
  ModelOptions model;
  std::int64_t steps = 10;
  std::uint64_t seed = 1234;
  Dtype dtype = Dtype::kFloat32;
  Device device = Device::kCpu;
  int cuda_device = 0;  // with kCuda: the GPU this rank uses, resolved by the worker
  double lr = 1e-3;
  double weight_decay = 0.01;
  int threads = 0;  // 0 = automatic
  bool log_samples = false;
  std::int64_t checkpoint_every = 0;
  // dist
  Backend backend = Backend::kGloo;
  std::chrono::milliseconds rendezvous_timeout{60000};
  std::chrono::milliseconds op_timeout{300000};
};

// Reads and cross-checks the keys (hidden_size divisible by num_heads, an
// even head size for rotary positions, a path for file sources, ...).
// Relative paths are resolved against the directory of the file that set
// them, or the working directory for --set and defaults. Errors are one line
// naming the key, its value, where it was set and what to do.
Result<TrainOptions> train_options_from_config(const host::Config& config);

const char* dtype_name(Dtype dtype);

// The ranks a job runs on: parallel.world_size when set, else
// parallel.dp_size x parallel.cp_size.
std::int64_t job_world_size(const host::Config& config);

// train.checkpoint_every, train.checkpoint_dir, train.checkpoint_keep and
// train.resume, checked: a directory is needed to save or to resume with
// auto, and paths are made absolute (relative to the config file that set
// them, or to the working directory for --set).
struct CheckpointOptions {
  std::int64_t every = 0;  // 0 = never save
  std::string dir;         // absolute, or empty
  std::int64_t keep = 2;
  enum class Resume { kNo, kAuto, kPath } resume = Resume::kNo;
  std::string resume_path;  // kPath: absolute
};
Result<CheckpointOptions> checkpoint_options_from_config(const host::Config& config);

}  // namespace fulcrum::train
