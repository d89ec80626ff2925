#include "train/state_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "fulcrum/host/log.h"
#include "launch/worker_env.h"
#include "train/model.h"
#include "train/worker_errors.h"

namespace fulcrum::train {
namespace {

// A tensor as a checkpoint blob (see checkpoint.h): the raw contiguous
// elements, so a float64 value comes back bitwise.
std::string tensor_to_blob(const at::Tensor& tensor) {
  const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
  TensorBlob blob;
  switch (t.scalar_type()) {
    case at::kFloat:
      blob.dtype = BlobDtype::kFloat32;
      break;
    case at::kDouble:
      blob.dtype = BlobDtype::kFloat64;
      break;
    case at::kByte:
      blob.dtype = BlobDtype::kUint8;
      break;
    case at::kLong:
      blob.dtype = BlobDtype::kInt64;
      break;
    default:
      throw std::logic_error(std::string("no checkpoint dtype for ") +
                             at::toString(t.scalar_type()));
  }
  blob.shape = t.sizes().vec();
  blob.data.assign(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return encode_tensor_blob(blob);
}

at::ScalarType scalar_type_of(BlobDtype dtype) {
  switch (dtype) {
    case BlobDtype::kFloat32:
      return at::kFloat;
    case BlobDtype::kFloat64:
      return at::kDouble;
    case BlobDtype::kUint8:
      return at::kByte;
    case BlobDtype::kInt64:
      return at::kLong;
  }
  return at::kDouble;
}

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string text;
  for (std::int64_t d : dims) text += (text.empty() ? "" : ", ") + std::to_string(d);
  return "[" + text + "]";
}

// Blob `name` of checkpoint `source` as a tensor shaped and typed like
// `like`.
Result<at::Tensor> blob_to_tensor(const Checkpoint& checkpoint, const std::string& name,
                                  const std::string& source, const at::Tensor& like) {
  const std::string* bytes = checkpoint.find(name);
  if (bytes == nullptr) {
    return invalid_argument("checkpoint " + source + " has no '" + name +
                            "' entry; it was not written for this model");
  }
  Result<TensorBlob> blob = decode_tensor_blob(*bytes, name, source);
  if (!blob) return blob.status();
  const at::ScalarType type = scalar_type_of(blob->dtype);
  if (type != like.scalar_type() || blob->shape != like.sizes().vec()) {
    return invalid_argument(
        "checkpoint " + source + " entry '" + name + "' is " + blob_dtype_name(blob->dtype) + " " +
        shape_text(blob->shape) + ", this run's is " + at::toString(like.scalar_type()) + " " +
        shape_text(like.sizes().vec()) + "; resume with the model it was made for");
  }
  at::Tensor t = at::empty(blob->shape, at::TensorOptions().dtype(type));
  if (!blob->data.empty()) std::memcpy(t.data_ptr(), blob->data.data(), blob->data.size());
  return t;
}

// The process's CPU generator state. Unused by training today (no dropout);
// saved so that a model that draws from it resumes the same stream.
at::Tensor cpu_rng_state() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

// Everything a checkpoint restores, read and checked before anything is
// changed: a refused checkpoint must leave the fresh model as it was.
struct SavedState {
  std::vector<at::Tensor> parameters;
  AdamW::State optimizer;
  at::Tensor rng;
};

Result<SavedState> read_saved_state(const Checkpoint& c, const std::string& path,
                                    const GptModel& model) {
  const std::vector<at::Tensor>& params = model.parameters();
  const std::vector<std::string>& names = model.parameter_names();
  SavedState saved;
  for (std::size_t i = 0; i < params.size(); ++i) {
    Result<at::Tensor> t = blob_to_tensor(c, "model/" + names[i], path, params[i]);
    if (!t) return t.status();
    saved.parameters.push_back(*t);
  }
  Result<std::vector<std::int64_t>> optim_step = c.i64s("optim/step", 1, path);
  if (!optim_step) return optim_step.status();
  saved.optimizer.step = (*optim_step)[0];
  for (std::size_t i = 0; saved.optimizer.step > 0 && i < params.size(); ++i) {
    Result<at::Tensor> m = blob_to_tensor(c, "optim/m/" + names[i], path, params[i]);
    if (!m) return m.status();
    Result<at::Tensor> v = blob_to_tensor(c, "optim/v/" + names[i], path, params[i]);
    if (!v) return v.status();
    // Checkpoints hold CPU tensors; the moments live with their parameter.
    saved.optimizer.m.push_back(m->to(params[i].device()));
    saved.optimizer.v.push_back(v->to(params[i].device()));
  }
  Result<at::Tensor> rng = blob_to_tensor(c, "rng/torch_cpu", path, cpu_rng_state());
  if (!rng) return rng.status();
  saved.rng = *rng;
  return saved;
}

void install(SavedState saved, GptModel& model, AdamW& optimizer) {
  {
    c10::NoGradGuard no_grad;
    const std::vector<at::Tensor>& params = model.parameters();
    for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(saved.parameters[i]);
  }
  optimizer.set_state(std::move(saved.optimizer));
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(saved.rng);
}

Status check_trajectory(const Checkpoint& c, const std::string& path,
                        const std::string& trajectory) {
  const std::string* saved = c.find("config");
  if (saved != nullptr && c.header.config_fingerprint == fnv1a64(trajectory)) {
    return Status::ok();
  }
  const std::string what = saved == nullptr ? std::string("it holds no settings")
                                            : describe_difference(*saved, trajectory);
  return invalid_argument("checkpoint " + path + " was made with other settings (" + what +
                          "); resume with the settings it was made with, or start a new run "
                          "with another train.checkpoint_dir");
}

// The loader's position, and the DP window it was taken with
// (balancer.dp.window > 1): the window is part of the data order, so a
// resume with another is refused.
Result<data::LoaderPosition> restore_loader(const Checkpoint& c, const std::string& path,
                                            data::DataLoader& loader) {
  Result<std::vector<std::int64_t>> position = c.i64s("loader/position", 2, path);
  if (!position) return position.status();
  const data::LoaderPosition at{(*position)[0], (*position)[1]};
  if (Status s = loader.seek(at); !s) {
    return invalid_argument("checkpoint " + path + ": " + s.message());
  }
  const std::string* window = c.find("loader/dp_window");
  if (Status s = loader.restore_window_state(window ? *window : std::string_view()); !s) {
    return invalid_argument("checkpoint " + path + ": " + s.message());
  }
  return at;
}

void warn_about_layout(const Checkpoint& c, const std::string& path, const std::string& layout) {
  const std::string* saved = c.find("layout");
  const std::string change = saved ? describe_difference(*saved, layout) : "";
  if (change.empty()) return;
  host::log_to_stderr(
      host::LogLevel::kWarning,
      "resuming " + path + " (made by DP " + std::to_string(c.header.dp_size) + " x CP " +
          std::to_string(c.header.cp_size) + ") with another layout: " + change +
          "; every sample is still trained exactly once, but rows are formed and summed in "
          "another order, so losses will not be bitwise those of an uninterrupted run");
}

Result<ResumedAt> apply_checkpoint(const Checkpoint& c, const std::string& path,
                                   TrainingState& state, bool rank0) {
  if (Status s = check_trajectory(c, path, state.trajectory); !s) return s;
  // The loader first: a window state that does not fit this run is refused
  // before the layout warning could promise an exactly-once resume.
  Result<data::LoaderPosition> position = restore_loader(c, path, *state.loader);
  if (!position) return position.status();
  if (rank0) warn_about_layout(c, path, state.layout);
  Result<SavedState> saved = read_saved_state(c, path, *state.model);
  if (!saved) return saved.status();
  if (state.mode != nullptr) {
    if (Status s = state.mode->read(c, path, rank0); !s) return s;
  }
  install(std::move(saved).value(), *state.model, *state.optimizer);
  if (state.mode != nullptr) state.mode->install();
  if (rank0) {
    host::log_to_stderr(host::LogLevel::kInfo,
                        "resuming from " + path + ": step " + std::to_string(c.header.step) +
                            " done, data at epoch " + std::to_string(position->epoch) + " step " +
                            std::to_string(position->step));
  }
  return ResumedAt{c.header.step, c.header.payload_crc32};
}

// Writing into a directory that holds another run's checkpoints would
// interleave the two runs' files, and a later resume could pick the wrong
// one.
Status require_empty_checkpoint_dir(const std::string& dir) {
  Result<std::vector<CheckpointFile>> files = list_checkpoints(dir);
  if (!files) return files.status();
  if (files->empty()) return Status::ok();
  return invalid_argument("train.checkpoint_dir " + dir + " already holds checkpoints (the " +
                          "newest: " + files->front().path +
                          "); set train.resume=auto to continue that run, or choose an empty "
                          "directory");
}

}  // namespace

Result<ResumedAt> restore_training_state(const CheckpointOptions& checkpoints, TrainingState& state,
                                         bool rank0) {
  using Resume = CheckpointOptions::Resume;
  if (checkpoints.every > 0) {
    if (Status s = prepare_checkpoint_dir(checkpoints.dir); !s) return s;
  }
  // fulcrum train's launcher holds the directory's lock for the whole job
  // (and names the completion note); a job another launcher started is
  // locked by its rank 0, so that two jobs never write one directory.
  const char* note = std::getenv(launch::kCompletionNoteVariable);
  if (rank0 && !checkpoints.dir.empty() && (note == nullptr || *note == '\0')) {
    if (Status s = hold_checkpoint_dir_lock(checkpoints.dir); !s) return s;
  }
  if (checkpoints.resume == Resume::kNo) {
    if (checkpoints.every == 0) return ResumedAt{};
    if (Status s = require_empty_checkpoint_dir(checkpoints.dir); !s) return s;
    return ResumedAt{};
  }
  if (checkpoints.resume == Resume::kPath) {
    Result<Checkpoint> read = read_checkpoint(checkpoints.resume_path);
    if (!read) {
      return invalid_argument(read.status().message() +
                              "; set train.resume to an intact checkpoint, or to auto for the "
                              "newest intact one in train.checkpoint_dir");
    }
    return apply_checkpoint(*read, checkpoints.resume_path, state, rank0);
  }
  Result<std::optional<ResumePoint>> point = latest_good_checkpoint(checkpoints.dir);
  if (!point) return point.status();
  if (!point->has_value()) {
    if (rank0) {
      host::log_to_stderr(host::LogLevel::kInfo, "train.resume = auto: no checkpoint in " +
                                                     checkpoints.dir +
                                                     " yet; training from step 1");
    }
    return ResumedAt{};
  }
  const ResumePoint& p = **point;
  for (const std::string& refused : p.refused) {
    if (rank0) {
      host::log_to_stderr(host::LogLevel::kWarning,
                          refused + "; refused it, resuming from the older " + p.path);
    }
  }
  return apply_checkpoint(p.checkpoint, p.path, state, rank0);
}

std::string write_training_state(const CheckpointOptions& checkpoints, const TrainingState& state,
                                 std::int64_t step, int dp_size, int cp_size) {
  Checkpoint c;
  c.header.step = step;
  c.header.dp_size = dp_size;
  c.header.cp_size = cp_size;
  c.header.config_fingerprint = fnv1a64(state.trajectory);
  c.add("config", state.trajectory);
  c.add("layout", state.layout);
  // The loader's state: its shuffle is a pure function of (data.seed,
  // epoch) and its steps of (shuffle, balancer.dp.window), so the position is
  // all it needs; with a window > 1 one more entry names the window, so that
  // a resume with another is refused. The balancer keeps nothing between
  // steps (the plugin is deterministic and stateless, the CP selector's
  // preference is restored by scope).
  const data::LoaderPosition position = state.loader->position();
  c.add_i64s("loader/position", {position.epoch, position.step});
  if (std::string window = state.loader->window_state(); !window.empty()) {
    c.add("loader/dp_window", std::move(window));
  }
  c.add("rng/torch_cpu", tensor_to_blob(cpu_rng_state()));
  const std::vector<std::string>& names = state.model->parameter_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    c.add("model/" + names[i], tensor_to_blob(state.model->parameters()[i]));
  }
  const AdamW::State optimizer = state.optimizer->state();
  c.add_i64s("optim/step", {optimizer.step});
  for (std::size_t i = 0; i < optimizer.m.size(); ++i) {
    c.add("optim/m/" + names[i], tensor_to_blob(optimizer.m[i]));
    c.add("optim/v/" + names[i], tensor_to_blob(optimizer.v[i]));
  }
  if (state.mode != nullptr) state.mode->save(c);
  Result<std::string> path = save_checkpoint(checkpoints.dir, c, checkpoints.keep);
  if (!path) {
    throw CheckpointError("checkpoint of step " + std::to_string(step) + ": " +
                          path.status().message());
  }
  return std::move(path).value();
}

Status save_parameters(const std::string& path, const GptModel& model) {
  std::ostringstream out;
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    out << model.parameter_names()[i] << ' ' << model.parameters()[i].numel() << '\n';
  }
  out << '\n';
  for (const at::Tensor& p : model.parameters()) {
    const at::Tensor d = p.detach().to(at::kCPU, at::kDouble).contiguous();
    out.write(reinterpret_cast<const char*>(d.data_ptr<double>()),
              static_cast<std::streamsize>(d.numel() * sizeof(double)));
  }
  const Status written = write_file_atomically(path, out.str());
  if (!written) {
    // The writer's own advice names train.checkpoint_dir; keep only its cause.
    const std::string cause = written.message().substr(0, written.message().find("; "));
    return invalid_argument("cannot write parameters to --save-params " + path + " (" + cause +
                            "); free space there or choose another path");
  }
  return Status::ok();
}

}  // namespace fulcrum::train
