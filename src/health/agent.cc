#include "health/agent.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "util/error.h"

namespace fmstack::health {

nlohmann::json ToJson(const Verdict& v) {
  return {{"check", v.check},
          {"kind", v.kind},
          {"severity", SeverityName(v.severity)},
          {"action", resilience::NodeActionName(v.action)},
          {"ok", v.ok},
          {"timed_out", v.timed_out},
          {"reason", v.reason},
          {"seconds", v.seconds}};
}

Verdict VerdictFromJson(const nlohmann::json& j) {
  Verdict v;
  try {
    v.check = j.at("check").get<std::string>();
    v.kind = j.value("kind", "");
    const std::string severity = j.at("severity").get<std::string>();
    v.severity = severity == "info"      ? Severity::kInfo
                 : severity == "warning" ? Severity::kWarning
                                         : Severity::kCritical;
    const std::optional<resilience::NodeAction> a =
        resilience::ParseNodeAction(j.at("action").get<std::string>());
    if (!a) throw Error("unknown action " + j.at("action").dump());
    v.action = *a;
    v.ok = j.at("ok").get<bool>();
    v.timed_out = j.value("timed_out", false);
    v.reason = j.value("reason", "");
    v.seconds = j.value("seconds", 0.0);
  } catch (const std::exception& e) {
    throw Error(fmt::format("not a health verdict ({}): {}", e.what(), j.dump().substr(0, 200)));
  }
  if (v.check.size() > 128 || v.reason.size() > 1024)
    throw Error("a health verdict with a check name or reason beyond 128/1024 characters");
  return v;
}

Agent::Agent(std::vector<CheckSpec> checks, NodeContext node) : node_(std::move(node)) {
  for (CheckSpec& s : checks) {
    Check c;
    c.spec = std::move(s);
    checks_.push_back(std::move(c));
  }
}

void Agent::SetPids(std::map<int, int> pids) {
  node_.pids = std::move(pids);
}

Verdict Agent::Make(const Check& c, const Outcome& o) const {
  return {c.spec.name, c.spec.kind, c.spec.severity, c.spec.action,
          o.ok,        o.timed_out, o.reason,        o.seconds};
}

std::vector<Verdict> Agent::Tick(double now, double repeat_seconds) {
  std::vector<Verdict> report;
  for (Check& c : checks_) {
    if (c.running) {
      std::optional<Outcome> finished;
      {
        const std::lock_guard lock(c.running->mu);
        if (c.running->done) finished = c.running->outcome;
      }
      if (finished) {
        c.running.reset();
        const Verdict v = Make(c, *finished);
        const bool changed = !c.last || c.last->ok != v.ok || c.last->reason != v.reason;
        const bool repeat = !v.ok && now - c.reported_at >= repeat_seconds;
        c.last = v;
        if (changed || repeat || c.timeout_reported) {
          report.push_back(v);
          c.reported_at = now;
        }
        c.timeout_reported = false;
      } else if (!c.timeout_reported && now - c.started_at > c.spec.deadline_seconds) {
        // Stuck: say so now; the thread is left to return when it can.
        Outcome o;
        o.ok = false;
        o.timed_out = true;
        o.seconds = now - c.started_at;
        o.reason = fmt::format("the {} check did not finish within {:.1f} s (deadline)",
                               c.spec.kind, c.spec.deadline_seconds);
        const Verdict v = Make(c, o);
        c.last = v;
        c.timeout_reported = true;
        c.reported_at = now;
        report.push_back(v);
      }
    }
    if (c.running || now < c.next_at) continue;
    c.next_at = now + c.spec.interval_seconds;
    c.started_at = now;
    auto run = std::make_shared<Run>();
    c.running = run;
    std::thread([run, spec = c.spec, node = node_, since = c.process_since] {
      Outcome o = RunCheck(spec, node, since.get());
      const std::lock_guard lock(run->mu);
      run->outcome = std::move(o);
      run->done = true;
    }).detach();
  }
  return report;
}

std::optional<std::vector<DeviceState>> Agent::Readings(double) {
  std::optional<std::vector<DeviceState>> out;
  if (reading_) {
    const std::lock_guard lock(reading_->mu);
    if (!reading_->done) return out;  // still reading (or stuck): no second one
    out = std::move(reading_->devices);
  }
  reading_ = std::make_shared<Reading>();
  std::thread([r = reading_, devices = node_.devices] {
    std::vector<DeviceState> d = devices ? devices->Read() : std::vector<DeviceState>{};
    const std::lock_guard lock(r->mu);
    r->devices = std::move(d);
    r->done = true;
  }).detach();
  return out;
}

std::vector<Verdict> Agent::Current() const {
  std::vector<Verdict> out;
  for (const Check& c : checks_) {
    if (c.last) out.push_back(*c.last);
  }
  return out;
}

std::vector<Verdict> RunAllOnce(const std::vector<CheckSpec>& checks, const NodeContext& node) {
  Agent agent(checks, node);
  const auto t0 = std::chrono::steady_clock::now();
  auto now = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::map<std::string, Verdict> got;
  // Every check starts at 0; the longest deadline bounds the wait.
  double longest = 0;
  for (const CheckSpec& c : checks) longest = std::max(longest, c.deadline_seconds);
  while (got.size() < checks.size() && now() <= longest + 0.2) {
    for (const Verdict& v : agent.Tick(now(), /*repeat_seconds=*/1e9)) got[v.check] = v;
    if (got.size() < checks.size()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<Verdict> out;
  for (const CheckSpec& c : checks) {
    if (got.contains(c.name)) out.push_back(got[c.name]);
  }
  return out;
}

}  // namespace fmstack::health
