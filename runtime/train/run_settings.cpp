#include "train/run_settings.h"

#include <cstdio>

#include "fulcrum/core/workload.h"
#include "fulcrum/host/config.h"

namespace fulcrum::train {
namespace {

// A double in 17 significant digits, which read back as the same double.
std::string exact(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

void append_line(std::string& text, const std::string& key, const std::string& value) {
  text += key + "=" + value + "\n";
}

}  // namespace

std::string trajectory_settings(const TrainOptions& options, std::int64_t loader_samples) {
  const ModelOptions& m = options.model;
  std::string t;
  const auto line = [&t](const std::string& key, const std::string& value) {
    append_line(t, key, value);
  };
  line("model.hidden_size", std::to_string(m.hidden_size));
  line("model.num_layers", std::to_string(m.num_layers));
  line("model.num_heads", std::to_string(m.num_heads));
  line("model.vocab_size", std::to_string(m.vocab_size));
  line("model.ffn_size", std::to_string(m.ffn_size));
  line("model.position", m.position == PositionKind::kLearned ? "learned" : "rope");
  line("model.rope_base", exact(m.rope_base));
  line("model.max_positions", std::to_string(m.max_positions));
  line("train.seed", std::to_string(options.seed));
  line("train.dtype", dtype_name(options.dtype));
  line("train.lr", exact(options.lr));
  line("train.weight_decay", exact(options.weight_decay));
  line("balancer.cp.mask", mask_to_string(options.mask));
  line("data.source", options.source == DataSource::kJsonl      ? "jsonl"
                      : options.source == DataSource::kMegatron ? "megatron"
                                                                : "synthetic");
  line("data.path", options.data_path);
  line("data.samples", std::to_string(loader_samples));
  const bool synthetic = options.source == DataSource::kSynthetic;
  line("data.num_samples", synthetic ? std::to_string(options.num_samples) : "-");
  line("data.max_length", synthetic ? std::to_string(options.max_length) : "-");
  line("data.seed", std::to_string(options.data_seed));
  line("data.shuffle", options.shuffle ? "true" : "false");
  line("data.seq_length", std::to_string(options.seq_length));
  line("data.packing", options.packing ? "true" : "false");
  line("data.global_batch_size", std::to_string(options.global_batch_size));
  return t;
}

std::string layout_settings(const TrainOptions& options, const std::string& balancer) {
  std::string t;
  const auto line = [&t](const std::string& key, const std::string& value) {
    append_line(t, key, value);
  };
  line("parallel.dp_size", std::to_string(options.dp_size));
  line("parallel.cp_size", std::to_string(options.cp_size));
  line("balancer", balancer);
  line("balancer.dp.strategy", options.dp_strategy);
  line("balancer.dp.cost", host::cost_model_to_string(options.dp_cost));
  line("balancer.dp.equal_count", options.dp_equal_count ? "true" : "false");
  line("balancer.cp.strategy", options.cp_strategy);
  line("balancer.cp.fallback", options.cp_fallback);
  line("balancer.cp.block_size", std::to_string(options.block_size));
  line("data.micro_batch_size", std::to_string(options.micro_batch_size));
  return t;
}

}  // namespace fulcrum::train
