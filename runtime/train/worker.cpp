#include "train/worker.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <memory>
#include <string>
#include <utility>

#include "attention/compute_threads.h"
#include "train/run_settings.h"
#include "train/worker_base.h"

namespace fulcrum::train {

Status configure_compute(TrainOptions& options, const launch::WorkerIdentity& id) {
#ifndef FULCRUM_WITH_NCCL
  if (options.backend == Backend::kNccl) {
    return invalid_argument(
        "dist.backend is nccl, but this fulcrum was built against a LibTorch without NCCL; set "
        "dist.backend: gloo, or rebuild against a CUDA LibTorch with NCCL (docs/RESULTS_GPU.md)");
  }
#endif
  if (options.device == Device::kCuda) {
    const auto gpus = static_cast<int>(torch::cuda::device_count());
    if (gpus == 0) {
      return invalid_argument(
          "train.device is cuda, but this LibTorch sees no GPU (it was built without CUDA, or "
          "no GPU is visible); set train.device: cpu, or build against a CUDA LibTorch "
          "(docs/RESULTS_GPU.md)");
    }
    const int local = id.local_world_size.value_or(id.world_size);
    if (options.backend == Backend::kNccl && local > gpus) {
      return invalid_argument("dist.backend: nccl needs one GPU per rank, but this host runs " +
                              std::to_string(local) + " ranks on " + std::to_string(gpus) +
                              " GPUs; set dist.backend: gloo (ranks then share GPUs) or start "
                              "fewer ranks per host");
    }
    options.cuda_device = id.local_rank % gpus;
  }
  attention::set_compute_threads(options.threads > 0 ? options.threads : default_threads(id));
  return Status::ok();
}

Status run_training(TrainOptions options, CheckpointOptions checkpoints,
                    const launch::WorkerIdentity& id, const WorkerArgs& args,
                    ReliabilityOptions reliability) {
  const bool hybrid = options.mode == ParallelMode::kHybrid;
  WorkerSetup setup{std::move(options), std::move(checkpoints), id, args,
                    ReliabilityHooks(std::move(reliability), id.rank)};
  std::unique_ptr<Worker> worker =
      hybrid ? make_hybrid_worker(std::move(setup)) : make_fixed_worker(std::move(setup));
  if (Status s = worker->prepare(); !s) return s;
  worker->connect();
  worker->train();
  return Status::ok();
}

}  // namespace fulcrum::train
