#include "train/model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <utility>

namespace fulcrum::train {
namespace {

constexpr double kInitStd = 0.02;  // GPT-2's

at::TensorOptions f64() { return at::TensorOptions().dtype(at::kDouble); }

}  // namespace

GptModel::GptModel(const ModelOptions& options, Dtype dtype, std::uint64_t seed, at::Device device)
    : options_(options),
      dtype_(dtype == Dtype::kFloat64 ? at::kDouble : at::kFloat),
      device_(device) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const std::int64_t h = options.hidden_size;
  const std::int64_t f = options.ffn_size;
  const std::int64_t v = options.vocab_size;
  auto normal = [&](std::vector<std::int64_t> shape, double std) {
    return at::normal(0.0, std, shape, gen, f64());
  };
  auto zeros = [&](std::int64_t n) { return at::zeros({n}, f64()); };
  auto ones = [&](std::int64_t n) { return at::ones({n}, f64()); };
  // Residual branches end in a projection scaled down with depth, so the
  // residual stream's variance does not grow with the number of blocks.
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(options.num_layers));

  token_embedding_ = add("token_embedding", normal({v, h}, kInitStd));
  if (options.position == PositionKind::kLearned) {
    position_embedding_ =
        add("position_embedding",
            normal({std::max<std::int64_t>(1, options.max_positions), h}, kInitStd));
  }
  for (std::int64_t l = 0; l < options.num_layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    Block b;
    b.ln1_w = add(p + "ln1.weight", ones(h));
    b.ln1_b = add(p + "ln1.bias", zeros(h));
    b.qkv_w = add(p + "qkv.weight", normal({3 * h, h}, kInitStd));
    b.qkv_b = add(p + "qkv.bias", zeros(3 * h));
    b.proj_w = add(p + "proj.weight", normal({h, h}, residual_std));
    b.proj_b = add(p + "proj.bias", zeros(h));
    b.ln2_w = add(p + "ln2.weight", ones(h));
    b.ln2_b = add(p + "ln2.bias", zeros(h));
    b.fc1_w = add(p + "fc1.weight", normal({f, h}, kInitStd));
    b.fc1_b = add(p + "fc1.bias", zeros(f));
    b.fc2_w = add(p + "fc2.weight", normal({h, f}, residual_std));
    b.fc2_b = add(p + "fc2.bias", zeros(h));
    blocks_.push_back(std::move(b));
  }
  lnf_w_ = add("ln_f.weight", ones(h));
  lnf_b_ = add("ln_f.bias", zeros(h));
  head_w_ = add("head.weight", normal({v, h}, kInitStd));
}

at::Tensor GptModel::add(const std::string& name, at::Tensor value) {
  at::Tensor p = value.to(device_, dtype_).contiguous().set_requires_grad(true);
  params_.push_back(p);
  names_.push_back(name);
  return p;
}

std::int64_t GptModel::num_parameters() const {
  std::int64_t n = 0;
  for (const at::Tensor& p : params_) n += p.numel();
  return n;
}

// GPT-NeoX-style rotary embedding: channel i of the first half pairs with
// channel i of the second half.
at::Tensor GptModel::rotate(const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) const {
  const std::int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half);
  const at::Tensor x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
}

at::Tensor GptModel::forward(
    const at::Tensor& tokens, const at::Tensor& positions,
    const std::vector<std::shared_ptr<attention::RowAttention>>& layers) const {
  const std::int64_t s = tokens.size(0);
  const std::int64_t h = options_.hidden_size;
  const std::int64_t heads = options_.num_heads;
  const std::int64_t hd = h / heads;

  at::Tensor x = at::embedding(token_embedding_, tokens);
  at::Tensor cos, sin;
  if (options_.position == PositionKind::kLearned) {
    x = x + at::embedding(position_embedding_, positions);
  } else {
    // Angles in float64 whatever the model dtype: positions reach 1e5 and
    // float32 would lose the low bits of pos * freq.
    const at::Tensor inv_freq =
        at::pow(options_.rope_base, -at::arange(0, hd / 2, f64().device(positions.device())) *
                                        (2.0 / static_cast<double>(hd)));
    const at::Tensor angles = positions.to(at::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);
    cos = angles.cos().to(dtype_).unsqueeze(1);  // [S, 1, hd/2], broadcast over heads
    sin = angles.sin().to(dtype_).unsqueeze(1);
  }

  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    const at::Tensor a = at::layer_norm(x, {h}, b.ln1_w, b.ln1_b);
    const at::Tensor qkv = at::linear(a, b.qkv_w, b.qkv_b);
    at::Tensor q = qkv.narrow(1, 0, h).reshape({s, heads, hd});
    at::Tensor k = qkv.narrow(1, h, h).reshape({s, heads, hd});
    const at::Tensor v = qkv.narrow(1, 2 * h, h).reshape({s, heads, hd}).contiguous();
    if (options_.position == PositionKind::kRope) {
      q = rotate(q, cos, sin);
      k = rotate(k, cos, sin);
    }
    const at::Tensor attn = layers[l]->apply(q.contiguous(), k.contiguous(), v);
    x = x + at::linear(attn.reshape({s, h}), b.proj_w, b.proj_b);
    const at::Tensor m = at::layer_norm(x, {h}, b.ln2_w, b.ln2_b);
    x = x + at::linear(at::gelu(at::linear(m, b.fc1_w, b.fc1_b)), b.fc2_w, b.fc2_b);
  }
  x = at::layer_norm(x, {h}, lnf_w_, lnf_b_);
  return at::linear(x, head_w_);
}

at::Tensor GptModel::loss_sum(const at::Tensor& logits, const at::Tensor& labels,
                              const at::Tensor& loss_mask) const {
  const at::Tensor logp = at::log_softmax(logits, -1);
  const at::Tensor nll = -logp.gather(1, labels.unsqueeze(1)).squeeze(1);
  return (nll * loss_mask.to(nll.scalar_type())).sum();
}

void AdamW::step() {
  c10::NoGradGuard no_grad;
  if (m_.empty()) {
    for (const at::Tensor& p : params_) {
      m_.push_back(at::zeros_like(p));
      v_.push_back(at::zeros_like(p));
    }
  }
  ++t_;
  const double c1 = 1.0 - std::pow(options_.beta1, static_cast<double>(t_));
  const double c2 = 1.0 - std::pow(options_.beta2, static_cast<double>(t_));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor p = params_[i];
    const at::Tensor g = p.grad().defined() ? p.grad() : at::zeros_like(p);
    m_[i].mul_(options_.beta1).add_(g, 1.0 - options_.beta1);
    v_[i].mul_(options_.beta2).addcmul_(g, g, 1.0 - options_.beta2);
    if (p.dim() >= 2 && options_.weight_decay > 0.0)
      p.mul_(1.0 - options_.lr * options_.weight_decay);
    const at::Tensor denom = (v_[i] / c2).sqrt_().add_(options_.eps);
    p.addcdiv_(m_[i], denom, -options_.lr / c1);
  }
}

}  // namespace fulcrum::train
