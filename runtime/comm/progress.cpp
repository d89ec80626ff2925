#include "comm/progress.h"

#include "fulcrum/core/text.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace fulcrum::comm {
namespace {

// Group and operation names are single words ("cp[dp=1]", "all_gather"); the
// text formats below rely on it.
bool is_word(const std::string& s) {
  return !s.empty() && std::none_of(s.begin(), s.end(), [](char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
  });
}

std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::optional<std::int64_t> parse_int(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace

// --- records -----------------------------------------------------------------

std::int64_t ProgressRecord::enter(const std::string& group, const std::string& op) {
  Group& g = groups[group];
  g.last_op = op;
  last_group = group;
  return ++g.entered;
}

void ProgressRecord::wait_in(const std::string& group) {
  if (groups.count(group) != 0) last_group = group;
}

std::string pair_group(int rank, int peer) {
  return "p2p[" + std::to_string(std::min(rank, peer)) + "," +
         std::to_string(std::max(rank, peer)) + "]";
}

std::string ProgressRecord::encode() const {
  std::string text;
  for (const auto& [name, g] : groups) {
    text += "g " + name + " " + std::to_string(g.entered) + " " +
            (g.last_op.empty() ? std::string("-") : g.last_op) + "\n";
  }
  text += "last " + (last_group.empty() ? std::string("-") : last_group) + "\n";
  return text;
}

Result<ProgressRecord> ProgressRecord::decode(const std::string& text) {
  ProgressRecord record;
  bool saw_last = false;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> w = split_words(line);
    if (w.size() == 4 && w[0] == "g") {
      const std::optional<std::int64_t> entered = parse_int(w[2]);
      if (!entered) return invalid_argument("progress record: bad count in '" + line + "'");
      record.groups[w[1]] = {*entered, w[3] == "-" ? std::string() : w[3]};
    } else if (w.size() == 2 && w[0] == "last") {
      record.last_group = w[1] == "-" ? std::string() : w[1];
      saw_last = true;
    } else {
      return invalid_argument("progress record: unexpected line '" + line + "'");
    }
  }
  if (!saw_last) return invalid_argument("progress record: no 'last' line");
  if (!record.last_group.empty() && record.groups.count(record.last_group) == 0) {
    return invalid_argument("progress record: last group '" + record.last_group + "' has no entry");
  }
  return record;
}

std::string CollectiveRef::describe() const {
  return op + " #" + std::to_string(seq) + " on group " + group;
}

// --- formatting ----------------------------------------------------------------

std::string format_duration_ms(std::int64_t ms) {
  if (ms < 1000) return std::to_string(ms) + " ms";
  char text[32];
  if (ms % 1000 == 0) {
    std::snprintf(text, sizeof(text), "%lld s", static_cast<long long>(ms / 1000));
  } else {
    std::snprintf(text, sizeof(text), "%.3g s", static_cast<double>(ms) / 1000.0);
  }
  return text;
}

std::string format_ranks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    // Runs of four or more read better as a range; shorter ones as a list.
    if (j - i >= 3) {
      parts.push_back(std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]));
    } else {
      for (std::size_t k = i; k <= j; ++k) parts.push_back(std::to_string(ranks[k]));
    }
    i = j + 1;
  }
  return join(parts, ", ");
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  std::set<int> distinct(ranks.begin(), ranks.end());
  return (distinct.size() == 1 ? "rank " : "ranks ") + format_ranks(ranks);
}

// --- analysis ------------------------------------------------------------------

MembersOf job_groups(int world_size, int dp_size, int cp_size) {
  return [=](const std::string& group) {
    std::vector<int> none;
    if (group == "world") {
      std::vector<int> all(static_cast<std::size_t>(std::max(world_size, 0)));
      for (int r = 0; r < world_size; ++r) all[static_cast<std::size_t>(r)] = r;
      return all;
    }
    // "cp[dp=<i>]" and "dp[cp=<i>]", as group_layout.cpp names them.
    auto index_of = [&](const std::string& prefix) -> std::optional<std::int64_t> {
      if (group.size() <= prefix.size() + 1 || group.compare(0, prefix.size(), prefix) != 0 ||
          group.back() != ']') {
        return std::nullopt;
      }
      return parse_int(group.substr(prefix.size(), group.size() - prefix.size() - 1));
    };
    if (const auto i = index_of("cp[dp="); i && *i < dp_size) {
      return all_cp_groups(dp_size, cp_size)[static_cast<std::size_t>(*i)];
    }
    if (const auto i = index_of("dp[cp="); i && *i < cp_size) {
      return all_dp_groups(dp_size, cp_size)[static_cast<std::size_t>(*i)];
    }
    // "p2p[a,b]"
    if (group.size() > 6 && group.compare(0, 4, "p2p[") == 0 && group.back() == ']') {
      const std::string inner = group.substr(4, group.size() - 5);
      const auto comma = inner.find(',');
      if (comma == std::string::npos) return none;
      const auto a = parse_int(inner.substr(0, comma));
      const auto b = parse_int(inner.substr(comma + 1));
      if (!a || !b || *a < 0 || *b <= *a || *b >= world_size) return none;
      return std::vector<int>{static_cast<int>(*a), static_cast<int>(*b)};
    }
    return none;
  };
}

StallAnalysis analyse_stall(int reporter, const CollectiveRef& timed_out,
                            const std::vector<int>& members,
                            const std::vector<std::optional<ProgressRecord>>& records,
                            const MembersOf& members_of) {
  auto record_of = [&](int rank) -> const ProgressRecord* {
    if (rank < 0 || static_cast<std::size_t>(rank) >= records.size()) return nullptr;
    const auto& r = records[static_cast<std::size_t>(rank)];
    return r ? &*r : nullptr;
  };
  // How many collectives `rank` entered on `group`; nullopt = unknown.
  auto entered = [&](int rank, const std::string& group) -> std::optional<std::int64_t> {
    const ProgressRecord* r = record_of(rank);
    if (r == nullptr) return std::nullopt;
    const auto it = r->groups.find(group);
    return it == r->groups.end() ? 0 : it->second.entered;
  };
  auto last_of = [&](int rank) -> std::optional<CollectiveRef> {
    const ProgressRecord* r = record_of(rank);
    if (r == nullptr || r->last_group.empty()) return std::nullopt;
    const ProgressRecord::Group& g = r->groups.at(r->last_group);
    return CollectiveRef{g.last_op, g.entered, r->last_group};
  };
  // The members of `c`'s group, other than `self`, that have not entered it
  // (or whose progress is unknown).
  auto behind_in = [&](const CollectiveRef& c, int self) {
    std::vector<int> behind;
    for (int m : members_of(c.group)) {
      if (m == self) continue;
      const std::optional<std::int64_t> e = entered(m, c.group);
      if (!e || *e < c.seq) behind.push_back(m);
    }
    return behind;
  };

  StallAnalysis a;
  for (int m : members) {
    if (m == reporter) continue;
    const std::optional<std::int64_t> e = entered(m, timed_out.group);
    if (!e || *e < timed_out.seq) a.missing.push_back(m);
  }

  for (int r = 0; r < static_cast<int>(records.size()); ++r) {
    if (r == reporter) {
      a.waiting.push_back({r, timed_out, a.missing});
      continue;
    }
    const std::optional<CollectiveRef> last = last_of(r);
    if (!last) continue;
    std::vector<int> behind = behind_in(*last, r);
    if (!behind.empty()) a.waiting.push_back({r, *last, std::move(behind)});
  }

  // Follow who waits for whom from each missing rank.
  std::set<int> visited{reporter};
  std::vector<int> stack(a.missing.rbegin(), a.missing.rend());
  while (!stack.empty()) {
    const int m = stack.back();
    stack.pop_back();
    if (!visited.insert(m).second) continue;
    if (record_of(m) == nullptr) {
      a.unknown.push_back(m);
      continue;
    }
    const std::optional<CollectiveRef> last = last_of(m);
    if (!last) {
      a.stalled.push_back(m);  // published, but entered no collective
      continue;
    }
    const std::vector<int> behind = behind_in(*last, m);
    if (behind.empty()) {
      a.stalled.push_back(m);
      a.last_seen[m] = *last;
      continue;
    }
    for (auto it = behind.rbegin(); it != behind.rend(); ++it) stack.push_back(*it);
  }
  std::sort(a.stalled.begin(), a.stalled.end());
  std::sort(a.unknown.begin(), a.unknown.end());
  return a;
}

std::string describe_stall(const StallAnalysis& a) {
  if (a.missing.empty()) return "";
  auto is = [](const std::vector<int>& v, int r) {
    return std::find(v.begin(), v.end(), r) != v.end();
  };
  auto waiting_of = [&](int r) -> const WaitingRank* {
    for (const WaitingRank& w : a.waiting) {
      if (w.rank == r) return &w;
    }
    return nullptr;
  };
  auto about = [&](int r) -> std::string {
    const std::string who = "rank " + std::to_string(r);
    if (is(a.unknown, r)) return who + "'s progress could not be read";
    if (is(a.stalled, r)) {
      const auto it = a.last_seen.find(r);
      return it == a.last_seen.end() ? who + " entered no collective yet"
                                     : who + " was last seen in " + it->second.describe();
    }
    if (const WaitingRank* w = waiting_of(r)) {
      return who + " is waiting for " + ranks_phrase(w->for_ranks) + " in " + w->in.describe();
    }
    return who + " is behind";
  };

  std::string text = "; " + ranks_phrase(a.missing) + " never entered it (";
  if (a.missing.size() == 1 && is(a.stalled, a.missing[0])) {
    const auto it = a.last_seen.find(a.missing[0]);
    text += it == a.last_seen.end() ? "it entered no collective yet"
                                    : "last seen in " + it->second.describe();
  } else {
    std::vector<std::string> parts;
    for (int r : a.missing) parts.push_back(about(r));
    text += join(parts, "; ");
  }
  text += ")";
  std::vector<std::string> beyond;
  for (int r : a.stalled) {
    if (!is(a.missing, r)) beyond.push_back(about(r));
  }
  for (int r : a.unknown) {
    if (!is(a.missing, r)) beyond.push_back(about(r));
  }
  if (!beyond.empty()) text += "; " + join(beyond, "; ");
  if (!a.stalled.empty()) {
    text += "; " + ranks_phrase(a.stalled) + (a.stalled.size() == 1 ? " has" : " have") +
            " stopped entering collectives: check what " +
            (a.stalled.size() == 1 ? "it is" : "they are") + " doing";
  }
  return text;
}

// --- the report to the launcher -----------------------------------------------------

std::string stall_report_name(int rank) { return "rank-" + std::to_string(rank) + ".stall"; }

std::string lost_peer_note_name(int rank) { return "rank-" + std::to_string(rank) + ".lost"; }

std::string StallReport::encode() const {
  auto ref = [](const CollectiveRef& c) {
    return c.op + " " + std::to_string(c.seq) + " " + c.group;
  };
  std::string text = "fulcrum-stall-report 1\n";
  text += "reporter " + std::to_string(reporter) + "\n";
  text += "timeout_ms " + std::to_string(timeout_ms) + "\n";
  text += "timed_out " + ref(timed_out) + "\n";
  text += "stalled";
  for (int r : stalled) text.append(" ").append(std::to_string(r));
  text += "\n";
  for (const WaitingRank& w : waiting) {
    text += "waiting " + std::to_string(w.rank) + " " + ref(w.in) + "\n";
  }
  text += "end\n";
  return text;
}

Result<StallReport> StallReport::decode(const std::string& text) {
  StallReport report;
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != "fulcrum-stall-report 1") {
    return invalid_argument("stall report: not a 'fulcrum-stall-report 1' file");
  }
  auto bad = [](const std::string& l) {
    return invalid_argument("stall report: unexpected line '" + l + "'");
  };
  auto rank_of = [](const std::string& w) -> std::optional<int> {
    const std::optional<std::int64_t> v = parse_int(w);
    if (!v || *v > 1 << 24) return std::nullopt;
    return static_cast<int>(*v);
  };
  auto ref_of = [&](const std::vector<std::string>& w,
                    std::size_t at) -> std::optional<CollectiveRef> {
    if (w.size() != at + 3 || !is_word(w[at]) || !is_word(w[at + 2])) return std::nullopt;
    const std::optional<std::int64_t> seq = parse_int(w[at + 1]);
    if (!seq) return std::nullopt;
    return CollectiveRef{w[at], *seq, w[at + 2]};
  };
  bool ended = false, saw_reporter = false, saw_timed_out = false;
  while (std::getline(in, line)) {
    const std::vector<std::string> w = split_words(line);
    if (w.empty()) return bad(line);
    if (w[0] == "end" && w.size() == 1) {
      ended = true;
      break;
    }
    if (w[0] == "reporter" && w.size() == 2) {
      const std::optional<int> r = rank_of(w[1]);
      if (!r) return bad(line);
      report.reporter = *r;
      saw_reporter = true;
    } else if (w[0] == "timeout_ms" && w.size() == 2) {
      const std::optional<std::int64_t> ms = parse_int(w[1]);
      if (!ms) return bad(line);
      report.timeout_ms = *ms;
    } else if (w[0] == "timed_out") {
      const std::optional<CollectiveRef> c = ref_of(w, 1);
      if (!c) return bad(line);
      report.timed_out = *c;
      saw_timed_out = true;
    } else if (w[0] == "stalled") {
      for (std::size_t i = 1; i < w.size(); ++i) {
        const std::optional<int> r = rank_of(w[i]);
        if (!r) return bad(line);
        report.stalled.push_back(*r);
      }
    } else if (w[0] == "waiting" && w.size() >= 2) {
      const std::optional<int> r = rank_of(w[1]);
      const std::optional<CollectiveRef> c = ref_of(w, 2);
      if (!r || !c) return bad(line);
      report.waiting.push_back({*r, *c, {}});
    } else {
      return bad(line);
    }
  }
  // A report cut short (its writer was stopped) is refused rather than
  // half-read; writers rename a complete file into place, so this is rare.
  if (!ended || !saw_reporter || !saw_timed_out) {
    return invalid_argument("stall report: incomplete");
  }
  return report;
}

std::optional<std::string> stall_summary(const std::vector<StallReport>& reports) {
  std::set<int> reporters;
  for (const StallReport& r : reports) reporters.insert(r.reporter);
  // A rank that timed out was waiting, not stalled, whatever another saw.
  std::vector<int> stalled;
  for (const StallReport& r : reports) {
    for (int s : r.stalled) {
      if (reporters.count(s) == 0) stalled.push_back(s);
    }
  }
  std::sort(stalled.begin(), stalled.end());
  stalled.erase(std::unique(stalled.begin(), stalled.end()), stalled.end());
  if (stalled.empty()) return std::nullopt;

  std::vector<int> waiting;
  std::vector<std::string> where;  // "<op> on group <g>", first seen first
  auto add_where = [&](const CollectiveRef& c) {
    const std::string w = c.op + " on group " + c.group;
    if (std::find(where.begin(), where.end(), w) == where.end()) where.push_back(w);
  };
  for (const StallReport& r : reports) {
    waiting.push_back(r.reporter);
    add_where(r.timed_out);
  }
  for (const StallReport& r : reports) {
    for (const WaitingRank& w : r.waiting) {
      if (std::binary_search(stalled.begin(), stalled.end(), w.rank)) continue;
      waiting.push_back(w.rank);
      add_where(w.in);
    }
  }
  std::string places = where.empty() ? "" : where.front();
  for (std::size_t i = 1; i < where.size(); ++i) {
    places += (i + 1 == where.size() ? " and " : ", ") + where[i];
  }
  const bool one = stalled.size() == 1;
  std::string line =
      "fulcrum: " + ranks_phrase(stalled) + " stalled (" + ranks_phrase(waiting) +
      (std::set<int>(waiting.begin(), waiting.end()).size() == 1 ? " was" : " were") +
      " waiting for " + (one ? "it" : "them") + " in " + places + "; " +
      ranks_phrase(std::vector<int>(reporters.begin(), reporters.end())) + " timed out after " +
      format_duration_ms(reports.front().timeout_ms) + "); stopped all ranks";
  return line;
}

}  // namespace fulcrum::comm
