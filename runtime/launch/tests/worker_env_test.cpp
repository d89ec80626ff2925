// Worker identity from each launcher's variables, and every bad value refused
// with a message that names the variable and the value.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "launch/worker_env.h"

namespace fulcrum::launch {
namespace {

using Env = std::map<std::string, std::string>;

Result<WorkerIdentity> detect(const Env& env) {
  return detect_worker_identity([&env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

void expect_refused(const Env& env, const std::string& variable, const std::string& value) {
  auto id = detect(env);
  ASSERT_FALSE(id) << "accepted " << variable << "=" << value;
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
  const std::string m = id.status().message();
  EXPECT_NE(m.find(variable + "='" + value + "'"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "not one line: " << m;
}

TEST(WorkerEnv, Torchrun) {
  auto id = detect({{"RANK", "3"},
                    {"WORLD_SIZE", "8"},
                    {"LOCAL_RANK", "1"},
                    {"LOCAL_WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "node0"},
                    {"MASTER_PORT", "29501"}});
  ASSERT_TRUE(id) << id.status().message();
  EXPECT_EQ(id->launcher, LauncherKind::kTorchrun);
  EXPECT_EQ(id->rank, 3);
  EXPECT_EQ(id->world_size, 8);
  EXPECT_EQ(id->local_rank, 1);
  EXPECT_EQ(id->local_world_size, 2);
  EXPECT_EQ(id->master_addr, "node0");
  EXPECT_EQ(id->master_port, 29501);
}

TEST(WorkerEnv, Slurm) {
  auto id = detect({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}});
  ASSERT_TRUE(id) << id.status().message();
  EXPECT_EQ(id->launcher, LauncherKind::kSlurm);
  EXPECT_EQ(id->rank, 5);
  EXPECT_EQ(id->world_size, 6);
  EXPECT_EQ(id->local_rank, 1);
  EXPECT_FALSE(id->local_world_size.has_value());
  EXPECT_EQ(id->master_addr, kDefaultMasterAddr);
  EXPECT_EQ(id->master_port, kDefaultMasterPort);
}

TEST(WorkerEnv, OpenMpi) {
  auto id = detect({{"OMPI_COMM_WORLD_RANK", "0"},
                    {"OMPI_COMM_WORLD_SIZE", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                    {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(id) << id.status().message();
  EXPECT_EQ(id->launcher, LauncherKind::kOpenMpi);
  EXPECT_EQ(id->world_size, 2);
  EXPECT_EQ(id->local_world_size, 2);
  EXPECT_EQ(id->master_port, 1234);
}

TEST(WorkerEnv, StandaloneWhenNoLauncher) {
  auto id = detect({});
  ASSERT_TRUE(id) << id.status().message();
  EXPECT_EQ(id->launcher, LauncherKind::kStandalone);
  EXPECT_EQ(id->rank, 0);
  EXPECT_EQ(id->world_size, 1);
}

TEST(WorkerEnv, TorchrunWinsInsideASlurmAllocation) {
  auto id =
      detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(id) << id.status().message();
  EXPECT_EQ(id->launcher, LauncherKind::kTorchrun);
  EXPECT_EQ(id->rank, 1);
}

TEST(WorkerEnv, LocalRankDefaultsToRank) {
  auto id = detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  ASSERT_TRUE(id) << id.status().message();
  EXPECT_EQ(id->local_rank, 1);
}

TEST(WorkerEnv, RefusesBadValues) {
  const Env torch{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}};
  auto with = [](Env env, const std::string& k, const std::string& v) {
    env[k] = v;
    return env;
  };
  expect_refused(with(torch, "RANK", "4"), "RANK", "4");  // RANK >= WORLD_SIZE
  expect_refused(with(torch, "RANK", "abc"), "RANK", "abc");
  expect_refused(with(torch, "RANK", "-1"), "RANK", "-1");
  expect_refused(with(torch, "RANK", "+1"), "RANK", "+1");
  expect_refused(with(torch, "RANK", " 1"), "RANK", " 1");
  expect_refused(with(torch, "RANK", "1x"), "RANK", "1x");
  expect_refused(with(torch, "RANK", ""), "RANK", "");
  expect_refused(with(torch, "RANK", "99999999999999999999"), "RANK", "99999999999999999999");
  expect_refused(with(torch, "WORLD_SIZE", "0"), "WORLD_SIZE", "0");
  expect_refused(with(torch, "WORLD_SIZE", "2.0"), "WORLD_SIZE", "2.0");
  expect_refused(with(torch, "LOCAL_RANK", "-3"), "LOCAL_RANK", "-3");
  expect_refused(with(torch, "LOCAL_RANK", "4"), "LOCAL_RANK", "4");
  expect_refused(with(with(torch, "LOCAL_WORLD_SIZE", "2"), "LOCAL_RANK", "2"), "LOCAL_RANK", "2");
  expect_refused(with(torch, "LOCAL_WORLD_SIZE", "5"), "LOCAL_WORLD_SIZE", "5");
  expect_refused(with(torch, "MASTER_PORT", "0"), "MASTER_PORT", "0");
  expect_refused(with(torch, "MASTER_PORT", "65536"), "MASTER_PORT", "65536");
  expect_refused(with(torch, "MASTER_PORT", "http"), "MASTER_PORT", "http");
  expect_refused(with(torch, "MASTER_ADDR", ""), "MASTER_ADDR", "");

  const Env slurm{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}};
  expect_refused(with(slurm, "SLURM_PROCID", "2"), "SLURM_PROCID", "2");
  expect_refused(with(slurm, "SLURM_NTASKS", "two"), "SLURM_NTASKS", "two");
  expect_refused(with(slurm, "SLURM_LOCALID", "-1"), "SLURM_LOCALID", "-1");

  const Env mpi{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
  expect_refused(with(mpi, "OMPI_COMM_WORLD_RANK", "7"), "OMPI_COMM_WORLD_RANK", "7");
  expect_refused(with(mpi, "OMPI_COMM_WORLD_SIZE", "-2"), "OMPI_COMM_WORLD_SIZE", "-2");
  expect_refused(with(mpi, "OMPI_COMM_WORLD_LOCAL_RANK", "x"), "OMPI_COMM_WORLD_LOCAL_RANK", "x");
}

TEST(WorkerEnv, RefusesAHalfSetIdentity) {
  auto id = detect({{"RANK", "0"}});
  ASSERT_FALSE(id);
  EXPECT_NE(id.status().message().find("WORLD_SIZE is not"), std::string::npos)
      << id.status().message();
}

}  // namespace
}  // namespace fulcrum::launch
