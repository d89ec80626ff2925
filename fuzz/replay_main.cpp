// A main() for the fuzz targets without libFuzzer: feeds every file named on
// the command line (directories are walked, sorted) to
// LLVMFuzzerTestOneInput once. Built with the ordinary compiler as a ctest
// test, so the kept corpus and every crash ever found (fuzz/regressions/)
// are replayed on every CI run, with no clang and no fuzzing time.
//
// A failure aborts inside the target with its message, which is what ctest
// reports; the name of the input is printed first so that it is known.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs_of(const fs::path& arg) {
  std::error_code ec;
  if (fs::is_directory(arg, ec)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::recursive_directory_iterator(arg)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    return files;
  }
  if (fs::is_regular_file(arg, ec)) return {arg};
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  std::size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    const std::vector<fs::path> files = inputs_of(argv[i]);
    // A missing directory is an empty one: git keeps no empty folders, and a
    // target with no regressions yet has none.
    if (files.empty()) std::fprintf(stderr, "replay: no inputs under %s\n", argv[i]);
    for (const fs::path& file : files) {
      std::ifstream in(file, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
        return 2;
      }
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
      std::fprintf(stderr, "replay: %s (%zu bytes)\n", file.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      ++count;
    }
  }
  std::fprintf(stderr, "replay: %zu inputs, all passed\n", count);
  return count > 0 ? 0 : 2;
}
