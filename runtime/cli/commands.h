// The subcommands of the fulcrum command line. Each takes the arguments after
// its name and returns the process exit code: 0 success, 1 internal failure,
// 2 bad input (one line on stderr). None lets an exception escape.
#pragma once

#include <string>
#include <vector>

namespace fulcrum::cli {

int run_plan(const std::vector<std::string>& args);
int run_dp_partition(const std::vector<std::string>& args);
int run_train(const std::vector<std::string>& args);
int run_schedule(const std::vector<std::string>& args);
int run_calibrate(const std::vector<std::string>& args);
int run_preprocess(const std::vector<std::string>& args);

}  // namespace fulcrum::cli
