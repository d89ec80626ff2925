#include "train/options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "fulcrum/core/workload.h"
#include "fulcrum/host/cost_profile_file.h"
#include "fulcrum/host/open_balancer.h"
#include "train/job_schema.h"

namespace fulcrum::train {
namespace {

// "<key> = <value> (from <file:line:col | --set key=value | --flag>)": the
// prefix of every message here, so the user can find what to change.
std::string where(const host::Config& config, const std::string& key, const std::string& value) {
  return key + " = " + value + " (" + config.source(key) + ")";
}

std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000.0)));
}

// train.compare_schedulers and train.compare_repetitions: names that are
// not empty and not repeated, in hybrid mode only. Whether the balancer
// offers them is checked where it is loaded (the CLI's preflight and the
// worker's prepare).
Status read_compare(const host::Config& config, TrainOptions& o) {
  const std::string text = config.get_string("train.compare_schedulers");
  o.compare_repetitions = config.get_int("train.compare_repetitions");
  if (text.empty()) return Status::ok();
  const std::string key = "train.compare_schedulers";
  o.compare_source = config.source(key);
  if (o.mode != ParallelMode::kHybrid) {
    return invalid_argument(where(config, key, text) +
                            " needs parallel.mode: hybrid (fixed mode runs no schedules); set "
                            "parallel.mode: hybrid or drop --compare-schedulers");
  }
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    const std::string name =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (name.empty() || name.find_first_of(" \t") != std::string::npos) {
      return invalid_argument(where(config, key, text) +
                              " has an empty or blank-holding name; list scheduler names "
                              "separated by single commas, e.g. fixed,megatron_dcp,hybrid");
    }
    if (std::find(o.compare_schedulers.begin(), o.compare_schedulers.end(), name) !=
        o.compare_schedulers.end()) {
      return invalid_argument(where(config, key, text) + " names " + name +
                              " twice; list each scheduler once");
    }
    o.compare_schedulers.push_back(name);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return Status::ok();
}

// balancer.schedule.profile: auto and its two keys, which mean nothing
// without it; hybrid mode only (fixed mode plans with no profile).
Status read_profile_auto(const host::Config& config, TrainOptions& o) {
  const std::string key = "balancer.schedule.profile";
  o.profile_auto = config.get_string(key) == "auto";
  o.refit_every = config.get_int("balancer.schedule.refit_every");
  if (o.profile_auto && o.mode != ParallelMode::kHybrid) {
    return invalid_argument(where(config, key, "auto") +
                            " needs parallel.mode: hybrid (fixed mode plans with no cost "
                            "profile); set parallel.mode: hybrid or drop the key");
  }
  for (const char* other : {"balancer.schedule.profile_start", "balancer.schedule.refit_every"}) {
    if (!o.profile_auto && config.is_set(other)) {
      return invalid_argument(std::string(other) + " (" + config.source(other) +
                              ") is read only with balancer.schedule.profile: auto; set that "
                              "too, or drop " +
                              other);
    }
  }
  return Status::ok();
}

// parallel.mode, parallel.world_size and the schedule's keys. Hybrid mode
// runs W = world ranks as dp_size = W, cp_size = 1.
Status read_parallel_mode(const host::Config& config, TrainOptions& o) {
  const std::int64_t world_key = config.get_int("parallel.world_size");
  o.mode =
      config.get_string("parallel.mode") == "hybrid" ? ParallelMode::kHybrid : ParallelMode::kFixed;
  if (world_key > 0 && (o.mode == ParallelMode::kFixed || o.dp_size * o.cp_size != 1) &&
      world_key != static_cast<std::int64_t>(o.dp_size) * o.cp_size) {
    return invalid_argument(
        where(config, "parallel.world_size", std::to_string(world_key)) +
        " disagrees with parallel.dp_size x parallel.cp_size = " + std::to_string(o.dp_size) +
        " x " + std::to_string(o.cp_size) +
        "; in fixed mode leave parallel.world_size at 0, in hybrid mode set either the world "
        "size or dp_size and cp_size");
  }
  o.schedule_strategy = config.get_string("balancer.schedule.strategy");
  o.schedule_profile = schedule_profile(config);
  if (o.mode == ParallelMode::kHybrid) {
    if (job_world_size(config) > kMaxGroupSize) {
      return invalid_argument("parallel.mode: hybrid over " +
                              std::to_string(job_world_size(config)) +
                              " ranks is more than the 2^20 a schedule places; use fewer ranks");
    }
    o.dp_size = static_cast<int>(job_world_size(config));
    o.cp_size = 1;
    Result<CostProfile> profile = host::resolve_cost_profile(o.schedule_profile);
    if (!profile) {
      const std::string key = config.get_string("balancer.schedule.profile") == "auto"
                                  ? "balancer.schedule.profile_start"
                                  : "balancer.schedule.profile";
      return invalid_argument(key + " (" + config.source(key) + "): " + profile.status().message());
    }
    o.profile = *profile;
  }
  if (Status s = read_profile_auto(config, o); !s) return s;
  return read_compare(config, o);
}

// Hybrid mode: T, and pieces of data.seq_length that fit the world.
Status check_hybrid(const host::Config& config, TrainOptions& o) {
  o.free_single_slots = config.get_bool("parallel.hybrid.free_single_slots");
  o.overlap = config.get_bool("parallel.hybrid.overlap");
  const std::string calls = config.get_string("parallel.hybrid.overlap_calls");
  o.overlap_two_calls = calls == "two_a_pass";
  // per_peer, the one value that is not the default, does nothing where no
  // slot's exchange is overlapped: said, not ignored.
  if (!o.overlap_two_calls && (o.mode != ParallelMode::kHybrid || !o.overlap)) {
    return invalid_argument(
        where(config, "parallel.hybrid.overlap_calls", calls) +
        (o.mode != ParallelMode::kHybrid
             ? " needs parallel.mode: hybrid (fixed mode has no slots); set parallel.mode: "
               "hybrid or drop the key"
             : " needs parallel.hybrid.overlap: true (without overlap every member calls the "
               "kernel once a pass); drop one of the two keys"));
  }
  if (o.mode != ParallelMode::kHybrid) {
    if (!o.free_single_slots) return Status::ok();
    return invalid_argument(where(config, "parallel.hybrid.free_single_slots", "true") +
                            " needs parallel.mode: hybrid (fixed mode has no slots); set "
                            "parallel.mode: hybrid or drop the key");
  }
  if (config.get_string("dist.backend") == "nccl") {
    return invalid_argument(
        "parallel.mode: hybrid exchanges K/V point-to-point over Gloo only; set dist.backend: "
        "gloo, or parallel.mode: fixed for NCCL");
  }
  if (o.mask.kind == MaskKind::kBlockSparse) {
    return invalid_argument(where(config, "balancer.cp.mask", mask_to_string(o.mask)) +
                            " is block-sparse, which schedules do not take; use causal, full, "
                            "sliding:W or prefix:L in parallel.mode: hybrid");
  }
  const std::int64_t world = o.dp_size;
  const std::int64_t t = config.get_int("parallel.max_tokens_per_rank");
  const std::int64_t needed = (o.seq_length + world - 1) / world;  // W x T >= seq_length
  o.max_tokens_per_rank = t > 0 ? t : needed;
  // The schedule request's own bound (validate_schedule_request): the world's
  // slots together hold at most one row of 2^31 tokens. Checked here so the
  // workers never see a request they must refuse.
  if (o.max_tokens_per_rank > kMaxRowTokens / world) {
    return invalid_argument(
        where(config, "parallel.max_tokens_per_rank", std::to_string(t)) + " x " +
        std::to_string(world) + " ranks is more than the 2^31 (" + std::to_string(kMaxRowTokens) +
        ") tokens a schedule places; lower it to at most " + std::to_string(kMaxRowTokens / world));
  }
  if (o.max_tokens_per_rank < needed) {
    return invalid_argument(where(config, "parallel.max_tokens_per_rank", std::to_string(t)) +
                            " x " + std::to_string(world) +
                            " ranks holds fewer tokens than a piece of data.seq_length = " +
                            std::to_string(o.seq_length) + "; raise it to at least " +
                            std::to_string(needed) + " or lower data.seq_length");
  }
  return Status::ok();
}

// balancer.*: the plugin, the CP and DP strategies.
Status read_balancer(const host::Config& config, TrainOptions& o) {
  o.plugin = config.get_string("balancer.plugin");
  o.plugin_named = config.is_set("balancer.plugin");
  o.plugin_dirs = host::split_plugin_dirs(config.get_string("balancer.plugin_dirs"));
  o.check_permissions = config.get_bool("balancer.check_permissions");
  o.cp_strategy = config.get_string("balancer.cp.strategy");
  o.cp_fallback = config.get_string("balancer.cp.fallback");
  o.block_size = config.get_int("balancer.cp.block_size");
  Result<MaskSpec> mask = parse_mask(config.get_string("balancer.cp.mask"));
  if (!mask) return invalid_argument(mask.status().message());
  o.mask = *mask;
  o.dp_strategy = config.get_string("balancer.dp.strategy");
  Result<CostModel> cost = host::parse_cost_model(config.get_string("balancer.dp.cost"));
  if (!cost) return invalid_argument(cost.status().message());
  o.dp_cost = *cost;
  o.dp_equal_count = config.get_bool("balancer.dp.equal_count");
  o.dp_window = config.get_int("balancer.dp.window");
  return Status::ok();
}

// data.*; in hybrid mode also T against data.seq_length (check_hybrid).
Status read_data(const host::Config& config, TrainOptions& o) {
  const std::string source = config.get_string("data.source");
  o.source = source == "jsonl"      ? DataSource::kJsonl
             : source == "megatron" ? DataSource::kMegatron
                                    : DataSource::kSynthetic;
  o.data_path = config_path(config, "data.path");
  if (o.source != DataSource::kSynthetic && o.data_path.empty()) {
    return invalid_argument(
        "data.source = " + source + " needs data.path: the " +
        (o.source == DataSource::kJsonl ? "JSONL file" : "Megatron dataset prefix") + " to read");
  }
  o.seq_length = config.get_int("data.seq_length");
  if (Status s = check_hybrid(config, o); !s) return s;
  o.packing = config.get_bool("data.packing");
  o.global_batch_size = config.get_int("data.global_batch_size");
  o.micro_batch_size = config.get_int("data.micro_batch_size");
  o.num_samples = config.get_int("data.num_samples");
  o.num_samples_set = config.is_set("data.num_samples");
  o.max_length = config.get_int("data.max_length");
  o.data_seed = static_cast<std::uint64_t>(config.get_int("data.seed"));
  o.shuffle = config.get_bool("data.shuffle");
  // A window's w x global_batch_size sample ids are held and sorted at once.
  constexpr std::int64_t kMaxWindowSamples = std::numeric_limits<std::int32_t>::max();
  if (o.dp_window > 1 && o.global_batch_size > kMaxWindowSamples / o.dp_window) {
    return invalid_argument(
        where(config, "balancer.dp.window", std::to_string(o.dp_window)) +
        " is too large for data.global_batch_size = " + std::to_string(o.global_batch_size) +
        ": window x global_batch_size must stay below " + std::to_string(kMaxWindowSamples) +
        "; lower balancer.dp.window");
  }
  return Status::ok();
}

// model.*, with the head width every attention needs.
Status read_model(const host::Config& config, TrainOptions& o) {
  ModelOptions& m = o.model;
  m.hidden_size = config.get_int("model.hidden_size");
  m.num_layers = config.get_int("model.num_layers");
  m.num_heads = config.get_int("model.num_heads");
  m.vocab_size = config.get_int("model.vocab_size");
  m.ffn_size = config.get_int("model.ffn_size");
  if (m.ffn_size == 0) m.ffn_size = 4 * m.hidden_size;
  m.position = config.get_string("model.position") == "learned" ? PositionKind::kLearned
                                                                : PositionKind::kRope;
  m.rope_base = config.get_double("model.rope_base");
  if (m.hidden_size % m.num_heads != 0) {
    return invalid_argument(
        where(config, "model.hidden_size", std::to_string(m.hidden_size)) +
        " is not divisible by model.num_heads = " + std::to_string(m.num_heads) +
        "; every head needs the same width, so pick a multiple");
  }
  if (m.position == PositionKind::kRope && (m.hidden_size / m.num_heads) % 2 != 0) {
    return invalid_argument(
        "rotary positions rotate pairs of channels, but the head size "
        "model.hidden_size / model.num_heads = " +
        std::to_string(m.hidden_size / m.num_heads) +
        " is odd; make it even or set model.position: learned");
  }
  return Status::ok();
}

// train.* and the device and backend they run on; then a row long enough
// for the CP group.
Status read_loop(const host::Config& config, TrainOptions& o) {
  o.steps = config.get_int("train.steps");
  o.seed = static_cast<std::uint64_t>(config.get_int("train.seed"));
  o.dtype = config.get_string("train.dtype") == "float64" ? Dtype::kFloat64 : Dtype::kFloat32;
  o.device = config.get_string("train.device") == "cuda" ? Device::kCuda : Device::kCpu;
  o.backend = config.get_string("dist.backend") == "nccl" ? Backend::kNccl : Backend::kGloo;
  if (o.backend == Backend::kNccl && o.device != Device::kCuda) {
    return invalid_argument(
        "dist.backend: nccl communicates CUDA tensors only, but train.device is cpu; set "
        "train.device: cuda, or dist.backend: gloo");
  }
  o.lr = config.get_double("train.lr");
  o.weight_decay = config.get_double("train.weight_decay");
  // More intra-op threads than CPUs only time-slice: at 1,000 a step of the
  // tiny quickstart model takes minutes, with nothing printed meanwhile.
  const std::int64_t threads = config.get_int("train.threads");
  const auto cpus = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads > cpus) {
    return invalid_argument(where(config, "train.threads", std::to_string(threads)) +
                            " is more than the " + std::to_string(cpus) +
                            " CPUs of this host; set at most " + std::to_string(cpus) +
                            ", or 0 to divide the CPUs among the workers");
  }
  o.threads = static_cast<int>(threads);
  o.log_samples = config.get_bool("train.log_samples");
  o.checkpoint_every = config.get_int("train.checkpoint_every");

  // Every rank must hold at least one token of a row and a row at least one
  // label: shorter rows train on nothing and report a loss of zero.
  if (o.seq_length < std::max<std::int64_t>(2, o.cp_size)) {
    return invalid_argument(where(config, "data.seq_length", std::to_string(o.seq_length)) +
                            " is too short for parallel.cp_size = " + std::to_string(o.cp_size) +
                            ": a row needs at least 2 tokens and one per CP rank; raise "
                            "data.seq_length to at least " +
                            std::to_string(std::max<std::int64_t>(2, o.cp_size)));
  }
  return Status::ok();
}

// Seconds as a message shows them: std::to_string prints 309 digits for
// 1e308 and 0.000000 for 1e-7.
std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", seconds);
  return text;
}

// dist.timeout_s and dist.op_timeout_s.
Status read_deadlines(const host::Config& config, TrainOptions& o) {
  // Deadlines are turned into nanoseconds by the collectives; past this they
  // overflow and every collective times out at once.
  constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600.0;
  for (const char* key : {"dist.timeout_s", "dist.op_timeout_s"}) {
    const double seconds = config.get_double(key);
    if (!(seconds <= kMaxTimeoutSeconds)) {
      return invalid_argument(where(config, key, seconds_text(seconds)) + " is more than a week (" +
                              seconds_text(kMaxTimeoutSeconds) +
                              " s); give a number of seconds from 0.001 to " +
                              std::to_string(static_cast<std::int64_t>(kMaxTimeoutSeconds)));
    }
  }
  o.rendezvous_timeout = seconds_to_ms(config.get_double("dist.timeout_s"));
  o.op_timeout = seconds_to_ms(config.get_double("dist.op_timeout_s"));
  if (o.rendezvous_timeout.count() < 1 || o.op_timeout.count() < 1) {
    return invalid_argument("dist.timeout_s and dist.op_timeout_s must be at least 0.001 s; got " +
                            seconds_text(config.get_double("dist.timeout_s")) + " and " +
                            seconds_text(config.get_double("dist.op_timeout_s")));
  }
  return Status::ok();
}

}  // namespace

const char* dtype_name(Dtype dtype) { return dtype == Dtype::kFloat64 ? "float64" : "float32"; }

std::int64_t job_world_size(const host::Config& config) {
  const std::int64_t world = config.get_int("parallel.world_size");
  return world > 0 ? world
                   : config.get_int("parallel.dp_size") * config.get_int("parallel.cp_size");
}

Result<TrainOptions> train_options_from_config(const host::Config& config) {
  TrainOptions o;
  o.dp_size = static_cast<int>(config.get_int("parallel.dp_size"));
  o.cp_size = static_cast<int>(config.get_int("parallel.cp_size"));
  // In this order, so that of several mistakes the same one is named first.
  for (const auto read :
       {read_parallel_mode, read_balancer, read_data, read_model, read_loop, read_deadlines}) {
    if (Status s = read(config, o); !s) return s;
  }
  return o;
}

Result<CheckpointOptions> checkpoint_options_from_config(const host::Config& config) {
  CheckpointOptions o;
  o.every = config.get_int("train.checkpoint_every");
  o.keep = config.get_int("train.checkpoint_keep");
  o.dir = config_path(config, "train.checkpoint_dir");
  const std::string resume = config.get_string("train.resume");
  if (resume == "auto") {
    o.resume = CheckpointOptions::Resume::kAuto;
  } else if (resume != "none" && !resume.empty()) {
    o.resume = CheckpointOptions::Resume::kPath;
    o.resume_path = config_path(config, "train.resume");
  }
  if (o.every > 0 && o.dir.empty()) {
    return invalid_argument(where(config, "train.checkpoint_every", std::to_string(o.every)) +
                            " needs train.checkpoint_dir, the directory to write them to; "
                            "set it, or set train.checkpoint_every: 0");
  }
  if (o.resume == CheckpointOptions::Resume::kAuto && o.dir.empty()) {
    return invalid_argument(where(config, "train.resume", resume.empty() ? "''" : resume) +
                            " needs train.checkpoint_dir, the directory to resume from; set it, "
                            "or name a checkpoint file in train.resume");
  }
  return o;
}

}  // namespace fulcrum::train
