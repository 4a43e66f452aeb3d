#include "metrics/goodput.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "util/text_table.h"
#include "util/units.h"

namespace fmstack::metrics {

const std::vector<std::string>& Ledger::Buckets() {
  // "productive" is computed from the kept steps; "other" is what is left.
  static const std::vector<std::string> buckets = {
      "productive", "lost", "checkpoint", "detection", "restart", "restore", "backoff", "other"};
  return buckets;
}

void Ledger::Book(const std::string& bucket, double seconds) {
  if (seconds > 0) seconds_[bucket] += seconds;
}

double Ledger::Get(const std::string& bucket) const {
  if (bucket == "productive") {
    double sum = 0;
    for (const auto& [step, s] : steps_) sum += s;
    return sum;
  }
  if (bucket == "other") {
    double booked = 0;
    for (const std::string& b : Buckets())
      if (b != "other") booked += Get(b);
    return std::max(0.0, wall_ - booked);
  }
  const auto it = seconds_.find(bucket);
  return it == seconds_.end() ? 0 : it->second;
}

void Ledger::Step(int64_t step, double seconds) {
  steps_[step] = seconds;
}

int64_t Ledger::RollBack(int64_t restored_step) {
  int64_t n = 0;
  for (auto it = steps_.upper_bound(restored_step); it != steps_.end();) {
    seconds_["lost"] += it->second;
    it = steps_.erase(it);
    ++n;
  }
  return n;
}

double Ledger::Goodput() const {
  return wall_ > 0 ? Get("productive") / wall_ : 0;
}

nlohmann::json Ledger::ToJson() const {
  nlohmann::json j;
  j["wall_seconds"] = wall_;
  j["goodput"] = Goodput();
  for (const std::string& b : Buckets()) j["seconds"][b] = Get(b);
  nlohmann::json steps = nlohmann::json::object();
  for (const auto& [step, s] : steps_) steps[std::to_string(step)] = s;
  j["step_seconds"] = steps;
  j["incidents"] = nlohmann::json::array();
  for (const Incident& i : incidents_) {
    j["incidents"].push_back({{"kind", i.kind},
                              {"rank", i.rank},
                              {"step", i.step},
                              {"at", i.at},
                              {"detect_seconds", i.detect_seconds},
                              {"recovery_seconds", i.recovery_seconds},
                              {"lost_steps", i.lost_steps},
                              {"decision", i.decision},
                              {"what", i.what}});
  }
  j["attempts"] = nlohmann::json::array();
  for (const Attempt& a : attempts_) {
    j["attempts"].push_back({{"started_unix", a.started_unix},
                             {"at", a.at},
                             {"from_step", a.from_step},
                             {"end", a.end}});
  }
  return j;
}

Ledger Ledger::FromJson(const nlohmann::json& j) {
  Ledger l;
  l.wall_ = j.value("wall_seconds", 0.0);
  for (const std::string& b : Buckets()) {
    if (b == "productive" || b == "other") continue;
    l.seconds_[b] = j.at("seconds").value(b, 0.0);
  }
  const nlohmann::json steps = j.value("step_seconds", nlohmann::json::object());
  for (const auto& [step, s] : steps.items()) l.steps_[std::stoll(step)] = s.get<double>();
  const nlohmann::json incidents = j.value("incidents", nlohmann::json::array());
  for (const nlohmann::json& i : incidents) {
    l.incidents_.push_back({i.value("kind", ""), i.value("rank", -1), i.value("step", int64_t{0}),
                            i.value("at", 0.0), i.value("detect_seconds", -1.0),
                            i.value("recovery_seconds", -1.0), i.value("lost_steps", int64_t{0}),
                            i.value("decision", ""), i.value("what", "")});
  }
  for (const nlohmann::json& a : j.value("attempts", nlohmann::json::array())) {
    l.attempts_.push_back({a.value("started_unix", int64_t{0}), a.value("at", 0.0),
                           a.value("from_step", int64_t{-1}), a.value("end", "")});
  }
  return l;
}

std::string Ledger::RenderText() const {
  TextTable t({"wall time", "seconds", "share", "sim's bucket"},
              {TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kRight,
               TextTable::Align::kLeft});
  const std::map<std::string, std::string> sim = {
      {"productive", "work"},       {"lost", "lost work"},
      {"checkpoint", "checkpoint"}, {"detection", "detection"},
      {"restart", "restart"},       {"restore", "restart"},
      {"backoff", "waiting"},       {"other", "(start-up, evaluation)"}};
  for (const std::string& b : Buckets()) {
    const double s = Get(b);
    t.AddRow({b, fmt::format("{:.2f}", s), fmt::format("{:.1f}%", wall_ > 0 ? 100 * s / wall_ : 0),
              sim.at(b)});
  }
  t.AddRow({"wall", fmt::format("{:.2f}", wall_), "100.0%", ""});
  std::string out = t.RenderText();
  if (attempts_.size() > 1) {
    TextTable a({"attempt", "started", "at wall", "from step", "ended"},
                {TextTable::Align::kRight, TextTable::Align::kLeft, TextTable::Align::kRight,
                 TextTable::Align::kRight, TextTable::Align::kLeft});
    for (size_t i = 0; i < attempts_.size(); ++i) {
      const Attempt& x = attempts_[i];
      const std::time_t t0 = static_cast<std::time_t>(x.started_unix);
      std::tm tm{};
      gmtime_r(&t0, &tm);
      a.AddRow({std::to_string(i + 1), fmt::format("{:%Y-%m-%d %H:%M:%S} UTC", tm),
                fmt::format("{:.2f} s", x.at),
                x.from_step > 0    ? std::to_string(x.from_step)
                : x.from_step == 0 ? "scratch"
                                   : "-",
                x.end});
    }
    out += "\n" + a.RenderText();
  }
  if (incidents_.empty()) return out + "no faults\n";
  TextTable f(
      {"#", "fault", "rank", "step", "detected in", "recovered in", "steps lost", "decision"});
  for (size_t i = 0; i < incidents_.size(); ++i) {
    const Incident& x = incidents_[i];
    f.AddRow({std::to_string(i + 1), x.kind, x.rank >= 0 ? std::to_string(x.rank) : "-",
              std::to_string(x.step),
              x.detect_seconds >= 0 ? fmt::format("{:.2f} s", x.detect_seconds) : "-",
              x.recovery_seconds >= 0 ? fmt::format("{:.2f} s", x.recovery_seconds) : "-",
              std::to_string(x.lost_steps), x.decision});
  }
  return out + "\n" + f.RenderText();
}

}  // namespace fmstack::metrics
