// fulcrum preprocess: text or JSONL into a byte-level Megatron indexed
// dataset (.bin/.idx) that `data.source: megatron` trains on. Byte tokens
// (vocabulary 256, no end-of-document token; data/byte_corpus.h says why)
// need no tokenizer and nothing downloaded. LibTorch-free.

#include <sys/stat.h>

#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "data/byte_corpus.h"
#include "host/input_file.h"
#include "host/trusted_directory.h"

namespace fulcrum::cli {
namespace {

namespace po = boost::program_options;

constexpr const char* kUsage =
    "Usage: fulcrum preprocess --input FILE [FILE ...] --output-prefix PREFIX\n"
    "                          [--format text|jsonl] [--split blank-line|file|line:TEXT]\n"
    "                          [--json-key KEY]\n"
    "\n"
    "Writes PREFIX.bin and PREFIX.idx, a Megatron indexed dataset (MMIDIDX) of\n"
    "byte tokens: every byte of a document is one token (vocabulary 256, dtype\n"
    "uint8), one sequence per document, no end-of-document token. Train on it with\n"
    "data.source: megatron, data.path: PREFIX and model.vocab_size: 256. Existing\n"
    "PREFIX.bin/.idx are replaced atomically. Documents of whitespace only are\n"
    "skipped. Example, the quotations of Debian's fortunes-min:\n"
    "  fulcrum preprocess --split line:% --output-prefix build/fortunes \\\n"
    "      --input /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/riddles\n";

// The inputs of one run, together: each file is read whole, and a corpus of
// tiny documents costs about 10 bytes of memory and 0.4 us per input byte
// (measured: 30 MB of two-byte documents, 11 s and 296 MB), so this bound
// keeps the worst case near a minute and 1.3 GB. Larger corpora are split
// and preprocessed to several prefixes.
constexpr std::uint64_t kMaxInputBytes = std::uint64_t{128} << 20;
// Deeper JSON than this is not a document record.
constexpr int kMaxJsonDepth = 64;

struct PreprocessFlags {
  std::vector<std::string> inputs;
  std::string output_prefix;
  std::string format = "text";
  std::string split = "blank-line";
  std::string json_key = "text";
  bool help = false;
};

po::options_description preprocess_options(PreprocessFlags& f) {
  po::options_description options("Options");
  options.add_options()  //
      ("input", po::value(&f.inputs)->value_name("FILE")->multitoken(),
       "text or JSONL files, in order (several after one --input, or --input repeated; at "
       "most 128 MiB together)")  //
      ("output-prefix", po::value(&f.output_prefix)->value_name("PREFIX"),
       "write PREFIX.bin and PREFIX.idx (required)")  //
      ("format", po::value(&f.format)->value_name("FORMAT"),
       "text (default) or jsonl (one JSON object per line)")  //
      ("split", po::value(&f.split)->value_name("RULE"),
       "text: how documents are separated: blank-line (default: one or more blank lines), "
       "file (each file is one document) or line:TEXT (a line equal to TEXT, e.g. line:%)")  //
      ("json-key", po::value(&f.json_key)->value_name("KEY"),
       "jsonl: the string field holding each document (default: text)")  //
      ("help,h", po::bool_switch(&f.help), "show this help");
  return options;
}

data::TextSplit parse_split(const std::string& text) {
  data::TextSplit split;
  if (text == "blank-line") return split;
  if (text == "file") {
    split.kind = data::TextSplit::Kind::kFile;
    return split;
  }
  constexpr std::string_view kLine = "line:";
  if (text.rfind(kLine, 0) == 0 && text.size() > kLine.size() &&
      text.find_first_of("\n\r") == std::string::npos) {
    split.kind = data::TextSplit::Kind::kLine;
    split.separator = text.substr(kLine.size());
    return split;
  }
  throw UsageError("--split " + quote_text(text) +
                   " is not a rule; give blank-line, file or line:TEXT with TEXT one non-empty "
                   "line, e.g. --split line:%");
}

void check(const Status& status) {
  if (!status) throw UsageError(status.message());
}

// The documents of one JSONL file: each non-blank line an object whose
// `key` is a string.
void add_jsonl(std::string_view text, const std::string& path, const std::string& key,
               data::ByteDatasetWriter& writer, std::int64_t& skipped) {
  std::int64_t line_number = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_number;
    const std::string where =
        "--input " + quote_text(path) + " line " + std::to_string(line_number);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    std::size_t at = 0;
    if (!host::json_nesting_within(line, kMaxJsonDepth, at)) {
      throw UsageError(where + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                       " levels; each line must be one object such as {\"" + key + "\": \"...\"}");
    }
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded()) {
      throw UsageError(where + ": not valid JSON; each line must be one object such as {\"" + key +
                       "\": \"...\"}");
    }
    if (!record.is_object()) {
      throw UsageError(where + ": a JSON " + record.type_name() +
                       "; each line must be one object such as {\"" + key + "\": \"...\"}");
    }
    const auto field = record.find(key);
    if (field == record.end() || !field->is_string()) {
      throw UsageError(where + ": " +
                       (field == record.end()
                            ? std::string("no key ") + quote_text(key)
                            : "key " + quote_text(key) + " holds a " + field->type_name()) +
                       ", expected a string; pick the field with --json-key");
    }
    const std::string& document = field->get_ref<const std::string&>();
    if (document.find_first_not_of(" \t\r\n\f\v") == std::string::npos) {
      ++skipped;
      continue;
    }
    check(writer.add(document));
  }
}

int preprocess_body(const std::vector<std::string>& args) {
  PreprocessFlags f;
  const po::options_description options = preprocess_options(f);
  const po::variables_map given = parse_command_line(args, options, "preprocess");
  if (printed_help(f.help, kUsage, options)) return kExitOk;
  if (f.inputs.empty()) {
    throw UsageError("--input FILE is required: the text or JSONL to turn into byte tokens");
  }
  if (f.output_prefix.empty()) {
    throw UsageError(
        "--output-prefix PREFIX is required: where to write PREFIX.bin and PREFIX.idx");
  }
  if (f.format != "text" && f.format != "jsonl") {
    throw UsageError("--format " + quote_text(f.format) + " is not a format; give text or jsonl");
  }
  const data::TextSplit split = parse_split(f.split);
  // A flag the chosen format ignores is a misunderstanding, not a default.
  if (f.format == "jsonl" && given.count("split") > 0) {
    throw UsageError(
        "--split applies to --format text; a JSONL record is one document, so "
        "drop --split");
  }
  if (f.format == "text" && given.count("json-key") > 0) {
    throw UsageError("--json-key applies to --format jsonl; add --format jsonl or drop --json-key");
  }
  if (f.format == "jsonl" && f.json_key.empty()) {
    throw UsageError("--json-key is empty; name the string field of each record, e.g. text");
  }

  // Bounded before any work: the inputs' sizes together (each is checked
  // again as it is read, and a file that grew is refused there).
  std::uint64_t total = 0;
  for (const std::string& path : f.inputs) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<std::uint64_t>(st.st_size);
    }
  }
  if (total > kMaxInputBytes) {
    throw UsageError("the inputs hold " + std::to_string(total) + " bytes, more than the " +
                     std::to_string(kMaxInputBytes) +
                     " one run takes (at worst about a minute and 1.3 GB per 128 MiB); split the "
                     "corpus and preprocess each part to its own --output-prefix");
  }

  // A link another user owns on the way decides where the pair is written.
  if (const std::optional<host::PathLink> link =
          host::foreign_link_on_path(f.output_prefix + ".bin")) {
    throw UsageError("--output-prefix " + quote_text(f.output_prefix) + ": " +
                     host::foreign_link_text(*link) +
                     ", who may repoint it to a directory of theirs; remove the link or choose "
                     "another prefix");
  }
  Result<data::ByteDatasetWriter> created = data::ByteDatasetWriter::create(f.output_prefix);
  check(created.status());
  data::ByteDatasetWriter writer = std::move(created).value();
  std::int64_t skipped = 0;
  for (const std::string& path : f.inputs) {
    const std::string what = "--input " + quote_text(path);
    Result<std::string> text = host::read_input_file(
        path, {what, "give a regular text or JSONL file of at most 128 MiB (split larger corpora)",
               kMaxInputBytes});
    check(text.status());
    if (f.format == "jsonl") {
      add_jsonl(*text, path, f.json_key, writer, skipped);
      continue;
    }
    std::int64_t dropped = 0;
    for (const std::string_view document : data::split_text(*text, split, &dropped)) {
      check(writer.add(document));
    }
    skipped += dropped;
  }
  if (writer.documents() == 0) {
    throw UsageError("the input holds no document (" + std::to_string(f.inputs.size()) +
                     " file(s), " + std::to_string(skipped) +
                     " whitespace-only document(s) skipped); give text with at least one "
                     "non-blank document");
  }
  check(writer.commit());
  std::cout << "fulcrum preprocess: " << writer.documents() << " documents, " << writer.bytes()
            << " byte tokens (vocabulary 256) from " << f.inputs.size() << " file(s) -> "
            << f.output_prefix << ".bin/.idx";
  if (skipped > 0) std::cout << "; " << skipped << " whitespace-only document(s) skipped";
  std::cout << "\n";
  return kExitOk;
}

}  // namespace

int run_preprocess(const std::vector<std::string>& args) {
  return run_command("preprocess", [&] { return preprocess_body(args); });
}

}  // namespace fulcrum::cli
