// What the model asks of a layer's attention over one row: differentiable
// attention of its local q, k, v ([S, H, D]), whoever else holds the rest of
// the row and however it travels. CpAttention (a fixed CP group's
// all-gather) and SlotAttention (a hybrid slot's point-to-point exchange)
// are the two.
#pragma once

#include <ATen/core/Tensor.h>

namespace fulcrum::attention {

class RowAttention {
 public:
  virtual ~RowAttention() = default;
  virtual at::Tensor apply(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) = 0;
};

}  // namespace fulcrum::attention
