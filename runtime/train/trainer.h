// One training worker: the rank of a DP x CP job that `fulcrum train` (or
// torchrun, srun, mpirun) started. No LibTorch in this header, so the
// worker's main() compiles quickly.
//
// Per optimizer step, every rank:
//   1. takes its DP rank's micro-batches from the DataLoader (the data-loader
//      hook: the plugin's DP partition; all CP ranks of a DP group get the
//      same rows);
//   2. for each row, asks the CpSelector for a CP plan (the attention-step
//      hook: balancer.cp.strategy, else balancer.cp.fallback), shards tokens,
//      positions, labels, loss mask and document ids by it, and runs forward
//      and backward on its shard; CP attention gathers K and V in the CP
//      group;
//   3. all-reduces gradients, the summed token loss and the loss-token count
//      over WORLD in one collective, divides the gradients by the global
//      count (so the result does not depend on the layout), and steps AdamW;
//   4. sends its figures to rank 0, which writes metrics and progress;
//   5. every train.checkpoint_every steps, rank 0 writes one checkpoint for
//      the job (everything in it is replicated; checkpoint.h has the file,
//      docs/RELIABILITY.md the guarantees). train.resume restores one on
//      every rank before the first step.
//
// Collectives never depend on how many micro-batches a DP rank got: within a
// CP group every rank has the same rows (same loader, same dp_rank), and
// every collective across DP groups happens once per step, on every rank,
// whatever its micro-batch count (zero included). So unequal DP shares
// cannot deadlock.
#pragma once

#include <string>
#include <vector>

#include "fulcrum/host/config.h"

namespace fulcrum::train {

struct WorkerArgs {
  std::string config_path;
  // "section.key=value", each labelled with what set it (--set, a flag).
  std::vector<host::Override> overrides;
  std::string metrics_path;  // rank 0 writes JSON lines; empty = none
  // Rank 0 writes the final parameters here: for every parameter in model
  // order a line "name numel" then, after a blank line, all values as
  // little-endian float64. For comparing runs; empty = none.
  std::string save_params_path;
};

// Runs the worker to the end. Returns the process exit code: 0 done, 1 a
// runtime failure (a collective, a peer, an internal error), 2 bad input
// (configuration, data, plugin, launch environment). Every failure is one
// line on stderr starting with "fulcrum-worker: rank R:". Never throws.
int run_worker(const WorkerArgs& args) noexcept;

}  // namespace fulcrum::train
