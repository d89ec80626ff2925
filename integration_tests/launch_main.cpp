// fulcrum_it_launch NPROC PROGRAM [ARGS...]: runs PROGRAM as NPROC ranks
// through fulcrum::launch, the launcher behind `fulcrum train`, so the
// integration tests can start workers that are not the trainer (the CP
// attention check) exactly as training starts its own.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "launch/launch.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s NPROC PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  fulcrum::launch::LaunchOptions options;
  options.nproc = std::atoi(argv[1]);
  options.program = argv[2];
  for (int i = 3; i < argc; ++i) options.args.emplace_back(argv[i]);
  return fulcrum::launch::launch_workers(options);
}
