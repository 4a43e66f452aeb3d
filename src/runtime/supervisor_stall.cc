// The supervisor's view of a stalled rank: its main thread is stuck (a
// deadlock, a file system call that never returns) while its heartbeat
// thread still beats, so the heartbeat timeout never fires. Its peers'
// collectives time out waiting for it; each says so on its control channel
// ("collective-failed") and waits for the supervisor's word instead of
// exiting. Without this the first peer to exit would be blamed for a crash,
// and a spare or an elastic shrink would take the wrong node.
#include <fmt/format.h>

#include <algorithm>

#include "runtime/supervisor_impl.h"

namespace fmstack::runtime::internal {
namespace {

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (const int r : ranks) s += fmt::format("{}{}", s.empty() ? "" : ", ", r);
  return s;
}

}  // namespace

void Supervisor::OnCollectiveFailed(int rank, const nlohmann::json& m) {
  if (decision_ || rejoin_) return;  // the recovery under way explains it
  // A report from before the last in-place recovery is about the old group.
  if (m.value("generation", int64_t{-1}) != env_.generation) return;
  const bool first = !monitor_->AnyCollectiveFailed();
  monitor_->OnCollectiveFailed(rank, Clock::now());
  if (!first) return;
  std::string what = m.value("what", "");
  if (what.size() > 300) what = what.substr(0, 300) + "...";
  Note(fmt::format(
      "{}: a collective failed at step {} and no rank was reported dead ({}); looking for a "
      "rank that stalled with its heartbeats going on",
      Where(rank), m.value("step", int64_t{-1}), what));
}

void Supervisor::CheckStalled(Clock::time_point now) {
  if (decision_ || rejoin_) return;
  const double grace = StallGrace(o_.collective_timeout);
  const std::optional<StalledRank> s = monitor_->Stalled(now, grace);
  if (!s) return;
  Detect({{.kind = resilience::EventKind::kHang, .rank = s->rank, .step = monitor_->MaxStep()},
          fmt::format("{} stalled: its heartbeats go on (last at step {} in phase {}), but "
                      "rank(s) {} timed out in a collective with no rank dead, the first {:.1f} s "
                      "ago",
                      Where(s->rank), s->step, s->phase, RankList(s->waiting), s->waited_seconds)});
}

}  // namespace fmstack::runtime::internal
