#include "attention/blocked_attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace fulcrum::attention {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string shape(const at::Tensor& t) {
  return t.defined() ? c10::str(t.sizes(), " ", t.scalar_type()) : std::string("undefined");
}

// Shapes every entry point relies on; returns heads. Messages are built only
// on failure (c10::str streams, which also sidesteps a GCC 12 -Wrestrict
// false positive on chained std::string concatenation).
std::int64_t check_qkv(const TileSchedule& s, const at::Tensor& q, const at::Tensor& k,
                       const at::Tensor& v, const char* fn) {
  if (!(q.defined() && q.dim() == 3 && q.size(0) == s.shard_len)) {
    throw std::invalid_argument(c10::str(fn, ": q is ", shape(q), "; expected [", s.shard_len,
                                         " local rows, heads, head_dim]"));
  }
  if (q.scalar_type() != at::kFloat && q.scalar_type() != at::kDouble) {
    throw std::invalid_argument(
        c10::str(fn, ": q is ", shape(q), "; float32 and float64 are supported"));
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"k", &k},
                                std::pair<const char*, const at::Tensor*>{"v", &v}}) {
    if (!(t->defined() && t->dim() == 3 && t->size(0) == s.tokens && t->size(1) == q.size(1) &&
          t->size(2) == q.size(2) && t->scalar_type() == q.scalar_type())) {
      throw std::invalid_argument(
          c10::str(fn, ": ", name, " is ", shape(*t), "; expected the row's keys in global order [",
                   s.tokens, ", ", q.size(1), ", ", q.size(2), "] ", q.scalar_type()));
    }
  }
  return q.size(1);
}

// The masked pairs of the tile rows [r0, r1) x keys [k0, k1), as a bool
// tensor [rows, keys] (true = masked) on `device`, or an undefined tensor when
// every pair is allowed, so interior tiles of wide ranges skip the masking
// ops. Written on the CPU from the schedule, then moved.
at::Tensor tile_mask(const TileSchedule& s, std::int64_t r0, std::int64_t r1, std::int64_t k0,
                     std::int64_t k1, const at::Device& device) {
  if (!chunk_needs_mask(s, r0, r1, k0, k1)) return {};
  const std::int64_t width = k1 - k0;
  at::Tensor mask = at::ones({r1 - r0, width}, at::kBool);
  bool* data = mask.data_ptr<bool>();
  for (std::int64_t row = r0; row < r1; ++row) {
    bool* line = data + (row - r0) * width;
    s.for_each_allowed(row, k0, k1, [&](std::int64_t a, std::int64_t b) {
      std::memset(line + (a - k0), 0, static_cast<std::size_t>(b - a));
    });
  }
  return device.is_cpu() ? mask : mask.to(device);
}

// [L, H, D] -> [H, L, D] contiguous, the layout bmm wants.
at::Tensor heads_first(const at::Tensor& t) { return t.transpose(0, 1).contiguous(); }

}  // namespace

bool chunk_needs_mask(const TileSchedule& s, std::int64_t r0, std::int64_t r1, std::int64_t k0,
                      std::int64_t k1) {
  if (s.sparse()) return true;
  for (std::int64_t row = r0; row < r1; ++row) {
    if (s.lo[row] > k0 || s.hi[row] < k1 - 1) return true;
  }
  return false;
}

LocalForward local_attention_forward(const TileSchedule& s, const at::Tensor& q,
                                     const at::Tensor& k, const at::Tensor& v,
                                     const KernelOptions& options) {
  const std::int64_t heads = check_qkv(s, q, k, v, "local_attention_forward");
  const std::int64_t dim = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const at::Tensor qh = heads_first(q * scale);
  const at::Tensor kh = heads_first(k);
  const at::Tensor vh = heads_first(v);
  at::Tensor out = at::zeros({heads, s.shard_len, dim}, q.options());
  at::Tensor lse = at::full({heads, s.shard_len}, -kInf, q.options());
  LocalForward result;

  for (std::int64_t qblk = 0; qblk < s.num_query_blocks; ++qblk) {
    if (s.run_offsets[qblk] == s.run_offsets[qblk + 1]) continue;  // pad rows only
    const std::int64_t r0 = qblk * s.block_size;
    const std::int64_t r1 = std::min(r0 + s.block_size, s.shard_len);
    const at::Tensor qb = qh.narrow(1, r0, r1 - r0);
    at::Tensor m = at::full({heads, r1 - r0}, -kInf, q.options());
    at::Tensor m_safe;
    at::Tensor l = at::zeros({heads, r1 - r0}, q.options());
    at::Tensor acc = at::zeros({heads, r1 - r0, dim}, q.options());
    for_each_chunk(s, qblk, options, [&](const Chunk& c) {
      result.tiles += c.blocks;
      result.full_tiles += c.full ? c.blocks : 0;
      const at::Tensor kc = kh.narrow(1, c.k0, c.k1 - c.k0);
      const at::Tensor vc = vh.narrow(1, c.k0, c.k1 - c.k0);
      at::Tensor scores = at::bmm(qb, kc.transpose(1, 2));  // [H, R, C]
      if (!c.full) {
        const at::Tensor mask = tile_mask(s, r0, r1, c.k0, c.k1, q.device());
        if (mask.defined()) scores.masked_fill_(mask, -kInf);
        result.masked_chunks += mask.defined() ? 1 : 0;
      }
      const at::Tensor m_new = at::maximum(m, scores.amax(-1));
      // A row with no allowed key so far keeps m = -inf; subtracting 0
      // instead keeps exp() at 0 rather than NaN.
      m_safe = m_new.masked_fill(m_new.isinf(), 0.0);
      const at::Tensor correction = (m - m_safe).exp_();
      at::Tensor p = scores.sub_(m_safe.unsqueeze(-1)).exp_();
      l.mul_(correction).add_(p.sum(-1));
      acc.mul_(correction.unsqueeze(-1)).baddbmm_(p, vc);
      m = m_new;
    });
    const at::Tensor l_safe = l.masked_fill(l.eq(0), 1.0);
    out.narrow(1, r0, r1 - r0).copy_(acc / l_safe.unsqueeze(-1));
    lse.narrow(1, r0, r1 - r0).copy_(m_safe + l.log());  // log(0) = -inf: no key
  }
  result.out = out.transpose(0, 1).contiguous();
  result.lse = lse.transpose(0, 1).contiguous();
  return result;
}

LocalGrads local_attention_backward(const TileSchedule& s, const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v, const at::Tensor& out,
                                    const at::Tensor& lse, const at::Tensor& dout,
                                    const KernelOptions& options) {
  const char* fn = "local_attention_backward";
  const std::int64_t heads = check_qkv(s, q, k, v, fn);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"out", &out},
                                std::pair<const char*, const at::Tensor*>{"dout", &dout}}) {
    if (!(t->defined() && t->sizes().equals(q.sizes()) && t->scalar_type() == q.scalar_type())) {
      throw std::invalid_argument(
          c10::str(fn, ": ", name, " is ", shape(*t), "; expected q's shape ", shape(q)));
    }
  }
  if (!(lse.defined() && lse.dim() == 2 && lse.size(0) == s.shard_len && lse.size(1) == heads &&
        lse.scalar_type() == q.scalar_type())) {
    throw std::invalid_argument(c10::str(fn, ": lse is ", shape(lse), "; expected [", s.shard_len,
                                         ", ", heads, "] ", q.scalar_type()));
  }
  const std::int64_t dim = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const at::Tensor qh = heads_first(q * scale);
  const at::Tensor kh = heads_first(k);
  const at::Tensor vh = heads_first(v);
  const at::Tensor doh = heads_first(dout);
  // Rows that see no key have L = -inf; +inf makes their P exactly 0.
  at::Tensor lh = lse.transpose(0, 1).contiguous();
  lh.masked_fill_(lh.isinf(), kInf);
  // rowsum(dO * O) = rowsum(dP * P): the softmax Jacobian's correction term.
  const at::Tensor delta = (doh * heads_first(out)).sum(-1);

  at::Tensor dq = at::zeros({heads, s.shard_len, dim}, q.options());
  at::Tensor dk = at::zeros({heads, s.tokens, dim}, q.options());
  at::Tensor dv = at::zeros({heads, s.tokens, dim}, q.options());
  LocalGrads grads;

  for (std::int64_t qblk = 0; qblk < s.num_query_blocks; ++qblk) {
    if (s.run_offsets[qblk] == s.run_offsets[qblk + 1]) continue;
    const std::int64_t r0 = qblk * s.block_size;
    const std::int64_t rows = std::min(r0 + s.block_size, s.shard_len) - r0;
    const at::Tensor qb = qh.narrow(1, r0, rows);
    const at::Tensor dob = doh.narrow(1, r0, rows);
    const at::Tensor lb = lh.narrow(1, r0, rows).unsqueeze(-1);
    const at::Tensor db = delta.narrow(1, r0, rows).unsqueeze(-1);
    at::Tensor dqb = dq.narrow(1, r0, rows);
    for_each_chunk(s, qblk, options, [&](const Chunk& c) {
      grads.tiles += c.blocks;
      grads.full_tiles += c.full ? c.blocks : 0;
      const at::Tensor kc = kh.narrow(1, c.k0, c.k1 - c.k0);
      const at::Tensor vc = vh.narrow(1, c.k0, c.k1 - c.k0);
      at::Tensor scores = at::bmm(qb, kc.transpose(1, 2));
      if (!c.full) {
        const at::Tensor mask = tile_mask(s, r0, r0 + rows, c.k0, c.k1, q.device());
        if (mask.defined()) scores.masked_fill_(mask, -kInf);
        grads.masked_chunks += mask.defined() ? 1 : 0;
      }
      const at::Tensor p = scores.sub_(lb).exp_();
      dv.narrow(1, c.k0, c.k1 - c.k0).baddbmm_(p.transpose(1, 2), dob);
      at::Tensor ds = at::bmm(dob, vc.transpose(1, 2)).sub_(db).mul_(p);
      dqb.baddbmm_(ds, kc);
      dk.narrow(1, c.k0, c.k1 - c.k0).baddbmm_(ds.transpose(1, 2), qb);  // qb carries the scale
    });
    dqb.mul_(scale);
  }
  grads.dq = dq.transpose(0, 1).contiguous();
  grads.dk = dk.transpose(0, 1).contiguous();
  grads.dv = dv.transpose(0, 1).contiguous();
  return grads;
}

}  // namespace fulcrum::attention
