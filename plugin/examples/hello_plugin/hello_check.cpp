// Loads the example plugin through the host's loader and checks one plan.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "fulcrum/host/plugin_loader.h"

int main() {
  fulcrum::host::LoaderOptions options;
  // A build tree's mode follows the umask; an installed plugin keeps the check.
  options.check_permissions = false;
  auto loaded = fulcrum::host::load_plugin(HELLO_PLUGIN_PATH, options);
  if (!loaded) {
    std::fprintf(stderr, "hello_check: %s\n", loaded.status().message().c_str());
    return 1;
  }
  fulcrum::CpWorkload workload;
  workload.tokens = 10;
  workload.cp_size = 4;
  auto plan = (*loaded)->plan_cp("reverse_contiguous", workload);
  if (!plan) {
    std::fprintf(stderr, "hello_check: %s\n", plan.status().message().c_str());
    return 1;
  }
  // Shards of 3: rank 3 gets [0, 3), rank 0 the last token and two pads.
  const std::vector<std::int64_t> expected = {9, -1, -1, 6, 7, 8, 3, 4, 5, 0, 1, 2};
  if (plan->positions != expected || plan->work.size() != 4 || plan->work[0].tokens != 1) {
    std::fprintf(stderr, "hello_check: unexpected plan from plugin '%s'\n",
                 (*loaded)->name().c_str());
    return 1;
  }
  std::printf("hello_check: plugin '%s' planned %lld tokens on %d ranks: ok\n",
              (*loaded)->name().c_str(), static_cast<long long>(workload.tokens), workload.cp_size);
  return 0;
}
