// The job's configuration schema: every key `fulcrum train` and its workers
// read (parallel, balancer, data, model, train, dist), in one table. The
// plan, dp-partition and schedule commands read the same file through it.
//
// Adding a key is one line in build_job_schema(); the loader, the overrides,
// the error messages and the defaults all follow from it.
#include "train/job_schema.h"

#include <filesystem>
#include <optional>
#include <string>

#include "fulcrum/core/workload.h"

namespace fulcrum::train {
namespace {

namespace fs = std::filesystem;

constexpr std::optional<double> kNoMax = std::nullopt;

std::optional<std::string> check_mask(const std::string& text) {
  auto mask = parse_mask(text);
  if (!mask) return mask.status().message();
  return std::nullopt;
}

std::optional<std::string> check_cost(const std::string& text) {
  auto cost = host::parse_cost_model(text);
  if (!cost) return cost.status().message();
  return std::nullopt;
}

std::optional<std::string> check_not_empty(const std::string& text) {
  if (text.empty()) return std::string("it is empty");
  return std::nullopt;
}

host::ConfigSchema build_job_schema() {
  using namespace host;
  ConfigSchema s;
  // clang-format off
  // parallel: the job's shape; WORLD = dp_size x cp_size, CP fastest-varying.
  s.add(int_key("parallel.dp_size", 1, 1, kNoMax, "data-parallel ranks; an integer >= 1"));
  s.add(int_key("parallel.cp_size", 1, 1, kNoMax, "context-parallel ranks; an integer >= 1"));
  s.add(string_key("parallel.mode", "fixed", {"fixed", "hybrid"}, {}, "fixed: DP groups of CP groups, every row on one CP group; hybrid: the world is one pool and the balancer's scheduler places each document piece on a group of any size (docs/HYBRID_RUNTIME.md)"));
  s.add(int_key("parallel.world_size", 0, 0, static_cast<double>(kMaxGroupSize), "ranks of the job, 0 = parallel.dp_size x parallel.cp_size; an integer in [0, 2^20]"));
  s.add(int_key("parallel.max_tokens_per_rank", 0, 0, static_cast<double>(kMaxRowTokens), "hybrid mode: T, the most tokens one rank holds in a slot; 0 = data.seq_length / world size, rounded up; an integer in [0, 2^31 / world size]"));
  s.add(bool_key("parallel.hybrid.overlap", true, "hybrid mode: overlap each slot's K/V exchange with its attention compute, one peer at a time (docs/HYBRID_RUNTIME.md section 10); false: every row travels before the first tile"));
  s.add(string_key("parallel.hybrid.overlap_calls", "two_a_pass", {"two_a_pass", "per_peer"}, {}, "hybrid mode, with overlap: two_a_pass, the tiles of the own keys while every peer's keys travel, then the rest in one kernel call (backward: the rest, then the own keys' tiles while every dK/dV travels); per_peer, a call for each peer's keys as they arrive, and each peer's dK/dV leaves once its tiles are done. Results are equal to rounding either way (docs/HYBRID_RUNTIME.md section 10)"));
  s.add(bool_key("parallel.hybrid.free_single_slots", false, "hybrid mode: single-rank slots after the last multi-rank wave are run by whichever rank is free first, not by their planned rank (docs/HYBRID_RUNTIME.md section 11)"));
  // balancer: which plugin, and which strategies it is asked for.
  s.add(string_key("balancer.plugin", "fulcrum_balancer", {}, check_not_empty, "balancer plugin; a plugin name, a path to one, or builtin (the host's contiguous balancer)"));
  s.add(string_key("balancer.plugin_dirs", "", {}, {}, "directories searched for the plugin, colon-separated, before the defaults"));
  s.add(bool_key("balancer.check_permissions", true, "refuse a plugin that group or others may write"));
  s.add(string_key("balancer.cp.strategy", "auto", {}, check_not_empty, "preferred CP strategy; a name the plugin lists, or auto"));
  s.add(string_key("balancer.cp.fallback", "contiguous", {}, check_not_empty, "CP strategy used when the preferred one cannot serve a batch; a name the plugin lists"));
  s.add(int_key("balancer.cp.block_size", 128, 1, static_cast<double>(kMaxRowTokens), "kernel tile edge B in tokens; an integer in [1, 2^31]"));
  s.add(string_key("balancer.cp.mask", "causal", {}, check_mask, "attention mask; causal, full, sliding:W with W >= 1, or prefix:L with L >= 0"));
  s.add(string_key("balancer.dp.strategy", "auto", {}, check_not_empty, "DP partition strategy; a name the plugin lists, or auto"));
  s.add(string_key("balancer.dp.cost", "tokens", {}, check_cost, "DP cost model; tokens, attention or attention:A with A from 0 to 2^40"));
  s.add(bool_key("balancer.dp.equal_count", false, "give every DP rank floor(n/k) or ceil(n/k) samples"));
  s.add(int_key("balancer.dp.window", 1, 1, kNoMax, "global batches balanced together; an integer >= 1"));
  s.add(string_key("balancer.schedule.strategy", "hybrid", {}, check_not_empty, "hybrid mode: the scheduler that places each global batch; a name the balancer lists (fixed, megatron_dcp, hybrid)"));
  s.add(string_key("balancer.schedule.profile", "cpu_gloo", {}, check_not_empty, "hybrid mode: the step-time cost profile the scheduler plans with; a bundled name (cpu_gloo, h100_7b, h100_7b_fa3, h100_7b_nccl), a profile YAML file, or auto (start from balancer.schedule.profile_start, refit from the job's slot times every balancer.schedule.refit_every steps)"));
  s.add(string_key("balancer.schedule.profile_start", "", {}, {}, "with balancer.schedule.profile: auto, the profile the job starts from; a bundled name or a profile YAML file (e.g. one fulcrum calibrate --config wrote); empty = the bundled cpu_gloo"));
  s.add(int_key("balancer.schedule.refit_every", 4, 1, 10000, "with balancer.schedule.profile: auto, steps between refits of the profile from the slot times measured; an integer in [1, 10000]"));
  // data: where samples come from and how they are batched.
  s.add(string_key("data.source", "synthetic", {"synthetic", "jsonl", "megatron"}, {}, "sample source"));
  s.add(string_key("data.path", "", {}, {}, "JSONL file or Megatron dataset prefix (without .bin/.idx)"));
  s.add(int_key("data.seq_length", 4096, 1, kNoMax, "tokens per packed row; an integer >= 1"));
  s.add(bool_key("data.packing", true, "pack documents into rows with document boundaries"));
  s.add(int_key("data.global_batch_size", 8, 1, kNoMax, "samples per global batch, over all DP ranks; an integer >= 1"));
  s.add(int_key("data.micro_batch_size", 1, 1, kNoMax, "rows per micro-batch; an integer >= 1"));
  s.add(int_key("data.num_samples", 1024, 1, kNoMax, "synthetic documents generated; an integer >= 1"));
  s.add(int_key("data.seed", 1, 0, kNoMax, "seed of the synthetic data and the sampler; an integer >= 0"));
  s.add(int_key("data.max_length", 4096, 1, kNoMax, "longest synthetic document when data.path names no lengths file; an integer >= 1"));
  s.add(bool_key("data.shuffle", true, "shuffle the samples every epoch (seeded by data.seed); false keeps dataset order"));
  // model: a small GPT-style model.
  s.add(int_key("model.hidden_size", 64, 1, kNoMax, "model width; an integer >= 1"));
  s.add(int_key("model.num_layers", 2, 1, kNoMax, "transformer blocks; an integer >= 1"));
  s.add(int_key("model.num_heads", 4, 1, kNoMax, "attention heads; an integer >= 1"));
  s.add(int_key("model.vocab_size", 1024, 1, kNoMax, "vocabulary size; an integer >= 1"));
  s.add(int_key("model.ffn_size", 0, 0, kNoMax, "MLP inner width, 0 = 4 x hidden_size; an integer >= 0"));
  s.add(string_key("model.position", "rope", {"rope", "learned"}, {}, "position encoding, from each token's position in its document"));
  s.add(double_key("model.rope_base", "10000", 0.0, /*exclusive=*/true, "rotary embedding base; a number > 0"));
  // train: the loop.
  s.add(int_key("train.steps", 10, 1, kNoMax, "optimizer steps; an integer >= 1"));
  s.add(int_key("train.seed", 1234, 0, kNoMax, "seed of the model initialisation; an integer >= 0"));
  s.add(string_key("train.dtype", "float32", {"float32", "float64"}, {}, "parameter and activation dtype"));
  s.add(string_key("train.device", "cpu", {"cpu", "cuda"}, {}, "where the model, the attention and the collectives' tensors live; cuda needs a LibTorch built with CUDA and a GPU (rank r uses GPU r % GPUs)"));
  s.add(double_key("train.lr", "1e-3", 0.0, /*exclusive=*/true, "AdamW learning rate; a number > 0"));
  s.add(int_key("train.checkpoint_every", 0, 0, kNoMax, "steps between checkpoints, 0 = never; an integer >= 0"));
  s.add(string_key("train.checkpoint_dir", "", {}, {}, "directory of the checkpoint files (step-N.ckpt); needed by train.checkpoint_every and train.resume: auto"));
  s.add(int_key("train.checkpoint_keep", 2, 1, kNoMax, "newest checkpoints kept in train.checkpoint_dir; an integer >= 1"));
  s.add(string_key("train.resume", "none", {}, check_not_empty, "none (start at step 1), auto (the newest intact checkpoint in train.checkpoint_dir, if any) or a checkpoint file"));
  s.add(double_key("train.weight_decay", "0.01", 0.0, /*exclusive=*/false, "AdamW decoupled weight decay; a number >= 0"));
  s.add(int_key("train.threads", 0, 0, kNoMax, "intra-op threads per worker, 0 = the cores divided among this host's workers; an integer from 0 to this host's CPU count"));
  s.add(string_key("train.compare_schedulers", "", {}, {}, "hybrid mode: schedulers whose schedules of every global batch are also run, timed and reported, comma-separated (e.g. fixed,megatron_dcp,hybrid); empty = none; the step is still taken once, with balancer.schedule.strategy (docs/HYBRID_RUNTIME.md)"));
  s.add(int_key("train.compare_repetitions", 3, 1, 100, "runs of each compared schedule per global batch, in rotating order; an integer in [1, 100]"));
  s.add(bool_key("train.log_samples", false, "add every micro-batch's document pieces to the metrics (exactly-once audits)"));
  // dist: rendezvous and collectives.
  s.add(string_key("dist.backend", "gloo", {"gloo", "nccl"}, {}, "c10d backend of every process group; nccl needs train.device: cuda, a LibTorch built with NCCL and one GPU per rank on this host"));
  s.add(double_key("dist.timeout_s", "60", 0.0, /*exclusive=*/true, "seconds a worker waits for the others at rendezvous; a number > 0"));
  s.add(double_key("dist.op_timeout_s", "300", 0.0, /*exclusive=*/true, "seconds any one collective may take; a number > 0"));
  s.add(int_key("dist.master_port", 0, 0, 65535, "rendezvous port fulcrum train hands its workers, 0 = a free one; an integer in [0, 65535]"));
  s.add(bool_key("dist.plan_consensus", true, "all-gather a fingerprint of every CP plan and DP partition, and of the workload it came from, before the collectives that use them; a divergence ends the job with an error naming the ranks"));
  // clang-format on
  return s;
}

}  // namespace

std::string config_path(const host::Config& config, const std::string& key) {
  const std::string text = config.get_string(key);
  if (text.empty()) return text;
  fs::path path(text);
  if (path.is_relative()) {
    if (const std::string file = config.origin_file(key); !file.empty()) {
      path = fs::absolute(file).parent_path() / path;
    } else {
      path = fs::absolute(path);
    }
  }
  return path.lexically_normal().string();
}

std::string schedule_profile(const host::Config& config) {
  std::string key = "balancer.schedule.profile";
  std::string text = config.get_string(key);
  if (text == "auto") {  // the profile the job starts from (profile_refit.h)
    key = "balancer.schedule.profile_start";
    text = config.get_string(key);
    if (text.empty()) return "cpu_gloo";
  }
  if (text.find('/') == std::string::npos && text.find('.') == std::string::npos) return text;
  return config_path(config, key);
}

const host::ConfigSchema& job_schema() {
  static const host::ConfigSchema schema = build_job_schema();
  return schema;
}

Result<host::Config> load_job_config(const std::string& path,
                                     const std::vector<host::Override>& overrides) {
  return host::load_config(path, overrides, job_schema());
}

host::Override flag_override(const KeyFlag& flag, const std::string& value) {
  return {std::string(flag.key) + "=" + value, flag.flag};
}

Result<host::Config> load_job_config_string(const std::string& yaml, const std::string& name,
                                            const std::vector<host::Override>& overrides) {
  return host::load_config_string(yaml, name, overrides, job_schema());
}

}  // namespace fulcrum::train
