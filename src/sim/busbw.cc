#include "sim/busbw.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "util/error.h"
#include "util/strict_table.h"
#include "util/units.h"

namespace fmstack::sim {
namespace {

std::vector<std::string> Split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, sep)) {
    cell.erase(0, cell.find_first_not_of(" \t"));
    cell.erase(cell.find_last_not_of(" \t") + 1);
    out.push_back(cell);
  }
  return out;
}

std::optional<double> Number(const std::string& s) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

std::optional<Collective> ParseCollective(std::string name) {
  std::erase(name, '_');
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllToAll, Collective::kBroadcast}) {
    std::string n = CollectiveName(c);
    std::erase(n, '_');
    std::erase(n, '-');
    if (n == name) return c;
  }
  return std::nullopt;
}

MeasuredBusbw MeasuredBusbw::Load(const std::string& path, std::optional<Collective> op) {
  const std::string text = ReadTextFile(path);
  MeasuredBusbw m;
  std::optional<Collective> table_op = op;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '|') {
      // `fmstack bench comm --markdown`: | size | 1 node algbw | busbw | ... | n nodes algbw |
      // busbw |
      const std::vector<std::string> cells = Split(line.substr(1), '|');
      if (cells.size() < 7 || !table_op) continue;
      std::string size = cells[0];
      std::erase(size, ' ');
      double bytes = 0;
      try {
        bytes = units::ParseBytes(size);
      } catch (const std::exception&) {
        continue;  // header or rule
      }
      if (const std::optional<double> busbw = Number(cells[6]); busbw && *busbw > 0) {
        m.curves_[*table_op].push_back({bytes, *busbw * 1e9});
      }
      continue;
    }
    std::istringstream words(line);
    std::vector<std::string> w{std::istream_iterator<std::string>(words), {}};
    if (!op && !w.empty()) {
      // A table title such as "allreduce — 4 ranks (GB/s; ...)".
      if (std::optional<Collective> c = ParseCollective(w[0])) table_op = c;
      continue;
    }
    // nccl-tests: size count type redop root time algbw busbw #wrong ...
    if (w.size() < 8 || !op) continue;
    const std::optional<double> bytes = Number(w[0]), busbw = Number(w[7]);
    if (!bytes || !busbw) continue;
    if (*busbw <= 0) {
      throw Error(fmt::format("{}:{}: busbw {} is not positive", path, number, w[7]));
    }
    m.curves_[*op].push_back({*bytes, *busbw * 1e9});
  }
  if (m.curves_.empty()) {
    throw Error(
        fmt::format("{}: no bandwidth rows found (expected nccl-tests output, with the op given as "
                    "OP=FILE, or `fmstack bench comm --markdown` output)",
                    path));
  }
  for (auto& [c, points] : m.curves_) {
    std::sort(points.begin(), points.end());
    // Several tables of one op (2, 4, 8 ranks): keep the best busbw per size.
    std::vector<std::pair<double, double>> merged;
    for (const auto& p : points) {
      if (!merged.empty() && merged.back().first == p.first) {
        merged.back().second = std::max(merged.back().second, p.second);
      } else {
        merged.push_back(p);
      }
    }
    points = std::move(merged);
  }
  return m;
}

double MeasuredBusbw::Busbw(Collective c, double bytes) const {
  const std::vector<std::pair<double, double>>& p = curves_.at(c);
  if (bytes <= p.front().first) return p.front().second;
  if (bytes >= p.back().first) return p.back().second;
  const auto hi = std::lower_bound(p.begin(), p.end(), std::make_pair(bytes, 0.0));
  const auto lo = hi - 1;
  const double f = std::log(bytes / lo->first) / std::log(hi->first / lo->first);
  return lo->second + f * (hi->second - lo->second);
}

double MeasuredBusbw::Time(Collective c, double bytes, int ranks) const {
  if (ranks <= 1 || bytes <= 0) return 0;
  return bytes * BusFactor(c, ranks) / Busbw(c, bytes);
}

std::string MeasuredBusbw::Describe() const {
  std::string out;
  for (const auto& [c, p] : curves_) {
    out += fmt::format("{}{} {} sizes {}..{}", out.empty() ? "" : ", ", CollectiveName(c), p.size(),
                       units::FormatBytes(p.front().first), units::FormatBytes(p.back().first));
  }
  return out;
}

}  // namespace fmstack::sim
