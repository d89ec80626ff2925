// The training loop of one rank, behind a LibTorch-free interface: the
// worker's device and threads, and the run itself (trainer.h describes what
// every rank does per step). run_worker (trainer.cpp) reads the settings and
// maps failures to exit codes; worker.cpp picks the step loop of the mode
// (worker_base.h: FixedWorker, HybridWorker over what they share) and trains.
#pragma once

#include "fulcrum/status.h"
#include "launch/worker_env.h"
#include "train/checkpoint.h"
#include "train/consensus.h"
#include "train/options.h"
#include "train/trainer.h"

namespace fulcrum::train {

// train.device and dist.backend against this LibTorch and this host's GPUs
// (cuda without a GPU, NCCL with fewer GPUs than ranks here are settings to
// fix, refused before the rendezvous so no rank waits for one that gave
// up), then the GPU of this rank and the intra-op threads.
Status configure_compute(TrainOptions& options, const launch::WorkerIdentity& id);

// Prepares everything that can be checked locally (balancer, data, model,
// the checkpoint to resume), then meets the other ranks and trains. A
// non-OK status is bad input found before the rendezvous; failures after it
// are thrown (worker_errors.h, ConsensusError, comm::CommError and the like).
Status run_training(TrainOptions options, CheckpointOptions checkpoints,
                    const launch::WorkerIdentity& id, const WorkerArgs& args,
                    ReliabilityOptions reliability);

}  // namespace fulcrum::train
