// The fulcrum command line: dispatches to the subcommands and guarantees the
// exit-code contract (0 ok, 1 internal failure, 2 bad input) even if
// something throws past a subcommand.

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "fulcrum/c_api.h"

#ifndef FULCRUM_VERSION
// The build passes project(VERSION); this default serves other builds.
#define FULCRUM_VERSION "0.1.0"
#endif

namespace {

constexpr const char* kHelp =
    "fulcrum - load balancing for long-sequence context-parallel x data-parallel training\n"
    "\n"
    "Usage: fulcrum <command> [options]\n"
    "\n"
    "Commands:\n"
    "  plan          shard one row across CP ranks and report each rank's work,\n"
    "                or compare every strategy on it (--compare)\n"
    "  dp-partition  split samples across DP ranks and report each rank's cost\n"
    "  schedule      place a global batch of documents on W ranks (hybrid placement)\n"
    "                and report slots, per-rank time and the step time against a bound\n"
    "  train         train a small GPT with balanced CP x DP on this host's workers\n"
    "  calibrate     measure this machine's cost-model coefficients into a profile\n"
    "  preprocess    turn text or JSONL into a byte-level .bin/.idx dataset to train on\n"
    "\n"
    "Options:\n"
    "  -h, --help    show this help\n"
    "  --version     show the version and the plugin ABI it speaks\n"
    "\n"
    "Run 'fulcrum <command> --help' for a command's options. Example, the bundled\n"
    "workload (131072 tokens of packed synthetic documents on 8 CP ranks):\n"
    "  fulcrum plan --compare --cp 8 --seq-len 131072 --synthetic-docs 1\n";

void print_line(const std::string& line) {
  const std::string text = line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
}

int dispatch(const std::vector<std::string>& args) {
  if (args.empty()) {
    print_line("fulcrum: no command given; run 'fulcrum --help' to see the commands");
    return fulcrum::cli::kExitUsage;
  }
  const std::string& command = args.front();
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kHelp;
    return fulcrum::cli::kExitOk;
  }
  if (command == "--version") {
    std::cout << "fulcrum " << FULCRUM_VERSION << " (plugin ABI " << FULCRUM_ABI_MAJOR << "."
              << FULCRUM_ABI_MINOR << ")\n";
    return fulcrum::cli::kExitOk;
  }
  if (command == "plan") return fulcrum::cli::run_plan(rest);
  if (command == "dp-partition") return fulcrum::cli::run_dp_partition(rest);
  if (command == "train") return fulcrum::cli::run_train(rest);
  if (command == "schedule") return fulcrum::cli::run_schedule(rest);
  if (command == "calibrate") return fulcrum::cli::run_calibrate(rest);
  if (command == "preprocess") return fulcrum::cli::run_preprocess(rest);
  const std::string kind = !command.empty() && command.front() == '-' ? "option" : "command";
  print_line("fulcrum: unknown " + kind + " '" + fulcrum::cli::one_line(command) +
             "'; the commands are plan, dp-partition, schedule, train, calibrate and preprocess, "
             "see "
             "'fulcrum --help'");
  return fulcrum::cli::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  // The subcommands catch their own failures; this is the last guard so that
  // no exception ever reaches std::terminate and prints a trace.
  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    print_line("fulcrum: internal error: " + fulcrum::cli::one_line(e.what()) +
               "; please report this");
  } catch (...) {
    print_line("fulcrum: internal error: unknown exception; please report this");
  }
  return fulcrum::cli::kExitInternal;
}
