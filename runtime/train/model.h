// A small GPT-style decoder for the trainer: token embedding, rotary or
// learned positions, pre-norm blocks of [CP attention + MLP], an untied LM
// head. Written with plain ATen ops on leaf tensors (no torch::nn), which
// keeps this one of the few LibTorch translation units and makes the
// parameter order explicit for checkpoints and cross-layout comparisons.
//
// The model only ever sees one CP rank's shard of a row: every op but
// attention is per token, so it runs on the shard as is; attention goes
// through a RowAttention (CpAttention gathers K and V in the CP
// group, SlotAttention exchanges the touched blocks within a hybrid slot).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/row_attention.h"
#include "train/options.h"

namespace fulcrum::train {

class GptModel {
 public:
  // Deterministic for (options, seed) and independent of dtype and device:
  // weights are drawn in float64 on the CPU from a generator seeded with
  // `seed`, then converted and moved to `device`.
  GptModel(const ModelOptions& options, Dtype dtype, std::uint64_t seed,
           at::Device device = at::kCPU);

  // Logits [S, vocab] of the shard's tokens. `tokens` and `positions` are
  // int64 [S] (positions: each token's position in its document, from the
  // unsharded row); `layers` holds one attention per block (CpAttention in
  // fixed mode, SlotAttention in a hybrid slot), built for this row's plan.
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions,
                     const std::vector<std::shared_ptr<attention::RowAttention>>& layers) const;

  // Summed next-token cross-entropy over the positions where `loss_mask` is 1.
  at::Tensor loss_sum(const at::Tensor& logits, const at::Tensor& labels,
                      const at::Tensor& loss_mask) const;

  const std::vector<at::Tensor>& parameters() const { return params_; }
  const std::vector<std::string>& parameter_names() const { return names_; }
  std::int64_t num_parameters() const;
  const ModelOptions& options() const { return options_; }

 private:
  at::Tensor add(const std::string& name, at::Tensor value);
  at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const;

  struct Block {
    at::Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
    at::Tensor ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };

  ModelOptions options_;
  at::ScalarType dtype_;
  at::Device device_;
  at::Tensor token_embedding_;
  at::Tensor position_embedding_;  // learned positions only
  std::vector<Block> blocks_;
  at::Tensor lnf_w_, lnf_b_, head_w_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
};

// AdamW (decoupled weight decay) over a fixed parameter list; the state is
// created on the first step. Written out rather than torch::optim so the
// update is the same few ops in every build and layout.
class AdamW {
 public:
  struct Options {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.01;
  };
  // Weight decay applies to matrices only (weights of linear maps and
  // embeddings), not to biases and norm gains, as in GPT-2 and Megatron.
  AdamW(std::vector<at::Tensor> params, Options options)
      : params_(std::move(params)), options_(options) {}

  // Applies one update from the parameters' .grad(); an undefined gradient
  // counts as zero.
  void step();

  // The moment estimates and the step count, for checkpoints: a resumed run
  // must continue the bias correction and the moments exactly. `m` and `v`
  // are empty before the first step, else one tensor per parameter, shaped
  // and typed like it. set_state trusts its caller to have checked that.
  struct State {
    std::int64_t step = 0;
    std::vector<at::Tensor> m, v;
  };
  State state() const { return {t_, m_, v_}; }
  void set_state(State state) {
    t_ = state.step;
    m_ = std::move(state.m);
    v_ = std::move(state.v);
  }

 private:
  std::vector<at::Tensor> params_;
  Options options_;
  std::vector<at::Tensor> m_, v_;
  std::int64_t t_ = 0;
};

}  // namespace fulcrum::train
