// Private to fulcrum::host: the copies a plugin call borrows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace fulcrum::host::detail {

// Memory lent to a plugin. A `const` pointer in a request is a promise the
// plugin can break, and the arrays behind it are the host's own batch. So the
// plugin is lent copies, made per call (a copy of the row's lengths costs
// little next to planning it), and after the call each copy is compared with
// the host's original: a plugin that wrote through a `const` pointer is
// named and refused, and never changes what the host schedules or trains.
class LentMemory {
 public:
  // A copy of `host` for the plugin to read: nullptr when it is empty.
  const std::int64_t* lend(const char* field, const std::vector<std::int64_t>& host) {
    Array& lent = arrays_.emplace_back(Array{field, &host, host});
    return lent.copy.empty() ? nullptr : lent.copy.data();
  }
  const double* lend(const char* field, const std::vector<double>& host) {
    Reals& lent = reals_.emplace_back(Reals{field, &host, host});
    return lent.copy.empty() ? nullptr : lent.copy.data();
  }
  const char* lend(const char* field, const std::string& host) {
    return texts_.emplace_back(Text{field, &host, host}).copy.c_str();
  }
  // The request struct itself, compared byte for byte after the call.
  template <typename Struct>
  void watch(const char* field, const Struct& request) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&request);
    structs_.push_back(
        Bytes{field, bytes, std::vector<unsigned char>(bytes, bytes + sizeof request)});
  }

  // What the plugin wrote into, as a message names it ("doc_lengths[3]"), or
  // "" when it left everything as lent.
  std::string changed() const {
    for (const Bytes& s : structs_) {
      if (std::memcmp(s.live, s.before.data(), s.before.size()) != 0) {
        return std::string("the request struct ") + s.field;
      }
    }
    for (const Array& a : arrays_) {
      const auto [host, lent] = std::mismatch(a.host->begin(), a.host->end(), a.copy.begin());
      if (host != a.host->end()) {
        const auto at = host - a.host->begin();
        return std::string(a.field) + "[" + std::to_string(at) + "] (" + std::to_string(*host) +
               " lent, " + std::to_string(*lent) + " after the call)";
      }
    }
    for (const Reals& a : reals_) {
      // Bit for bit: a weight is no NaN here (the workload was validated).
      for (std::size_t i = 0; i < a.copy.size(); ++i) {
        if (std::memcmp(&a.copy[i], &(*a.host)[i], sizeof(double)) != 0) {
          return std::string(a.field) + "[" + std::to_string(i) + "]";
        }
      }
    }
    for (const Text& t : texts_) {
      // The terminating NUL too: a plugin that overwrote it changed the text.
      if (std::memcmp(t.copy.c_str(), t.host->c_str(), t.host->size() + 1) != 0) {
        return std::string("the string ") + t.field;
      }
    }
    return "";
  }

 private:
  struct Array {
    const char* field;
    const std::vector<std::int64_t>* host;
    std::vector<std::int64_t> copy;
  };
  struct Reals {
    const char* field;
    const std::vector<double>* host;
    std::vector<double> copy;
  };
  struct Text {
    const char* field;
    const std::string* host;
    std::string copy;
  };
  struct Bytes {
    const char* field;
    const unsigned char* live;
    std::vector<unsigned char> before;
  };
  // Deques: what was lent keeps its address while more is lent.
  std::deque<Array> arrays_;
  std::deque<Reals> reals_;
  std::deque<Text> texts_;
  std::vector<Bytes> structs_;
};

}  // namespace fulcrum::host::detail
