// Fuzz target: the YAML configuration loader with the fulcrum schema.
//
// The input is text a user could have written: a YAML file, then optionally
// a line "#--set" (a YAML comment, so the file part stays valid YAML) and one
// "--set" override per line after it. load_job_config_string must either accept
// it, after which every typed accessor of every schema key works and returns
// a value the schema allows, or refuse it with one line (kInvalidArgument);
// never crash, hang or throw. Streams that yaml-cpp 0.7's YAML::LoadAll
// never returns from (a file holding just ","; jbeder/yaml-cpp#1040) are
// included: the loader must refuse them (fuzz/regressions/config/).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fulcrum/status.h"
#include "fuzz_input.h"
#include "train/job_schema.h"

namespace fulcrum::fuzz {
namespace {

constexpr std::string_view kOverrideMarker = "#--set\n";

void check_value(const host::Config& config, const host::KeySpec& spec) {
  const std::string& key = spec.key;
  // Accessors throw std::logic_error only on programming errors; a stored
  // value that does not re-parse would be one, and it would escape here.
  (void)config.origin(key);
  switch (spec.type) {
    case host::ValueType::kInt: {
      const double v = static_cast<double>(config.get_int(key));
      FUZZ_CHECK(!spec.min || v >= *spec.min, key + " below its minimum");
      FUZZ_CHECK(!spec.max || v <= *spec.max, key + " above its maximum");
      break;
    }
    case host::ValueType::kDouble: {
      const double v = config.get_double(key);
      FUZZ_CHECK(!spec.min || (spec.min_exclusive ? v > *spec.min : v >= *spec.min),
                 key + " below its minimum");
      FUZZ_CHECK(!spec.max || v <= *spec.max, key + " above its maximum");
      break;
    }
    case host::ValueType::kBool:
      (void)config.get_bool(key);
      break;
    case host::ValueType::kString: {
      const std::string v = config.get_string(key);
      if (!spec.choices.empty()) {
        bool listed = false;
        for (const auto& choice : spec.choices) listed = listed || choice == v;
        FUZZ_CHECK(listed, key + " holds '" + v + "', not one of its choices");
      }
      // Defaults are not re-checked by the loader; only values that were set.
      if (spec.check && config.is_set(key)) {
        FUZZ_CHECK(!spec.check(v).has_value(), key + " holds '" + v + "', which its check refuses");
      }
      break;
    }
  }
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fulcrum;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string yaml = text;
  std::vector<std::string> overrides;
  if (const auto marker = text.find(fuzz::kOverrideMarker); marker != std::string::npos) {
    yaml = text.substr(0, marker);
    std::string rest = text.substr(marker + fuzz::kOverrideMarker.size());
    std::size_t at = 0;
    // One override per line; a final line break ends the last one, it does
    // not start an empty one.
    while (at < rest.size() && overrides.size() < 16) {
      const auto end = rest.find('\n', at);
      overrides.push_back(rest.substr(at, end == std::string::npos ? std::string::npos : end - at));
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }

  Result<host::Config> loaded =
      train::load_job_config_string(yaml, "fuzz.yaml", host::set_overrides(overrides));
  if (fuzz::verbose()) {
    std::fprintf(stderr, "config: %zu bytes, %zu overrides -> %s\n", yaml.size(), overrides.size(),
                 loaded ? "loaded" : loaded.status().message().c_str());
  }
  if (!loaded) {
    const Status& s = loaded.status();
    FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument,
               std::string("refusal with code ") + status_code_name(s.code()) + ": " + s.message());
    FUZZ_CHECK(!s.message().empty(), "refusal without a message");
    // One line: user text (keys, values, names) is quoted with its control
    // characters escaped.
    FUZZ_CHECK(s.message().find_first_of("\n\r") == std::string::npos,
               "multi-line refusal: " + s.message());
    return 0;
  }
  for (const host::KeySpec& spec : loaded->schema().keys()) fuzz::check_value(*loaded, spec);
  return 0;
}
