// ckpt: the engine's view of what the tiers hold: retention of the newest
// steps, collection of incomplete ones, the newest committed step, and the
// restore with its quarantine of newer steps that failed. The save pipeline
// (writer, drainer, commit) is engine.cc, Save()'s copy engine_copy.cc, its
// staging pool staging_pool.h.
#include <fmt/format.h>

#include <algorithm>

#include "ckpt/engine.h"
#include "util/error.h"

namespace fmstack::ckpt {

void Engine::Retain(size_t t) {
  if (options_.rank != 0) return;
  Tier& tier = *tiers_[t];
  const std::vector<StepListing> steps = tier.List();
  std::vector<int64_t> committed;
  for (const StepListing& s : steps)
    if (s.committed) committed.push_back(s.step);
  if (committed.empty()) return;
  const size_t keep = static_cast<size_t>(options_.keep);
  const int64_t oldest_kept =
      committed.size() > keep ? committed[committed.size() - keep] : committed.front();
  std::set<int64_t> pinned;
  {
    const std::lock_guard lock(mu_);
    if (t == 0) pinned = pinned_;
  }
  for (const StepListing& s : steps) {
    // Never the newest `keep` committed, never a step the drain reads, never
    // an uncommitted step newer than the newest commit (it may be in flight).
    if (s.step >= oldest_kept || pinned.count(s.step) > 0) continue;
    Point("removing", t);
    if (!RemoveOrNote(tier, s.step)) continue;
    Note(fmt::format("checkpoint: {} removed from {} ({})", StepDirName(s.step), tier.name(),
                     s.committed ? fmt::format("keeping the newest {}", keep) : "never committed"));
  }
}

bool Engine::RemoveOrNote(Tier& tier, int64_t step) {
  try {
    tier.Remove(step);
    return true;
  } catch (const ForeignStep& e) {
    Note(fmt::format("checkpoint: {}", e.what()));  // not ours: the others still go
    return false;
  }
}

void Engine::RetainOrWarn(size_t t) {
  try {
    Retain(t);
  } catch (const std::exception& e) {
    const std::string line = fmt::format(
        "checkpoint: {} tier: older steps not removed (the newest step stands; the next save "
        "tries again): {}",
        tiers_[t]->name(), e.what());
    {
      const std::lock_guard lock(mu_);
      if (errors_.size() < 16) errors_.push_back(line);
    }
    Note(line);
  }
}

void Engine::Janitor() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return retain_due_ || stop_; });
      if (!retain_due_) return;
      retain_due_ = false;
      retaining_ = true;
    }
    RetainOrWarn(0);
    {
      const std::lock_guard lock(mu_);
      retaining_ = false;
    }
    cv_.notify_all();
  }
}

void Engine::CollectGarbage(size_t first, size_t last) {
  for (size_t t = first; t < last; ++t) {
    Tier* tier = tiers_[t].get();
    try {
      for (const StepListing& s : tier->List()) {
        if (s.committed || !RemoveOrNote(*tier, s.step)) continue;
        Note(fmt::format("checkpoint: removed incomplete {} from {} (no COMMITTED marker)",
                         StepDirName(s.step), tier->name()));
      }
    } catch (const std::exception& e) {
      Fail(t, fmt::format("cannot collect incomplete steps: {}", e.what()));
    }
  }
}

std::optional<int64_t> Engine::Latest() {
  std::optional<int64_t> best;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (TierDown(t)) continue;
    std::vector<StepListing> listing;
    try {
      listing = tiers_[t]->List();
    } catch (const std::exception& e) {
      if (t == 0) throw;  // the fast tier is where the run lives
      Fail(t, fmt::format("unreachable, skipped: {}", e.what()));
      continue;
    }
    for (const StepListing& s : listing)
      if (s.committed && (!best || s.step > *best)) best = s.step;
  }
  return best;
}

std::vector<Tier*> Engine::tiers() const {
  std::vector<Tier*> out;
  for (const auto& t : tiers_) out.push_back(t.get());
  return out;
}

bool Engine::TierDown(size_t t) {
  const std::lock_guard lock(mu_);
  return failed_tiers_.contains(t);
}

std::optional<RestoreResult> Engine::Restore(std::span<const TensorTarget> targets,
                                             std::optional<int64_t> max_step) {
  Release();  // the targets are likely the very memory a live save reads
  // A slower tier that already failed in this process is not asked again:
  // each question to a hung store costs its timeouts.
  std::vector<Tier*> all;
  for (size_t t = 0; t < tiers_.size(); ++t)
    if (t == 0 || !TierDown(t)) all.push_back(tiers_[t].get());
  std::optional<RestoreResult> r = ckpt::Restore(all, targets, options_.log, max_step);
  if (!r || options_.rank != 0 || max_step) return r;
  for (Tier* tier : all) {
    std::vector<StepListing> listing;
    try {
      listing = tier->List();
    } catch (const std::exception&) {
      continue;  // the restore already said it is unreachable
    }
    for (const StepListing& s : listing) {
      if (s.step <= r->step) continue;
      // Never deleted: the run is about to write these step numbers again,
      // so the copy moves aside, kept for whoever investigates.
      std::string to;
      try {
        to = tier->Quarantine(s.step);
      } catch (const std::exception& e) {
        Note(fmt::format("checkpoint: {} on {} could not be quarantined: {}", StepDirName(s.step),
                         tier->name(), e.what()));
        continue;
      }
      Note(fmt::format("checkpoint: {} on {} is newer than the restored {} but not usable: {}",
                       StepDirName(s.step), tier->name(), StepDirName(r->step),
                       to.empty() ? "left in place" : "quarantined in " + to));
    }
  }
  return r;
}

}  // namespace fmstack::ckpt
