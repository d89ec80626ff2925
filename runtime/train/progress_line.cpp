// The progress a worker prints per step: a redrawn bar on a terminal, the
// bar's protocol lines under `fulcrum train`, or one line per step (with
// what ran: the DP balance, or hybrid's scheduler, slots and measured
// against predicted time).
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "train/metrics.h"

namespace fulcrum::train {

Progress::Mode Progress::detect() {
  if (const char* mode = std::getenv(kProgressEnv)) {
    const std::string m = mode;
    if (m == "protocol") return Mode::kProtocol;
    if (m == "bar") return Mode::kBar;
    if (m == "lines") return Mode::kLines;
  }
  return ::isatty(STDOUT_FILENO) ? Mode::kBar : Mode::kLines;
}

std::string render_progress_bar(std::int64_t step, std::int64_t steps, double loss,
                                double elapsed_s, int width) {
  const double done = steps > 0 ? static_cast<double>(step) / static_cast<double>(steps) : 1.0;
  const int filled = static_cast<int>(std::lround(done * width));
  std::string bar = "[";
  bar.append(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '.');
  bar += "]";
  return bar + " step " + std::to_string(step) + "/" + std::to_string(steps) + "  loss " +
         fixed(loss, 4) + "  " + fixed(elapsed_s, 1) + " s";
}

std::string render_rate_and_eta(std::int64_t tokens, std::int64_t steps_done,
                                std::int64_t steps_left, double elapsed_s) {
  if (steps_done < 1 || !(elapsed_s > 0.0)) return "";
  const double rate = static_cast<double>(tokens) / elapsed_s;
  const double eta = elapsed_s / static_cast<double>(steps_done) *
                     static_cast<double>(std::max<std::int64_t>(steps_left, 0));
  const long long whole = std::llround(eta);
  char text[64];
  if (whole < 60) {
    std::snprintf(text, sizeof text, "%lld s", whole);
  } else if (whole < 3600) {
    std::snprintf(text, sizeof text, "%lldm %02llds", whole / 60, whole % 60);
  } else {
    std::snprintf(text, sizeof text, "%lldh %02lldm", whole / 3600, whole / 60 % 60);
  }
  return "  " + std::to_string(std::llround(rate)) + " tokens/s  eta " + text;
}

std::string render_balance(const StepReport& step) {
  if (!step.hybrid) return "dp " + step.dp_strategy + " " + fixed(step.dp_imbalance, 3);
  const StepReport::Hybrid& h = *step.hybrid;
  // Group sizes as "4x1 2x2": how many slots of each size.
  std::map<std::int32_t, std::int64_t> sizes;
  for (std::int32_t g : h.groups) ++sizes[g];
  std::ostringstream out;
  out << "scheduler " << h.scheduler << (h.fallback_reason.empty() ? "" : " (fallback)")
      << "  slots";
  if (sizes.empty()) out << " none";
  for (const auto& [g, count] : sizes) out << " " << count << "x" << g;
  out << "  measured " << fixed(h.measured_ms, 1) << " ms, predicted " << fixed(h.predicted_ms, 1)
      << " ms; step";
  return out.str();
}

void Progress::update(const StepReport& step, double elapsed_s) {
  tokens_ += step.loss_tokens;
  const std::string rate =
      render_rate_and_eta(tokens_, step.step - first_step_, steps_ - step.step, elapsed_s);
  switch (mode_) {
    case Mode::kBar:
      std::cout << "\r\x1b[K" << render_progress_bar(step.step, steps_, step.loss, elapsed_s)
                << rate << std::flush;
      drawn_ = true;
      break;
    case Mode::kProtocol:
      std::cout << kProgressPrefix << render_progress_bar(step.step, steps_, step.loss, elapsed_s)
                << rate << std::endl;
      break;
    case Mode::kLines:
      std::cout << "step " << step.step << "/" << steps_ << "  loss " << fixed(step.loss, 4)
                << "  tokens " << step.loss_tokens << "  " << render_balance(step) << "  "
                << fixed(step.wall_ms, 1) << " ms" << rate << std::endl;
      break;
  }
}

void Progress::note(const std::string& line) {
  // The bar is redrawn by the next update; in protocol mode `fulcrum train`
  // clears and redraws it around any other line.
  if (drawn_) std::cout << "\r\x1b[K";
  drawn_ = false;
  std::cout << line << std::endl;
}

void Progress::finish() {
  if (drawn_) std::cout << "\n" << std::flush;
  // An empty progress line tells `fulcrum train` the bar is complete, so
  // the summary that follows is not interleaved with redraws of it.
  if (mode_ == Mode::kProtocol) std::cout << kProgressPrefix << std::endl;
  drawn_ = false;
}

}  // namespace fulcrum::train
